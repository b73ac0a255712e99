package e2e

// Issue 15, items 5 and 6: stopping the daemon and putting secrets back
// into an agent's configuration need the person: at a terminal of their
// own, not a supervised server's or an agent's process, audited.

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
)

func TestContainStopNeedsThePerson(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("RunAtTerminal: Linux")
	}
	h := newHome(t)
	d := startDaemon(t, h)
	ctx := testContext(t, 60*time.Second)

	// A pipe is not the person's terminal: refused, the daemon runs on.
	if r, err := h.Run(ctx, "stop"); err == nil || !strings.Contains(err.Error(), "only at a terminal of your own") {
		t.Fatalf("portcullis stop through a pipe: %v (stdout %q), want a refusal", err, r.Stdout)
	}
	if r, err := h.Run(ctx, "uninstall", "claude-code", "--restore-secrets"); err == nil || !strings.Contains(err.Error(), "only at a terminal of your own") {
		t.Fatalf("uninstall --restore-secrets through a pipe: %v (stdout %q), want a refusal", err, r.Stdout)
	}
	if _, err := h.Status(ctx); err != nil {
		t.Fatalf("the daemon no longer answers after the refused stop: %v", err)
	}

	// The person, at a terminal: the daemon stops, and says who asked.
	r, err := h.RunAtTerminal(ctx, "stop")
	if err != nil || !strings.Contains(r.Stdout, "Portcullis is stopping") {
		t.Fatalf("portcullis stop at a terminal: %v\n%s", err, r.Stdout)
	}
	select {
	case <-d.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop within 30 s of the person's stop")
	}
	var acted bool
	for _, e := range auditEvents(t, h) {
		if e.Type == audit.TypePersonAction && auditFields(t, e)["what"] == "stop the Portcullis daemon" {
			acted = true
		}
	}
	if !acted {
		t.Error("the audit log has no person_action for the stop")
	}
}
