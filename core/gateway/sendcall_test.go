package gateway

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
)

// TestEpochEndsWhileCallIsChecked: a call under a grant whose intent is
// written and whose tree check is under way when its epoch ends is
// answered epoch_ended, never reaches a process, and its completion is
// recorded. The epoch's end reads the call's record (p.call) that the
// call's goroutine wrote once the intent was durable; under -race the
// test fails if that write is not guarded by the session's mutex (issue
// 12: forwardRaw wrote it unlocked after publishing p).
func TestEpochEndsWhileCallIsChecked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, tp := newTreeRig(t, 0)
		defer r.close()
		approveFirstWrite(t, r)
		release := tp.holdChecks()
		defer release()
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		// Not synctest.Wait, which would order the call's goroutine before
		// this one for the race detector, as the mutex does, and so hide
		// an unguarded write. The bubble's clock moves only once every
		// goroutine is blocked: after this sleep the call waits in
		// CheckTree, its record written.
		time.Sleep(time.Millisecond)
		r.sess.Replace("rebuild") // the epoch's end reads the call's record
		release()
		_, ref := refusal(t, r.agent.wait(2, 5*time.Second))
		if ref == nil || ref.Error != control.EpochEnded || ref.Epoch != "E1" {
			t.Fatalf("call whose epoch ended during its tree check: %+v, want epoch_ended on E1", ref)
		}
		for _, c := range r.launcher.received() {
			if c.N == 2 {
				t.Fatalf("the call reached epoch %s", c.Epoch)
			}
		}
		synctest.Wait()
		var outcomes []string
		for _, e := range r.audit.entries() {
			if c, ok := e.Fields.(audit.ToolCompleted); ok && c.Tool == toolWrite && c.Epoch == "E1" {
				outcomes = append(outcomes, c.Outcome)
			}
		}
		if len(outcomes) != 2 || outcomes[0] != "ok" {
			t.Errorf("tool_completed outcomes of write on E1: %q, want the first call's ok and one for the ended call", outcomes)
		}
	})
}
