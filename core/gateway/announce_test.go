package gateway

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// TestCodeOnlyRebuildIsAnnounced: a rebuild that leaves tools/list
// byte-identical is still announced with notifications/tools/list_changed
// (the agent's cached catalog describes code that no longer answers), once
// per epoch; an agent that refetches then has its write held for the
// approval of the new code — never refused — and the approved call reaches
// the new epoch. The audit log tells what the agent was shown and told.
func TestCodeOnlyRebuildIsAnnounced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		decide(t, r, r.pendingFor(5*time.Second).ID, authz.ApproveRun)
		mustResult(t, r.agent.wait(2, 5*time.Second))
		rev := r.sess.Status().CatalogRevision

		r.sess.Replace("rebuild")
		if st := r.waitState(StateReady, 5*time.Second); st.Epoch != "E2" || st.CatalogRevision != rev {
			t.Fatalf("after Replace: epoch %s revision %d, want E2 on the same revision %d", st.Epoch, st.CatalogRevision, rev)
		}
		if !until(5*time.Second, func() bool { return len(r.agent.notifications(methodToolsChanged)) == 1 }) {
			t.Fatalf("the agent got %d tools/list_changed after a code-only rebuild, want 1", len(r.agent.notifications(methodToolsChanged)))
		}

		// The agent refetches (as Claude Code does on list_changed), then calls.
		r.agent.request(3, "tools/list", nil)
		r.agent.wait(3, 5*time.Second)
		r.agent.request(4, "tools/call", callParams(toolWrite, 4, ""))
		req := r.pendingFor(5 * time.Second)
		if req.Card.CurrentEpoch != "E2" || req.Card.PreviousEpoch != "E1" {
			t.Errorf("card %+v, want E1 → E2", req.Card)
		}
		if line, ok := r.agent.response(4); ok {
			t.Fatalf("the call after the refetch was answered before approval: %s", line)
		}
		decide(t, r, req.ID, authz.ApproveRun)
		if got := mustResult(t, r.agent.wait(4, 5*time.Second)); got != "write 4 on E2" {
			t.Errorf("result %q, want the call on E2", got)
		}
		// A later refresh of the same epoch and revision says nothing more.
		r.sess.mu.Lock()
		cur := r.sess.cur
		r.sess.mu.Unlock()
		r.sess.refresh(cur)
		if n := len(r.agent.notifications(methodToolsChanged)); n != 1 {
			t.Errorf("%d tools/list_changed after a refresh that changed nothing, want still 1", n)
		}

		var sent []audit.ListChangedSent
		var shown []audit.CatalogPresented
		for _, e := range r.audit.entries() {
			switch f := e.Fields.(type) {
			case audit.ListChangedSent:
				sent = append(sent, f)
			case audit.CatalogPresented:
				shown = append(shown, f)
			case audit.CallRefused:
				t.Errorf("call refused: %+v", f)
			}
		}
		if len(sent) != 1 || sent[0].Epoch != "E2" || sent[0].Revision != rev || sent[0].Method != methodToolsChanged || !strings.Contains(sent[0].Reason, "new execution epoch E2") {
			t.Errorf("list_changed_sent events %+v, want one for E2", sent)
		}
		var epochs []ids.EpochID
		for _, p := range shown {
			epochs = append(epochs, p.Epoch)
			if p.Revision != rev || p.Digest == "" || p.Tools != 2 || p.AgentRun != "RUN" {
				t.Errorf("catalog_presented %+v, want revision %d with its digest and 2 tools", p, rev)
			}
		}
		if !slices.Equal(epochs, []ids.EpochID{"E1", "E2"}) {
			t.Errorf("catalog_presented epochs %v, want [E1 E2]", epochs)
		}
	})
}

// TestUnrefreshedCallRefusedOnceThenHeld: an agent that does not refetch
// (Codex ignores list_changed) gets authorization_stale once for a tool
// after the epoch change, naming the approval request raised for it; its
// next call of the tool waits for that approval instead of being refused
// again, and runs on the new epoch once approved.
func TestUnrefreshedCallRefusedOnceThenHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		decide(t, r, r.pendingFor(5*time.Second).ID, authz.ApproveRun)
		mustResult(t, r.agent.wait(2, 5*time.Second))
		r.sess.Replace("rebuild")
		r.waitState(StateReady, 5*time.Second)

		r.agent.request(3, "tools/call", callParams(toolWrite, 3, ""))
		code, ref := refusal(t, r.agent.wait(3, 5*time.Second))
		if code != -31020 || ref.Request == "" {
			t.Fatalf("first call after the rebuild: %d %+v, want authorization_stale naming a request", code, ref)
		}
		r.agent.request(4, "tools/call", callParams(toolWrite, 3, ""))
		if !until(time.Second, func() bool {
			r.sess.mu.Lock()
			defer r.sess.mu.Unlock()
			_, p, ok := r.sess.flight.ofAgent(mcpwire.NumberID(4))
			return ok && p != nil && p.approval == ref.Request
		}) {
			line, _ := r.agent.response(4)
			t.Fatalf("the second call does not wait on %s (answer %s)", ref.Request, line)
		}
		decide(t, r, ref.Request, authz.ApproveRun)
		if got := mustResult(t, r.agent.wait(4, 5*time.Second)); got != "write 3 on E2" {
			t.Errorf("result %q, want the call on E2", got)
		}
	})
}

// TestModernEpochAnnouncedOnListenStream: in the 2026-07-28 era the
// announcement of a code-only rebuild goes on the agent's
// subscriptions/listen stream, with the agent's own subscription id.
func TestModernEpochAnnouncedOnListenStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, nil)
		b.discover()
		b.agent.send(`{"jsonrpc":"2.0","id":"sub-1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},"_meta":` + modernMeta + `}}`)
		b.agent.send(`{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":` + modernMeta + `}}`)
		b.agent.answer("6")
		b.sess.Replace("rebuild")
		synctest.Wait()
		if st := b.sess.Status(); st.State != StateReady || st.Epoch != "E2" {
			t.Fatalf("after Replace: %s on %s, want ready on E2", st.State, st.Epoch)
		}
		var notes []string
		for _, l := range b.agent.all() {
			if methodOf(l) == methodToolsChanged {
				notes = append(notes, string(mcpwire.GetPath(l, "params", "_meta", metaSubscriptionKey)))
			}
		}
		if !slices.Equal(notes, []string{`"sub-1"`}) {
			t.Errorf("tools/list_changed subscription ids %v, want one on the agent's stream \"sub-1\"", notes)
		}
		var sent []audit.ListChangedSent
		for _, e := range b.audit.entries() {
			if f, ok := e.Fields.(audit.ListChangedSent); ok {
				sent = append(sent, f)
			}
		}
		if len(sent) != 1 || sent[0].Subscription != "sub-1" || sent[0].Epoch != "E2" {
			t.Errorf("list_changed_sent %+v, want one on \"sub-1\" for E2", sent)
		}
	})
}
