package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/internal/harness"
)

// setAuditSigning edits settings.auditSigning in h's config.json by hand,
// as a person in an editor would: the rest of the file is kept as it is.
func setAuditSigning(t *testing.T, h *harness.Home, on bool) {
	t.Helper()
	b, err := os.ReadFile(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	doc["settings"] = json.RawMessage(fmt.Sprintf(`{"auditSigning": %t}`, on))
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.ConfigFile(), append(out, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitAuditStatus polls `portcullis status --json` until its audit part
// satisfies ok, or fails the test after 10 s.
func waitAuditStatus(t *testing.T, h *harness.Home, what string, ok func(daemon.AuditStatus) bool) daemon.AuditStatus {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rep, err := h.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok(rep.Audit) {
			return rep.Audit
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for the audit log to be %s: status %+v", what, rep.Audit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAuditSigningSetting turns settings.auditSigning off and on again by
// editing config.json while a real daemon (with the real Secret Service)
// serves calls: turning it off widens trust, so it waits until the person
// confirms it (`portcullis changes confirm`), turning it on applies at once; `portcullis audit verify` with
// the key accepts the log and says from which event signing was off, the
// config_changed events name the change, and a log whose signing_disabled
// was removed or altered fails verification.
func TestAuditSigningSetting(t *testing.T) {
	needSecretService(t)
	h := newHome(t)
	auditAddServer(t, h, "echo", config.Server{Command: echoBin}, "echo")
	d := startDaemon(t, h)
	st := waitAuditStatus(t, h, "open", func(daemon.AuditStatus) bool { return true })
	if !st.Signed {
		t.Fatalf("the daemon does not sign although the Secret Service runs: %s", st.Note)
	}
	a := connectCmd(t, h.ConnectCommand("echo"), "")
	ctx := testContext(t, 2*time.Minute)
	call := func(msg string) {
		t.Helper()
		res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}})
		if err != nil || res.IsError {
			t.Fatalf("echo %q: %v %+v", msg, err, res)
		}
	}
	call("signed 1")
	call("signed 2")

	setAuditSigning(t, h, false)
	p := pendingChange(t, h)
	if p == nil || len(p.Held) != 1 || p.Held[0].Kind != config.WidenAuditSigning {
		t.Fatalf("pending change %+v, want auditSigning off held", p)
	}
	if st := waitAuditStatus(t, h, "open", func(daemon.AuditStatus) bool { return true }); !st.Signed {
		t.Errorf("signing is off before the person confirmed it: %+v", st)
	}
	call("signed while held")
	if _, err := h.RunAtTerminal(testContext(t, 30*time.Second), "changes", "confirm", p.ID); err != nil {
		t.Fatal(err)
	}
	st = waitAuditStatus(t, h, "unsigned by the setting", func(st daemon.AuditStatus) bool { return !st.Signed })
	if !strings.Contains(st.Note, "signing is turned off in settings (settings.auditSigning)") || st.SigningError != "" {
		t.Errorf("status audit %+v, want the note that settings turned signing off", st)
	}
	if r := auditRun(t, h, "status"); !strings.Contains(r.Stdout, "signing is turned off in settings (settings.auditSigning)") {
		t.Errorf("portcullis status does not say that signing is off:\n%s", r.Stdout)
	}
	call("unsigned 1")
	call("unsigned 2")

	evs := auditEvents(t, h)
	off := slices.IndexFunc(evs, func(e audit.Event) bool { return e.Type == audit.TypeSigningDisabled })
	if off < 0 {
		t.Fatalf("no signing_disabled event in the log")
	}
	offSeq := evs[off].Seq
	if evs[off].Sig == "" || auditFields(t, evs[off])["reason"] != "settings.auditSigning is false" {
		t.Errorf("signing_disabled %+v, want it signed with the reason", evs[off])
	}
	changed := evs[off-1]
	if changed.Type != audit.TypeConfigChanged || !slices.Contains(auditFields(t, changed)["changes"].([]any), any("settings: auditSigning true → false")) {
		t.Errorf("the event before signing_disabled is %s %s; want config_changed naming auditSigning true → false", changed.Type, changed.Fields)
	}
	for _, e := range evs[off+1:] {
		if e.Sig != "" {
			t.Errorf("seq %d (%s) is signed after signing was turned off", e.Seq, e.Type)
		}
	}
	v, code := auditVerify(t, h)
	if code != 0 || !v.OK || !v.Signed || len(v.SigningOff) != 1 || v.SigningOff[0].Disabled != offSeq || v.SigningOff[0].Enabled != 0 {
		t.Errorf("audit verify while signing is off: exit %d, %+v; want OK, signatures checked, signing off since seq %d", code, v, offSeq)
	}
	if r := auditRun(t, h, "audit", "verify"); r.Code != 0 || !strings.Contains(r.Stdout, fmt.Sprintf("Signing was turned off at seq %d (settings.auditSigning is false)", offSeq)) {
		t.Errorf("audit verify: exit %d\n%s", r.Code, r.Stdout)
	}

	setAuditSigning(t, h, true)
	waitAuditStatus(t, h, "signed again", func(st daemon.AuditStatus) bool { return st.Signed && st.SigningError == "" })
	call("signed 3")
	a.Close()
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	evs = auditEvents(t, h)
	on := slices.IndexFunc(evs, func(e audit.Event) bool { return e.Type == audit.TypeSigningEnabled })
	if on < off {
		t.Fatalf("no signing_enabled after seq %d", offSeq)
	}
	onSeq := evs[on].Seq
	if evs[on].Sig == "" || auditFields(t, evs[on])["unsignedThrough"] != float64(onSeq-1) {
		t.Errorf("signing_enabled %+v, want it signed with unsignedThrough %d", evs[on], onSeq-1)
	}
	for _, e := range evs[on:] {
		if e.Sig == "" {
			t.Errorf("seq %d (%s) is unsigned after signing was turned on again", e.Seq, e.Type)
		}
	}
	v, code = auditVerify(t, h)
	if code != 0 || !v.OK || !v.Signed || len(v.SigningOff) != 1 || v.SigningOff[0].Disabled != offSeq || v.SigningOff[0].Enabled != onSeq ||
		v.Events != uint64(len(evs)) {
		t.Fatalf("audit verify after signing was on again: exit %d, %+v; want OK, signing off from seq %d to %d", code, v, offSeq, onSeq)
	}
	// Without the key only the hash chain is checked: exit 3, as for any
	// signed log.
	nokey := *h
	nokey.Env = append(slices.Clone(h.Env), "DBUS_SESSION_BUS_ADDRESS=", "XDG_RUNTIME_DIR="+t.TempDir())
	if r := auditRun(t, &nokey, "audit", "verify"); r.Code != 3 || !strings.Contains(r.Stdout, "NOT FULLY VERIFIED") {
		t.Errorf("audit verify without the key: exit %d\n%s\nwant exit 3", r.Code, r.Stdout)
	}

	auditSigningTamper(t, h, offSeq)
}

// auditSigningTamper damages copies of h's log around the signing_disabled
// event at seq off, as someone who can write the file but has no key would,
// and checks that `portcullis audit verify` fails (exit 1).
func auditSigningTamper(t *testing.T, h *harness.Home, off uint64) {
	t.Helper()
	src := filepath.Join(h.Dir, "audit")
	file := "audit-000001.jsonl"
	b, err := os.ReadFile(filepath.Join(src, file))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	lines = lines[:len(lines)-1]
	m := int(off - 1) // the line of signing_disabled
	if !bytes.Contains(lines[m], []byte(`"type":"signing_disabled"`)) {
		t.Fatalf("line %d is not signing_disabled: %s", m+1, lines[m])
	}
	tests := []struct {
		name     string
		damage   func(ls [][]byte) [][]byte
		firstBad uint64
		problem  string
	}{
		{"signing_disabled removed", func(ls [][]byte) [][]byte {
			return slices.Delete(ls, m, m+1)
		}, off, audit.ProblemDeleted},
		{"signing_disabled's signature flipped", func(ls [][]byte) [][]byte {
			i := bytes.Index(ls[m], []byte(`"sig":"hmac-sha256:`)) + len(`"sig":"hmac-sha256:`)
			ls[m] = bytes.Clone(ls[m])
			if ls[m][i] == '0' {
				ls[m][i] = '1'
			} else {
				ls[m][i] = '0'
			}
			return ls
		}, off, audit.ProblemBadSignature},
		{"signing_disabled's reason reworded", func(ls [][]byte) [][]byte {
			ls[m] = bytes.Replace(ls[m], []byte("settings.auditSigning is false"), []byte("routine maintenance, ignore"), 1)
			return ls
		}, off, audit.ProblemEdited},
		{"signing_disabled turned into an ordinary event", func(ls [][]byte) [][]byte {
			ls[m] = bytes.Replace(ls[m], []byte(`"type":"signing_disabled"`), []byte(`"type":"config_changed"`), 1)
			return ls
		}, off, audit.ProblemEdited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hc, err := harness.NewHome(portcullis, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(hc.Dir, "audit")
			if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
				t.Fatal(err)
			}
			ls := tt.damage(slices.Clone(lines))
			if err := os.WriteFile(filepath.Join(dst, file), bytes.Join(ls, nil), 0o600); err != nil {
				t.Fatal(err)
			}
			v, code := auditVerify(t, hc)
			if code != 1 || v.OK || v.FirstBad != tt.firstBad || v.Problem != tt.problem {
				t.Errorf("audit verify --json: exit %d, firstBad %d, problem %q (%s); want exit 1, firstBad %d, problem %q",
					code, v.FirstBad, v.Problem, v.Detail, tt.firstBad, tt.problem)
			}
		})
	}
}
