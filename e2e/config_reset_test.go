package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/daemon"
)

// TestResetDoesNotWiden plays the agent (same uid) resetting Portcullis to
// widen trust: it kills the daemon with SIGKILL, deletes audit/ and
// config.audited.json (in one case the daemon's run record too) and allows
// tool echo and turns approvalAuthentication off in config.json by hand. The next daemon reports log_tampered
// (status text and --json), names what was missing in a log_tampered event
// of the new log, and holds the allow: echo is refused while the tampering
// is not acknowledged and asks the person after it; it is served only once
// the person confirms the change from a terminal. The same with a
// person-held key (audit setup-keys) and without.
func TestResetDoesNotWiden(t *testing.T) {
	for _, tc := range []struct {
		name         string
		key          bool // the person set up the sealing keys
		deleteRecord bool // the agent deletes the run record too
	}{
		{"without a person-held key", false, false},
		{"with a person-held key", true, false},
		{"run record deleted too", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHome(t)
			callLog := filepath.Join(t.TempDir(), "calls.jsonl")
			if err := h.AddServer(testContext(t, 30*time.Second), "echo", []string{"--env", "ECHO_CALL_LOG=" + callLog}, echoBin); err != nil {
				t.Fatal(err)
			}
			d, err := h.StartDaemon(testContext(t, 30*time.Second), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Stop(5 * time.Second) })
			if tc.key {
				if key, out := setupKeys(t, h); key == "" {
					t.Fatalf("setup-keys showed no verification key:\n%s", out)
				}
			}
			a := connectCmd(t, h.ConnectCommand("echo"), "")
			if _, err := a.Session.ListTools(testContext(t, 30*time.Second), nil); err != nil {
				t.Fatal(err)
			}
			a.Session.Close()

			// The agent's reset.
			if err := syscall.Kill(d.PID(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-d.Done()
			if err := os.RemoveAll(filepath.Join(h.Dir, "audit")); err != nil {
				t.Fatal(err)
			}
			gone := []string{"config.audited.json"}
			if tc.deleteRecord {
				gone = append(gone, daemon.RunRecordName)
			}
			for _, f := range gone {
				if err := os.Remove(filepath.Join(h.Dir, f)); err != nil {
					t.Fatal(err)
				}
			}
			editPolicies(t, h, map[string]config.Policy{"echo": config.PolicyAllow})
			cfg, err := config.Load(h.ConfigFile())
			if err != nil {
				t.Fatal(err)
			}
			cfg.Settings.ApprovalAuthentication = config.AuthOff
			if err := config.Save(h.ConfigFile(), cfg); err != nil {
				t.Fatal(err)
			}

			startDaemon(t, h)
			ctx := testContext(t, 30*time.Second)
			rep, err := h.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(rep.Audit.Tampered, "log_tampered") || !strings.Contains(rep.Audit.Tampered, "while no daemon ran") {
				t.Errorf("status audit.tampered %q, want log_tampered for the deleted log", rep.Audit.Tampered)
			}
			p := rep.PendingChange
			if p == nil || !p.AtStart || !p.LogTampered || len(p.Held) != 2 || p.Held[0].Text != "echo: tool echo approve → allow" || !strings.HasPrefix(p.Held[1].Text, "settings: approvalAuthentication ") {
				t.Fatalf("status pendingChange %+v, want the allow of echo and approvalAuthentication off held after log_tampered", p)
			}
			r, err := h.Run(ctx, "status")
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{"TAMPERED", "log_tampered", "the configuration you last confirmed is in force", "portcullis changes confirm " + p.ID} {
				if !strings.Contains(r.Stdout, w) {
					t.Errorf("status does not say %q:\n%s", w, r.Stdout)
				}
			}
			// The fresh log does not verify as an untouched one, key or not.
			if r := auditRun(t, h, "audit", "verify", "--json"); r.Code != 1 || !strings.Contains(r.Stdout, `"problem": "tampered"`) && !strings.Contains(r.Stdout, `"problem":"tampered"`) {
				t.Errorf("audit verify on the fresh log: exit %d\n%s; want exit 1, problem tampered", r.Code, r.Stdout)
			}
			if cfg, err := config.Load(h.ConfigFile()); err != nil || cfg.Servers["echo"].Policy("echo") != config.PolicyAllow {
				t.Errorf("config.json was rewritten (%v); the held change must stay in the file until the person decides", err)
			}

			// The allow is not in force: refused while the tampering waits
			// for the person, asked for once acknowledged.
			a = connectCmd(t, h.ConnectCommand("echo"), "")
			_, err = a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "tampered"}})
			if code, ref := refusalOf(t, err); code != int64(control.AuditUnavailable.Code()) || !strings.Contains(ref.Reason, "acknowledge") {
				t.Errorf("echo while tampered: code %d, %+v; want audit_unavailable naming acknowledge", code, ref)
			}
			if r, err := h.RunAtTerminal(ctx, "audit", "acknowledge"); err != nil {
				t.Fatalf("acknowledge: %v\n%s", err, r.Stdout)
			}
			pending := asyncCall(t, a.Session, "echo", map[string]any{"message": "held"})
			req := waitApproval(t, h, "echo while its allow is held", forTool("echo", ""))
			decideCLI(t, h, "deny", string(req.ID))
			if r := await(t, pending); r.err == nil {
				t.Errorf("echo was served while its allow was held: %+v", r.res)
			}
			if n := echoCallsSoFar(t, callLog); n != 0 {
				t.Errorf("the server received %d echo calls, want 0", n)
			}

			if _, err := h.RunAtTerminal(ctx, "changes", "confirm", p.ID); err != nil {
				t.Fatal(err)
			}
			if got := callText(t, a.Session, "echo", map[string]any{"message": "allowed"}); got != "allowed" {
				t.Errorf("echo answered %q after the confirmation", got)
			}

			// The new log says what was missing.
			var found []string
			for _, e := range auditEvents(t, h) {
				if e.Type != audit.TypeLogTampered {
					continue
				}
				for _, f := range auditFields(t, e)["files"].([]any) {
					m := f.(map[string]any)
					found = append(found, m["file"].(string)+" "+m["change"].(string))
				}
			}
			for _, w := range []string{"audit/ missing", "config.audited.json missing"} {
				if !slices.Contains(found, w) {
					t.Errorf("log_tampered names %v, want %q", found, w)
				}
			}
			if tc.deleteRecord && !slices.Contains(found, daemon.RunRecordName+" missing") {
				t.Errorf("log_tampered names %v, want %s missing", found, daemon.RunRecordName)
			}
		})
	}
}

// TestFirstStartNotTampered: a daemon started on a data directory with
// only config.json (a first start, written by hand with an allow) takes
// the file as it is and is not log_tampered; it leaves its run record, and
// the next start is not log_tampered either.
func TestFirstStartNotTampered(t *testing.T) {
	h := newHome(t)
	if err := h.AddServer(testContext(t, 30*time.Second), "echo", nil, echoBin); err != nil {
		t.Fatal(err)
	}
	editPolicies(t, h, map[string]config.Policy{"echo": config.PolicyAllow})
	for i := range 2 {
		d := startDaemon(t, h)
		ctx := testContext(t, 30*time.Second)
		rep, err := h.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Audit.Tampered != "" || rep.PendingChange != nil {
			t.Errorf("start %d: tampered %q, pending %+v; want neither", i, rep.Audit.Tampered, rep.PendingChange)
		}
		a := connectCmd(t, h.ConnectCommand("echo"), "")
		if got := callText(t, a.Session, "echo", map[string]any{"message": "first"}); got != "first" {
			t.Errorf("start %d: echo answered %q", i, got)
		}
		a.Session.Close()
		if err := d.Stop(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		rec, ok, err := daemon.ReadRunRecord(filepath.Join(h.Dir, daemon.RunRecordName))
		if err != nil || !ok || rec.Starts != uint64(i+1) || rec.Head == nil {
			t.Errorf("start %d: run record %+v, %t, %v", i, rec, ok, err)
		}
	}
}

// TestRewrittenRunRecordDoesNotWiden plays the agent that cannot delete its
// way around the run record (the log and the catalog stay) and rewrites it
// instead: kill -9, the record's configuration replaced by config.json
// widened by hand (echo allowed), config.audited.json too. The record's
// configuration is not the one its audit event recorded: log_tampered, and
// the allow is held for the person.
func TestRewrittenRunRecordDoesNotWiden(t *testing.T) {
	h := newHome(t)
	if err := h.AddServer(testContext(t, 30*time.Second), "echo", nil, echoBin); err != nil {
		t.Fatal(err)
	}
	d, err := h.StartDaemon(testContext(t, 30*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(5 * time.Second) })
	if err := syscall.Kill(d.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.Done()

	editPolicies(t, h, map[string]config.Policy{"echo": config.PolicyAllow})
	widened, err := os.ReadFile(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	recPath := filepath.Join(h.Dir, daemon.RunRecordName)
	b, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(widened)
	rec["config"], rec["configDigest"] = string(widened), "sha256:"+hex.EncodeToString(sum[:])
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{recPath, b}, {filepath.Join(h.Dir, "config.audited.json"), widened}} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := daemon.ReadRunRecord(recPath); !ok || err != nil {
		t.Fatalf("the forged record does not read as the daemon's: %v", err)
	}

	startDaemon(t, h)
	ctx := testContext(t, 30*time.Second)
	rep, err := h.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Audit.Tampered, "rewritten while no daemon ran") {
		t.Errorf("status audit.tampered %q, want the rewritten record named", rep.Audit.Tampered)
	}
	if p := rep.PendingChange; p == nil || !p.LogTampered || len(p.Held) != 1 || p.Held[0].Text != "echo: tool echo approve → allow" {
		t.Fatalf("status pendingChange %+v, want the allow of echo held", rep.PendingChange)
	}
}
