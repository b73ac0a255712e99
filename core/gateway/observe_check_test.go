package gateway

import (
	"context"
	"errors"
	"fmt"
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

// failingTreeProc is a treeProc whose CheckTree fails with err while err is
// set.
type failingTreeProc struct {
	*treeProc
	mu  sync.Mutex
	err error // guarded by mu
}

func (p *failingTreeProc) CheckTree(ctx context.Context) (*supervisor.TreeChange, error) {
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err != nil {
		p.treeProc.mu.Lock()
		p.treeProc.checks++
		p.treeProc.mu.Unlock()
		return nil, err
	}
	return p.treeProc.CheckTree(ctx)
}

func (p *failingTreeProc) fail(err error) {
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
}

func newFailingTreeRig(t *testing.T) (*rig, *failingTreeProc) {
	var fp *failingTreeProc
	ready := make(chan struct{})
	var once sync.Once
	r := newRig(t, rigOptions{wrap: func(p *scriptServer) Process {
		tp := &treeProc{scriptServer: p, changes: make(chan supervisor.TreeChange, 4)}
		tp.stdin = &heldWriter{p: tp}
		f := &failingTreeProc{treeProc: tp}
		once.Do(func() { fp = f; close(ready) })
		return f
	}})
	r.handshake()
	<-ready
	return r, fp
}

func reachedServer(r *rig, n int64) bool {
	for _, c := range r.launcher.received() {
		if c.N == n {
			return true
		}
	}
	return false
}

// A tree check that fails before a call under a grant closes: the call is
// refused (server_unavailable, and the model is told to call again in a
// moment), never sent, and the refusal and the unsent call are audited.
// Once the check succeeds again the same call goes through.
func TestTreeCheckErrorFailsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, fp := newFailingTreeRig(t)
		defer r.close()
		approveFirstWrite(t, r)
		fp.fail(fmt.Errorf("process 4242: %w", errors.New("no such file or directory")))
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		line := r.agent.wait(2, 5*time.Second)
		_, ref := refusal(t, line)
		if ref == nil || ref.Error != control.ServerUnavailable || ref.Epoch != "E1" {
			t.Fatalf("call with a failing tree check: %+v, want server_unavailable on E1", ref)
		}
		var msg string
		if e := mcpwire.GetPath(line, "error", "message"); e != nil {
			msg = string(e)
		}
		for _, want := range []string{"could not check which processes of the server can answer", "no such file or directory", "the call was not sent", "call again in a moment"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error.message %s lacks %q", msg, want)
			}
		}
		if reachedServer(r, 2) {
			t.Fatal("the call reached the server although the tree check failed")
		}
		waitFor(t, "the refusal audited", func() bool {
			denied, unsent := false, false
			for _, e := range r.audit.entries() {
				switch f := e.Fields.(type) {
				case audit.CallRefused:
					denied = denied || (f.Kind == string(control.ServerUnavailable) && f.Tool == toolWrite && strings.Contains(f.Reason, "could not check"))
				case audit.ToolCompleted:
					unsent = unsent || (f.Outcome == "not_forwarded" && strings.Contains(f.Error, "could not check"))
				}
			}
			return denied && unsent
		})
		// The retry the refusal names succeeds once the check can.
		fp.fail(nil)
		r.agent.request(3, "tools/call", callParams(toolWrite, 3, ""))
		if _, ref := refusal(t, r.agent.wait(3, 5*time.Second)); ref != nil {
			t.Fatalf("call after the check recovered: %+v", ref)
		}
		if !reachedServer(r, 3) {
			t.Error("the call after the check recovered did not reach the server")
		}
	})
}

// A process whose tree the system does not show at all (no tree view on
// the platform, or tree watching off) is not checked: its calls go on as
// they did before tree watching, and the status never says the running
// server is unchanged.
func TestTreeUnwatchedIsNotAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, fp := newFailingTreeRig(t)
		defer r.close()
		fp.fail(fmt.Errorf("%w (plan9)", supervisor.ErrTreeUnwatched))
		approveFirstWrite(t, r)
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		if _, ref := refusal(t, r.agent.wait(2, 5*time.Second)); ref != nil {
			t.Fatalf("call on an unwatched tree: %+v, want it forwarded", ref)
		}
		if checked, _ := r.sess.TreeUnchanged(); checked {
			t.Error("TreeUnchanged reports a check on an unwatched tree")
		}
	})
}
