package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/secrets"
)

// The catalog revisions of the table: revision 2 changed write's default
// mode, added fresh and dropped old.
var (
	decideRev1 = decideCatalog(1,
		`{"name":"read","description":"Read a file.","inputSchema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}`,
		`{"name":"write","description":"Write a file.","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"mode":{"type":"string","enum":["append","truncate"],"default":"append"}},"required":["path"]}}`,
		`{"name":"old","description":"Gone in revision 2.","inputSchema":{"type":"object"}}`)
	decideRev2 = decideCatalog(2,
		`{"name":"read","description":"Read a file.","inputSchema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}`,
		`{"name":"write","description":"Write a file.","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"mode":{"type":"string","enum":["append","truncate"],"default":"truncate"}},"required":["path"]}}`,
		`{"name":"fresh","description":"New in revision 2.","inputSchema":{"type":"object","properties":{"n":{"type":"integer"}}}}`)
)

func decideCatalog(rev uint64, tools ...string) *catalog.Catalog {
	page, _ := json.Marshal(map[string]any{"tools": func() []json.RawMessage {
		var out []json.RawMessage
		for _, t := range tools {
			out = append(out, json.RawMessage(t))
		}
		return out
	}()})
	ts, err := catalog.Parse([]json.RawMessage{page})
	if err != nil {
		panic(err)
	}
	return &catalog.Catalog{Label: "files", Revision: rev, Tools: ts}
}

func decideDigest(cat *catalog.Catalog, tool string) string {
	t, _ := cat.Lookup(tool)
	return t.Digest
}

// decideFacts is what a session knows in the table's usual case: epoch E2
// with revision 2, listed by the agent on E2, every tool approve, an
// Authority, no credentials, the audit log up.
func decideFacts() *callFacts {
	return &callFacts{
		label: "files", epoch: "E2", cat: decideRev2, policy: config.PolicyApprove,
		agentRev: 2, listedThisEpoch: true,
		validator: catalog.NewValidator(), checked: true,
	}
}

func decideCallOf(t *testing.T, tool, args string) *toolCall {
	t.Helper()
	params := fmt.Sprintf(`{"name":%q`, tool)
	if args != "" {
		params += `,"arguments":` + args
	}
	m, err := mcpwire.Parse([]byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":` + params + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	c, why := parseCall(m)
	if why != "" {
		t.Fatal(why)
	}
	return c
}

// TestDecideCall states every rule of how a tools/call is decided
// (decideCall), with the exact message the agent is given on a refusal.
func TestDecideCall(t *testing.T) {
	readArgs := `{"path":"/tmp/x"}`
	readDigest := decideCallOf(t, "read", readArgs).digest
	runGrant := func(id ids.GrantID, epoch ids.EpochID, tools ...string) authz.Grant {
		return authz.Grant{ID: id, ExecutionEpoch: epoch, ToolScope: tools, ExpiresWhen: authz.ExpiresRunEnds}
	}
	stale := runGrant("G1", "E1", "read", "write")
	missing := func(scope string) error { return fmt.Errorf("%w: no such item", secrets.ErrNotFound) }
	locked := func(scope string) error { return secrets.ErrLocked }
	full := func(granted string) bool { return granted == "" || granted == decideDigest(decideRev2, "write") }

	type want struct {
		kind      verdictKind
		decision  string
		grant     string
		inject    []string
		message   string
		ask       *cardAsk
		contract  string // toldContract
		toldStale bool
	}
	cases := []struct {
		name string
		tool string
		args string
		edit func(f *callFacts)
		want want
	}{
		// Rule 1: a grant voided by an epoch change.
		{name: "voided grant, agent has not listed on this epoch: refused, card raised", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.listedThisEpoch, f.stale = false, &stale },
			want: want{kind: verdictRefuse, ask: &cardAsk{reason: "server execution epoch changed", stale: &stale}, contract: decideDigest(decideRev2, "read"), toldStale: true,
				message: "authorization_stale: the server's code changed (execution epoch E1 → E2) since the person approved read, so the approval no longer holds and the call was not sent; current arguments of \"read\": path (string, required); the person has been asked to approve the new code in Portcullis (approval request R9); call read again once they approve, and it will wait for their decision"}},
		{name: "voided grant, tool changed since the listed revision: the refusal says what changed", tool: "write", args: `{"path":"/tmp/x","mode":"append"}`,
			edit: func(f *callFacts) { f.listedThisEpoch, f.stale, f.agentRev, f.listed = false, &stale, 1, decideRev1 },
			want: want{kind: verdictRefuse, ask: &cardAsk{reason: "server execution epoch changed", stale: &stale}, contract: decideDigest(decideRev2, "write"), toldStale: true,
				message: "authorization_stale: the server's code changed (execution epoch E1 → E2) since the person approved write, so the approval no longer holds and the call was not sent (write: default of argument \"mode\" changed from \"append\" to \"truncate\"); current arguments of \"write\": path (string, required), mode (string, one of \"append\"|\"truncate\", default \"truncate\"); the person has been asked to approve the new code in Portcullis (approval request R9); call write again once they approve, and it will wait for their decision"}},
		{name: "voided grant, credential missing: refused without a card", tool: "read", args: readArgs,
			edit: func(f *callFacts) {
				f.listedThisEpoch, f.stale, f.creds, f.secretCheck = false, &stale, []string{"token"}, missing
			},
			want: want{kind: verdictRefuse, contract: decideDigest(decideRev2, "read"), toldStale: true,
				message: "authorization_stale: the server's code changed (execution epoch E1 → E2) since the person approved read, so the approval no longer holds and the call was not sent; current arguments of \"read\": path (string, required); ask the person to store the credential (portcullis creds set token), then call again"}},
		{name: "voided grant, audit log down: refused without a card", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.listedThisEpoch, f.stale, f.auditErr = false, &stale, errors.New("disk full") },
			want: want{kind: verdictRefuse, contract: decideDigest(decideRev2, "read"), toldStale: true,
				message: "authorization_stale: the server's code changed (execution epoch E1 → E2) since the person approved read, so the approval no longer holds and the call was not sent; current arguments of \"read\": path (string, required); tell the person that Portcullis cannot write its audit log (they should check the disk and the data directory), then call again"}},
		{name: "voided grant, agent already told on this epoch: holds", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.listedThisEpoch, f.stale, f.staleTold = false, &stale, true },
			want: want{kind: verdictHold, ask: &cardAsk{}}},
		{name: "voided grant, agent listed on this epoch: holds", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.stale = &stale },
			want: want{kind: verdictHold, ask: &cardAsk{}}},
		{name: "voided grant, no catalog (the server judges): refused, card raised, no contract", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.listedThisEpoch, f.stale, f.cat, f.agentRev = false, &stale, nil, 0 },
			want: want{kind: verdictRefuse, ask: &cardAsk{reason: "server execution epoch changed", stale: &stale}, toldStale: true,
				message: "authorization_stale: the server's code changed (execution epoch E1 → E2) since the person approved read, so the approval no longer holds and the call was not sent; the person has been asked to approve the new code in Portcullis (approval request R9); call read again once they approve, and it will wait for their decision"}},
		{name: "voided grant of a tool the new code lacks: the catalog decides", tool: "old", args: `{}`,
			edit: func(f *callFacts) {
				f.listedThisEpoch, f.stale, f.agentRev, f.listed, f.visible = false, &stale, 1, decideRev1, []string{"fresh", "read", "write"}
			},
			want: want{kind: verdictRefuse, message: "catalog_stale: tool \"old\" is no longer offered: catalog revision 2, which the server answers with now, does not have it; do not call it again; the tools offered now are fresh, read, write"}},
		{name: "voided grant of an allow tool: goes", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.listedThisEpoch, f.stale, f.policy = false, &stale, config.PolicyAllow },
			want: want{kind: verdictForward, decision: decisionAllow}},

		// Rule 2: policy deny.
		{name: "denied tool", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.policy = config.PolicyDeny },
			want: want{kind: verdictRefuse, message: "approval_denied: tool \"read\" is denied by the person's policy for files; the call was not sent; do not call this tool again; tell the person if the task needs it (they can change its policy in Portcullis)"}},

		// Rule 3: no catalog.
		{name: "no catalog, approve: holds for its card", tool: "anything", args: `{"x":1}`,
			edit: func(f *callFacts) { f.cat, f.agentRev = nil, 0 },
			want: want{kind: verdictHold, ask: &cardAsk{}}},

		// Rule 4: the catalog.
		{name: "tool not in the revision the agent has", tool: "nope", args: `{}`,
			edit: func(f *callFacts) { f.visible = []string{"fresh", "read", "write"} },
			want: want{kind: verdictRefuse, message: "unknown_tool: there is no tool \"nope\" in catalog revision 2; call one of the tools the server offers: fresh, read, write"}},
		{name: "tool not in the revision the agent has, none visible", tool: "nope", args: `{}`,
			want: want{kind: verdictRefuse, message: "unknown_tool: there is no tool \"nope\" in catalog revision 2; call one of the tools the server offers: none"}},
		{name: "tool dropped since the agent listed", tool: "old", args: `{}`,
			edit: func(f *callFacts) {
				f.agentRev, f.listed, f.visible = 1, decideRev1, []string{"fresh", "read", "write"}
			},
			want: want{kind: verdictRefuse, message: "catalog_stale: tool \"old\" is no longer offered: catalog revision 2, which the server answers with now, does not have it; do not call it again; the tools offered now are fresh, read, write"}},
		{name: "tool changed since the agent listed, contract not told yet: refused, contract told", tool: "write", args: `{"path":"/tmp/x"}`,
			edit: func(f *callFacts) { f.agentRev, f.listed = 1, decideRev1 },
			want: want{kind: verdictRefuse, contract: decideDigest(decideRev2, "write"), message: "catalog_stale: tool \"write\" changed since catalog revision 1, which the agent last fetched; the current revision is 2 (write: default of argument \"mode\" changed from \"append\" to \"truncate\"); current arguments of \"write\": path (string, required), mode (string, one of \"append\"|\"truncate\", default \"truncate\"); form the call again from the current arguments given here: a call formed from them is judged on them, without listing the tools again"}},
		{name: "tool added since the agent listed, contract not told yet", tool: "fresh", args: `{"n":1}`,
			edit: func(f *callFacts) { f.agentRev, f.listed = 1, decideRev1 },
			want: want{kind: verdictRefuse, contract: decideDigest(decideRev2, "fresh"), message: "catalog_stale: tool \"fresh\" was added after catalog revision 1, which the agent last fetched; the current revision is 2 (new tool \"fresh\" (arguments: n; declared no annotations; MCP defaults: may be destructive, open world)); current arguments of \"fresh\": n (integer); form the call again from the current arguments given here: a call formed from them is judged on them, without listing the tools again"}},
		{name: "tool changed, contract told, call sets the changed argument: judged on it", tool: "write", args: `{"path":"/tmp/x","mode":"truncate"}`,
			edit: func(f *callFacts) { f.agentRev, f.listed, f.told = 1, decideRev1, decideDigest(decideRev2, "write") },
			want: want{kind: verdictHold, ask: &cardAsk{}}},
		{name: "tool changed, contract told, call omits the argument whose default changed", tool: "write", args: `{"path":"/tmp/x"}`,
			edit: func(f *callFacts) { f.agentRev, f.listed, f.told = 1, decideRev1, decideDigest(decideRev2, "write") },
			want: want{kind: verdictRefuse, message: "catalog_stale: tool \"write\" changed since catalog revision 1, which the agent last fetched, and this call omits \"mode\", whose default changed: the call would do what it does not show (write: default of argument \"mode\" changed from \"append\" to \"truncate\"); current arguments of \"write\": path (string, required), mode (string, one of \"append\"|\"truncate\", default \"truncate\"); send the call again with \"mode\" set explicitly (the current arguments are given here)"}},
		{name: "tool unchanged since the agent listed: judged as usual", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.agentRev, f.listed = 1, decideRev1 },
			want: want{kind: verdictHold, ask: &cardAsk{}}},
		{name: "the revision the agent listed is no longer stored", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.agentRev = 1 },
			want: want{kind: verdictRefuse, message: "catalog_stale: catalog revision 1, which the agent last fetched, is no longer known; the current revision is 2; current arguments of \"read\": path (string, required); list the tools again (tools/list) and form the call from the current contract of read; if the agent cannot list tools mid-session, tell the person that read changed and the agent must reconnect to use it"}},

		// Rule 5: arguments.
		{name: "arguments the inputSchema rejects", tool: "read", args: `{"path":3}`,
			want: want{kind: verdictRefuse, message: "invalid_arguments: the arguments do not fit the inputSchema of \"read\" in catalog revision 2 (at '/path': got number, want string); current arguments of \"read\": path (string, required); fix the arguments to fit the current arguments given here, then call again"}},
		{name: "arguments missing a required one", tool: "read",
			want: want{kind: verdictRefuse, message: "invalid_arguments: the arguments do not fit the inputSchema of \"read\" in catalog revision 2 (at '': missing property 'path'); current arguments of \"read\": path (string, required); fix the arguments to fit the current arguments given here, then call again"}},

		// Rule 6: what lets a call go.
		{name: "allow policy", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.policy = config.PolicyAllow },
			want: want{kind: verdictForward, decision: decisionAllow}},
		{name: "allow policy, credentials: no grant, nothing injected", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.policy, f.creds = config.PolicyAllow, []string{"token"} },
			want: want{kind: verdictForward, decision: decisionAllow}},
		{name: "no Authority", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.checked = false },
			want: want{kind: verdictForward, decision: decisionUnchecked}},
		{name: "a grant of this epoch for the tool", tool: "read", args: readArgs,
			edit: func(f *callFacts) {
				f.grants = []authz.Grant{runGrant("G0", "E2", "write"), runGrant("G2", "E2", "read")}
			},
			want: want{kind: verdictForward, decision: decisionGrant, grant: "G2"}},
		{name: "a grant of this epoch with the credentials: they are injected", tool: "read", args: readArgs,
			edit: func(f *callFacts) {
				g := runGrant("G2", "E2", "read")
				g.CredentialScope = []string{"token", "other"}
				f.grants, f.creds = []authz.Grant{g}, []string{"token"}
			},
			want: want{kind: verdictForward, decision: decisionGrant, grant: "G2", inject: []string{"token"}}},
		{name: "a grant without the credential: holds", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.grants, f.creds = []authz.Grant{runGrant("G2", "E2", "read")}, []string{"token"} },
			want: want{kind: verdictHold, ask: &cardAsk{}}},
		{name: "a grant of an older epoch: holds", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.grants = []authz.Grant{runGrant("G1", "E1", "read")} },
			want: want{kind: verdictHold, ask: &cardAsk{}}},
		{name: "a once grant for these arguments", tool: "read", args: readArgs,
			edit: func(f *callFacts) {
				g := runGrant("G3", "E2", "read")
				g.ExpiresWhen, g.ArgsDigest = authz.ExpiresOnce, readDigest
				f.grants = []authz.Grant{g}
			},
			want: want{kind: verdictForward, decision: decisionGrant, grant: "G3"}},
		{name: "a once grant for other arguments: holds", tool: "read", args: `{"path":"/etc/passwd"}`,
			edit: func(f *callFacts) {
				g := runGrant("G3", "E2", "read")
				g.ExpiresWhen, g.ArgsDigest = authz.ExpiresOnce, readDigest
				f.grants = []authz.Grant{g}
			},
			want: want{kind: verdictHold, ask: &cardAsk{}}},
		{name: "a grant whose contract the server's rewrite outgrew: holds", tool: "write", args: `{"path":"/tmp/x"}`,
			edit: func(f *callFacts) {
				g := runGrant("G4", "E2", "write")
				g.Contracts = map[string]string{"write": decideDigest(decideRev1, "write")}
				f.grants, f.covers = []authz.Grant{g}, full
			},
			want: want{kind: verdictHold, ask: &cardAsk{}}},
		{name: "a grant for the contract offered now", tool: "write", args: `{"path":"/tmp/x"}`,
			edit: func(f *callFacts) {
				g := runGrant("G4", "E2", "write")
				g.Contracts = map[string]string{"write": decideDigest(decideRev2, "write")}
				f.grants, f.covers = []authz.Grant{g}, full
			},
			want: want{kind: verdictForward, decision: decisionGrant, grant: "G4"}},
		{name: "a grant, but a credential asks on every use: holds", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.grants, f.askEvery = []authz.Grant{runGrant("G2", "E2", "read")}, true },
			want: want{kind: verdictHold, ask: &cardAsk{}}},

		// Rule 7: a person must decide.
		{name: "no grant: holds for its card", tool: "read", args: readArgs,
			want: want{kind: verdictHold, ask: &cardAsk{}}},
		{name: "no grant, keychain locked: holds (the card says so)", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.creds, f.secretCheck = []string{"token"}, locked },
			want: want{kind: verdictHold, ask: &cardAsk{}}},
		{name: "no grant, credential missing", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.creds, f.secretCheck = []string{"token"}, missing },
			want: want{kind: verdictRefuse, message: "credential_unavailable: credential scope \"token\" cannot be had: no secret stored: no such item; ask the person to store the credential (portcullis creds set token), then call again"}},
		{name: "no grant, audit log down", tool: "read", args: readArgs,
			edit: func(f *callFacts) { f.auditErr = errors.New("disk full") },
			want: want{kind: verdictRefuse, message: "audit_unavailable: the audit log cannot be written (disk full), so no approval is asked and no call is forwarded; tell the person that Portcullis cannot write its audit log (they should check the disk and the data directory), then call again"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := decideFacts()
			if tc.edit != nil {
				tc.edit(f)
			}
			v := decideCall(f, decideCallOf(t, tc.tool, tc.args))
			got := want{kind: v.kind, decision: v.decision, inject: v.inject, ask: v.ask, contract: v.toldContract, toldStale: v.toldStale}
			if v.grant != nil {
				got.grant = string(v.grant.ID)
			}
			if v.refusal != nil {
				if v.ask != nil {
					askedIn(v.refusal, "R9")
				}
				got.message = v.refusal.Message()
			}
			if got.kind != tc.want.kind || got.decision != tc.want.decision || got.grant != tc.want.grant ||
				!slices.Equal(got.inject, tc.want.inject) || got.message != tc.want.message ||
				got.contract != tc.want.contract || got.toldStale != tc.want.toldStale ||
				(got.ask == nil) != (tc.want.ask == nil) || (got.ask != nil && (got.ask.reason != tc.want.ask.reason || got.ask.stale != tc.want.ask.stale)) {
				t.Errorf("decideCall:\n got  %+v\n want %+v", got, tc.want)
			}
		})
	}
}

// TestDecideSpendsOnceGrant: a call that goes on a once grant spends it as
// it is decided, and a call decided on facts read before another call
// spent that grant does not go on it: it holds for a card of its own.
func TestDecideSpendsOnceGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{noCredentials: true})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)
		s := r.sess
		s.mu.Lock()
		e := s.cur
		s.mu.Unlock()
		call := decideCallOf(t, toolWrite, `{"n":1}`)
		grantOnce := func() ids.GrantID {
			id := r.auth.Raise(authz.Card{AgentRun: "RUN", ServerLabel: "fake", CurrentEpoch: e.ID, Tool: toolWrite,
				Arguments: call.args, ArgsDigest: call.digest, ToolScope: []string{toolWrite}})
			decide(t, r, id, authz.ApproveOnce)
			gs := r.auth.Grants("RUN")
			if len(gs) != 1 {
				t.Fatalf("grants after approving once: %+v", gs)
			}
			return gs[0].ID
		}

		g := grantOnce()
		if v := s.decide(e, call); v.kind != verdictForward || v.grant == nil || v.grant.ID != g {
			t.Fatalf("a call on its once grant: %+v", v)
		}
		if gs := r.auth.Grants("RUN"); len(gs) != 0 {
			t.Errorf("the once grant was not spent by its call: %+v", gs)
		}
		if v := s.decide(e, call); v.kind != verdictHold {
			t.Errorf("a second call on a spent once grant: %+v", v)
		}

		g = grantOnce()
		f := s.callFacts(e, call)
		if !r.auth.Consume("RUN", g) {
			t.Fatal("the once grant was not there to spend")
		}
		if v := s.decideFrom(&f, call); v.kind != verdictHold || v.grant != nil {
			t.Errorf("a call decided on facts read before another call spent the grant: %+v", v)
		}
	})
}

// TestDecideWaited states how a call's wait for a person ends
// (decideWaited), with the exact message the agent is given on a refusal.
func TestDecideWaited(t *testing.T) {
	grant := func(epoch string, tools ...string) *authz.Grant {
		return &authz.Grant{ID: "G5", ExecutionEpoch: ids.EpochID(epoch), ToolScope: tools, CredentialScope: []string{"token"}, ExpiresWhen: authz.ExpiresRunEnds}
	}
	base := waited{label: "files", tool: "read", epoch: "E2", request: "R9", timeout: 2 * time.Minute, current: "E2", creds: []string{"token"}}
	cases := []struct {
		name    string
		edit    func(w *waited)
		grant   string
		inject  []string
		message string
	}{
		{name: "approved for the tool on its epoch: goes with the credentials", grant: "G5", inject: []string{"token"},
			edit: func(w *waited) { w.grant = grant("E2", "read") }},
		{name: "nobody answered",
			edit:    func(w *waited) { w.err = authz.ErrTimeout },
			message: "approval_timeout: nobody answered approval request R9 for read within 2m0s; the call was not sent; tell the person that read on files needs their approval in Portcullis (its window or `portcullis approve`), and call again when they say they are ready to approve it"},
		{name: "approved, but the audit log could not record it",
			edit:    func(w *waited) { w.err = authz.ErrUnrecorded },
			message: "audit_unavailable: the person approved request R9, but the audit log could not record it, so nothing was granted and the call was not sent; tell the person that Portcullis cannot write its audit log (they should check the disk and the data directory), then call again"},
		{name: "withdrawn before anyone decided",
			edit:    func(w *waited) { w.err = authz.ErrWithdrawn },
			message: "approval_denied: approval request R9 was withdrawn before a person decided it; the call was not sent; call again if the tool is still needed: the person will be asked again"},
		{name: "the run ended while the call waited",
			edit:    func(w *waited) { w.err = context.Canceled },
			message: "approval_denied: approval request R9 was withdrawn before a person decided it: the agent run ended; none in this agent run, which is over"},
		{name: "the person denied",
			edit:    func(w *waited) { w.err = authz.ErrDenied },
			message: "approval_denied: the person denied approval request R9 for read; the call was not sent; tell the person that read was not run because they denied it; do not call it again unless they ask you to"},
		{name: "approved other tools",
			edit:    func(w *waited) { w.grant = grant("E2", "write") },
			message: "approval_denied: the person approved other tools in request R9, not read; the call was not sent; tell the person that read was not approved; do not call it again unless they ask you to"},
		{name: "the epoch ended while the call waited",
			edit:    func(w *waited) { w.grant, w.ended, w.current = grant("E2", "read"), true, "E3" },
			message: "authorization_stale: the server's code changed (execution epoch E2 ended) while the call waited for approval, so the approval given is for code that no longer runs and the call was not sent; call read again: it will wait for the person to approve the new code"},
		{name: "approved for another epoch",
			edit:    func(w *waited) { w.grant = grant("E3", "read") },
			message: "authorization_stale: the server's code changed (execution epoch E2 ended) while the call waited for approval, so the approval given is for code that no longer runs and the call was not sent; call read again: it will wait for the person to approve the new code"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := base
			tc.edit(&w)
			v := decideWaited(w)
			var grant, message string
			if v.grant != nil {
				grant = string(v.grant.ID)
			}
			if v.refusal != nil {
				message = v.refusal.Message()
			}
			if grant != tc.grant || message != tc.message || !slices.Equal(v.inject, tc.inject) || (message == "") != (v.kind == verdictForward) {
				t.Errorf("decideWaited: got %+v (message %q), want grant %q inject %v message %q", v, message, tc.grant, tc.inject, tc.message)
			}
		})
	}
	if got, want := deniedWhileWaiting("files", "E2", "read").Message(), `approval_denied: tool "read" was denied by the person's policy for files while the call waited for approval; the call was not sent; do not call this tool again; tell the person if the task needs it (they can change its policy in Portcullis)`; got != want {
		t.Errorf("denied while waiting:\n got  %s\n want %s", got, want)
	}
}
