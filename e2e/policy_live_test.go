package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestPolicyLive: a tool policy changed with `portcullis servers policy`
// while an agent run is connected takes effect in that run, by itself: a
// tool set to deny is announced with tools/list_changed (in the form of the
// agent's protocol era), disappears from tools/list and is refused without
// reaching the server; a tool tightened from allow to approve asks a person
// at its next call, and the list does not change; a config.json broken by
// hand changes nothing; set back to allow, the tool is announced, listed
// and served again.
func TestPolicyLive(t *testing.T) {
	for _, era := range []struct{ name, version string }{
		{"legacy", "2025-06-18"},
		{"modern", ""}, // the go-sdk's default, 2026-07-28
	} {
		t.Run(era.name, func(t *testing.T) {
			h := newHome(t)
			callLog := filepath.Join(t.TempDir(), "calls.jsonl")
			if err := h.AddServer(testContext(t, 30*time.Second), "echo", []string{"--env", "ECHO_CALL_LOG=" + callLog}, echoBin); err != nil {
				t.Fatal(err)
			}
			allowTools(t, h, "echo", "echo", "add")
			startDaemon(t, h)
			a := connectListChanged(t, h, "echo", era.version)

			if got := listedNames(t, a.Session); !slices.Contains(got, "echo") || !slices.Contains(got, "add") {
				t.Fatalf("tools/list %v lacks echo or add", got)
			}
			if got := callText(t, a.Session, "echo", map[string]any{"message": "before"}); got != "before" {
				t.Fatalf("echo answered %q", got)
			}

			// deny: announced, hidden, refused, never forwarded.
			out := policyCLI(t, h, "echo", "deny")
			if !strings.Contains(out, "in force at once") {
				t.Errorf("servers policy printed %q, want it to say the policy is in force at once", out)
			}
			a.waitListChanged(t, 1, 20*time.Second)
			if got := listedNames(t, a.Session); slices.Contains(got, "echo") || !slices.Contains(got, "add") {
				t.Errorf("tools/list after deny %v: want add and not echo", got)
			}
			expectDenied(t, a.Session, "after deny")
			// The change of authority is on the record.
			found := false
			for _, e := range auditEvents(t, h) {
				if e.Type == audit.TypeConfigChanged {
					f := auditFields(t, e)
					changes, _ := f["changes"].([]any)
					found = found || slices.Contains(changes, any("echo: tool echo allow → deny"))
				}
			}
			if !found {
				t.Error("no config_changed event records echo: tool echo allow → deny")
			}
			if n := echoCalls(t, callLog); n != 1 {
				t.Errorf("the server received %d echo calls, want 1 (before the deny)", n)
			}

			// allow → approve: the next call waits for a person; the list
			// the agent sees is the same, so nothing is announced.
			policyCLI(t, h, "add", "approve")
			pending := asyncCall(t, a.Session, "add", map[string]any{"a": 1, "b": 2})
			req := waitApproval(t, h, "add after allow → approve", forTool("add", ""))
			decideCLI(t, h, "deny", string(req.ID))
			if r := await(t, pending); r.err == nil {
				t.Errorf("add, tightened to approve and denied by the person, was served: %+v", r.res)
			} else if _, ref := refusalOf(t, r.err); ref.Error != control.ApprovalDenied {
				t.Errorf("add refused with %s, want %s", ref.Error, control.ApprovalDenied)
			}
			if n := a.listChanged(); n != 1 {
				t.Errorf("%d list_changed after allow → approve, want still 1", n)
			}

			// A config.json broken by hand, one that would allow echo if it
			// parsed: the daemon reads it, reports it and keeps the policy.
			good, err := os.ReadFile(h.ConfigFile())
			if err != nil {
				t.Fatal(err)
			}
			broken := bytes.ReplaceAll(good, []byte(`"deny"`), []byte(`"allow"`))
			broken = bytes.Replace(broken, []byte(`"mcpServers": {`), []byte(`"mcpServers": {,`), 1)
			if bytes.Equal(broken, good) || !bytes.Contains(good, []byte(`"deny"`)) {
				t.Fatalf("nothing to break in:\n%s", good)
			}
			if err := os.WriteFile(h.ConfigFile(), broken, 0o600); err != nil {
				t.Fatal(err)
			}
			waitConfigError(t, h)
			expectDenied(t, a.Session, "with a broken config.json")
			if got := listedNames(t, a.Session); slices.Contains(got, "echo") {
				t.Errorf("tools/list with a broken config.json shows echo: %v", got)
			}
			if n := a.listChanged(); n != 1 {
				t.Errorf("%d list_changed after config.json broke, want still 1", n)
			}

			// Repaired, then allowed again: announced, listed, served.
			if err := os.WriteFile(h.ConfigFile(), good, 0o600); err != nil {
				t.Fatal(err)
			}
			policyCLI(t, h, "echo", "allow")
			a.waitListChanged(t, 2, 20*time.Second)
			if got := listedNames(t, a.Session); !slices.Contains(got, "echo") {
				t.Errorf("tools/list after allow %v lacks echo", got)
			}
			if got := callText(t, a.Session, "echo", map[string]any{"message": "after"}); got != "after" {
				t.Errorf("echo answered %q", got)
			}
			if n := echoCalls(t, callLog); n != 2 {
				t.Errorf("the server received %d echo calls, want 2", n)
			}
			if n := a.listChanged(); n != 2 {
				t.Errorf("%d list_changed in all, want 2", n)
			}
		})
	}
}

// policyCLI runs `portcullis servers policy echo TOOL POLICY` and returns
// what it printed.
func policyCLI(t *testing.T, h *harness.Home, tool, policy string) string {
	t.Helper()
	r, err := h.RunAtTerminal(testContext(t, 30*time.Second), "servers", "policy", "echo", tool, policy)
	if err != nil {
		t.Fatalf("servers policy echo %s %s: %v", tool, policy, err)
	}
	return r.Stdout
}

// listedNames returns the names in the agent's tools/list, sorted.
func listedNames(t *testing.T, s *mcp.ClientSession) []string {
	t.Helper()
	res, err := s.ListTools(testContext(t, 30*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	slices.Sort(out)
	return out
}

// expectDenied calls echo and wants it refused by the deny policy.
func expectDenied(t *testing.T, s *mcp.ClientSession, when string) {
	t.Helper()
	res, err := s.CallTool(testContext(t, 30*time.Second), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "denied"}})
	if err == nil {
		t.Errorf("%s: echo was served: %s", when, resultText(res))
		return
	}
	if _, ref := refusalOf(t, err); ref.Error != control.ApprovalDenied || !strings.Contains(ref.Reason, "policy") {
		t.Errorf("%s: echo refused with %s (%s), want %s by the policy", when, ref.Error, ref.Reason, control.ApprovalDenied)
	}
}

// echoCalls counts the echo calls in the echo server's call log.
func echoCalls(t *testing.T, path string) int {
	t.Helper()
	n := 0
	for _, c := range readCallLog(t, path) {
		if c.Tool == "echo" {
			n++
		}
	}
	return n
}

// waitConfigError polls `portcullis status` until it reports the broken
// configuration file, failing t after 20 s.
func waitConfigError(t *testing.T, h *harness.Home) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rep, err := h.Status(testContext(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if rep.ConfigError != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("status reported no configError within 20 s of config.json breaking")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPolicyLiveWhileWaiting: a policy change reaches a call that already
// waits for a person. Denied meanwhile, the call is refused at once (not at
// the approval timeout) by the policy, and its request, which no call waits
// on any more, leaves `portcullis approvals`; allowed meanwhile, the call
// is served at once without anybody approving, and its request leaves too.
func TestPolicyLiveWhileWaiting(t *testing.T) {
	h := newHome(t)
	callLog := filepath.Join(t.TempDir(), "calls.jsonl")
	if err := h.AddServer(testContext(t, 30*time.Second), "echo", []string{"--env", "ECHO_CALL_LOG=" + callLog}, echoBin); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, h)
	a := connectListChanged(t, h, "echo", "")

	// approve → deny while the call waits.
	pending := asyncCall(t, a.Session, "echo", map[string]any{"message": "held"})
	req := waitApproval(t, h, "echo", forTool("echo", ""))
	policyCLI(t, h, "echo", "deny")
	r := awaitWithin(t, pending, 20*time.Second, "echo denied while it waited")
	if r.err == nil {
		t.Fatalf("echo, denied while it waited, was served: %s", resultText(r.res))
	}
	if _, ref := refusalOf(t, r.err); ref.Error != control.ApprovalDenied || !strings.Contains(ref.Reason, "denied by the person's policy") {
		t.Errorf("echo refused with %s (%s), want %s by the policy", ref.Error, ref.Reason, control.ApprovalDenied)
	}
	waitApprovalGone(t, h, string(req.ID))
	if n := echoCallsSoFar(t, callLog); n != 0 {
		t.Errorf("the server received %d echo calls, want 0", n)
	}
	if _, err := h.RunAtTerminal(testContext(t, 30*time.Second), "approve", string(req.ID)); err == nil {
		t.Errorf("approve %s succeeded after the request was withdrawn", req.ID)
	}

	// approve → allow while the call waits.
	policyCLI(t, h, "echo", "approve")
	pending = asyncCall(t, a.Session, "echo", map[string]any{"message": "released"})
	req = waitApproval(t, h, "echo again", forTool("echo", ""))
	policyCLI(t, h, "echo", "allow")
	if got := okText(t, awaitWithin(t, pending, 20*time.Second, "echo allowed while it waited")); got != "released" {
		t.Errorf("echo answered %q, want released", got)
	}
	waitApprovalGone(t, h, string(req.ID))
	if n := echoCalls(t, callLog); n != 1 {
		t.Errorf("the server received %d echo calls, want 1", n)
	}
}

// TestPolicyLiveServerRemoved: `portcullis servers remove` (or a config.json
// replaced by a valid `{}`) while an agent run is connected changes nothing
// for that run: its denied tool stays hidden and refused, its allowed tool
// is served without approval, and nothing is announced. When the label
// comes back, its new policies apply.
func TestPolicyLiveServerRemoved(t *testing.T) {
	h := newHome(t)
	callLog := filepath.Join(t.TempDir(), "calls.jsonl")
	if err := h.AddServer(testContext(t, 30*time.Second), "echo", []string{"--env", "ECHO_CALL_LOG=" + callLog}, echoBin); err != nil {
		t.Fatal(err)
	}
	allowTools(t, h, "echo", "add")
	if err := h.SetToolPolicy("echo", "deny", "echo"); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, h)
	a := connectListChanged(t, h, "echo", "")
	if got := listedNames(t, a.Session); slices.Contains(got, "echo") || !slices.Contains(got, "add") {
		t.Fatalf("tools/list %v: want add and not echo", got)
	}

	check := func(when string) {
		t.Helper()
		if got := listedNames(t, a.Session); slices.Contains(got, "echo") || !slices.Contains(got, "add") {
			t.Errorf("%s: tools/list %v: want add and not echo", when, got)
		}
		// Bounded: a call that waited for a person would block.
		if r := awaitWithin(t, asyncCall(t, a.Session, "add", map[string]any{"a": 1, "b": 2}), 20*time.Second, when+": add"); r.err != nil {
			t.Errorf("%s: the allowed add failed: %v", when, r.err)
		}
		r := awaitWithin(t, asyncCall(t, a.Session, "echo", map[string]any{"message": "x"}), 20*time.Second, when+": echo")
		if r.err == nil {
			t.Errorf("%s: the denied echo was served", when)
		} else if _, ref := refusalOf(t, r.err); ref.Error != control.ApprovalDenied {
			t.Errorf("%s: echo refused with %s, want %s", when, ref.Error, control.ApprovalDenied)
		}
		if reqs := approvals(t, h); len(reqs) != 0 {
			t.Errorf("%s: approval requests pending: %+v", when, reqs)
		}
	}

	if _, err := h.Run(testContext(t, 30*time.Second), "servers", "remove", "echo"); err != nil {
		t.Fatal(err)
	}
	check("after servers remove")
	if err := os.WriteFile(h.ConfigFile(), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Status reads the file as it is now: the {} is in force after it.
	if _, err := h.Status(testContext(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	check("with config.json {}")
	if n := a.listChanged(); n != 0 {
		t.Errorf("%d list_changed after the server was removed, want none", n)
	}

	// Back, with the default policies: echo is shown again (announced)
	// and asks a person.
	if err := h.AddServer(testContext(t, 30*time.Second), "echo", []string{"--env", "ECHO_CALL_LOG=" + callLog}, echoBin); err != nil {
		t.Fatal(err)
	}
	a.waitListChanged(t, 1, 20*time.Second)
	if got := listedNames(t, a.Session); !slices.Contains(got, "echo") {
		t.Errorf("tools/list after the label came back %v lacks echo", got)
	}
	pending := asyncCall(t, a.Session, "add", map[string]any{"a": 1, "b": 2})
	req := waitApproval(t, h, "add after the label came back", forTool("add", ""))
	decideCLI(t, h, "approve", string(req.ID))
	if r := awaitWithin(t, pending, 20*time.Second, "add approved"); r.err != nil {
		t.Errorf("approved add failed: %v", r.err)
	}
}

// echoCallsSoFar is echoCalls, zero while the call log is empty or absent.
func echoCallsSoFar(t *testing.T, path string) int {
	t.Helper()
	if b, err := os.ReadFile(path); err != nil || len(bytes.TrimSpace(b)) == 0 {
		return 0
	}
	return echoCalls(t, path)
}

// awaitWithin waits up to d for the call's result, failing t otherwise.
func awaitWithin(t *testing.T, ch <-chan asyncResult, d time.Duration, what string) asyncResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		t.Fatalf("%s: no answer within %s", what, d)
	}
	return asyncResult{}
}

// waitApprovalGone polls `portcullis approvals --json` until request id is
// no longer pending, failing t after 20 s.
func waitApprovalGone(t *testing.T, h *harness.Home, id string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		reqs := approvals(t, h)
		if !slices.ContainsFunc(reqs, func(r authz.Request) bool { return string(r.ID) == id }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("approval request %s still pending after 20 s: %+v", id, reqs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConfigChangedWhileStopped: the audit log records the configuration in
// force when it first sees it, and an edit made while no daemon ran when
// the next daemon starts.
func TestConfigChangedWhileStopped(t *testing.T) {
	h := newHome(t)
	if err := h.AddServer(testContext(t, 30*time.Second), "echo", nil, echoBin); err != nil {
		t.Fatal(err)
	}
	d, err := h.StartDaemon(testContext(t, 30*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	policyCLI(t, h, "add", "deny")
	startDaemon(t, h)
	var records [][]any
	for _, e := range auditEvents(t, h) {
		if f := auditFields(t, e); e.Type == audit.TypeConfigChanged && f["atStart"] == true {
			records = append(records, f["changes"].([]any))
		}
	}
	if len(records) != 2 || !slices.Contains(records[0], any("echo: server added ("+echoBin+")")) ||
		!slices.Equal(records[1], []any{"echo: tool add approve → deny"}) {
		t.Errorf("config_changed records at start: %v; want the configuration first seen, then the edit made while stopped", records)
	}
}
