package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/paths"
)

// standingCard is a first call of greet by a run of /usr/bin/agent on an
// epoch running code.
func standingCard(run ids.RunID, code string) authz.Card {
	return authz.Card{Reason: "first use of greet in this agent run", AgentRun: run, AgentExe: "/usr/bin/agent", ServerLabel: "srv",
		CurrentEpoch: ids.EpochID("E" + run), Code: code, CatalogRevision: 1, Tool: "greet", ArgsDigest: "sha256:" + string(run),
		ToolScope: []string{"greet"}, OtherTools: []string{"deploy"}, ToolContracts: map[string]string{"greet": "sha256:g", "deploy": "sha256:d"}}
}

// startStanding starts a daemon on dirs and returns it with its stop.
func startStanding(t *testing.T, dirs paths.Dirs) (*Daemon, func() error) {
	t.Helper()
	d, err := New(Options{Dirs: dirs, Peers: selfPeers{}})
	if err != nil {
		t.Fatal(err)
	}
	return d, serve(t, d, dirs)
}

// approveCode approves a card of run on code with --code, for greet.
func approveCode(t *testing.T, d *Daemon, run ids.RunID, code string) ids.RequestID {
	t.Helper()
	id := d.authz.Raise(standingCard(run, code))
	if err := d.authz.Decide(id, authz.Decision{Choice: authz.ApproveCode, Tools: []string{"greet"}, By: "cli"}); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestStandingApprovalsOutliveTheDaemon: a standing approval is recorded
// and kept; the next start puts it in force again (a later run on the same
// code is granted without a card), and it is listed in status.
func TestStandingApprovalsOutliveTheDaemon(t *testing.T) {
	dirs := shortHome(t)
	d, stop := startStanding(t, dirs)
	id := approveCode(t, d, "runA", "sha256:c1")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	d, stop = startStanding(t, dirs)
	defer stop()
	if st := d.Status().Standing; len(st) != 1 || st[0].ID != id || st[0].Code != "sha256:c1" || !slices.Equal(st[0].Tools, []string{"greet"}) {
		t.Fatalf("after a restart: standing %+v", st)
	}
	d.authz.Raise(standingCard("runB", "sha256:c1"))
	if p := d.authz.Pending(); len(p) != 0 {
		t.Errorf("a later run on the approved code was asked: %+v", p)
	}
	if n := countEvents(t, dirs, TypeStandingGranted); n != 1 {
		t.Errorf("%d %s events, want 1", n, TypeStandingGranted)
	}
}

// TestStandingFileTheAgentEdits: the standing approvals' file is a file of
// the person's user, which the agent can write: a file whose approval was
// widened (another tool, another agent program, other code), that names
// an event the log does not hold, that brings back an approval revoked
// since, or that is not JSON, is refused whole; none is in force, status
// says why, and the refusal is recorded. Deleting it only narrows.
func TestStandingFileTheAgentEdits(t *testing.T) {
	dirs := shortHome(t)
	d, stop := startStanding(t, dirs)
	kept := approveCode(t, d, "runA", "sha256:c1")
	revoked := d.authz.Raise(func() authz.Card {
		c := standingCard("runR", "sha256:c1")
		c.AgentExe = "/usr/bin/other-agent"
		return c
	}())
	if err := d.authz.Decide(revoked, authz.Decision{Choice: authz.ApproveCode, Tools: []string{"greet"}, By: "cli"}); err != nil {
		t.Fatal(err)
	}
	beforeRevoke, err := os.ReadFile(StandingPath(dirs))
	if err != nil {
		t.Fatal(err)
	}
	// portcullis revoke, from any process: it narrows trust.
	if _, err := control.Call(dirs.Socket(), control.Hello{Op: control.OpRevokeStanding, Request: string(revoked)}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := control.Call(dirs.Socket(), control.Hello{Op: control.OpRevokeStanding, Request: string(revoked)}, 5*time.Second); err == nil || !strings.Contains(err.Error(), "nothing was revoked") {
		t.Errorf("revoking it twice: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(StandingPath(dirs))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(a map[string]any, ev map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		e := m["approvals"].([]any)[0].(map[string]any)
		f(e["approval"].(map[string]any), e["event"].(map[string]any))
		b, _ := json.Marshal(m)
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"another tool", edit(func(a, _ map[string]any) { a["tools"] = []string{"greet", "deploy"} }), "rewritten"},
		{"another agent program", edit(func(a, _ map[string]any) { a["agentExe"] = "/bin/sh" }), "rewritten"},
		{"other code", edit(func(a, _ map[string]any) { a["code"] = "sha256:evil" }), "rewritten"},
		{"another event", edit(func(_, ev map[string]any) { ev["seq"] = 1 }), "does not hold"},
		{"a revoked approval copied back", beforeRevoke, "was revoked"},
		{"not JSON", []byte("garbage"), "invalid character"},
		{"another version", []byte(`{"version":2,"approvals":[]}`), "version 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(StandingPath(dirs), tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			before := countEvents(t, dirs, TypeStandingRefused)
			d, stop := startStanding(t, dirs)
			defer stop()
			rep := d.Status()
			if len(rep.Standing) != 0 || !strings.Contains(rep.StandingError, tc.want) || !strings.Contains(rep.StandingError, ErrBadStanding.Error()) {
				t.Errorf("standing %+v, error %q; want none in force and an error saying %q", rep.Standing, rep.StandingError, tc.want)
			}
			d.authz.Raise(standingCard("runX", "sha256:c1"))
			if p := d.authz.Pending(); len(p) != 1 {
				t.Errorf("a run on the approved code was not asked with the file refused: pending %d", len(p))
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if n := countEvents(t, dirs, TypeStandingRefused); n != before+1 {
				t.Errorf("%d %s events, want %d", n, TypeStandingRefused, before+1)
			}
		})
	}
	// The file as the daemon wrote it: the approval not revoked is in
	// force; deleting the file narrows to none.
	if err := os.WriteFile(StandingPath(dirs), good, 0o600); err != nil {
		t.Fatal(err)
	}
	d, stop = startStanding(t, dirs)
	if st := d.Status(); len(st.Standing) != 1 || st.Standing[0].ID != kept || st.StandingError != "" {
		t.Errorf("the daemon's own file: standing %+v, error %q", st.Standing, st.StandingError)
	}
	// New code ends it, and so it leaves the file.
	d.authz.Raise(standingCard("runN", "sha256:c2"))
	if st := d.Status().Standing; len(st) != 0 {
		t.Errorf("standing %+v after new code", st)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(StandingPath(dirs)); err != nil {
		t.Fatal(err)
	}
	d, stop = startStanding(t, dirs)
	defer stop()
	if st := d.Status(); len(st.Standing) != 0 || st.StandingError != "" {
		t.Errorf("no file: standing %+v, error %q", st.Standing, st.StandingError)
	}
}

func countEvents(t *testing.T, dirs paths.Dirs, typ string) int {
	t.Helper()
	evs, err := audit.EventsOfType(AuditDir(dirs), typ)
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

// TestStandingEventForgedOutsideTheLog: the agent can write any file of
// the audit directory. An entry that names, as its event, a line the log's
// chain does not hold backs nothing, and the file is refused: a copy of
// the real event widened to another agent program in a file beside the log
// (its hash left as it was, or computed again), in a file named like a
// segment of no log, or edited in place in the log with its hash computed
// again (the event after it, or head.json, no longer names it).
func TestStandingEventForgedOutsideTheLog(t *testing.T) {
	dirs := shortHome(t)
	d, stop := startStanding(t, dirs)
	approveCode(t, d, "runA", "sha256:c1")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(StandingPath(dirs))
	if err != nil {
		t.Fatal(err)
	}
	var f standingFile
	if err := json.Unmarshal(good, &f); err != nil || len(f.Approvals) != 1 {
		t.Fatalf("standing file %s: %v", good, err)
	}
	segPath := filepath.Join(AuditDir(dirs), f.Approvals[0].Event.File)
	seg, err := os.ReadFile(segPath)
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(seg), "\n") {
		if strings.Contains(l, `"type":"`+TypeStandingGranted+`"`) {
			line = l
		}
	}
	const from, to = `"agentExe":"/usr/bin/agent"`, `"agentExe":"/bin/sh"`
	if !strings.Contains(line, from) || !strings.Contains(line, `,"hash":"`) {
		t.Fatalf("no %s line with %s in %s", TypeStandingGranted, from, seg)
	}
	widened := strings.Replace(line, from, to, 1)
	// rehashed is the widened line with its hash computed again, as
	// anyone can: the hash is the SHA-256 of prev, the line up to its hash
	// and a closing brace.
	rehashed, newHash := func() (string, string) {
		open := widened[:strings.Index(widened, `,"hash":"`)]
		prev := open[strings.Index(open, `"prev":"`)+len(`"prev":"`):]
		prev = prev[:strings.Index(prev, `"`)]
		sum := sha256.Sum256([]byte(prev + open + "}"))
		h := "sha256:" + hex.EncodeToString(sum[:])
		rest := widened[len(open)+len(`,"hash":"`):]
		return open + `,"hash":"` + h + rest[strings.Index(rest, `"`):], h
	}()
	for _, tc := range []struct {
		name, file, line, hash string
	}{
		{"a file beside the log", "forged.jsonl", widened, f.Approvals[0].Event.Hash},
		{"a file beside the log, hash computed again", "forged.jsonl", rehashed, newHash},
		{"a file named like a segment of no log", "audit-999999.jsonl", rehashed, newHash},
		{"edited in place, hash computed again", f.Approvals[0].Event.File, rehashed, newHash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(AuditDir(dirs), tc.file)
			if path == segPath {
				now, err := os.ReadFile(path) // the starts before added events
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(strings.Replace(string(now), line, tc.line, 1)), 0o600); err != nil {
					t.Fatal(err)
				}
				defer os.WriteFile(path, now, 0o600)
			} else {
				if err := os.WriteFile(path, []byte(tc.line+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				defer os.Remove(path)
			}
			w := f
			w.Approvals = slices.Clone(f.Approvals)
			w.Approvals[0].Approval.AgentExe = "/bin/sh"
			w.Approvals[0].Event.File = tc.file
			w.Approvals[0].Event.Hash = tc.hash
			b, _ := json.Marshal(w)
			if err := os.WriteFile(StandingPath(dirs), b, 0o600); err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(StandingPath(dirs), good, 0o600)
			if _, found, err := audit.FindEvent(AuditDir(dirs), tc.file, f.Approvals[0].Event.Seq, tc.hash); tc.hash != f.Approvals[0].Event.Hash && (err != nil || found) {
				t.Errorf("FindEvent found the forged event: %v %v", found, err)
			}
			if _, found, err := audit.FindEvent(AuditDir(dirs), f.Approvals[0].Event.File, f.Approvals[0].Event.Seq, f.Approvals[0].Event.Hash); err != nil || found != (path != segPath) {
				t.Errorf("FindEvent of the real event: found %v (%v), want %v", found, err, path != segPath)
			}
			if path == segPath {
				// The daemon's start would record the edit; this is only
				// about what the standing approvals' file is believed.
				return
			}
			d, stop := startStanding(t, dirs)
			defer stop()
			if rep := d.Status(); len(rep.Standing) != 0 || !strings.Contains(rep.StandingError, ErrBadStanding.Error()) {
				t.Errorf("an event forged in %s was taken: standing %+v, error %q", tc.file, rep.Standing, rep.StandingError)
			}
			c := standingCard("runX", "sha256:c1")
			c.AgentExe = "/bin/sh"
			d.authz.Raise(c)
			if p := d.authz.Pending(); len(p) != 1 {
				t.Errorf("a run of /bin/sh was granted without a card: pending %d", len(p))
			}
		})
	}
	// The daemon's own file and log: the approval is in force.
	d, stop = startStanding(t, dirs)
	defer stop()
	if st := d.Status(); len(st.Standing) != 1 || st.StandingError != "" {
		t.Errorf("the daemon's own file after the attempts: standing %+v, error %q", st.Standing, st.StandingError)
	}
}
