package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/identity"
)

// identityGate makes each epoch's Identify wait until the test releases it,
// as the supervisor's does until the launch settled and the process
// answered.
type identityGate struct {
	mu      sync.Mutex
	release map[string]chan struct{} // guarded by mu; epoch → closed to let Identify return
	asked   []string                 // guarded by mu; epochs whose Identify was called
}

func (g *identityGate) wrap(launch Launcher) Launcher {
	return func(ctx context.Context) (*Epoch, error) {
		ep, err := launch(ctx)
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		if g.release == nil {
			g.release = map[string]chan struct{}{}
		}
		ch := make(chan struct{})
		g.release[string(ep.ID)] = ch
		g.mu.Unlock()
		id, pid := ep.ID, ep.Proc.Pid()
		ep.Identify = func(ctx context.Context) ([]identity.Observed, error) {
			g.mu.Lock()
			g.asked = append(g.asked, string(id))
			g.mu.Unlock()
			select {
			case <-ch:
				return []identity.Observed{{PID: pid, Exe: "/srv/observed-" + string(id)}}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return ep, nil
	}
}

func (g *identityGate) open(epoch string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.release[epoch])
}

// The handshake and tools/list are forwarded and answered while the first
// epoch's identity is still being judged; a tools/call sent right after
// initialize (before even the answer) waits for that identity, reaches the
// epoch that was identified, and the audit log has its server_started, with
// the observed processes, before the call's intent.
func TestCallWaitsForIdentity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &identityGate{}
		r := newBubble(t, func(o *Options) { o.Launch = g.wrap(o.Launch) })
		synctest.Wait()
		// Sent back to back, as an agent that pipelines its requests.
		r.agent.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
		r.agent.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		r.agent.request(1, "tools/list", nil)
		r.agent.request(2, "tools/call", map[string]any{"name": "t", "arguments": map[string]any{}})
		synctest.Wait()
		if _, ok := r.agent.response(0); !ok {
			t.Fatal("initialize was not answered while the identity was pending")
		}
		if list, ok := r.agent.response(1); !ok || resultOf(list) == nil {
			t.Fatalf("tools/list = %s (answered %v), want the catalog while the identity is pending", list, ok)
		}
		if got, ok := r.agent.response(2); ok {
			t.Fatalf("tools/call answered before the identity was known: %s", got)
		}
		if got := r.proc(1).received("tools/call"); len(got) != 0 {
			t.Fatalf("the server got %d tools/call before the identity was known", len(got))
		}
		if slices.Contains(r.auditTypes(), audit.TypeServerStarted) {
			t.Fatal("server_started was recorded before the identity was known")
		}
		g.open("E1")
		synctest.Wait()
		calls := r.proc(1).received("tools/call")
		if len(calls) != 1 {
			t.Fatalf("the server got %d tools/call after the identity, want 1", len(calls))
		}
		r.proc(1).reply(calls[0], `{"content":[{"type":"text","text":"ok"}]}`)
		if res := resultOf(r.agent.wait(2, 5*time.Second)); res == nil {
			t.Fatal("tools/call got no result")
		}
		var started, called int64
		for _, e := range r.audit.entries() {
			switch f := e.Fields.(type) {
			case audit.ServerStarted:
				started = e.Seq
				if f.Epoch != "E1" || !containsObserved(f.Execution, "/srv/observed-E1") {
					t.Errorf("server_started = epoch %s, execution %s; want E1 with its observed process", f.Epoch, f.Execution)
				}
			case audit.ToolCalled:
				called = e.Seq
				if f.Epoch != "E1" {
					t.Errorf("tool_called under epoch %s, want E1", f.Epoch)
				}
			}
		}
		if started == 0 || called == 0 || started > called {
			t.Errorf("audit: server_started seq %d, tool_called seq %d; want server_started first", started, called)
		}
		if st := r.sess.Status(); st.Record == nil || len(st.Record.Observed) != 1 {
			t.Errorf("status record %+v, want the observed process", st.Record)
		}
	})
}

// After a replacement, a call waits for the new epoch's identity, not the
// old one's: the gate opens with the catalog, the call is held until E2 is
// identified, and it reaches E2's process, never E1's.
func TestCallWaitsForNewEpochIdentity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &identityGate{}
		r := newBubble(t, func(o *Options) { o.Launch = g.wrap(o.Launch) })
		synctest.Wait()
		g.open("E1")
		r.handshake()
		r.sess.Replace("build complete: test")
		r.waitState(StateReady, 5*time.Second)
		if st := r.sess.Status(); st.Epoch != "E2" {
			t.Fatalf("current epoch %s, want E2", st.Epoch)
		}
		r.agent.request(3, "tools/call", map[string]any{"name": "t", "arguments": map[string]any{}})
		synctest.Wait()
		if got, ok := r.agent.response(3); ok {
			t.Fatalf("tools/call answered before E2 was identified: %s", got)
		}
		if got := append(r.proc(1).received("tools/call"), r.proc(2).received("tools/call")...); len(got) != 0 {
			t.Fatalf("a tools/call reached a process before E2 was identified: %s", got)
		}
		g.open("E2")
		synctest.Wait()
		if got := r.proc(1).received("tools/call"); len(got) != 0 {
			t.Fatalf("the replaced epoch's process got the call: %s", got)
		}
		calls := r.proc(2).received("tools/call")
		if len(calls) != 1 {
			t.Fatalf("E2's process got %d tools/call, want 1", len(calls))
		}
		g.mu.Lock()
		asked := fmt.Sprint(g.asked)
		g.mu.Unlock()
		if asked != "[E1 E2]" {
			t.Errorf("Identify asked for %s, want [E1 E2]", asked)
		}
	})
}

func containsObserved(execution []byte, exe string) bool {
	var rec identity.Record
	if err := json.Unmarshal(execution, &rec); err != nil {
		return false
	}
	for _, o := range rec.Observed {
		if o.Exe == exe {
			return true
		}
	}
	return false
}

// A call whose epoch is never identified (its Identify does not return) is
// refused after the hold timeout, saying so, and never reaches the server.
func TestCallUnidentifiedTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &identityGate{}
		r := newBubble(t, func(o *Options) { o.Launch = g.wrap(o.Launch) })
		synctest.Wait()
		r.handshake()
		r.agent.request(2, "tools/call", map[string]any{"name": "t", "arguments": map[string]any{}})
		_, ref := refusal(t, r.agent.wait(2, 10*time.Second))
		if ref == nil || ref.Error != "hold_timeout" || !strings.Contains(ref.Reason, "were not identified") {
			t.Fatalf("refusal %+v, want hold_timeout naming the identity", ref)
		}
		if got := r.proc(1).received("tools/call"); len(got) != 0 {
			t.Fatalf("the server got %s", got)
		}
		g.open("E1") // lets the run end
	})
}

// TestExecBeforeIdentityRefetchesCatalog: the read that fixes the epoch's
// identity finds that the program exec'd around its first answers
// (supervisor.Process.ChangedWhenArmed, Epoch.Refetch): the tools/list the
// gateway fetched may have come from the program before the exec, so the
// catalog is fetched again on the same pipe before a call waiting for the
// identity passes: a held call to a tool only the program after the exec
// has is judged against that catalog, the agent is told that the tools
// changed, and after its list the call reaches the process.
func TestExecBeforeIdentityRefetchesCatalog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &identityGate{}
		r := newBubble(t, func(o *Options) {
			launch := g.wrap(o.Launch)
			o.Launch = func(ctx context.Context) (*Epoch, error) {
				ep, err := launch(ctx)
				if err == nil {
					ep.Refetch = func() bool { return true }
				}
				return ep, err
			}
		})
		synctest.Wait()
		r.agent.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
		r.agent.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		r.agent.request(1, "tools/list", nil)
		synctest.Wait()
		if list, ok := r.agent.response(1); !ok || resultOf(list) == nil {
			t.Fatalf("tools/list = %s (answered %v), want the catalog while the identity is pending", list, ok)
		}
		before := r.proc(1).listed()
		// The program execs into one with a second tool, u, before the
		// read that fixes the identity.
		r.proc(1).setTools(`{"tools":[{"name":"t","inputSchema":{"type":"object"}},{"name":"u","inputSchema":{"type":"object"}}]}`)
		r.agent.request(2, "tools/call", map[string]any{"name": "u", "arguments": map[string]any{}})
		synctest.Wait()
		g.open("E1")
		synctest.Wait()
		if n := r.proc(1).listed(); n <= before {
			t.Fatalf("tools/list asked of the process %d times, still %d after the identity: the catalog was not fetched again", n, before)
		}
		// The held call is judged against the catalog fetched again: u is
		// new since the agent's list, which it must fetch first.
		if got := string(r.agent.wait(2, 5*time.Second)); !strings.Contains(got, `"catalog_stale"`) || !strings.Contains(got, "the current revision is 2") {
			t.Fatalf("the call of u held for the identity got %s, want catalog_stale against revision 2 (the catalog fetched after the exec)", got)
		}
		r.agent.request(3, "tools/list", nil)
		r.agent.request(4, "tools/call", map[string]any{"name": "u", "arguments": map[string]any{}})
		synctest.Wait()
		calls := r.proc(1).received("tools/call")
		if len(calls) != 1 {
			got, _ := r.agent.response(4)
			t.Fatalf("the process got %d tools/call for u, want 1 (the agent got %s)", len(calls), got)
		}
		r.proc(1).reply(calls[0], `{"content":[{"type":"text","text":"ok"}]}`)
		if res := resultOf(r.agent.wait(4, 5*time.Second)); res == nil {
			t.Fatal("tools/call of u got no result")
		}
		if n := len(r.agent.notifications(methodToolsChanged)); n != 1 {
			t.Errorf("the agent got %d tools/list_changed after the catalog changed under the same epoch, want 1", n)
		}
	})
}
