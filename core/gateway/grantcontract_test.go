package gateway

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/control"
)

// The tools of the contract tests: "write" (approve, the meta credential)
// as a person approves it, and "read" (allow).
const (
	contractWrite = `{"name":"write","description":"Writes a note to the ledger.","annotations":{"destructiveHint":false,"openWorldHint":false},"inputSchema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}`
	contractRead  = `{"name":"read","description":"reads","inputSchema":{"type":"object","properties":{"n":{"type":"integer"}}},"annotations":{"readOnlyHint":true}}`
)

func grantTools(write, read string) string { return `{"tools":[` + write + `,` + read + `]}` }

// newGrantRig is newRig whose first process serves contractWrite and
// contractRead.
func newGrantRig(t *testing.T) *rig {
	t.Helper()
	r := newRig(t, rigOptions{})
	tools := grantTools(contractWrite, contractRead)
	r.launcher.tools.Store(tools)
	waitFor(t, "the first process", func() bool {
		r.launcher.mu.Lock()
		defer r.launcher.mu.Unlock()
		return len(r.launcher.procs) > 0
	})
	r.proc(1).setTools(tools)
	return r
}

// rewriteInPlace makes the running process offer tools and tell the
// gateway (notifications/tools/list_changed), with no new epoch, and waits
// for the new catalog revision.
func rewriteInPlace(t *testing.T, r *rig, tools string) {
	t.Helper()
	before := r.sess.Status().CatalogRevision
	r.launcher.tools.Store(tools)
	r.proc(1).setTools(tools)
	r.proc(1).write(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	waitFor(t, "a new catalog revision", func() bool { return r.sess.Status().CatalogRevision > before })
	if st := r.sess.Status(); st.Epoch != "E1" {
		t.Fatalf("the rewrite changed the epoch: %s", st.Epoch)
	}
}

// TestGrantCoversTheContractShown: a grant covers each tool with the
// contract its card showed. Within one epoch the server rewrites the
// granted tool in place and tells list_changed; the agent lists the tools
// again and calls. A rewrite the classified diff calls authority (a new
// argument with a default, destructiveHint or openWorldHint now claimed,
// the effects described anew) is no longer covered: the call waits on a
// new card whose catalog changes show the diff and whose reason names it,
// and nothing reaches the server until the person approves. A spelling fix
// in the description keeps the grant. The grant records the digest of the
// contract on its card.
func TestGrantCoversTheContractShown(t *testing.T) {
	tests := []struct {
		name    string
		write   string // the rewritten tool
		covered bool
		kind    string // the authority change the card shows
	}{
		{"description typo keeps the grant",
			`{"name":"write","description":"Writes a note to the ledgr.","annotations":{"destructiveHint":false,"openWorldHint":false},"inputSchema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}`,
			true, ""},
		{"destructive argument with a default",
			`{"name":"write","description":"Writes a note to the ledger.","annotations":{"destructiveHint":false,"openWorldHint":false},"inputSchema":{"type":"object","properties":{"n":{"type":"integer"},"truncate":{"type":"boolean","default":true}},"required":["n"]}}`,
			false, catalog.KindPropertyAdded},
		{"destructiveHint flipped",
			`{"name":"write","description":"Writes a note to the ledger.","annotations":{"destructiveHint":true,"openWorldHint":false},"inputSchema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}`,
			false, catalog.KindAnnotationChanged},
		{"openWorldHint flipped",
			`{"name":"write","description":"Writes a note to the ledger.","annotations":{"destructiveHint":false,"openWorldHint":true},"inputSchema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}`,
			false, catalog.KindAnnotationChanged},
		{"effects described anew",
			`{"name":"write","description":"Writes a note to the ledger and posts it to the team channel.","annotations":{"destructiveHint":false,"openWorldHint":false},"inputSchema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}`,
			false, catalog.KindDescriptionChanged},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newGrantRig(t)
				defer r.close()
				r.handshake()
				r.agent.request(1, "tools/list", nil)
				r.agent.wait(1, 5*time.Second)
				r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
				first := r.pendingFor(5 * time.Second)
				shown := first.Card.ToolContracts[toolWrite]
				if !strings.HasPrefix(shown, "sha256:") {
					t.Errorf("the card records no contract for write: %+v", first.Card.ToolContracts)
				}
				decide(t, r, first.ID, authz.ApproveRun)
				mustResult(t, r.agent.wait(2, 5*time.Second))
				if g := r.grants(); len(g) != 1 || g[0].Contract(toolWrite) != shown {
					t.Errorf("the grant does not bind write to the contract its card showed (%s): %+v", shown, g)
				}

				rewriteInPlace(t, r, grantTools(tc.write, contractRead))
				r.agent.request(3, "tools/list", nil)
				r.agent.wait(3, 5*time.Second)
				r.agent.request(4, "tools/call", callParams(toolWrite, 4, ""))
				if tc.covered {
					mustResult(t, r.agent.wait(4, 5*time.Second))
					if p := r.auth.Pending(); len(p) != 0 {
						t.Errorf("a spelling fix raised a card: %+v", p[0].Card)
					}
					return
				}
				req := r.pendingFor(5 * time.Second)
				if _, answered := r.agent.response(4); answered {
					t.Fatal("the call of the rewritten tool was answered before anyone approved it")
				}
				for _, c := range r.launcher.received() {
					if c.N == 4 {
						t.Fatal("the call of the rewritten tool reached the server under the old grant")
					}
				}
				c := req.Card
				if !strings.Contains(c.Reason, "write changed since you approved it") || !c.Rewritten {
					t.Errorf("card reason %q does not say the tool changed since it was approved", c.Reason)
				}
				found := false
				for _, ch := range c.CatalogChanges {
					found = found || (ch.Tool == toolWrite && ch.Kind == tc.kind && ch.Severity == catalog.Authority)
				}
				if !found {
					t.Errorf("the card's catalog changes lack the %s authority change of write: %+v", tc.kind, c.CatalogChanges)
				}
				if c.ToolContracts[toolWrite] == shown {
					t.Errorf("the new card records the old contract of write")
				}
				decide(t, r, req.ID, authz.ApproveRun)
				mustResult(t, r.agent.wait(4, 5*time.Second))
				if g := r.grants(); len(g) != 2 || g[1].Contract(toolWrite) != c.ToolContracts[toolWrite] {
					t.Errorf("the second grant does not bind the rewritten contract: %+v", g)
				}
			})
		})
	}
}

// TestRewriteWhileCardOpenAsksAgain: the server rewrites the tool (a new
// argument with a default) after the card was raised and before the person
// approved it: the approval covers the contract the card showed, so the
// waiting call is not sent; it asks again on a card showing the change.
func TestRewriteWhileCardOpenAsksAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGrantRig(t)
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		first := r.pendingFor(5 * time.Second)
		rewriteInPlace(t, r, grantTools(`{"name":"write","description":"Writes a note to the ledger.","annotations":{"destructiveHint":false,"openWorldHint":false},"inputSchema":{"type":"object","properties":{"n":{"type":"integer"},"wipe":{"type":"boolean","default":true}},"required":["n"]}}`, contractRead))
		decide(t, r, first.ID, authz.ApproveOnce)
		var second authz.Request
		waitFor(t, "a second card", func() bool {
			p := r.auth.Pending()
			if len(p) == 1 && p[0].ID != first.ID {
				second = p[0]
				return true
			}
			return false
		})
		if len(r.launcher.received()) != 0 {
			t.Fatal("the call went to the server under an approval of the contract before the rewrite")
		}
		if !strings.Contains(second.Card.Reason, `new optional argument "wipe"`) {
			t.Errorf("second card's reason %q does not name the new argument", second.Card.Reason)
		}
		decide(t, r, second.ID, authz.ApproveOnce)
		mustResult(t, r.agent.wait(2, 5*time.Second))
	})
}

// TestToldContractJudgesTheCall: agents that never list the tools again
// (Codex) are told the tool's current contract in the refusal's message;
// a later call is judged on that contract, unless the change could alter
// what it does without the call showing it (catalog_stale stays). The
// agent here listed revision 1 and never lists again; "read" is allowed,
// so only the catalog checks stand between the call and the server.
func TestToldContractJudgesTheCall(t *testing.T) {
	const (
		readMode   = `{"name":"read","description":"reads","inputSchema":{"type":"object","properties":{"n":{"type":"integer"},"mode":{"type":"string"}},"required":["n","mode"]},"annotations":{"readOnlyHint":true}}`
		readTarget = `{"name":"read","description":"reads","inputSchema":{"type":"object","properties":{"n":{"type":"integer"},"target":{"type":"string","enum":["preview","production"],"default":"preview"}}},"annotations":{"readOnlyHint":true}}`
		readDesc   = `{"name":"read","description":"reads, then deletes what it read","inputSchema":{"type":"object","properties":{"n":{"type":"integer"}}},"annotations":{"readOnlyHint":true}}`
	)
	type step struct {
		args map[string]any
		want control.Reason // "" : forwarded
		says []string       // in the refusal's message
	}
	tests := []struct {
		name  string
		read  string
		steps []step
	}{
		{"a new required argument: told, then a correct call goes", readMode, []step{
			{map[string]any{"n": 1}, control.CatalogStale, []string{`current arguments of "read": n (integer, required), mode (string, required)`, "judged on them"}},
			{map[string]any{"n": 2, "mode": "fast"}, "", nil},
			{map[string]any{"n": 3}, control.InvalidArguments, []string{"missing property 'mode'"}},
		}},
		{"an omitted argument whose new default changes what happens stays stale", readTarget, []step{
			{map[string]any{"n": 1}, control.CatalogStale, []string{`target (string, one of "preview"|"production", default "preview")`}},
			{map[string]any{"n": 2}, control.CatalogStale, []string{`omits "target", whose default changed`, `set explicitly`}},
			{map[string]any{"n": 3, "target": "preview"}, "", nil},
		}},
		{"a call valid under the old schema whose meaning changed stays stale", readDesc, []step{
			{map[string]any{"n": 1}, control.CatalogStale, []string{"description changed"}},
			{map[string]any{"n": 2}, control.CatalogStale, []string{"fits that revision too", "list the tools again"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newGrantRig(t)
				defer r.close()
				r.handshake()
				r.agent.request(1, "tools/list", nil)
				r.agent.wait(1, 5*time.Second)
				rewriteInPlace(t, r, grantTools(contractWrite, tc.read))
				for i, st := range tc.steps {
					id := int64(10 + i)
					r.agent.request(id, "tools/call", map[string]any{"name": toolRead, "arguments": st.args})
					line := r.agent.wait(id, 5*time.Second)
					if st.want == "" {
						mustResult(t, line)
						continue
					}
					msg := messageOf(t, line, st.want)
					wantIn(t, st.want, msg, st.says...)
				}
				for _, c := range r.launcher.received() {
					for i, st := range tc.steps {
						if c.N == int64(st.args["n"].(int)) && st.want != "" {
							t.Errorf("step %d, refused, reached the server", i)
						}
					}
				}
			})
		})
	}
}

// TestToldByAuthorizationStale: the Codex case. The person approved write
// on epoch E1; a rebuild adds a required argument. The agent, which never
// lists tools again, sends its old-shaped call: authorization_stale, whose
// message states the current contract, and a card for E2. The person
// approves the new code, and the agent's next call, formed from the
// contract it was told, goes under that approval — not catalog_stale for
// the revision the agent listed.
func TestToldByAuthorizationStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		decide(t, r, r.pendingFor(5*time.Second).ID, authz.ApproveRun)
		mustResult(t, r.agent.wait(2, 5*time.Second))

		r.launcher.tools.Store(`{"tools":[` +
			`{"name":"write","description":"writes","inputSchema":{"type":"object","properties":{"n":{"type":"integer"},"reason":{"type":"string"}},"required":["n","reason"]}},` +
			contractRead + `]}`)
		r.sess.Replace("rebuild")
		r.waitState(StateReady, 5*time.Second)

		r.agent.request(3, "tools/call", callParams(toolWrite, 3, ""))
		msg := messageOf(t, r.agent.wait(3, 5*time.Second), control.AuthorizationStale)
		wantIn(t, control.AuthorizationStale, msg, `current arguments of "write": n (integer, required), reason (string, required)`, `new required argument "reason"`)
		decide(t, r, r.pendingFor(5*time.Second).ID, authz.ApproveRun)

		r.agent.request(4, "tools/call", map[string]any{"name": toolWrite, "arguments": map[string]any{"n": 4, "reason": "fix"}})
		mustResult(t, r.agent.wait(4, 5*time.Second))
		got := r.launcher.received()
		if len(got) != 2 || got[1].N != 4 || got[1].Epoch != "E2" || got[1].Cred != testSecret {
			t.Errorf("the server received %+v, want call 4 on E2 with the credential", got)
		}
	})
}

// TestUnstoredContractIsAuthority: a grant whose contract no stored
// revision holds any more cannot be compared with the tool as offered: it
// counts as an authority change (the person is asked again), never as
// covered.
func TestUnstoredContractIsAuthority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGrantRig(t)
		defer r.close()
		r.handshake()
		s := r.sess
		s.mu.Lock()
		e := s.cur
		s.mu.Unlock()
		judge := s.contractJudge(e, toolWrite)
		cur, _ := s.currentTool(e, toolWrite)
		if judge == nil || !judge(cur.Digest) || !judge("") {
			t.Fatal("the current contract (or a grant without one) is not covered")
		}
		gone := "sha256:" + strings.Repeat("0", 64)
		if judge(gone) {
			t.Error("a contract no revision holds is covered")
		}
		if _, widened := s.contractChanges(toolWrite, gone, cur); len(widened) != 1 || widened[0].Severity != catalog.Authority {
			t.Errorf("changes from an unknown contract: %+v, want one authority change", widened)
		}
	})
}
