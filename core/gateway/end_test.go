package gateway

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
)

// Regression tests of the end of an agent run.

// TestCompletionBeforeAnswer: a call's tool_completed is written before its
// answer is forwarded to the agent (the record tier: in the file before the
// agent sees anything), on the server's reading loop, with no goroutine.
func TestCompletionBeforeAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, nil)
		b.handshake()
		release := b.audit.holdType(audit.TypeToolCompleted)
		defer release()
		b.agent.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}`)
		synctest.Wait()
		calls := b.proc(1).received(methodToolsCall)
		if len(calls) != 1 {
			t.Fatalf("the server got %d calls, want 1", len(calls))
		}
		b.proc(1).reply(calls[0], `{"content":[{"type":"text","text":"done"}]}`)
		if got := b.agent.answers("1"); len(got) != 0 {
			t.Fatalf("the agent got the answer %s while its tool_completed was not written", got[0])
		}
		release()
		b.agent.answer("1")
		if !slices.Contains(b.auditTypes(), audit.TypeToolCompleted) {
			t.Fatalf("audit events %q: no tool_completed", b.auditTypes())
		}
	})
}

// TestEventsBeforeRunEnded: the events of a run that are written off the
// response path (server_exited) are all written before its run_ended, and
// Serve returns only once they are.
func TestEventsBeforeRunEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, nil)
		b.handshake()
		releaseExited := b.audit.holdType(audit.TypeServerExited)
		defer releaseExited()
		b.agent.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}`)
		synctest.Wait()
		calls := b.proc(1).received(methodToolsCall)
		if len(calls) != 1 {
			t.Fatalf("the server got %d calls, want 1", len(calls))
		}
		b.proc(1).reply(calls[0], `{"content":[{"type":"text","text":"done"}]}`)
		b.agent.answer("1")
		b.agent.inW.Close() // the agent leaves: the run ends
		synctest.Wait()
		if slices.Contains(b.auditTypes(), audit.TypeRunEnded) {
			t.Fatalf("run_ended written while server_exited was still being written: %q", b.auditTypes())
		}
		select {
		case err := <-b.served:
			t.Fatalf("Serve returned (%v) before the run's events were written", err)
		default:
		}
		releaseExited()
		err := <-b.served
		b.served <- err
		types := b.auditTypes()
		end := slices.Index(types, audit.TypeRunEnded)
		if end != len(types)-1 {
			t.Fatalf("audit events %q: run_ended is not the last", types)
		}
		for _, typ := range []string{audit.TypeToolCompleted, audit.TypeServerExited} {
			if i := slices.Index(types, typ); i < 0 || i > end {
				t.Errorf("audit events %q: %s missing or after run_ended", types, typ)
			}
		}
	})
}

// TestListenDoesNotHoldTheDrain: an open subscriptions/listen stream is not
// an answer the drain after EndOfInput waits for; a call in flight is, and
// the run ends as soon as it is answered.
func TestListenDoesNotHoldTheDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const drain = time.Minute
		b := newBubble(t, func(o *Options) { o.DrainTimeout = drain })
		b.discover()
		b.agent.send(`{"jsonrpc":"2.0","id":5,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},"_meta":` + modernMeta + `}}`)
		b.agent.send(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"t","_meta":` + modernMeta + `}}`)
		synctest.Wait()
		p := b.proc(1)
		if n := len(p.received(methodListen)); n != 1 {
			t.Fatalf("the server got %d subscriptions/listen, want 1", n)
		}
		calls := p.received(methodToolsCall)
		if len(calls) != 1 {
			t.Fatalf("the server got %d calls, want 1", len(calls))
		}
		start := time.Now()
		b.agent.send(control.EndOfInput)
		synctest.Wait()
		select {
		case err := <-b.served:
			t.Fatalf("Serve returned (%v) with a call in flight after EndOfInput", err)
		default:
		}
		p.reply(calls[0], `{"content":[{"type":"text","text":"done"}]}`)
		err := <-b.served
		b.served <- err
		if d := time.Since(start); d != 0 {
			t.Errorf("the run ended %s after its last answer, want at once (the listen stream kept it alive; drain timeout %s)", d, drain)
		}
		if got := b.agent.answer("6"); resultOf(got) == nil {
			t.Errorf("the call drained got %.300s, want its result", got)
		}
	})
}

// TestFailedWriteDoesNotStallTheAgent: a request that cannot be written to
// a process that has not exited holds nothing else of the agent up (its
// reading loop goes on at once), and is refused with server_unavailable
// once the process has had writeFailGrace to exit.
func TestFailedWriteDoesNotStallTheAgent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, nil)
		b.handshake()
		b.proc(1).inR.CloseWithError(errors.New("broken pipe")) // its stdin is gone; it runs on
		start := time.Now()
		b.agent.send(`{"jsonrpc":"2.0","id":1,"method":"resources/list"}`) // forwarded from the agent's reading loop
		b.agent.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
		b.agent.answer("2")
		if d := time.Since(start); d != 0 {
			t.Errorf("the agent's ping was answered %s after a failed write, want at once", d)
		}
		time.Sleep(writeFailGrace)
		code, ref := refusal(t, b.agent.answer("1"))
		if code == 0 || ref.Error != control.ServerUnavailable || !strings.Contains(ref.Reason, "writing to the server failed: broken pipe") {
			t.Errorf("the request that could not be written: code %d %+v, want server_unavailable naming the write error", code, ref)
		}
	})
}
