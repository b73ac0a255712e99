package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/supervisor"
)

// treeProc is a scriptServer whose tree the test changes: changes go out on
// Changes (the supervisor's watcher) or come back from the next CheckTree
// (the check before a call). Calls with arguments.n == heldN are kept from
// the fake server, so that the test answers them itself, late.
type treeProc struct {
	*scriptServer
	changes chan supervisor.TreeChange

	mu     sync.Mutex
	next   *supervisor.TreeChange // guarded by mu; CheckTree's next answer
	hold   chan struct{}          // guarded by mu; CheckTree waits until it is closed (holdChecks)
	checks int                    // guarded by mu
	held   [][]byte               // guarded by mu; requests kept from the fake
	heldN  int64
	stdin  *heldWriter
}

var _ treeWatcher = (*treeProc)(nil)

func (p *treeProc) Changes() <-chan supervisor.TreeChange { return p.changes }

func (p *treeProc) CheckTree(context.Context) (*supervisor.TreeChange, error) {
	p.mu.Lock()
	p.checks++
	ch := p.next
	p.next = nil
	hold := p.hold
	p.mu.Unlock()
	if hold != nil {
		<-hold
	}
	return ch, nil
}

// holdChecks makes the next CheckTree calls wait until release is called.
func (p *treeProc) holdChecks() (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	hold := make(chan struct{})
	p.hold = hold
	var once sync.Once
	return func() { once.Do(func() { close(hold) }) }
}

func (p *treeProc) Stdin() io.WriteCloser { return p.stdin }

// heldWriter passes lines to the fake, except the tools/call it holds.
type heldWriter struct{ p *treeProc }

func (w *heldWriter) Write(b []byte) (int, error) {
	if n := mcpwire.GetPath(bytes.TrimSpace(b), "params", "arguments", "n"); n != nil && string(n) != "" {
		var v int64
		if json.Unmarshal(n, &v) == nil && v == w.p.heldN && w.p.heldN != 0 {
			w.p.mu.Lock()
			w.p.held = append(w.p.held, bytes.Clone(b))
			w.p.mu.Unlock()
			return len(b), nil
		}
	}
	return w.p.scriptServer.Stdin().Write(b)
}

func (w *heldWriter) Close() error { return w.p.scriptServer.Stdin().Close() }

// newTreeRig is newRig whose processes are treeProcs; it returns the first.
func newTreeRig(t *testing.T, heldN int64) (*rig, *treeProc) {
	var first *treeProc
	var once sync.Once
	ready := make(chan struct{})
	r := newRig(t, rigOptions{wrap: func(p *scriptServer) Process {
		tp := &treeProc{scriptServer: p, changes: make(chan supervisor.TreeChange, 4), heldN: heldN}
		tp.stdin = &heldWriter{p: tp}
		once.Do(func() { first = tp; close(ready) })
		return tp
	}})
	r.handshake()
	<-ready
	return r, first
}

func observedChange(prev, next ids.EpochID) supervisor.TreeChange {
	return supervisor.TreeChange{
		Epoch: next, Previous: prev, Restarted: true,
		Old:  []identity.Observed{{PID: 1001, Exe: "/usr/bin/node", Script: "/srv/a.js"}},
		New:  []identity.Observed{{PID: 1001, Exe: "/usr/bin/node"}, {PID: 2002, Exe: "/usr/bin/node", Script: "/srv/a.js"}},
		What: []string{"pid 2002 started, holding the server's stdio: /usr/bin/node /srv/a.js"},
	}
}

func approveFirstWrite(t *testing.T, r *rig) {
	t.Helper()
	r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
	decide(t, r, r.pendingFor(5*time.Second).ID, authz.ApproveRun)
	if _, ref := refusal(t, r.agent.wait(1, 5*time.Second)); ref != nil {
		t.Fatalf("first write refused: %+v", ref)
	}
}

// A change the supervisor observes in the tree is a new epoch on the same
// process: the grant of the old one is void, the next call is refused
// authorization_stale naming both, server_replaced is audited with cause
// observed and both identities, and the process keeps running.
func TestObservedChangeIsNewEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, tp := newTreeRig(t, 0)
		defer r.close()
		approveFirstWrite(t, r)
		tp.changes <- observedChange("E1", "E1w")
		waitFor(t, "the observed epoch ready", func() bool {
			st := r.sess.Status()
			return st.Epoch == "E1w" && st.State == StateReady
		})
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		_, ref := refusal(t, r.agent.wait(2, 5*time.Second))
		if ref == nil || ref.Error != control.AuthorizationStale || ref.ApprovedEpoch != "E1" || ref.CurrentEpoch != "E1w" {
			t.Fatalf("call after the observed change: %+v, want authorization_stale E1 -> E1w", ref)
		}
		for _, c := range r.launcher.received() {
			if c.N == 2 {
				t.Fatalf("the call reached the server under the old grant: %+v", c)
			}
		}
		// The card claims no more than was measured and says what was seen.
		req := r.pendingFor(5 * time.Second)
		for _, want := range []string{"the supervisor observed a new process behind the same pipe (pid 2002 started", "no measured file changed (measured: executable fake)"} {
			if !strings.Contains(req.Card.Reason, want) {
				t.Errorf("card reason %q lacks %q", req.Card.Reason, want)
			}
		}
		select {
		case <-tp.Done():
			t.Fatal("the process was stopped: an observed epoch runs on it")
		default:
		}
		found := false
		for _, e := range r.audit.entries() {
			if sr, ok := e.Fields.(audit.ServerReplaced); ok && e.Type == audit.TypeServerReplaced {
				found = sr.Cause == "observed" && sr.OldEpoch == "E1" && sr.NewEpoch == "E1w" &&
					bytes.Contains(sr.OldIdentity, []byte(`"pid":1001`)) && bytes.Contains(sr.NewIdentity, []byte(`"pid":2002`))
			}
		}
		if !found {
			t.Errorf("no server_replaced cause observed E1 -> E1w with both identities in %+v", r.audit.entries())
		}
	})
}

// The check before a call that carries authority sees a change the watcher
// has not delivered yet: the call is refused and never sent.
func TestCheckBeforeAuthorityCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, tp := newTreeRig(t, 0)
		defer r.close()
		approveFirstWrite(t, r)
		ch := observedChange("E1", "E1x")
		tp.mu.Lock()
		tp.next = &ch
		tp.mu.Unlock()
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		_, ref := refusal(t, r.agent.wait(2, 5*time.Second))
		if ref == nil || ref.Error != control.AuthorizationStale || ref.CurrentEpoch != "E1x" {
			t.Fatalf("call with a changed tree: %+v, want authorization_stale naming E1x", ref)
		}
		for _, c := range r.launcher.received() {
			if c.N == 2 {
				t.Fatalf("the call reached the server: %+v", c)
			}
		}
		waitFor(t, "the checked epoch taken over", func() bool { return r.sess.Status().Epoch == "E1x" })
		// An allowed call without credentials carries no authority: no check.
		tp.mu.Lock()
		before := tp.checks
		tp.mu.Unlock()
		r.waitState(StateReady, 5*time.Second)
		r.agent.request(3, "tools/call", callParams(toolRead, 3, ""))
		r.agent.wait(3, 5*time.Second)
		tp.mu.Lock()
		after := tp.checks
		tp.mu.Unlock()
		// read is allowed but the rig's server has a meta credential scope:
		// the check runs for every call then.
		if after == before {
			t.Errorf("no tree check before a call to a server holding credentials")
		}
	})
}

// An answer that the old epoch sends after the agent was told epoch_ended
// is recorded as tool_completed with lateAnswer, never forwarded.
func TestLateAnswerRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, tp := newTreeRig(t, 5)
		defer r.close()
		approveFirstWrite(t, r)
		r.agent.request(5, "tools/call", callParams(toolWrite, 5, ""))
		waitFor(t, "the call held at the fake", func() bool {
			tp.mu.Lock()
			defer tp.mu.Unlock()
			return len(tp.held) == 1
		})
		tp.changes <- observedChange("E1", "E1y")
		_, ref := refusal(t, r.agent.wait(5, 5*time.Second))
		if ref == nil || ref.Error != control.EpochEnded || ref.Epoch != "E1" || ref.CurrentEpoch != "E1y" {
			t.Fatalf("the call in flight: %+v, want epoch_ended E1 -> E1y", ref)
		}
		tp.mu.Lock()
		req := tp.held[0]
		tp.mu.Unlock()
		id := mcpwire.GetPath(bytes.TrimSpace(req), "id")
		tp.write(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"content":[{"type":"text","text":"late write"}]}}`)
		waitFor(t, "the late answer recorded", func() bool {
			for _, e := range r.audit.entries() {
				if c, ok := e.Fields.(audit.ToolCompleted); ok && c.LateAnswer && c.Epoch == "E1" && c.Outcome == "ok" {
					return true
				}
			}
			return false
		})
		r.agent.request(6, "ping", nil)
		r.agent.wait(6, 5*time.Second)
		if got, _ := r.agent.response(5); bytes.Contains(got, []byte("late write")) {
			t.Errorf("the late answer reached the agent: %s", got)
		}
	})
}
