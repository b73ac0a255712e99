package gateway

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/supervisor"
)

// fakeSource is a build watcher's view of a server's source for
// Options.SourceUnsettled: unsettled from change until settle.
type fakeSource struct {
	mu sync.Mutex
	ch chan struct{} // guarded by mu; nil: settled
}

func (f *fakeSource) unsettled() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ch
}

// change starts a change of the source, as a file written behind a
// relaying launcher.
func (f *fakeSource) change() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
}

// settle ends it, as the build watcher's settled event once the daemon has
// decided on it.
func (f *fakeSource) settle() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch != nil {
		close(f.ch)
		f.ch = nil
	}
}

// newRelayRig is a rig whose server runs behind a launcher that relays its
// stdin to the worker it swaps, with a granted write.
func newRelayRig(t *testing.T) (*rig, *fakeSource) {
	src := &fakeSource{}
	r := newRig(t, rigOptions{noCredentials: true, sourceUnsettled: src.unsettled})
	r.handshake()
	approveFirstWrite(t, r)
	return r, src
}

// A call under a grant is not written to a relaying launcher while the
// server's source changed without settling (the launcher could hand it to
// the worker it starts on the new code); once the source settled and the
// build measured the same code, it goes to the epoch it was decided on.
func TestRelayedCallWaitsForSettledSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, src := newRelayRig(t)
		defer r.close()
		src.change()
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		synctest.Wait()
		if reachedServer(r, 2) {
			t.Fatal("a granted call was written to the relaying launcher while its source was changing")
		}
		if _, ok := r.agent.response(2); ok {
			t.Fatal("the call was answered while the source was changing; it should wait")
		}
		if st := r.sess.Status(); st.State != StateIdentityPending {
			t.Errorf("state %s while a call waits for the source, want identity-pending (the gate closed)", st.State)
		}
		// Another call meanwhile waits at the closed gate.
		r.agent.request(3, "tools/call", callParams(toolWrite, 3, ""))
		synctest.Wait()
		if reachedServer(r, 3) {
			t.Fatal("a second call passed while the source was changing")
		}
		time.Sleep(2 * time.Second) // still changing, within the hold timeout
		src.settle()
		r.sess.BuildSettled(false) // the daemon: the identity did not change
		for _, id := range []int64{2, 3} {
			if _, ref := refusal(t, r.agent.wait(id, 5*time.Second)); ref != nil {
				t.Fatalf("call %d after the source settled on the same code: %+v", id, ref)
			}
			if !reachedServer(r, id) {
				t.Errorf("call %d did not reach the server after the source settled", id)
			}
		}
	})
}

// When the settled source is other code (a replacement follows), the call
// decided on the old epoch's grant is refused, not sent: it would be read
// by the new code. The refusal tells the model to call again, and the
// audit records that it was not forwarded.
func TestRelayedCallNotSentWhenSourceChangedCode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, src := newRelayRig(t)
		defer r.close()
		src.change()
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		synctest.Wait()
		src.settle()
		r.sess.BuildSettled(true) // the daemon: other code; it replaces the server next
		line := r.agent.wait(2, 5*time.Second)
		_, ref := refusal(t, line)
		if ref == nil || ref.Error != control.EpochEnded || ref.Epoch != "E1" {
			t.Fatalf("call decided on the old grant after the source changed the code: %+v, want epoch_ended on E1", ref)
		}
		msg := string(mcpwire.GetPath(line, "error", "message"))
		for _, want := range []string{"the server's source changed while the call waited to be sent", "the call was not sent", "approve the new code"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error.message %s lacks %q", msg, want)
			}
		}
		if reachedServer(r, 2) {
			t.Fatal("the call reached the server whose source changed")
		}
		waitFor(t, "the unsent call audited", func() bool {
			for _, e := range r.audit.entries() {
				if f, ok := e.Fields.(audit.ToolCompleted); ok && f.Outcome == "not_forwarded" && strings.Contains(f.Error, "source changed") {
					return true
				}
			}
			return false
		})
	})
}

// A source that never settles does not hold calls for ever: after the hold
// timeout the call that waited, and one held at the gate behind it, are
// refused saying that the source is changing and to call again when the
// edit is finished; neither reached the server.
func TestRelayedCallSourceNeverSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, src := newRelayRig(t)
		defer r.close()
		src.change()
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		synctest.Wait()
		time.Sleep(time.Second)
		r.agent.request(3, "tools/call", callParams(toolWrite, 3, ""))
		for _, id := range []int64{2, 3} {
			line := r.agent.wait(id, 30*time.Second)
			_, ref := refusal(t, line)
			if ref == nil || ref.Error != control.HoldTimeout {
				t.Fatalf("call %d while the source never settles: %+v, want hold_timeout", id, ref)
			}
			msg := string(mcpwire.GetPath(line, "error", "message"))
			for _, want := range []string{"the server's source is changing", "was not sent", "call again once the edit is finished", "portcullis servers edit"} {
				if !strings.Contains(msg, want) {
					t.Errorf("call %d: error.message %s lacks %q", id, msg, want)
				}
			}
			if reachedServer(r, id) {
				t.Errorf("call %d reached the server while its source never settled", id)
			}
		}
	})
}

// A call that carries no authority (an allowed tool, no credentials) is
// sent while the source changes: the check is for what a grant or a
// person's decision lets through.
func TestUnrelayedCallIsNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{}
		src.change() // never settles
		r := newRig(t, rigOptions{noCredentials: true, sourceUnsettled: src.unsettled})
		defer r.close()
		r.handshake()
		r.agent.request(2, "tools/call", callParams(toolRead, 2, ""))
		if _, ref := refusal(t, r.agent.wait(2, 5*time.Second)); ref != nil || !reachedServer(r, 2) {
			t.Fatalf("an allowed call without credentials was held for the source: %+v", ref)
		}
	})
}

// newRelayTreeRig is newRelayRig whose processes are treeProcs (calls with
// arguments.n == heldN are kept for the test to answer); it returns the
// first.
func newRelayTreeRig(t *testing.T, heldN int64) (*rig, *treeProc, *fakeSource) {
	src := &fakeSource{}
	var first *treeProc
	var once sync.Once
	ready := make(chan struct{})
	r := newRig(t, rigOptions{noCredentials: true, sourceUnsettled: src.unsettled, wrap: func(p *scriptServer) Process {
		tp := &treeProc{scriptServer: p, changes: make(chan supervisor.TreeChange, 4), heldN: heldN}
		tp.stdin = &heldWriter{p: tp}
		once.Do(func() { first = tp; close(ready) })
		return tp
	}})
	r.handshake()
	<-ready
	approveFirstWrite(t, r)
	return r, first, src
}

// answerHeld answers the call tp holds, as whichever worker reads it.
func answerHeld(t *testing.T, tp *treeProc, text string) {
	t.Helper()
	waitFor(t, "the call held at the fake", func() bool {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		return len(tp.held) == 1
	})
	tp.mu.Lock()
	req := tp.held[0]
	tp.mu.Unlock()
	id := mcpwire.GetPath(bytes.TrimSpace(req), "id")
	tp.write(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"content":[{"type":"text","text":"` + text + `"}]}}`)
}

// A call sent while the source was settled, whose answer comes after a
// change of the source began (the launcher may have handed it to the new
// worker), is suspect: the tree is checked before the answer passes. When
// the new worker is there, the answer is recorded as its late answer,
// naming it, and the agent is told epoch_ended, never given the answer.
func TestSuspectAnswerOfRelayedCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, tp, src := newRelayTreeRig(t, 5)
		defer r.close()
		r.agent.request(5, "tools/call", callParams(toolWrite, 5, ""))
		synctest.Wait()
		src.change() // the edit, after the call was written
		r.sess.BuildStarted("server.js")
		tp.mu.Lock()
		ch := observedChange("E1", "E1n")
		tp.next = &ch
		tp.mu.Unlock()
		answerHeld(t, tp, "new worker wrote")
		line := r.agent.wait(5, 5*time.Second)
		if bytes.Contains(line, []byte("new worker wrote")) {
			t.Fatalf("the answer that came after the source changed reached the agent: %s", line)
		}
		if _, ref := refusal(t, line); ref == nil || ref.Error != control.EpochEnded || ref.Epoch != "E1" {
			t.Fatalf("the suspect call: %+v, want epoch_ended on E1", ref)
		}
		waitFor(t, "the late answer recorded with who answered", func() bool {
			for _, e := range r.audit.entries() {
				if c, ok := e.Fields.(audit.ToolCompleted); ok && c.LateAnswer && c.Epoch == "E1" && c.AnsweredBy != nil {
					return c.AnsweredBy.PID == 2002 && c.AnsweredBy.Epoch == "E1n"
				}
			}
			return false
		})
	})
}

// The same answer from a tree that did not change (the old worker read the
// call and answered) passes.
func TestSuspectAnswerOfUnchangedTreePasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, tp, src := newRelayTreeRig(t, 5)
		defer r.close()
		r.agent.request(5, "tools/call", callParams(toolWrite, 5, ""))
		synctest.Wait()
		src.change()
		r.sess.BuildStarted("server.js")
		tp.mu.Lock()
		before := tp.checks
		tp.mu.Unlock()
		answerHeld(t, tp, "old worker wrote")
		if line := r.agent.wait(5, 5*time.Second); !bytes.Contains(line, []byte("old worker wrote")) {
			t.Fatalf("the old worker's answer did not pass: %s", line)
		}
		tp.mu.Lock()
		checks := tp.checks - before
		tp.mu.Unlock()
		if checks != 1 {
			t.Errorf("the answer passed after %d tree checks, want 1", checks)
		}
	})
}
