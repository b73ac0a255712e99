package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// policies is a tool policy table a test edits while the session runs, as
// a person edits the configuration file.
type policies struct {
	mu sync.Mutex
	m  map[string]config.Policy // guarded by mu; tool → policy, "approve" when absent
}

func (p *policies) get(tool string) config.Policy {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.m[tool]; ok {
		return v
	}
	return policyApprove
}

func (p *policies) set(tool string, policy config.Policy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[tool] = policy
}

// newPolicyRig is newRig without credentials, whose tool policies come from
// pol at every use.
func newPolicyRig(t *testing.T, pol *policies) *rig {
	t.Helper()
	return newRig(t, rigOptions{noCredentials: true, policy: pol.get,
		toolDenied: func(_, tool string) bool { return pol.get(tool) == policyDeny }})
}

// listedTools asks for tools/list under id and returns the names listed.
func (r *rig) listedTools(id int64) []string {
	r.t.Helper()
	r.agent.request(id, "tools/list", nil)
	line := r.agent.wait(id, 10*time.Second)
	var res struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if err := json.Unmarshal(mcpwire.GetPath(line, "result"), &res); err != nil {
		r.t.Fatalf("tools/list answered %s", line)
	}
	var names []string
	for _, t := range res.Tools {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}

// callTool calls tool and returns its refusal, nil when it was answered by
// the server.
func (r *rig) callTool(id int64, tool string) *control.Refusal {
	r.t.Helper()
	r.agent.request(id, "tools/call", callParams(tool, id, ""))
	_, ref := refusal(r.t, r.agent.wait(id, 10*time.Second))
	return ref
}

// waitListChanged waits until the agent has received n list_changed.
func (r *rig) waitListChanged(n int) {
	r.t.Helper()
	if !until(10*time.Second, func() bool { return len(r.agent.notifications(methodToolsChanged)) >= n }) {
		r.t.Fatalf("%d tools/list_changed within 10 s, want %d", len(r.agent.notifications(methodToolsChanged)), n)
	}
}

func (r *rig) forwarded(tool string) int {
	n := 0
	for _, c := range r.launcher.received() {
		if c.Tool == tool {
			n++
		}
	}
	return n
}

// TestPolicyDenyHidesAndAnnounces: a tool that becomes denied during an
// agent run disappears from tools/list, its calls are refused and never
// forwarded, and the agent is told with list_changed; allowed again, it is
// listed, announced and served. Re-checks that change nothing say nothing.
func TestPolicyDenyHidesAndAnnounces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := &policies{m: map[string]config.Policy{toolRead: policyAllow}}
		r := newPolicyRig(t, pol)
		defer r.close()
		r.handshake()
		if got := r.listedTools(1); !slices.Equal(got, []string{toolRead, toolWrite}) {
			t.Fatalf("tools/list %v", got)
		}
		if ref := r.callTool(2, toolRead); ref != nil {
			t.Fatalf("allowed call refused: %+v", ref)
		}

		pol.set(toolRead, policyDeny)
		r.sess.PolicyChanged()
		r.waitListChanged(1)
		if got := r.listedTools(3); !slices.Equal(got, []string{toolWrite}) {
			t.Errorf("tools/list after deny %v, want only %s", got, toolWrite)
		}
		if ref := r.callTool(4, toolRead); ref == nil || ref.Error != control.ApprovalDenied {
			t.Errorf("call of a denied tool: refusal %+v, want %s", ref, control.ApprovalDenied)
		}
		if n := r.forwarded(toolRead); n != 1 {
			t.Errorf("%s reached the server %d times, want 1 (before the deny)", toolRead, n)
		}
		// Nothing changed since: nothing more is said.
		r.sess.PolicyChanged()
		pol.set(toolWrite, policyApprove) // approve → approve
		r.sess.PolicyChanged()

		pol.set(toolRead, policyAllow)
		r.sess.PolicyChanged()
		r.waitListChanged(2)
		if got := r.listedTools(5); !slices.Equal(got, []string{toolRead, toolWrite}) {
			t.Errorf("tools/list after allow %v", got)
		}
		if ref := r.callTool(6, toolRead); ref != nil {
			t.Errorf("call allowed again refused: %+v", ref)
		}
		if n := len(r.agent.notifications(methodToolsChanged)); n != 2 {
			t.Errorf("%d list_changed, want 2", n)
		}
	})
}

// TestPolicyDenyBeforeListSaysNothing: before the agent listed the tools
// (and before its handshake) nothing is announced, and the first list it
// asks for already hides the denied tool.
func TestPolicyDenyBeforeListSaysNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := &policies{m: map[string]config.Policy{toolRead: policyAllow}}
		r := newPolicyRig(t, pol)
		defer r.close()
		r.sess.PolicyChanged() // before the handshake
		r.handshake()
		pol.set(toolRead, policyDeny)
		r.sess.PolicyChanged()
		if got := r.listedTools(1); !slices.Equal(got, []string{toolWrite}) {
			t.Errorf("tools/list %v, want only %s", got, toolWrite)
		}
		r.sess.PolicyChanged()
		r.listedTools(2) // what was written before its answer has been read
		if n := len(r.agent.notifications(methodToolsChanged)); n != 0 {
			t.Errorf("%d list_changed, want none", n)
		}
	})
}

// TestPolicyAllowToApproveAsksAtTheNextCall: tightening allow → approve
// leaves the list as it is (no list_changed) and the next call waits for a
// person; a grant the person gave for the run then serves, and loosening
// back to allow needs none.
func TestPolicyAllowToApproveAsksAtTheNextCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := &policies{m: map[string]config.Policy{toolRead: policyAllow}}
		r := newPolicyRig(t, pol)
		defer r.close()
		r.handshake()
		r.listedTools(1)
		if ref := r.callTool(2, toolRead); ref != nil {
			t.Fatalf("allowed call refused: %+v", ref)
		}
		if p := r.auth.Pending(); len(p) != 0 {
			t.Fatalf("an allowed call raised %d approval requests", len(p))
		}

		pol.set(toolRead, policyApprove)
		r.sess.PolicyChanged()
		r.agent.request(3, "tools/call", callParams(toolRead, 3, ""))
		req := r.pendingFor(10 * time.Second)
		if req.Card.Tool != toolRead {
			t.Fatalf("approval request for %q, want %q", req.Card.Tool, toolRead)
		}
		if err := r.auth.Decide(req.ID, authz.Decision{Choice: authz.ApproveRun}); err != nil {
			t.Fatal(err)
		}
		if _, ref := refusal(t, r.agent.wait(3, 10*time.Second)); ref != nil {
			t.Fatalf("approved call refused: %+v", ref)
		}
		// The grant for the run serves the next call without asking.
		if ref := r.callTool(4, toolRead); ref != nil {
			t.Errorf("call under the grant refused: %+v", ref)
		}
		if p := r.auth.Pending(); len(p) != 0 {
			t.Errorf("a call under a grant raised %d approval requests", len(p))
		}
		// Deny wins over the grant.
		pol.set(toolRead, policyDeny)
		if ref := r.callTool(5, toolRead); ref == nil || ref.Error != control.ApprovalDenied {
			t.Errorf("denied tool with a grant: refusal %+v, want %s", ref, control.ApprovalDenied)
		}
		if n := len(r.agent.notifications(methodToolsChanged)); n != 0 {
			t.Errorf("%d list_changed before PolicyChanged was called, want none", n)
		}
		r.sess.PolicyChanged()
		r.waitListChanged(1)
		if n := r.forwarded(toolRead); n != 3 {
			t.Errorf("%s reached the server %d times, want 3", toolRead, n)
		}
	})
}

// TestPolicyChangeDuringRefresh: a deny that lands while a new epoch's
// catalog is fetched (no PolicyChanged can see it: the epoch has no catalog
// yet) is announced once the catalog is in, although its revision is the
// one the agent has.
func TestPolicyChangeDuringRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := &policies{m: map[string]config.Policy{toolRead: policyAllow}}
		r := newPolicyRig(t, pol)
		defer r.close()
		r.handshake()
		r.listedTools(1)
		pol.set(toolRead, policyDeny) // not announced: the refresh must see it
		r.sess.Replace("test restart")
		r.waitState(StateReady, 10*time.Second)
		r.waitListChanged(1)
		if got := r.listedTools(2); !slices.Equal(got, []string{toolWrite}) {
			t.Errorf("tools/list %v, want only %s", got, toolWrite)
		}
	})
}

// TestPolicyDenyWhileWaitingForApproval: a call that waits for a person
// when its tool becomes denied is refused even if the person then
// approves it: deny wins, and the call never reaches the server.
func TestPolicyDenyWhileWaitingForApproval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := &policies{m: map[string]config.Policy{}}
		r := newPolicyRig(t, pol)
		defer r.close()
		r.handshake()
		r.listedTools(1)
		r.agent.request(2, "tools/call", callParams(toolRead, 2, ""))
		req := r.pendingFor(10 * time.Second)
		pol.set(toolRead, policyDeny)
		if err := r.auth.Decide(req.ID, authz.Decision{Choice: authz.ApproveRun}); err != nil {
			t.Fatal(err)
		}
		if _, ref := refusal(t, r.agent.wait(2, 10*time.Second)); ref == nil || ref.Error != control.ApprovalDenied {
			t.Errorf("call approved after its tool was denied: refusal %+v, want %s", ref, control.ApprovalDenied)
		}
		if n := r.forwarded(toolRead); n != 0 {
			t.Errorf("%s reached the server %d times, want 0", toolRead, n)
		}
	})
}

// waitCall waits for the answer to call id and returns its refusal (nil
// when served) and how long it took from since.
func (r *rig) waitCall(id int64, since time.Time) (*control.Refusal, time.Duration) {
	r.t.Helper()
	_, ref := refusal(r.t, r.agent.wait(id, 10*time.Second))
	return ref, time.Since(since)
}

// waitNoPending waits until the run has no pending approval request.
func (r *rig) waitNoPending(d time.Duration) {
	r.t.Helper()
	if !until(d, func() bool { return len(r.auth.Pending()) == 0 }) {
		r.t.Fatalf("approval requests still pending after %s: %+v", d, r.auth.Pending())
	}
}

// intentDecisions lists the decisions of the tool_called intents of tool.
func (r *rig) intentDecisions(tool string) []string {
	var out []string
	for _, e := range r.audit.entries() {
		if c, ok := e.Fields.(audit.ToolCalled); ok && c.Tool == tool {
			out = append(out, c.Decision)
		}
	}
	return out
}

// TestPolicyDenyWhileWaitingRefusesAtOnce: a call waiting for a person is
// refused as soon as PolicyChanged reports its tool denied — not when the
// person decides or the request times out — and its request, which no call
// waits on any more, is withdrawn: it leaves Pending and its waiters hear
// ErrWithdrawn. The tool never reaches the server.
func TestPolicyDenyWhileWaitingRefusesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := &policies{m: map[string]config.Policy{}}
		r := newPolicyRig(t, pol)
		defer r.close()
		r.handshake()
		r.listedTools(1)
		r.agent.request(2, "tools/call", callParams(toolRead, 2, ""))
		req := r.pendingFor(10 * time.Second)
		pol.set(toolRead, policyDeny)
		start := time.Now()
		r.sess.PolicyChanged()
		ref, took := r.waitCall(2, start)
		if ref == nil || ref.Error != control.ApprovalDenied || !strings.Contains(ref.Reason, "denied by the person's policy") {
			t.Fatalf("call whose tool was denied while it waited: refusal %+v, want %s by the policy", ref, control.ApprovalDenied)
		}
		if took >= policyRecheck {
			t.Errorf("refused after %s, want at once (PolicyChanged), well before the %s re-check", took, policyRecheck)
		}
		r.waitNoPending(5 * time.Second)
		if _, err := r.auth.Wait(context.Background(), req.ID); !errors.Is(err, authz.ErrWithdrawn) {
			t.Errorf("request %s ended with %v, want %v", req.ID, err, authz.ErrWithdrawn)
		}
		if err := r.auth.Decide(req.ID, authz.Decision{Choice: authz.ApproveRun}); !errors.Is(err, authz.ErrNoRequest) {
			t.Errorf("approving the withdrawn request: %v, want %v", err, authz.ErrNoRequest)
		}
		if n := r.forwarded(toolRead); n != 0 {
			t.Errorf("%s reached the server %d times, want 0", toolRead, n)
		}
		if g := r.auth.Grants("RUN"); len(g) != 0 {
			t.Errorf("grants %+v, want none", g)
		}
	})
}

// TestPolicyAllowWhileWaitingServesAtOnce: the mirror case — allowed while
// it waits, the call goes at once, without a grant (its intent is recorded
// with decision "allow"), and the request nobody waits on is withdrawn.
func TestPolicyAllowWhileWaitingServesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := &policies{m: map[string]config.Policy{}}
		r := newPolicyRig(t, pol)
		defer r.close()
		r.handshake()
		r.listedTools(1)
		r.agent.request(2, "tools/call", callParams(toolRead, 2, ""))
		r.pendingFor(10 * time.Second)
		pol.set(toolRead, policyAllow)
		start := time.Now()
		r.sess.PolicyChanged()
		ref, took := r.waitCall(2, start)
		if ref != nil {
			t.Fatalf("call whose tool was allowed while it waited refused: %+v", ref)
		}
		if took >= policyRecheck {
			t.Errorf("served after %s, want at once", took)
		}
		r.waitNoPending(5 * time.Second)
		if n := r.forwarded(toolRead); n != 1 {
			t.Errorf("%s reached the server %d times, want 1", toolRead, n)
		}
		if g := r.auth.Grants("RUN"); len(g) != 0 {
			t.Errorf("grants %+v, want none", g)
		}
		if got := r.intentDecisions(toolRead); !slices.Equal(got, []string{"allow"}) {
			t.Errorf("intent decisions %v, want [allow]", got)
		}
	})
}

// TestPolicyChangeWithTwoWaiters: two calls of different tools wait, each
// on its own card (a call arriving while a card is open never shares it).
// One tool allowed: its call goes and its card is withdrawn; the other
// still waits on its own card. One tool denied: its call is refused and
// its card withdrawn; the other call's card stays, and approving it with
// the denied tool ticked grants nothing denied.
func TestPolicyChangeWithTwoWaiters(t *testing.T) {
	t.Run("allow", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			pol := &policies{m: map[string]config.Policy{}}
			r := newPolicyRig(t, pol)
			defer r.close()
			r.handshake()
			r.listedTools(1)
			r.agent.request(2, "tools/call", callParams(toolRead, 2, ""))
			req := r.pendingFor(10 * time.Second)
			r.agent.request(3, "tools/call", callParams(toolWrite, 3, "tok3"))
			own := r.pendingWhere(10*time.Second, func(q authz.Request) bool { return q.ID != req.ID })
			if own.Card.Tool != toolWrite {
				t.Fatalf("second card %+v, want the write call's own", own.Card)
			}
			pol.set(toolRead, policyAllow)
			r.sess.PolicyChanged()
			if ref, _ := r.waitCall(2, time.Now()); ref != nil {
				t.Fatalf("allowed call refused: %+v", ref)
			}
			r.pendingWhere(10*time.Second, func(authz.Request) bool {
				p := r.auth.Pending()
				return len(p) == 1 && p[0].ID == own.ID
			})
			if _, ok := r.agent.response(3); ok {
				t.Fatal("write was answered before the person decided")
			}
			if err := r.auth.Decide(own.ID, authz.Decision{Choice: authz.ApproveRun}); err != nil {
				t.Fatal(err)
			}
			if ref, _ := r.waitCall(3, time.Now()); ref != nil {
				t.Errorf("approved write refused: %+v", ref)
			}
		})
	})
	t.Run("deny", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			pol := &policies{m: map[string]config.Policy{}}
			r := newPolicyRig(t, pol)
			defer r.close()
			r.handshake()
			r.listedTools(1)
			r.agent.request(2, "tools/call", callParams(toolRead, 2, ""))
			req := r.pendingFor(10 * time.Second)
			if !slices.Contains(req.Card.OtherTools, toolWrite) || slices.Contains(req.Card.ToolScope, toolWrite) {
				t.Fatalf("tool scope %v, other tools %v: want %s offered, not proposed", req.Card.ToolScope, req.Card.OtherTools, toolWrite)
			}
			r.agent.request(3, "tools/call", callParams(toolWrite, 3, "tok3"))
			own := r.pendingWhere(10*time.Second, func(q authz.Request) bool { return q.ID != req.ID })
			pol.set(toolRead, policyDeny)
			r.sess.PolicyChanged()
			if ref, _ := r.waitCall(2, time.Now()); ref == nil || ref.Error != control.ApprovalDenied {
				t.Fatalf("denied call: refusal %+v, want %s", ref, control.ApprovalDenied)
			}
			r.pendingWhere(10*time.Second, func(authz.Request) bool {
				p := r.auth.Pending()
				return len(p) == 1 && p[0].ID == own.ID
			})
			if _, ok := r.agent.response(3); ok {
				t.Fatal("write was answered before the person decided")
			}
			if err := r.auth.Decide(own.ID, authz.Decision{Choice: authz.ApproveRun, Tools: []string{toolWrite, toolRead}}); err != nil {
				t.Fatal(err)
			}
			if ref, _ := r.waitCall(3, time.Now()); ref != nil {
				t.Errorf("approved write refused: %+v", ref)
			}
			for _, g := range r.auth.Grants("RUN") {
				if slices.Contains(g.ToolScope, toolRead) {
					t.Errorf("grant %+v includes the denied %s", g, toolRead)
				}
			}
			if n := r.forwarded(toolRead); n != 0 {
				t.Errorf("%s reached the server %d times, want 0", toolRead, n)
			}
		})
	})
}

// TestPolicyDenyNoticedWithoutPolicyChanged: with no PolicyChanged (the
// configuration watcher is unavailable), a waiting call notices its tool's
// deny by itself within a re-check period.
func TestPolicyDenyNoticedWithoutPolicyChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := &policies{m: map[string]config.Policy{}}
		r := newPolicyRig(t, pol)
		defer r.close()
		r.handshake()
		r.listedTools(1)
		r.agent.request(2, "tools/call", callParams(toolRead, 2, ""))
		r.pendingFor(10 * time.Second)
		pol.set(toolRead, policyDeny)
		ref, took := r.waitCall(2, time.Now())
		if ref == nil || ref.Error != control.ApprovalDenied {
			t.Fatalf("refusal %+v, want %s", ref, control.ApprovalDenied)
		}
		if took > 3*policyRecheck {
			t.Errorf("noticed after %s, want within about %s", took, policyRecheck)
		}
		r.waitNoPending(5 * time.Second)
	})
}

// TestApprovalNeverGrantsADeniedTool: a person who approves a request
// whose card still names a tool denied since (the change not yet reported
// by PolicyChanged) grants the rest of the scope only.
func TestApprovalNeverGrantsADeniedTool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := &policies{m: map[string]config.Policy{}}
		r := newPolicyRig(t, pol)
		defer r.close()
		r.handshake()
		r.listedTools(1)
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		req := r.pendingFor(10 * time.Second)
		if !slices.Contains(req.Card.OtherTools, toolRead) {
			t.Fatalf("other tools %v lack %s", req.Card.OtherTools, toolRead)
		}
		pol.set(toolRead, policyDeny)
		// The person ticks read, denied since the card was raised.
		if err := r.auth.Decide(req.ID, authz.Decision{Choice: authz.ApproveRun, Tools: []string{toolWrite, toolRead}}); err != nil {
			t.Fatal(err)
		}
		if ref, _ := r.waitCall(2, time.Now()); ref != nil {
			t.Fatalf("approved write refused: %+v", ref)
		}
		g := r.auth.Grants("RUN")
		if len(g) != 1 || !slices.Equal(g[0].ToolScope, []string{toolWrite}) {
			t.Errorf("grants %+v, want one for [write] only", g)
		}
	})
}

// TestLaunchCommandNotFoundSaysFixTheConfig: when the configured command
// does not exist, a restart would fail the same way, so the refusal tells
// the agent to have the configuration corrected, not to restart.
func TestLaunchCommandNotFoundSaysFixTheConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{launchFails: true})
		defer r.close()
		r.agent.request(1, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}})
		_, ref := refusal(t, r.agent.wait(1, 10*time.Second))
		if ref == nil || ref.Error != control.ServerUnavailable {
			t.Fatalf("initialize after a failed launch: refusal %+v, want %s", ref, control.ServerUnavailable)
		}
		if !strings.Contains(ref.Reason, "command not found") || !strings.Contains(ref.Retry, "correct the command of fake") || strings.Contains(ref.Retry, "restart") {
			t.Errorf("reason %q, retry %q: want the missing command named and a fix of the configuration asked for", ref.Reason, ref.Retry)
		}
	})
}

// TestForAgent: the agent's initialize answer advertises tools.listChanged
// (the gateway sends it whatever the server does), and a tools/list passed
// through from the server loses the denied tools; other answers, and
// answers that need nothing, keep their bytes.
func TestForAgent(t *testing.T) {
	pol := &policies{m: map[string]config.Policy{"secret_tool": policyDeny}}
	s := New(Options{Label: "fake", Policy: pol.get})
	e := &epoch{Epoch: Epoch{ID: "E1"}}
	tests := []struct {
		method, in, want string
	}{
		{methodInitialize,
			`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}`,
			`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"s","version":"1"}}}`},
		{methodInitialize,
			`{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tools":{"listChanged":false}}}}`,
			`{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tools":{"listChanged":true}}}}`},
		{methodInitialize, // already true: untouched
			`{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tools": {"listChanged": true}}}}`,
			`{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tools": {"listChanged": true}}}}`},
		{methodInitialize, // no tools capability: nothing to add
			`{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"prompts":{}}}}`,
			`{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"prompts":{}}}}`},
		{methodToolsList,
			`{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a","inputSchema":{"type":"object"}},{"name":"secret_tool","inputSchema":{"type":"object"}}],"nextCursor":"c2"}}`,
			`{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"c2"}}`},
		{methodToolsList, // nothing denied: untouched, spacing included
			`{"jsonrpc":"2.0","id":2,"result":{"tools": [ {"name":"a"} ]}}`,
			`{"jsonrpc":"2.0","id":2,"result":{"tools": [ {"name":"a"} ]}}`},
		{methodToolsCall,
			`{"jsonrpc":"2.0","id":3,"result":{"content":[],"capabilities":{"tools":{}}}}`,
			`{"jsonrpc":"2.0","id":3,"result":{"content":[],"capabilities":{"tools":{}}}}`},
	}
	for _, tt := range tests {
		if got := string(s.forAgent(e, tt.method, []byte(tt.in))); got != tt.want {
			t.Errorf("%s %s:\n got %s\nwant %s", tt.method, tt.in, got, tt.want)
		}
	}
}

// TestApprovedOtherTools: a run approval always covers the call its card
// showed: a decision that ticks only another tool of the card (widening)
// still grants the called tool, and the call goes.
func TestApprovedOtherTools(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPolicyRig(t, &policies{m: map[string]config.Policy{}})
		defer r.close()
		r.handshake()
		r.listedTools(1)
		r.agent.request(2, "tools/call", callParams(toolRead, 2, ""))
		req := r.pendingFor(10 * time.Second)
		if err := r.auth.Decide(req.ID, authz.Decision{Choice: authz.ApproveRun, Tools: []string{toolWrite}}); err != nil {
			t.Fatal(err)
		}
		if ref, _ := r.waitCall(2, time.Now()); ref != nil {
			t.Fatalf("the call shown was refused: %+v", ref)
		}
		g := r.auth.Grants("RUN")
		if len(g) != 1 || !slices.Equal(g[0].ToolScope, []string{toolRead, toolWrite}) {
			t.Errorf("grants %+v, want one for [%s %s]", g, toolRead, toolWrite)
		}
		if n := r.forwarded(toolRead); n != 1 {
			t.Errorf("%s reached the server %d times, want 1", toolRead, n)
		}
	})
}
