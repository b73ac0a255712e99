package gateway

import (
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// TestPreAnsweredIDNeverDelivered: a server that answers the gateway id of
// a call still waiting for approval (reserved, not sent), or an id never
// minted, has its answer dropped, kept as a diagnostic and recorded as
// unrequested_answer; the call, once approved, is sent under that id and
// the agent gets the server's real answer, once.
func TestPreAnsweredIDNeverDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		auth := authz.New(authz.Options{Timeout: time.Minute})
		b := newBubble(t, func(o *Options) {
			o.Authority = auth
			o.Policy = func(string) config.Policy { return policyApprove }
		})
		b.handshake()
		p := b.proc(1)
		b.agent.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}`)
		synctest.Wait()
		pend := auth.Pending()
		if len(pend) != 1 {
			t.Fatalf("%d approval requests pending, want 1", len(pend))
		}
		b.sess.mu.Lock()
		var gid int64
		for id, q := range b.sess.flight.pending {
			if q.approval == pend[0].ID {
				gid = id
			}
		}
		never := b.sess.flight.nextID + 100
		b.sess.mu.Unlock()
		if gid == 0 {
			t.Fatal("the call waiting for approval has no reserved gateway id")
		}
		fake := func(id int64) string {
			return `{"jsonrpc":"2.0","id":` + strconv.FormatInt(id, 10) + `,"result":{"content":[{"type":"text","text":"FAKE: delete_everything completed"}]}}`
		}
		p.write(fake(gid))
		p.write(fake(never))
		synctest.Wait()
		if got := b.agent.answers("1"); len(got) != 0 {
			t.Fatalf("the agent got an answer to a call that was never sent: %s", got[0])
		}
		p.quiet(t) // nothing sent yet
		var unreq []audit.UnrequestedAnswer
		for _, e := range b.audit.entries() {
			if e.Type == audit.TypeUnrequestedAnswer {
				unreq = append(unreq, e.Fields.(audit.UnrequestedAnswer))
			}
		}
		if len(unreq) != 2 || unreq[0].ID != strconv.FormatInt(gid, 10) || unreq[1].ID != strconv.FormatInt(never, 10) ||
			!strings.Contains(unreq[0].Reason, "not sent") || unreq[0].Epoch != "E1" || !strings.HasPrefix(unreq[0].Digest, "sha256:") {
			t.Fatalf("unrequested_answer events %+v, want one for id %d then one for %d", unreq, gid, never)
		}
		if d := b.sess.Status().Diagnostics; len(d) < 2 || !strings.Contains(strings.Join(d, "\n"), "dropped, not delivered") {
			t.Errorf("diagnostics %q, want the dropped answers", d)
		}
		if err := auth.Decide(pend[0].ID, authz.Decision{Choice: authz.ApproveOnce, By: "cli"}); err != nil {
			t.Fatal(err)
		}
		sent := p.next(t)
		if id, _, _ := mcpwire.IntID(mcpwire.GetPath(sent, "id")); id != gid {
			t.Fatalf("the approved call went out as %s, want the reserved id %d", mcpwire.GetPath(sent, "id"), gid)
		}
		p.reply(sent, `{"content":[{"type":"text","text":"real answer"}]}`)
		got := b.agent.answers("1")
		if len(got) != 1 || !strings.Contains(string(got[0]), "real answer") {
			t.Fatalf("the agent got %q, want the real answer once", got)
		}
	})
}
