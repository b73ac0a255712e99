package e2e

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/internal/front"
)

// TestRecordNamesTheDecider: an approval and a confirmation of a widening
// change of the configuration, made by the person at a terminal of their
// own, are recorded with who decided: the channel, the deciding process
// (pid, executable, ancestry, as for a refused decision) and whether and
// how the operating system authenticated the person.
func TestRecordNamesTheDecider(t *testing.T) {
	h := newHome(t)
	callLog := filepath.Join(t.TempDir(), "calls.jsonl")
	if err := h.AddServer(testContext(t, 30*time.Second), "echo", []string{"--env", "ECHO_CALL_LOG=" + callLog}, echoBin); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, h)
	a := connectListChanged(t, h, "echo", "2025-06-18")
	pending := asyncCall(t, a.Session, "echo", map[string]any{"message": "approved"})
	req := waitApproval(t, h, "echo", forTool("echo", ""))
	decideCLI(t, h, "approve", string(req.ID))
	if got := okText(t, await(t, pending)); got != "approved" {
		t.Errorf("echo answered %q", got)
	}
	editPolicies(t, h, map[string]config.Policy{"add": config.PolicyAllow})
	var change string
	waitFor(t, "the widening edit is held", func() bool {
		if p := pendingChange(t, h); p != nil {
			change = p.ID
		}
		return change != ""
	})
	if _, err := h.RunAtTerminal(testContext(t, 30*time.Second), "changes", "confirm", change); err != nil {
		t.Fatal(err)
	}

	exe := front.AppPath(portcullis)
	check := func(what string, f map[string]any) {
		t.Helper()
		pid, _ := f["pid"].(float64)
		ancestry, _ := f["ancestry"].([]any)
		if f["channel"] != audit.ChannelCLI || pid <= 0 || f["executable"] != exe || len(ancestry) < 2 || ancestry[0] != pid ||
			slices.Contains(ancestry, any(float64(a.PID()))) {
			t.Errorf("%s: decider %v; want channel cli, the pid and ancestry of the person's command %s", what, f, exe)
		}
		if auth, _ := f["authentication"].(string); auth == "" || f["authenticationMode"] == nil {
			t.Errorf("%s: no authentication recorded: %v", what, f)
		}
	}
	granted, confirmed := 0, 0
	for _, e := range auditEvents(t, h) {
		switch f := auditFields(t, e); {
		case e.Type == audit.TypeApprovalGranted && f["request"] == string(req.ID):
			granted++
			check("approval_granted", f)
		case e.Type == "config_change_confirmed" && f["id"] == change:
			confirmed++
			check("config_change_confirmed", f)
		}
	}
	if granted != 1 || confirmed != 1 {
		t.Errorf("%d approval_granted and %d config_change_confirmed events, want one each", granted, confirmed)
	}
}
