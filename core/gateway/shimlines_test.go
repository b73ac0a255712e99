package gateway

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
)

// TestShimLinesTellHeldCalls: a relaying shim that asked for shim lines is
// told when a call starts and stops waiting for the person (so that it can
// say, should the daemon die meanwhile, that the call was never sent), the
// release before the call's answer; an agent's connection that did not ask
// never gets such a line.
func TestShimLinesTellHeldCalls(t *testing.T) {
	for _, asked := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{shimLines: asked})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/list", nil)
			r.agent.wait(1, 5*time.Second)
			r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
			req := r.pendingFor(5 * time.Second)
			synctest.Wait()
			held, released, answer := -1, -1, -1
			find := func() {
				for i, l := range r.agent.all() {
					switch {
					case bytes.Equal(l, control.HeldLine([]byte("2"))):
						held = i
					case bytes.Equal(l, control.ReleasedLine([]byte("2"))):
						released = i
					case string(mustGet(l, "id")) == "2":
						answer = i
					}
				}
			}
			find()
			if asked && (held < 0 || released >= 0) {
				t.Fatalf("while the call waits: held line at %d, released at %d; want held only", held, released)
			}
			decide(t, r, req.ID, authz.ApproveRun)
			mustResult(t, r.agent.wait(2, 5*time.Second))
			find()
			if !asked {
				for _, l := range r.agent.all() {
					if control.Reserved(l) {
						t.Fatalf("an agent that did not ask got %q", l)
					}
				}
				return
			}
			if !(held >= 0 && held < released && released < answer) {
				t.Errorf("held at %d, released at %d, answered at %d; want them in that order", held, released, answer)
			}
		})
	}
}
