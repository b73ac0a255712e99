package e2e

// A server contained on the wire: answers match requests that were sent
// (issue "contain the server", item 3).

import (
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/gateway"
)

// TestContainPreAnsweredID: a server that answers the gateway id of a call
// still waiting for approval (faulty -forge-previous) has that answer
// dropped: the agent never sees it, the audit log records an
// unrequested_answer, and the call, once the person approves it, gets the
// server's real answer.
func TestContainPreAnsweredID(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "forger", faultyBin(t), "-forge-previous")
	allowTools(t, h, "forger", "echo") // blob keeps the default: approve
	startDaemon(t, h)
	a := startRaw(t, h, "forger")
	a.handshake("1")
	a.call("2", "tools/list", nil, 30*time.Second)
	st, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })

	a.request(`"held"`, "tools/call", toolCall("blob", map[string]any{"bytes": 3}))
	req := waitApproval(t, h, "blob", forTool("blob", st.Epoch))
	// The call waiting for approval has its gateway id reserved; echo gets
	// the next one, and the server forges an answer for the one before.
	a.request(`"e"`, "tools/call", toolCall("echo", map[string]any{"message": "hi"}))
	echo, before := a.await(`"e"`, 30*time.Second)
	if got := echo.text(t); got != "hi" {
		t.Fatalf("echo answered %q", got)
	}
	for _, m := range before {
		if strings.Contains(m.Raw, "FAKE") || string(m.ID) == `"held"` {
			t.Fatalf("the agent got the forged answer: %s", m.Raw)
		}
	}
	evs := eventsOf(t, h, audit.TypeUnrequestedAnswer, st.Run)
	if len(evs) == 0 {
		t.Fatal("no unrequested_answer event in the audit log")
	}
	var f audit.UnrequestedAnswer
	if err := evs[0].DecodeFields(&f); err != nil {
		t.Fatal(err)
	}
	if f.Epoch != st.Epoch || f.ServerLabel != "forger" || !strings.Contains(f.Reason, "tools/call request that was not sent") {
		t.Errorf("unrequested_answer %+v, want the epoch %s and the reserved call", f, st.Epoch)
	}

	decideCLI(t, h, "approve", req.ID, "--once")
	held, between := a.await(`"held"`, 30*time.Second)
	if got := held.text(t); got != "xxx" {
		t.Fatalf("the approved call answered %q, want the server's real answer xxx", got)
	}
	for _, m := range between {
		if strings.Contains(m.Raw, "FAKE") {
			t.Fatalf("the agent got a forged answer: %s", m.Raw)
		}
	}
	verifyAudit(t, h)
}
