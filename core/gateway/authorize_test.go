package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/secrets"
)

// mustResult fails t when line is a refusal, and returns its text.
func mustResult(t *testing.T, line json.RawMessage) string {
	t.Helper()
	if code, r := refusal(t, line); r != nil {
		t.Fatalf("refused with %d: %+v", code, r)
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(json.RawMessage(mustGet(line, "result")), &res)
	if len(res.Content) == 0 {
		t.Fatalf("no content in %s", line)
	}
	return res.Content[0].Text
}

func mustGet(line json.RawMessage, key string) []byte {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(line, &m)
	return m[key]
}

func decide(t *testing.T, r *rig, id ids.RequestID, c authz.Choice) {
	t.Helper()
	if err := r.auth.Decide(id, authz.Decision{Choice: c, By: "cli"}); err != nil {
		t.Fatalf("Decide(%s, %s): %v", id, c, err)
	}
}

// TestCallWaitsForApprovalThenGetsCredential: the first call to an approve
// tool is held (with progress notifications, since the agent gave a token)
// until the person approves; only then is it forwarded, with the meta
// credential in params._meta. An allow tool needs no approval and never
// receives a credential.
func TestCallWaitsForApprovalThenGetsCredential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)

		r.agent.request(2, "tools/call", callParams(toolWrite, 2, "tok-2"))
		req := r.pendingFor(5 * time.Second)
		c := req.Card
		if c.Tool != toolWrite || c.CurrentEpoch != "E1" || c.AgentPID != 42 || c.Reason != "first use of write in this agent run" {
			t.Errorf("card = %+v", c)
		}
		if diff := cmp.Diff([]string{toolWrite}, c.ToolScope); diff != "" {
			t.Errorf("tool scope (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{credScope}, c.CredentialScope); diff != "" {
			t.Errorf("credential scope (-want +got):\n%s", diff)
		}
		// Held: nothing reached the server, and the agent was told why.
		waitFor(t, "a progress notification", func() bool { return len(r.agent.notifications("notifications/progress")) > 0 })
		prog := r.agent.notifications("notifications/progress")
		if len(prog) == 0 || !strings.Contains(string(prog[0]), string(req.ID)) || !strings.Contains(string(prog[0]), `"progressToken":"tok-2"`) {
			t.Errorf("progress while waiting = %s, want one naming %s for token tok-2", prog, req.ID)
		}
		if got := r.launcher.received(); len(got) != 0 {
			t.Fatalf("the server received %+v before approval", got)
		}
		if _, ok := r.agent.response(2); ok {
			t.Fatal("the call was answered before approval")
		}

		decide(t, r, req.ID, authz.ApproveRun)
		if got := mustResult(t, r.agent.wait(2, 5*time.Second)); got != "write 2 on E1" {
			t.Errorf("result %q", got)
		}
		r.agent.request(3, "tools/call", callParams(toolWrite, 3, ""))
		mustResult(t, r.agent.wait(3, 5*time.Second)) // the run grant covers it
		r.agent.request(4, "tools/call", callParams(toolRead, 4, ""))
		mustResult(t, r.agent.wait(4, 5*time.Second))

		want := []received{
			{Epoch: "E1", Tool: toolWrite, N: 2, Cred: testSecret},
			{Epoch: "E1", Tool: toolWrite, N: 3, Cred: testSecret},
			{Epoch: "E1", Tool: toolRead, N: 4},
		}
		if diff := cmp.Diff(want, r.launcher.received(), ignoreSeqAndRaw); diff != "" {
			t.Errorf("calls the server received (-want +got):\n%s", diff)
		}
		// The audit intent names the grant for write and the policy for read.
		var decisions []string
		for _, e := range r.audit.entries() {
			if tc, ok := e.Fields.(audit.ToolCalled); ok {
				decisions = append(decisions, tc.Tool+":"+tc.Decision+":"+string(tc.Epoch))
				if tc.Decision == "grant" && tc.Grant == "" {
					t.Errorf("tool_called %+v names no grant", tc)
				}
			}
		}
		if diff := cmp.Diff([]string{"write:grant:E1", "write:grant:E1", "read:allow:E1"}, decisions); diff != "" {
			t.Errorf("tool_called decisions (-want +got):\n%s", diff)
		}
	})
}

var ignoreSeqAndRaw = cmp.FilterPath(func(p cmp.Path) bool {
	s := p.Last().String()
	return s == ".Seq" || s == ".Creds"
}, cmp.Ignore())

// TestStaleAfterEpochChange is the rebuild story at unit level: a grant for
// epoch E1; the server is replaced by E2; a call prepared before the agent
// refreshed is refused as authorization_stale naming both epochs — before
// the catalog checks, so even arguments that do not fit are refused this
// way — and the request for E2 is raised at the same moment, with the
// identity change on its card. After tools/list and approval the call goes
// to E2, with the credential; E2 received nothing before.
func TestStaleAfterEpochChange(t *testing.T) {
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
		if st := r.waitState(StateReady, 5*time.Second); st.Epoch != "E2" {
			t.Fatalf("after Replace: epoch %s", st.Epoch)
		}
		if live := r.auth.Grants("RUN"); len(live) != 0 {
			t.Errorf("grants of E1 still live after the epoch change: %+v", live)
		}

		// Arguments that do not fit the schema: the epoch change is reported first.
		r.agent.request(3, "tools/call", map[string]any{"name": toolWrite, "arguments": map[string]any{"n": "not a number"}})
		code, ref := refusal(t, r.agent.wait(3, 5*time.Second))
		want := &control.Refusal{Error: control.AuthorizationStale, Reason: "the server's code changed (execution epoch E1 → E2) since the person approved write, so the approval no longer holds and the call was not sent",
			Server: "fake", Tool: toolWrite, ApprovedEpoch: "E1", CurrentEpoch: "E2", Request: ref.Request,
			// The tool's current contract, so that an agent that never
			// lists tools again can form its next call from it.
			Arguments: &control.ArgumentShape{Tool: toolWrite, Required: []string{"n"}, Properties: []control.PropertyShape{{Name: "n", Type: "integer", Required: true}}},
			Retry:     "the person has been asked to approve the new code in Portcullis (approval request " + string(ref.Request) + "); call write again once they approve, and it will wait for their decision"}
		if code != -31020 {
			t.Errorf("code %d, want -31020", code)
		}
		if diff := cmp.Diff(want, ref); diff != "" {
			t.Errorf("refusal (-want +got):\n%s", diff)
		}
		// The request for E2 was raised at the same moment.
		p := r.auth.Pending()
		if len(p) != 1 || p[0].ID != ref.Request {
			t.Fatalf("pending after the stale refusal: %+v, want one request, %s (the refusal's)", p, ref.Request)
		}
		c := p[0].Card
		if c.PreviousEpoch != "E1" || c.CurrentEpoch != "E2" || len(c.IdentityChanges) == 0 || !strings.Contains(c.Reason, "epoch changed") {
			t.Errorf("card of the request for E2 = %+v", c)
		}

		r.agent.request(4, "tools/list", nil)
		r.agent.wait(4, 5*time.Second)
		r.agent.request(5, "tools/call", callParams(toolWrite, 5, ""))
		// The retry has other arguments than the refused call the card
		// showed: it gets its own card, which the stale card's approval for
		// the run does not decide.
		retry := r.pendingWhere(5*time.Second, func(q authz.Request) bool { return q.ID != p[0].ID })
		if !retry.Card.Stale && !p[0].Card.Stale {
			t.Errorf("neither card is marked stale: %+v, %+v", p[0].Card, retry.Card)
		}
		if retry.Card.Stale {
			t.Errorf("the retry's own card is marked stale: %+v", retry.Card)
		}
		decide(t, r, p[0].ID, authz.ApproveRun)
		if q := r.auth.Pending(); len(q) != 1 || q[0].ID != retry.ID {
			t.Fatalf("pending after approving the stale card: %+v, want the retry's own card %s", q, retry.ID)
		}
		decide(t, r, retry.ID, authz.ApproveRun)
		if got := mustResult(t, r.agent.wait(5, 5*time.Second)); got != "write 5 on E2" {
			t.Errorf("result %q", got)
		}
		want2 := []received{{Epoch: "E1", Tool: toolWrite, N: 2, Cred: testSecret}, {Epoch: "E2", Tool: toolWrite, N: 5, Cred: testSecret}}
		if diff := cmp.Diff(want2, r.launcher.received(), ignoreSeqAndRaw); diff != "" {
			t.Errorf("calls the servers received (-want +got):\n%s", diff)
		}
		var denied []audit.CallRefused
		for _, e := range r.audit.entries() {
			if d, ok := e.Fields.(audit.CallRefused); ok {
				denied = append(denied, d)
			}
		}
		if len(denied) != 1 || denied[0].Kind != "authorization_stale" || denied[0].ApprovedEpoch != "E1" || denied[0].CurrentEpoch != "E2" || denied[0].Request != p[0].ID {
			t.Errorf("call_refused events %+v", denied)
		}
	})
}

func TestDenyTimeoutOnceAndAskEveryUse(t *testing.T) {
	t.Run("deny", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
			decide(t, r, r.pendingFor(5*time.Second).ID, authz.Deny)
			code, ref := refusal(t, r.agent.wait(1, 5*time.Second))
			if code != -31021 || ref == nil || ref.Error != control.ApprovalDenied || ref.CurrentEpoch != "E1" {
				t.Errorf("refusal %d %+v, want approval_denied", code, ref)
			}
			if got := r.launcher.received(); len(got) != 0 {
				t.Errorf("a denied call reached the server: %+v", got)
			}
		})
	})
	t.Run("timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{approvalTimeout: 30 * time.Millisecond})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
			code, ref := refusal(t, r.agent.wait(1, 5*time.Second))
			if code != -31022 || ref == nil || ref.Error != control.ApprovalTimeout || !strings.Contains(ref.Reason, "30ms") {
				t.Errorf("refusal %d %+v, want approval_timeout after 30ms", code, ref)
			}
			if got := r.launcher.received(); len(got) != 0 {
				t.Errorf("a call nobody approved reached the server: %+v", got)
			}
		})
	})
	t.Run("once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
			first := r.pendingFor(5 * time.Second)
			decide(t, r, first.ID, authz.ApproveOnce)
			mustResult(t, r.agent.wait(1, 5*time.Second))
			r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
			second := r.pendingFor(5 * time.Second)
			if second.ID == first.ID {
				t.Fatal("the second call shares the spent request")
			}
			decide(t, r, second.ID, authz.Deny)
			if code, _ := refusal(t, r.agent.wait(2, 5*time.Second)); code != -31021 {
				t.Errorf("second call: code %d, want approval_denied", code)
			}
			if n := len(r.launcher.received()); n != 1 {
				t.Errorf("%d calls reached the server, want 1", n)
			}
		})
	})
	t.Run("once, two calls waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The same call twice (same arguments): both wait on one request,
			// whose card shows that call; the once grant serves one of them
			// and the other asks again. Its progress messages then name the
			// new request at once, not the spent one.
			r := newRig(t, rigOptions{})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/call", callParams(toolWrite, 1, "tok-1"))
			first := r.pendingFor(5 * time.Second)
			r.agent.request(2, "tools/call", callParams(toolWrite, 1, "tok-2"))
			waitFor(t, "both calls' first progress message", func() bool {
				return len(r.agent.notifications("notifications/progress")) >= 2
			})
			if p := r.auth.Pending(); len(p) != 1 {
				t.Fatalf("%d pending requests for two calls of one tool, want 1", len(p))
			}
			decide(t, r, first.ID, authz.ApproveOnce)
			var second authz.Request
			waitFor(t, "a new request for the call the once grant did not serve", func() bool {
				p := r.auth.Pending()
				if len(p) == 1 && p[0].ID != first.ID {
					second = p[0]
					return true
				}
				return false
			})
			waitFor(t, "a progress message naming the new request", func() bool {
				for _, n := range r.agent.notifications("notifications/progress") {
					if strings.Contains(string(n), string(second.ID)) {
						return true
					}
				}
				return false
			})
			decide(t, r, second.ID, authz.ApproveOnce)
			mustResult(t, r.agent.wait(1, 5*time.Second))
			mustResult(t, r.agent.wait(2, 5*time.Second))
			var last = map[string]string{}
			for _, n := range r.agent.notifications("notifications/progress") {
				tok := string(mustGet(mustGet(n, "params"), "progressToken"))
				last[tok] = string(n)
			}
			if moved := last[`"tok-1"`] + last[`"tok-2"`]; !strings.Contains(moved, string(second.ID)) {
				t.Errorf("the last progress messages %q do not name the new request %s", moved, second.ID)
			}
		})
	})
	t.Run("ask every use", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{askEveryUse: true})
			defer r.close()
			r.handshake()
			for i := int64(1); i <= 3; i++ {
				r.agent.request(i, "tools/call", callParams(toolWrite, i, ""))
				req := r.pendingFor(5 * time.Second)
				if !req.Card.AskEveryUse || !strings.Contains(req.Card.Reason, "every use") {
					t.Errorf("card %+v does not say it asks on every use", req.Card)
				}
				decide(t, r, req.ID, authz.ApproveRun)
				mustResult(t, r.agent.wait(i, 5*time.Second))
			}
			if n := len(r.grants()); n != 3 {
				t.Errorf("%d grants for 3 calls, want one decision per call", n)
			}
		})
	})
}

// TestOnceGrantCoversTheCallShown: a grant approved once for the call its
// card showed (here raised for a call refused as stale, which the agent
// makes again later) is not spent by another call of the tool with other
// arguments: that call asks for itself; the call shown goes on the grant.
func TestOnceGrantCoversTheCallShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)
		shown, _ := audit.ArgsSummary(json.RawMessage(`{"n":1}`))
		id := r.auth.Raise(authz.Card{AgentRun: "RUN", ServerLabel: "fake", CurrentEpoch: "E1", Tool: toolWrite,
			Arguments: json.RawMessage(`{"n":1}`), ArgsDigest: shown, ToolScope: []string{toolWrite}, CredentialScope: []string{credScope}})
		decide(t, r, id, authz.ApproveOnce)

		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		other := r.pendingFor(5 * time.Second)
		if other.Card.Tool != toolWrite || string(other.Card.Arguments) != `{"n":2}` {
			t.Errorf("card for the other call: %+v", other.Card)
		}
		if got := r.launcher.received(); len(got) != 0 {
			t.Fatalf("a call with other arguments went on the once grant: %+v", got)
		}
		r.agent.request(3, "tools/call", callParams(toolWrite, 1, ""))
		if got := mustResult(t, r.agent.wait(3, 5*time.Second)); got != "write 1 on E1" {
			t.Errorf("the call shown: %q", got)
		}
		decide(t, r, other.ID, authz.Deny)
		if code, _ := refusal(t, r.agent.wait(2, 5*time.Second)); code != -31021 {
			t.Errorf("the other call: code %d, want approval_denied", code)
		}
	})
}

// TestCallNotShownAsksForItself: the first card of a run proposes the
// called tool only and offers the other approve tool unticked; a call that
// arrives while that card is open gets a card of its own at once; and a
// decision on the first card, even widened to the second call's tool, does
// not let the second call run: it waits until its own card is decided.
func TestCallNotShownAsksForItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{policy: func(string) config.Policy { return config.PolicyApprove }})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		first := r.pendingFor(5 * time.Second)
		if !slices.Equal(first.Card.ToolScope, []string{toolWrite}) || !slices.Equal(first.Card.OtherTools, []string{toolRead}) {
			t.Fatalf("card tool scope %v, other tools %v; want [%s] proposed, [%s] offered", first.Card.ToolScope, first.Card.OtherTools, toolWrite, toolRead)
		}
		r.agent.request(3, "tools/call", callParams(toolRead, 3, ""))
		second := r.pendingWhere(5*time.Second, func(q authz.Request) bool { return q.ID != first.ID })
		if second.Card.Tool != toolRead || string(second.Card.Arguments) != `{"n":3}` {
			t.Errorf("the read call's own card: %+v", second.Card)
		}
		if err := r.auth.Decide(first.ID, authz.Decision{Choice: authz.ApproveRun, Tools: []string{toolWrite, toolRead}, By: "cli"}); err != nil {
			t.Fatal(err)
		}
		mustResult(t, r.agent.wait(2, 5*time.Second))
		if p := r.auth.Pending(); len(p) != 1 || p[0].ID != second.ID {
			t.Fatalf("pending after the first decision: %+v, want the read call's own card", p)
		}
		if _, ok := r.agent.response(3); ok {
			t.Fatal("the read call was answered before its own card was decided")
		}
		if got := r.launcher.received(); len(got) != 1 || got[0].Tool != toolWrite {
			t.Fatalf("the servers received %+v, want the write call only", got)
		}
		decide(t, r, second.ID, authz.ApproveOnce)
		mustResult(t, r.agent.wait(3, 5*time.Second))
	})
}

// TestAuditDownAsksNobody: while the audit log cannot be written, a call
// that needs approval is refused with audit_unavailable before anyone is
// asked; a call already waiting when the log fails is refused the same way
// when the person approves, and nothing is granted.
func TestAuditDownAsksNobody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)

		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		waiting := r.pendingFor(5 * time.Second)
		r.audit.fail(errors.New("no space left on device"))
		if err := r.auth.Decide(waiting.ID, authz.Decision{Choice: authz.ApproveRun, By: "cli"}); !errors.Is(err, authz.ErrUnrecorded) {
			t.Errorf("approving while the log fails: %v, want ErrUnrecorded", err)
		}
		code, ref := refusal(t, r.agent.wait(2, 5*time.Second))
		if code != -31050 || ref == nil || ref.Error != control.AuditUnavailable || !strings.Contains(ref.Reason, "nothing was granted") {
			t.Errorf("the waiting call: %d %+v, want audit_unavailable", code, ref)
		}
		if g := r.grants(); len(g) != 0 {
			t.Errorf("grants made while the log failed: %+v", g)
		}

		r.agent.request(3, "tools/call", callParams(toolWrite, 3, ""))
		code, ref = refusal(t, r.agent.wait(3, 5*time.Second))
		if code != -31050 || ref == nil || !strings.Contains(ref.Reason, "no approval is asked") {
			t.Errorf("a new call while the log fails: %d %+v, want audit_unavailable", code, ref)
		}
		if p := r.auth.Pending(); len(p) != 0 {
			t.Errorf("approval requests raised while the log fails: %+v", p)
		}
		if got := r.launcher.received(); len(got) != 0 {
			t.Errorf("calls reached the server: %+v", got)
		}
	})
}

// TestMissingCredentialRaisesNoRequest: a call whose credential scope has no
// secret stored is refused at once as credential_unavailable: nobody is asked
// to approve a call that could not carry its credential. A call without
// credentials still asks as usual.
func TestMissingCredentialRaisesNoRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var asked atomic.Int32
		r := newRig(t, rigOptions{secretCheck: func(scope string) error {
			asked.Add(1)
			return fmt.Errorf("nothing stored for %s", scope)
		}})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
		code, ref := refusal(t, r.agent.wait(1, 5*time.Second))
		if code != -31023 || ref == nil || ref.Error != control.CredentialUnavailable || !strings.Contains(ref.Reason, "nothing stored for "+credScope) || !strings.Contains(ref.Retry, "portcullis creds set "+credScope) {
			t.Errorf("refusal %d %+v, want credential_unavailable naming the scope", code, ref)
		}
		if p := r.auth.Pending(); len(p) != 0 {
			t.Errorf("approval requests raised for a call that cannot get its credential: %+v", p)
		}
		if asked.Load() == 0 {
			t.Error("the store was never asked whether the secret exists")
		}
		if got := r.launcher.received(); len(got) != 0 {
			t.Errorf("the call reached the server: %+v", got)
		}

		r2 := newRig(t, rigOptions{noCredentials: true, secretCheck: func(string) error { return errors.New("nothing stored") }})
		defer r2.close()
		r2.handshake()
		r2.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
		decide(t, r2, r2.pendingFor(5*time.Second).ID, authz.ApproveRun)
		mustResult(t, r2.agent.wait(1, 5*time.Second))
	})
}

// TestLockedKeychainIsOnTheCard: a locked keychain still lets the call ask
// (the person may unlock it), and the card says it is locked; a secret
// still locked at approval refuses the call with advice to unlock.
func TestLockedKeychainIsOnTheCard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{
			secrets:     func(string) ([]byte, error) { return nil, errLocked },
			secretCheck: func(string) error { return errLocked },
		})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
		req := r.pendingFor(5 * time.Second)
		if !strings.Contains(req.Card.Reason, "the keychain holding "+credScope+" is locked") {
			t.Errorf("card reason %q does not say the keychain is locked", req.Card.Reason)
		}
		decide(t, r, req.ID, authz.ApproveOnce)
		code, ref := refusal(t, r.agent.wait(1, 5*time.Second))
		if code != -31023 || ref == nil || !strings.Contains(ref.Retry, "unlock the keychain") {
			t.Errorf("refusal %d %+v, want credential_unavailable advising to unlock", code, ref)
		}
	})
}

// TestCredentialUnavailableRefusesTheCall: the keychain cannot give the
// secret: the approved call is refused as credential_unavailable and never
// forwarded with an empty secret.
func TestCredentialUnavailableRefusesTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{secrets: func(string) ([]byte, error) { return nil, errLocked }})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
		decide(t, r, r.pendingFor(5*time.Second).ID, authz.ApproveRun)
		code, ref := refusal(t, r.agent.wait(1, 5*time.Second))
		if code != -31023 || ref == nil || ref.Error != control.CredentialUnavailable || !strings.Contains(ref.Reason, "keychain is locked") || !strings.Contains(ref.Retry, "unlock the keychain") {
			t.Errorf("refusal %d %+v", code, ref)
		}
		// An empty secret is refused just the same.
		r2 := newRig(t, rigOptions{secrets: func(string) ([]byte, error) { return []byte{}, nil }})
		defer r2.close()
		r2.handshake()
		r2.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
		decide(t, r2, r2.pendingFor(5*time.Second).ID, authz.ApproveRun)
		if code, _ := refusal(t, r2.agent.wait(1, 5*time.Second)); code != -31023 {
			t.Errorf("empty secret: code %d, want credential_unavailable", code)
		}
		if got := append(r.launcher.received(), r2.launcher.received()...); len(got) != 0 {
			t.Errorf("calls reached the server without their credential: %+v", got)
		}
	})
}

// errLocked is a keychain's error for a locked store.
var errLocked = fmt.Errorf("the keychain is locked: %w", secrets.ErrLocked)

// TestReplaceWhileIntentIsWritten: a granted call whose audit intent is
// still being written when the server is replaced is never sent to the new
// epoch (its grant belongs to the old one): the agent gets epoch_ended
// naming both epochs, and neither process receives it.
func TestReplaceWhileIntentIsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		decide(t, r, r.pendingFor(5*time.Second).ID, authz.ApproveRun)
		mustResult(t, r.agent.wait(2, 5*time.Second))

		entered, release := r.audit.holdIntents()
		r.agent.request(3, "tools/call", callParams(toolWrite, 3, ""))
		select { // granted at once; its intent is being written now
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("the intent of call 3 was never written")
		}
		r.sess.Replace("rebuild")
		release()
		code, ref := refusal(t, r.agent.wait(3, 5*time.Second))
		if code != -31030 || ref == nil || ref.Epoch != "E1" || ref.CurrentEpoch != "E2" {
			t.Errorf("refusal %d %+v, want epoch_ended from E1 to E2", code, ref)
		}
		want := []received{{Epoch: "E1", Tool: toolWrite, N: 2, Cred: testSecret}}
		if diff := cmp.Diff(want, r.launcher.received(), ignoreSeqAndRaw); diff != "" {
			t.Errorf("calls the servers received (-want +got):\n%s", diff)
		}
	})
}

// TestToolGoneAfterEpochChange: a tool approved on the old code that the new
// code no longer has is answered by the catalog check (the agent must list
// the tools again), not with authorization_stale, whose advice to request
// authorization could never succeed; nobody is asked to approve it.
func TestToolGoneAfterEpochChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		decide(t, r, r.pendingFor(5*time.Second).ID, authz.ApproveRun)
		mustResult(t, r.agent.wait(2, 5*time.Second))

		r.launcher.tools.Store(`{"tools":[{"name":"write_v2","inputSchema":{"type":"object"}},{"name":"read","inputSchema":{"type":"object"}}]}`)
		r.sess.Replace("rebuild: write renamed")
		if st := r.waitState(StateReady, 5*time.Second); st.Epoch != "E2" {
			t.Fatalf("after Replace: epoch %s", st.Epoch)
		}
		r.agent.request(3, "tools/call", callParams(toolWrite, 3, ""))
		code, ref := refusal(t, r.agent.wait(3, 5*time.Second))
		if ref == nil || ref.Error != control.CatalogStale {
			t.Errorf("a call of a tool the new code lacks: %d %+v, want catalog_stale", code, ref)
		}
		if p := r.auth.Pending(); len(p) != 0 {
			t.Errorf("approval requests for a tool that is gone: %+v", p)
		}
	})
}

// TestDrainEndsWaitingApproval: a call still waiting for a person when the
// drain after EndOfInput times out is told that it was never sent, or that
// its request was withdrawn as the run ended; never that the person denied
// it, nor to check an effect it cannot have had.
func TestDrainEndsWaitingApproval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		defer r.close()
		r.sess.opts.DrainTimeout = 200 * time.Millisecond
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		req := r.pendingFor(5 * time.Second)
		r.agent.send(control.EndOfInput)
		_, ref := refusal(t, r.agent.wait(2, 5*time.Second))
		switch {
		case ref == nil:
			t.Fatalf("call waiting on %s at the end of the drain got no refusal", req.ID)
		case ref.Error == control.EpochEnded && strings.Contains(ref.Reason, "it was not sent") && strings.Contains(ref.Retry, "agent run, which is over"):
		case ref.Error == control.ApprovalDenied && strings.Contains(ref.Reason, "withdrawn") && strings.Contains(ref.Reason, "the agent run ended"):
		default:
			t.Errorf("call waiting on %s at the end of the drain: %+v, want not sent or withdrawn as the run ended", req.ID, ref)
		}
	})
}
