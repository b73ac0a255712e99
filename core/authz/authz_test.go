package authz

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/ids"
)

// recorder collects what an Authority reports through its Options hooks.
type recorder struct {
	mu        sync.Mutex
	requested []string // request ids, guarded by mu
	granted   []Grant  // guarded by mu
	denied    []string // "request reason", guarded by mu
}

func (r *recorder) options(o Options) Options {
	o.OnRequested = func(q Request) { r.mu.Lock(); r.requested = append(r.requested, string(q.ID)); r.mu.Unlock() }
	o.OnGranted = func(_ Request, g Grant) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.granted = append(r.granted, g)
		return nil
	}
	o.OnDenied = func(q Request, why string) {
		r.mu.Lock()
		r.denied = append(r.denied, string(q.ID)+" "+why)
		r.mu.Unlock()
	}
	return o
}

func (r *recorder) deniedList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.denied)
}

// toolCard is the card of a first call of tool on epoch of run.
func toolCard(run ids.RunID, epoch ids.EpochID, tool string, scope []string, creds ...string) Card {
	return Card{Reason: "first use of " + tool, AgentRun: run, ServerLabel: "srv", CurrentEpoch: epoch,
		Tool: tool, ToolScope: scope, CredentialScope: creds}
}

// grantFor raises card and approves it with d, returning the grant made.
func grantFor(t *testing.T, a *Authority, card Card, d Decision) *Grant {
	t.Helper()
	id := a.Raise(card)
	if err := a.Decide(id, d); err != nil {
		t.Fatalf("Decide(%s, %+v): %v", id, d, err)
	}
	g, err := a.Wait(context.Background(), id)
	if err != nil {
		t.Fatalf("Wait(%s): %v", id, err)
	}
	return g
}

// TestIdentityApprovedOnceIsSpent: an identity approved once lets the launch
// that waited for it go; a later launch of the same identity asks again.
func TestIdentityApprovedOnceIsSpent(t *testing.T) {
	a := New(Options{})
	g := grantFor(t, a, Card{AgentRun: "r", ServerLabel: "srv", Identity: "sha256:aaa", CredentialScope: []string{"token"}}, Decision{Choice: ApproveOnce})
	if g == nil || g.Identity != "sha256:aaa" || g.ExpiresWhen != ExpiresOnce {
		t.Fatalf("grant = %+v, want a once grant of the identity", g)
	}
	if a.IdentityApproved("r", "sha256:aaa", []string{"token"}) {
		t.Error("an identity approved once still counts for a later launch")
	}
}

func TestCheckCoversRunEpochToolsAndCredentials(t *testing.T) {
	a := New(Options{})
	g := grantFor(t, a, toolCard("run1", "E1", "write", []string{"write", "delete"}, "api"), Decision{Choice: ApproveRun, By: "cli"})
	if g.ExpiresWhen != ExpiresRunEnds || g.ExecutionEpoch != "E1" || g.AgentRun != "run1" || g.Request == "" {
		t.Fatalf("grant = %+v", g)
	}
	tests := []struct {
		name  string
		run   ids.RunID
		epoch ids.EpochID
		tool  string
		creds []string
		want  bool
	}{
		{"granted tool", "run1", "E1", "write", nil, true},
		{"other tool of the scope", "run1", "E1", "delete", nil, true},
		{"granted credential", "run1", "E1", "write", []string{"api"}, true},
		{"tool outside the scope", "run1", "E1", "drop", nil, false},
		{"credential outside the scope", "run1", "E1", "write", []string{"api", "db"}, false},
		{"other epoch", "run1", "E2", "write", nil, false},
		{"other agent run", "run2", "E1", "write", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := a.Check(tt.run, tt.epoch, tt.tool, tt.creds)
			if (got != nil) != tt.want {
				t.Errorf("Check(%s, %s, %s, %v) = %+v, want a grant: %v", tt.run, tt.epoch, tt.tool, tt.creds, got, tt.want)
			}
		})
	}
	// A run grant is not consumed by use.
	if a.Check("run1", "E1", "write", nil) == nil || len(a.Grants("run1")) != 1 {
		t.Errorf("run grant consumed by Check: %+v", a.Grants("run1"))
	}
}

func TestApproveRunWithTickedTools(t *testing.T) {
	a := New(Options{})
	g := grantFor(t, a, toolCard("r", "E", "write", []string{"write", "delete", "drop"}), Decision{Choice: ApproveRun, Tools: []string{"drop", "write"}})
	if diff := cmp.Diff([]string{"write", "drop"}, g.ToolScope); diff != "" {
		t.Errorf("tool scope (-want +got):\n%s", diff)
	}
	if a.Check("r", "E", "delete", nil) != nil {
		t.Error("an unticked tool is covered")
	}
	// The called tool is part of every run approval, ticked or not.
	g = grantFor(t, a, toolCard("r", "E", "write", []string{"write", "delete"}), Decision{Choice: ApproveRun, Tools: []string{"delete"}})
	if diff := cmp.Diff([]string{"write", "delete"}, g.ToolScope); diff != "" {
		t.Errorf("tool scope without the called tool ticked (-want +got):\n%s", diff)
	}
}

// TestDecisionNamesOnlyToolsOnTheCard: a decision may tick the card's other
// tools (widening), never a tool the card did not show; such a decision is
// refused and the request stays pending.
func TestDecisionNamesOnlyToolsOnTheCard(t *testing.T) {
	a := New(Options{})
	card := toolCard("r", "E", "read", []string{"read"})
	card.OtherTools = []string{"write", "delete"}
	id := a.Raise(card)
	err := a.Decide(id, Decision{Choice: ApproveRun, Tools: []string{"read", "drop"}})
	if !errors.Is(err, ErrNotOnCard) || !strings.Contains(err.Error(), `"drop"`) {
		t.Fatalf("Decide with a tool not on the card: %v, want ErrNotOnCard naming drop", err)
	}
	if len(a.Pending()) != 1 || len(a.Grants("r")) != 0 {
		t.Fatalf("after the refused decision: pending %d, grants %+v; want the request pending and no grant", len(a.Pending()), a.Grants("r"))
	}
	if err := a.Decide(id, Decision{Choice: ApproveRun, Tools: []string{"delete"}}); err != nil {
		t.Fatal(err)
	}
	g, err := a.Wait(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"read", "delete"}, g.ToolScope); diff != "" {
		t.Errorf("widened scope (-want +got):\n%s", diff)
	}
}

func TestOnceGrantIsConsumedByOneCall(t *testing.T) {
	a := New(Options{})
	g := grantFor(t, a, toolCard("r", "E", "write", []string{"write", "delete"}, "api"), Decision{Choice: ApproveOnce})
	if g.ExpiresWhen != ExpiresOnce {
		t.Fatalf("expires %q", g.ExpiresWhen)
	}
	if diff := cmp.Diff([]string{"write"}, g.ToolScope); diff != "" {
		t.Errorf("a once grant covers the card's call only (-want +got):\n%s", diff)
	}
	if a.Check("r", "E", "delete", nil) != nil {
		t.Error("approve once covered another tool of the scope")
	}
	first := a.Check("r", "E", "write", []string{"api"})
	if first == nil || first.ID != g.ID {
		t.Fatalf("first Check = %+v, want grant %s", first, g.ID)
	}
	if again := a.Check("r", "E", "write", []string{"api"}); again != nil {
		t.Errorf("second Check = %+v, want nil: a once grant serves one call", again)
	}
	if n := len(a.Grants("r")); n != 0 {
		t.Errorf("%d grants left, want 0", n)
	}

	// Consume spends a once grant taken through Wait rather than Check.
	g2 := grantFor(t, a, toolCard("r", "E", "write", nil), Decision{Choice: ApproveOnce})
	a.Consume("r", g2.ID)
	if a.Check("r", "E", "write", nil) != nil {
		t.Error("a consumed grant still covers the tool")
	}
}

func TestVoidEpochKeepsIdentityGrants(t *testing.T) {
	a := New(Options{})
	tool := grantFor(t, a, toolCard("r", "E1", "write", []string{"write"}, "api"), Decision{Choice: ApproveRun})
	ident := grantFor(t, a, Card{AgentRun: "r", ServerLabel: "srv", Identity: "sha256:aaa", CredentialScope: []string{"token"}}, Decision{Choice: ApproveRun})
	if ident.ToolScope != nil || ident.Identity != "sha256:aaa" {
		t.Fatalf("identity grant = %+v, want no tools and the identity", ident)
	}
	// An identity grant never passes as a tool grant.
	if g := a.Check("r", "", "", []string{"token"}); g != nil {
		t.Errorf("Check returned the identity grant %+v", g)
	}
	if a.Stale("r", "E1", "write") != nil {
		t.Error("Stale with a live grant on the epoch")
	}

	voided := a.VoidEpoch("r", "E2", "rebuild")
	if len(voided) != 1 || voided[0].ID != tool.ID || voided[0].Voided != "rebuild" {
		t.Fatalf("voided = %+v, want only the tool grant %s, why rebuild", voided, tool.ID)
	}
	if a.Check("r", "E1", "write", nil) != nil {
		t.Error("a voided grant still covers its old epoch")
	}
	if !a.IdentityApproved("r", "sha256:aaa", []string{"token"}) {
		t.Error("the identity grant did not survive the epoch change")
	}
	if a.IdentityApproved("r", "sha256:bbb", []string{"token"}) || a.IdentityApproved("r", "sha256:aaa", []string{"token", "other"}) {
		t.Error("IdentityApproved for another identity or a wider credential scope")
	}
	st := a.Stale("r", "E2", "write")
	if st == nil || st.ID != tool.ID || st.ExecutionEpoch != "E1" {
		t.Fatalf("Stale = %+v, want the voided grant of E1", st)
	}
	if a.Stale("r", "E2", "other") != nil || a.Stale("other-run", "E2", "write") != nil {
		t.Error("Stale for a tool or run the old grant never covered")
	}
	// Stale consumes nothing; a new grant on E2 ends staleness.
	if a.Stale("r", "E2", "write") == nil {
		t.Error("Stale consumed the voided grant")
	}
	grantFor(t, a, toolCard("r", "E2", "write", []string{"write"}), Decision{Choice: ApproveRun})
	if a.Stale("r", "E2", "write") != nil {
		t.Error("Stale despite a live grant on the current epoch")
	}
	// Voiding again for the same current epoch voids nothing new.
	if v := a.VoidEpoch("r", "E2", "again"); len(v) != 0 {
		t.Errorf("second VoidEpoch voided %+v", v)
	}
}

func TestEndRunWithdrawsPendingRequests(t *testing.T) {
	rec := &recorder{}
	a := New(rec.options(Options{}))
	grantFor(t, a, toolCard("r", "E", "write", []string{"write"}), Decision{Choice: ApproveRun})
	mine := a.Raise(toolCard("r", "E", "delete", []string{"delete"}))
	other := a.Raise(toolCard("r2", "E", "delete", []string{"delete"}))

	errc := make(chan error, 1)
	go func() { _, err := a.Wait(context.Background(), mine); errc <- err }()
	a.EndRun("r")
	if err := <-errc; !errors.Is(err, ErrWithdrawn) {
		t.Errorf("Wait on a request of an ended run: %v, want ErrWithdrawn (nobody denied it)", err)
	}
	if got := a.Grants("r"); len(got) != 0 {
		t.Errorf("grants after EndRun: %+v", got)
	}
	if a.Stale("r", "E2", "write") != nil {
		t.Error("voided grants outlive the run")
	}
	pending := a.Pending()
	if len(pending) != 1 || pending[0].ID != other {
		t.Errorf("pending after EndRun = %+v, want only %s of the other run", pending, other)
	}
	if diff := cmp.Diff([]string{string(mine) + " withdrawn: the agent run ended"}, rec.deniedList()); diff != "" {
		t.Errorf("OnDenied (-want +got):\n%s", diff)
	}
}

func TestDecideErrors(t *testing.T) {
	a := New(Options{})
	id := a.Raise(toolCard("r", "E", "write", nil))
	tests := []struct {
		name string
		id   ids.RequestID
		d    Decision
		want error
	}{
		{"unknown choice", id, Decision{Choice: "maybe"}, ErrBadChoice},
		{"timeout is not a person's choice", id, Decision{Choice: timedOut}, ErrBadChoice},
		{"unknown request", "apr_nope", Decision{Choice: ApproveRun}, ErrNoRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := a.Decide(tt.id, tt.d); !errors.Is(err, tt.want) {
				t.Errorf("Decide = %v, want %v", err, tt.want)
			}
		})
	}
	if len(a.Pending()) != 1 {
		t.Fatal("a refused decision resolved the request")
	}
	if err := a.Decide(id, Decision{Choice: Deny}); err != nil {
		t.Fatal(err)
	}
	if err := a.Decide(id, Decision{Choice: ApproveRun}); !errors.Is(err, ErrNoRequest) {
		t.Errorf("deciding twice: %v, want ErrNoRequest", err)
	}
	// A Wait that starts after the decision still learns it (a call that
	// found the request with Find may get there late).
	if _, err := a.Wait(context.Background(), id); !errors.Is(err, ErrDenied) {
		t.Errorf("Wait after the denial: %v, want ErrDenied", err)
	}
	if _, err := a.Wait(context.Background(), "apr_unknown"); !errors.Is(err, ErrNoRequest) {
		t.Errorf("Wait on an unknown request: %v, want ErrNoRequest", err)
	}
	if len(a.Grants("r")) != 0 {
		t.Error("a denial made a grant")
	}
}

func TestWaitReturnsWhenContextEnds(t *testing.T) {
	a := New(Options{})
	id := a.Raise(toolCard("r", "E", "write", nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Wait(ctx, id); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
	if len(a.Pending()) != 1 {
		t.Error("an abandoned Wait resolved the request")
	}
}

func TestTimeoutDeniesAsApprovalTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		a := New(rec.options(Options{Timeout: 2 * time.Second}))
		start := time.Now()
		id := a.Raise(toolCard("r", "E", "write", nil))
		p := a.Pending()
		if len(p) != 1 || !p[0].Deadline.Equal(start.Add(2*time.Second)) {
			t.Fatalf("pending = %+v, want deadline %s", p, start.Add(2*time.Second))
		}
		_, err := a.Wait(context.Background(), id)
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Wait = %v, want ErrTimeout", err)
		}
		if waited := time.Since(start); waited != 2*time.Second {
			t.Errorf("timed out after %s, want 2s", waited)
		}
		if diff := cmp.Diff([]string{string(id) + " timeout"}, rec.deniedList()); diff != "" {
			t.Errorf("OnDenied (-want +got):\n%s", diff)
		}
		if err := a.Decide(id, Decision{Choice: ApproveRun}); !errors.Is(err, ErrNoRequest) {
			t.Errorf("approving after the timeout: %v, want ErrNoRequest", err)
		}
	})
}

func TestDecidedRequestDoesNotTimeOutLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		a := New(rec.options(Options{Timeout: time.Second}))
		g := grantFor(t, a, toolCard("r", "E", "write", []string{"write"}), Decision{Choice: ApproveRun})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if len(rec.deniedList()) != 0 || a.Check("r", "E", "write", nil) == nil {
			t.Errorf("after the deadline: denied %v, grant %s gone: %v", rec.deniedList(), g.ID, a.Check("r", "E", "write", nil) == nil)
		}
	})
}

func TestSubscribeEvents(t *testing.T) {
	rec := &recorder{}
	a := New(rec.options(Options{}))
	ch, cancel := a.Subscribe()
	id1 := a.Raise(toolCard("r", "E", "write", []string{"write"}))
	id2 := a.Raise(toolCard("r", "E", "drop", []string{"drop"}))
	if err := a.Decide(id1, Decision{Choice: ApproveOnce, By: "app"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Decide(id2, Decision{Choice: Deny, By: "cli"}); err != nil {
		t.Fatal(err)
	}
	cancel()
	cancel() // idempotent
	type ev struct {
		Kind    EventKind
		Request ids.RequestID
		Choice  Choice
	}
	var got []ev
	for e := range ch { // closed by cancel
		x := ev{Kind: e.Kind, Request: e.Request.ID}
		if e.Decision != nil {
			x.Choice = e.Decision.Choice
		}
		got = append(got, x)
	}
	want := []ev{{EventRaised, id1, ""}, {EventRaised, id2, ""}, {EventResolved, id1, ApproveOnce}, {EventResolved, id2, Deny}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// After cancel nothing is delivered, and raising does not block.
	a.Raise(toolCard("r", "E", "x", nil))
	if diff := cmp.Diff([]string{string(id2) + " denied"}, rec.deniedList()); diff != "" {
		t.Errorf("OnDenied (-want +got):\n%s", diff)
	}
	if len(rec.granted) != 1 || rec.granted[0].ExpiresWhen != ExpiresOnce || len(rec.requested) != 3 {
		t.Errorf("OnGranted %+v, OnRequested %v", rec.granted, rec.requested)
	}
}

func TestLateWaitForgetsOldDecisions(t *testing.T) {
	a := New(Options{})
	first := a.Raise(toolCard("r", "E", "w", []string{"w"}))
	if err := a.Decide(first, Decision{Choice: ApproveRun}); err != nil {
		t.Fatal(err)
	}
	for range maxDecided {
		if err := a.Decide(a.Raise(toolCard("r", "E", "w", nil)), Decision{Choice: Deny}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Wait(context.Background(), first); !errors.Is(err, ErrNoRequest) {
		t.Errorf("Wait on a request decided %d decisions ago: %v, want ErrNoRequest", maxDecided, err)
	}
}

func TestSlowSubscriberDoesNotBlock(t *testing.T) {
	a := New(Options{})
	_, cancel := a.Subscribe() // never read
	defer cancel()
	done := make(chan struct{})
	go func() {
		for range 200 {
			a.Raise(toolCard("r", "E", "w", nil))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Raise blocked on a subscriber that does not read")
	}
	if n := len(a.Pending()); n != 200 {
		t.Errorf("%d pending, want 200", n)
	}
}

// TestFindSharesADecisionOnlyWithTheCallShown: a call joins a pending
// request only when its card shows that very call (tool and arguments);
// another call, even of a tool in the card's scope, gets its own card.
func TestFindSharesADecisionOnlyWithTheCallShown(t *testing.T) {
	a := New(Options{})
	card := toolCard("r", "E", "write", []string{"write", "delete"}, "api")
	card.ArgsDigest = "sha256:staging"
	id := a.Raise(card)
	a.Raise(Card{AgentRun: "r", CurrentEpoch: "E", Identity: "sha256:x", CredentialScope: []string{"token"}})
	tests := []struct {
		name       string
		run        ids.RunID
		epoch      ids.EpochID
		tool, args string
		creds      []string
		want       ids.RequestID
	}{
		{"the call shown", "r", "E", "write", "sha256:staging", nil, id},
		{"the call shown, its credential", "r", "E", "write", "sha256:staging", []string{"api"}, id},
		{"same tool, other arguments", "r", "E", "write", "sha256:production", nil, ""},
		{"another tool of the scope", "r", "E", "delete", "sha256:staging", []string{"api"}, ""},
		{"wider credential scope", "r", "E", "write", "sha256:staging", []string{"api", "db"}, ""},
		{"other epoch", "r", "E2", "write", "sha256:staging", nil, ""},
		{"other run", "r2", "E", "write", "sha256:staging", nil, ""},
		{"identity requests are not shared with calls", "r", "E", "", "", []string{"token"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := a.Find(tt.run, tt.epoch, tt.tool, tt.creds, tt.args)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("Find = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

func TestPendingOldestFirst(t *testing.T) {
	base := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	n := 0
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		n++
		return base.Add(time.Duration(10-n) * time.Second) // each call earlier than the last
	}
	a := New(Options{Clock: clock, Timeout: time.Hour})
	want := []ids.RequestID{a.Raise(toolCard("r", "E", "a", nil)), a.Raise(toolCard("r", "E", "b", nil)), a.Raise(toolCard("r", "E", "c", nil))}
	var got []ids.RequestID
	for _, r := range a.Pending() {
		got = append(got, r.ID)
		if !r.Deadline.Equal(r.Created.Add(time.Hour)) {
			t.Errorf("request %s: deadline %s, created %s", r.ID, r.Deadline, r.Created)
		}
	}
	if diff := cmp.Diff([]ids.RequestID{want[2], want[1], want[0]}, got); diff != "" {
		t.Errorf("pending order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(toolCard("r", "E", "b", nil), a.Pending()[1].Card, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("card (-want +got):\n%s", diff)
	}
}

func TestGrantCovers(t *testing.T) {
	g := Grant{ToolScope: []string{"a", "b"}, CredentialScope: []string{"x"}}
	tests := []struct {
		tool  string
		creds []string
		want  bool
	}{
		{"a", nil, true},
		{"b", []string{"x"}, true},
		{"c", nil, false},
		{"a", []string{"y"}, false},
		{"", []string{"x"}, true}, // credentials only (identity checks)
		{"", nil, true},
	}
	for _, tt := range tests {
		if got := g.Covers(tt.tool, tt.creds); got != tt.want {
			t.Errorf("Covers(%q, %v) = %v, want %v", tt.tool, tt.creds, got, tt.want)
		}
	}
}

// TestHooksRunBeforeTheGrantIsUsable: the audit hook of a decision runs
// before a waiter learns it and before Check can use the grant, so that
// approval_granted always precedes the calls it lets go in the audit log.
func TestHooksRunBeforeTheGrantIsUsable(t *testing.T) {
	var a *Authority
	waited := make(chan struct{})
	var usableInHook, waiterDoneInHook bool
	a = New(Options{OnGranted: func(_ Request, g Grant) error {
		usableInHook = a.Check(g.AgentRun, g.ExecutionEpoch, "write", nil) != nil
		select {
		case <-waited:
			waiterDoneInHook = true
		case <-time.After(50 * time.Millisecond):
		}
		return nil
	}})
	id := a.Raise(toolCard("r", "E", "write", []string{"write"}))
	go func() {
		_, _ = a.Wait(context.Background(), id)
		close(waited)
	}()
	time.Sleep(10 * time.Millisecond) // let the waiter block
	if err := a.Decide(id, Decision{Choice: ApproveRun}); err != nil {
		t.Fatal(err)
	}
	<-waited
	if usableInHook || waiterDoneInHook {
		t.Errorf("during OnGranted: grant usable %v, waiter returned %v; want neither", usableInHook, waiterDoneInHook)
	}
	if a.Check("r", "E", "write", nil) == nil {
		t.Error("the grant is not usable after the decision")
	}
}

// TestWithdraw: a withdrawn request leaves Pending, its waiters get
// ErrWithdrawn (which is also ErrDenied), the audit hook hears why, and a
// person's denial is not a withdrawal.
func TestWithdraw(t *testing.T) {
	rec := &recorder{}
	a := New(rec.options(Options{}))
	id := a.Raise(toolCard("r", "E", "write", []string{"write"}))
	errc := make(chan error, 1)
	go func() { _, err := a.Wait(context.Background(), id); errc <- err }()
	if err := a.Withdraw(id, "the policy changed"); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrWithdrawn) || !errors.Is(err, ErrDenied) {
		t.Errorf("Wait on a withdrawn request: %v, want ErrWithdrawn (an ErrDenied)", err)
	}
	if p := a.Pending(); len(p) != 0 {
		t.Errorf("pending after Withdraw: %+v", p)
	}
	if err := a.Withdraw(id, "again"); !errors.Is(err, ErrNoRequest) {
		t.Errorf("second Withdraw: %v, want ErrNoRequest", err)
	}
	if diff := cmp.Diff([]string{string(id) + " withdrawn: the policy changed"}, rec.deniedList()); diff != "" {
		t.Errorf("OnDenied (-want +got):\n%s", diff)
	}
	denied := a.Raise(toolCard("r", "E", "write", []string{"write"}))
	if err := a.Decide(denied, Decision{Choice: Deny, By: "cli"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Wait(context.Background(), denied); !errors.Is(err, ErrDenied) || errors.Is(err, ErrWithdrawn) {
		t.Errorf("Wait on a denied request: %v, want ErrDenied, not ErrWithdrawn", err)
	}
}

// TestGrantExcludesDeniedTools: whatever the card's scope and the ticked
// tools, a tool that ToolDenied reports denied at the decision is never
// granted; once for a denied tool grants nothing.
func TestGrantExcludesDeniedTools(t *testing.T) {
	var mu sync.Mutex
	deniedNow := map[string]bool{}
	a := New(Options{ToolDenied: func(label, tool string) bool {
		mu.Lock()
		defer mu.Unlock()
		return label == "srv" && deniedNow[tool]
	}})
	card := toolCard("r", "E", "write", []string{"write", "delete", "drop"})
	mu.Lock()
	deniedNow["delete"] = true
	mu.Unlock()
	if g := grantFor(t, a, card, Decision{Choice: ApproveRun}); !slices.Equal(g.ToolScope, []string{"write", "drop"}) {
		t.Errorf("approve-run grant scope %v, want [write drop]", g.ToolScope)
	}
	if g := grantFor(t, a, card, Decision{Choice: ApproveRun, Tools: []string{"delete", "drop"}}); !slices.Equal(g.ToolScope, []string{"write", "drop"}) {
		t.Errorf("ticked grant scope %v, want [write drop] (the called tool, and drop)", g.ToolScope)
	}
	mu.Lock()
	deniedNow["write"] = true
	mu.Unlock()
	if g := grantFor(t, a, card, Decision{Choice: ApproveOnce}); len(g.ToolScope) != 0 {
		t.Errorf("once grant for a denied tool has scope %v, want none", g.ToolScope)
	}
	if a.Check("r", "E", "delete", nil) != nil {
		t.Error("delete, denied at every decision, is covered by a grant")
	}
}

// TestUnrecordedGrantIsNotMade: an approval the audit hook cannot record is
// turned into a denial: Decide says so, the waiter learns ErrUnrecorded, no
// grant exists, and the denial hook hears why.
func TestUnrecordedGrantIsNotMade(t *testing.T) {
	var denied []string
	a := New(Options{
		OnGranted: func(Request, Grant) error { return errors.New("disk full") },
		OnDenied:  func(_ Request, why string) { denied = append(denied, why) },
	})
	id := a.Raise(toolCard("r", "E", "write", []string{"write"}))
	errc := make(chan error, 1)
	go func() { _, err := a.Wait(context.Background(), id); errc <- err }()
	err := a.Decide(id, Decision{Choice: ApproveRun})
	if !errors.Is(err, ErrUnrecorded) || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Decide: %v, want ErrUnrecorded naming the cause", err)
	}
	if err := <-errc; !errors.Is(err, ErrUnrecorded) || !errors.Is(err, ErrDenied) {
		t.Errorf("Wait: %v, want ErrUnrecorded (an ErrDenied)", err)
	}
	if g := a.Grants("r"); len(g) != 0 || a.Check("r", "E", "write", nil) != nil {
		t.Errorf("grants after an unrecorded approval: %+v", g)
	}
	if !slices.Equal(denied, []string{"audit_unavailable"}) {
		t.Errorf("OnDenied heard %q", denied)
	}
}

// offered is the approve-policy catalog of the scope tests, in catalog
// order.
var offered = []string{"read_text_file", "write_file", "delete_file"}

// TestFirstCardProposesTheCalledToolOnly: the first card of a run ticks the
// called tool only; the others are offered unticked, and approving without
// ticks grants the called tool alone.
func TestFirstCardProposesTheCalledToolOnly(t *testing.T) {
	a := New(Options{})
	c := a.Propose(toolCard("r", "E1", "read_text_file", nil, "api"), offered)
	if diff := cmp.Diff([]string{"read_text_file"}, c.ToolScope); diff != "" {
		t.Errorf("proposed scope (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"write_file", "delete_file"}, c.OtherTools); diff != "" {
		t.Errorf("other tools (-want +got):\n%s", diff)
	}
	g := grantFor(t, a, c, Decision{Choice: ApproveRun, By: "cli"})
	if diff := cmp.Diff([]string{"read_text_file"}, g.ToolScope); diff != "" {
		t.Errorf("grant of a plain approve (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"api"}, g.CredentialScope); diff != "" {
		t.Errorf("the grant carries the call's credentials (-want +got):\n%s", diff)
	}
	for _, tool := range []string{"write_file", "delete_file"} {
		if a.Check("r", "E1", tool, nil) != nil {
			t.Errorf("%s is covered after approving a read_text_file card", tool)
		}
	}
	// A second card on the same epoch proposes its own call only, not
	// what was granted already.
	c = a.Propose(toolCard("r", "E1", "write_file", nil), offered)
	if diff := cmp.Diff([]string{"write_file"}, c.ToolScope); diff != "" {
		t.Errorf("second card's proposed scope (-want +got):\n%s", diff)
	}
	// A credential that asks on every use: its call alone, nothing to tick.
	ask := toolCard("r", "E1", "write_file", nil, "api")
	ask.AskEveryUse = true
	if c := a.Propose(ask, offered); !slices.Equal(c.ToolScope, []string{"write_file"}) || c.OtherTools != nil {
		t.Errorf("ask-every-use card: scope %v, other %v; want [write_file] and nothing else", c.ToolScope, c.OtherTools)
	}
}

// TestRebuildCardProposesThePreviousChoice: after a rebuild the first card
// ticks what the person chose for the previous epoch, minus the tools the
// new code lost; a tool the revision added is never ticked, even one the
// person had chosen under that name before; changed tools are marked.
func TestRebuildCardProposesThePreviousChoice(t *testing.T) {
	a := New(Options{})
	first := a.Propose(toolCard("r", "E1", "read_text_file", nil), []string{"read_text_file", "write_file", "move_file", "delete_file"})
	grantFor(t, a, first, Decision{Choice: ApproveRun, Tools: []string{"write_file", "move_file"}})
	// A once approval is no choice of scope for the run.
	once := a.Propose(toolCard("r", "E1", "delete_file", nil), []string{"read_text_file", "write_file", "move_file", "delete_file"})
	grantFor(t, a, once, Decision{Choice: ApproveOnce})

	// E2 lost move_file, changed write_file, added wipe_disk.
	card := toolCard("r", "E2", "read_text_file", nil)
	card.CatalogChanges = []catalog.Change{
		{Tool: "move_file", Kind: catalog.KindToolRemoved, Severity: catalog.Authority},
		{Tool: "write_file", Kind: catalog.KindPropertyAdded, Severity: catalog.Contract},
		{Tool: "read_text_file", Kind: catalog.KindDescriptionChanged, Severity: catalog.Cosmetic},
		{Tool: "wipe_disk", Kind: catalog.KindToolAdded, Severity: catalog.Authority},
	}
	c := a.Propose(card, []string{"read_text_file", "write_file", "delete_file", "wipe_disk"})
	want := Card{ToolScope: []string{"read_text_file", "write_file"}, OtherTools: []string{"delete_file", "wipe_disk"},
		NewTools: []string{"wipe_disk"}, ChangedTools: []string{"write_file"}}
	got := Card{ToolScope: c.ToolScope, OtherTools: c.OtherTools, NewTools: c.NewTools, ChangedTools: c.ChangedTools}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rebuild card scope (-want +got):\n%s", diff)
	}
	// The person narrows on E2: E3 proposes the narrowed choice.
	grantFor(t, a, c, Decision{Choice: ApproveRun, Tools: []string{"read_text_file"}})
	c = a.Propose(toolCard("r", "E3", "write_file", nil), []string{"read_text_file", "write_file", "delete_file", "wipe_disk"})
	if diff := cmp.Diff([]string{"read_text_file", "write_file"}, c.ToolScope); diff != "" {
		t.Errorf("E3 proposed scope after narrowing on E2 (-want +got):\n%s", diff)
	}
	// A tool chosen before, removed and now added again is a new tool.
	readd := toolCard("r", "E4", "write_file", nil)
	readd.CatalogChanges = []catalog.Change{{Tool: "read_text_file", Kind: catalog.KindToolAdded, Severity: catalog.Authority}}
	c = a.Propose(readd, []string{"read_text_file", "write_file"})
	if !slices.Equal(c.ToolScope, []string{"write_file"}) || !slices.Equal(c.NewTools, []string{"read_text_file"}) {
		t.Errorf("re-added tool: scope %v, new %v; want [write_file], new [read_text_file]", c.ToolScope, c.NewTools)
	}
	// Another run starts from nothing.
	if c := a.Propose(toolCard("r2", "E9", "read_text_file", nil), offered); !slices.Equal(c.ToolScope, []string{"read_text_file"}) {
		t.Errorf("another run's first card proposes %v", c.ToolScope)
	}
}

// TestSecondCallIsNotCoveredByTheFirstCard is the attack of a second call
// arriving while a card is open: its arguments differ, so it does not join
// the open card; deciding that card (for the whole run, every tool ticked)
// leaves the second call's own card pending, for the person to see.
func TestSecondCallIsNotCoveredByTheFirstCard(t *testing.T) {
	a := New(Options{})
	first := a.Propose(toolCard("r", "E", "deploy", nil), []string{"deploy", "status"})
	first.ArgsDigest = "sha256:staging"
	id1 := a.Raise(first)
	if _, ok := a.Find("r", "E", "deploy", nil, "sha256:production"); ok {
		t.Fatal("the second call joined the card of the first")
	}
	second := a.Propose(toolCard("r", "E", "deploy", nil), []string{"deploy", "status"})
	second.ArgsDigest = "sha256:production"
	id2 := a.Raise(second)
	if err := a.Decide(id1, Decision{Choice: ApproveRun, Tools: []string{"deploy", "status"}}); err != nil {
		t.Fatal(err)
	}
	if g, err := a.Wait(context.Background(), id1); err != nil || g == nil {
		t.Fatalf("first card: %+v, %v", g, err)
	}
	p := a.Pending()
	if len(p) != 1 || p[0].ID != id2 || p[0].Card.ArgsDigest != "sha256:production" {
		t.Fatalf("pending after deciding the first card = %+v, want the second call's own card %s", p, id2)
	}
	if gs := a.Grants("r"); len(gs) != 1 || gs[0].Request != id1 {
		t.Errorf("grants = %+v, want only the first card's", gs)
	}
}

// TestStaleCardOffersNoApproveOnce: the card of an authorization_stale
// refusal cannot be approved once (its call was refused already); approving
// it for the run allows the new code, and the request stays pending after
// the refused choice.
func TestStaleCardOffersNoApproveOnce(t *testing.T) {
	a := New(Options{})
	c := toolCard("r", "E2", "read", []string{"read"})
	c.Stale = true
	id := a.Raise(c)
	if err := a.Decide(id, Decision{Choice: ApproveOnce, By: "cli"}); !errors.Is(err, ErrStaleOnce) || !errors.Is(err, ErrBadChoice) {
		t.Fatalf("approve once of a stale card: %v, want ErrStaleOnce", err)
	}
	if len(a.Pending()) != 1 {
		t.Fatal("the refused choice resolved the request")
	}
	if err := a.Decide(id, Decision{Choice: ApproveRun, By: "cli"}); err != nil {
		t.Fatal(err)
	}
	if g, err := a.Wait(context.Background(), id); err != nil || !slices.Equal(g.ToolScope, []string{"read"}) || g.ExpiresWhen != ExpiresRunEnds {
		t.Errorf("approving the stale card for the run: %+v, %v; want a run grant of read", g, err)
	}
}

// TestEndedEpochWithdrawsItsRequests: the requests of an epoch that ended
// are withdrawn at once, with the reason, through OnWithdrawn (not as a
// person's denial); a request raised on it later is withdrawn as it is
// raised; Decide says it was withdrawn and why, and grants nothing.
func TestEndedEpochWithdrawsItsRequests(t *testing.T) {
	var mu sync.Mutex
	var withdrawn, denied []string
	a := New(Options{
		OnWithdrawn: func(r Request, why string) {
			mu.Lock()
			withdrawn = append(withdrawn, string(r.ID)+" "+why)
			mu.Unlock()
		},
		OnDenied: func(r Request, why string) { mu.Lock(); denied = append(denied, string(r.ID)+" "+why); mu.Unlock() },
	})
	onE1 := a.Raise(toolCard("r", "E1", "write", []string{"write"}))
	onE2 := a.Raise(toolCard("r", "E2", "write", []string{"write"}))
	otherRun := a.Raise(toolCard("r2", "E1", "write", []string{"write"}))
	launch := a.Raise(Card{AgentRun: "r", Identity: "sha256:x", CredentialScope: []string{"token"}})

	const why = "the server was replaced while the call waited (epoch E1 → E2)"
	if got := a.WithdrawEpoch("r", "E1", why); !slices.Equal(got, []ids.RequestID{onE1}) {
		t.Fatalf("WithdrawEpoch withdrew %v, want [%s]", got, onE1)
	}
	if _, err := a.Wait(context.Background(), onE1); !errors.Is(err, ErrWithdrawn) {
		t.Errorf("Wait on the withdrawn request: %v, want ErrWithdrawn", err)
	}
	var pending []ids.RequestID
	for _, r := range a.Pending() {
		pending = append(pending, r.ID)
	}
	if !slices.Equal(slices.Sorted(slices.Values(pending)), slices.Sorted(slices.Values([]ids.RequestID{onE2, otherRun, launch}))) {
		t.Errorf("pending = %v, want the requests of E2, of the other run and the launch", pending)
	}
	err := a.Decide(onE1, Decision{Choice: ApproveRun, By: "cli"})
	var re *ResolvedError
	if !errors.As(err, &re) || re.Outcome != "withdrawn" || !errors.Is(err, ErrNoRequest) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "nothing was granted") {
		t.Fatalf("Decide of the withdrawn request: %v, want a ResolvedError that says it was withdrawn and why", err)
	}
	if len(a.Grants("r")) != 0 {
		t.Errorf("grants after approving a withdrawn request: %+v", a.Grants("r"))
	}
	// Raised on the ended epoch after it ended (a race with the call):
	// withdrawn at once.
	late := a.Raise(toolCard("r", "E1", "read", []string{"read"}))
	if _, err := a.Wait(context.Background(), late); !errors.Is(err, ErrWithdrawn) {
		t.Errorf("a request raised on the ended epoch: %v, want ErrWithdrawn", err)
	}
	ws := a.Withdrawn("r")
	if len(ws) != 2 || ws[0].Request != onE1 || ws[0].Reason != why || ws[0].Tool != "write" || ws[0].Epoch != "E1" || ws[1].Request != late {
		t.Errorf("Withdrawn = %+v, want %s and %s with the reason", ws, onE1, late)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(withdrawn) != 2 || withdrawn[0] != string(onE1)+" "+why || len(denied) != 0 {
		t.Errorf("hooks: withdrawn %q, denied %q; want two withdrawals and no denial", withdrawn, denied)
	}
}

// TestDecideOfADecidedRequestSaysHow: Decide of a request decided already
// says how it ended.
func TestDecideOfADecidedRequestSaysHow(t *testing.T) {
	a := New(Options{})
	id := a.Raise(toolCard("r", "E", "write", []string{"write"}))
	if err := a.Decide(id, Decision{Choice: Deny, By: "app"}); err != nil {
		t.Fatal(err)
	}
	err := a.Decide(id, Decision{Choice: ApproveRun, By: "cli"})
	var re *ResolvedError
	if !errors.As(err, &re) || re.Outcome != "denied" || re.Why != "by app" {
		t.Errorf("Decide of a denied request: %v (%+v), want outcome denied by app", err, re)
	}
	if err := a.Decide("apr_unknown", Decision{Choice: Deny}); !errors.Is(err, ErrNoRequest) || errors.As(err, &re) {
		t.Errorf("Decide of an unknown request: %v, want plain ErrNoRequest", err)
	}
}

// TestServerRequestGrant: a grant of a server request card covers that
// kind on its epoch only, never a tool (even one named like the kind); once
// is spent by one request; an epoch change voids it.
func TestServerRequestGrant(t *testing.T) {
	a := New(Options{})
	card := func(epoch ids.EpochID) Card {
		return Card{AgentRun: "r", ServerLabel: "s", CurrentEpoch: epoch, ServerRequest: &ServerRequest{Kind: "sampling", Method: "sampling/createMessage"}}
	}
	id := a.Raise(card("E1"))
	if err := a.Decide(id, Decision{Choice: ApproveRun, By: "cli"}); err != nil {
		t.Fatal(err)
	}
	if a.Check("r", "E1", "sampling", nil) != nil || a.Check("r", "E1", "", nil) != nil {
		t.Error("a server request grant covers a tool")
	}
	if a.CheckServerRequest("r", "E1", "elicitation") != nil || a.CheckServerRequest("r", "E2", "sampling") != nil {
		t.Error("a sampling grant of E1 covers another kind or epoch")
	}
	for range 2 {
		if a.CheckServerRequest("r", "E1", "sampling") == nil {
			t.Fatal("the run grant does not cover a second sampling request of its epoch")
		}
	}
	a.VoidEpoch("r", "E2", "rebuild")
	if a.CheckServerRequest("r", "E1", "sampling") != nil {
		t.Error("the grant survived the epoch change")
	}
	id = a.Raise(card("E2"))
	if err := a.Decide(id, Decision{Choice: ApproveOnce, By: "cli"}); err != nil {
		t.Fatal(err)
	}
	if g := a.CheckServerRequest("r", "E2", "sampling"); g == nil || g.ExpiresWhen != ExpiresOnce || len(g.ToolScope) != 0 {
		t.Fatalf("once grant %+v", g)
	}
	if a.CheckServerRequest("r", "E2", "sampling") != nil {
		t.Error("a once grant served two requests")
	}
}

// TestGrantBindsTheContractsShown: a grant records, for each tool of its
// scope, the contract digest its card showed (and no entry for a tool it
// does not grant); CheckContract returns it only while covers accepts that
// digest, and neither returns nor consumes it otherwise; Outgrown names
// the grant the rewrite outgrew. A credential scope the card did not show
// is not covered either.
func TestGrantBindsTheContractsShown(t *testing.T) {
	a := New(Options{})
	card := toolCard("run", "E1", "write", []string{"write"}, "api")
	card.OtherTools = []string{"read"}
	card.ToolContracts = map[string]string{"write": "sha256:w1", "read": "sha256:r1"}
	g := grantFor(t, a, card, Decision{Choice: ApproveRun})
	if !cmp.Equal(g.Contracts, map[string]string{"write": "sha256:w1"}) {
		t.Fatalf("grant contracts %v, want write bound to sha256:w1 only", g.Contracts)
	}
	same := func(d string) bool { return d == "sha256:w1" }
	rewritten := func(d string) bool { return d == "sha256:w2" }
	if a.CheckContract("run", "E1", "write", []string{"api"}, "", same) == nil {
		t.Error("the grant does not cover the contract it was made for")
	}
	if a.CheckContract("run", "E1", "write", []string{"api"}, "", rewritten) != nil {
		t.Error("the grant covers a contract its card never showed")
	}
	if a.CheckContract("run", "E1", "write", []string{"api", "other"}, "", same) != nil {
		t.Error("the grant covers a credential scope its card never showed")
	}
	if o := a.Outgrown("run", "E1", "write", rewritten); o == nil || o.ID != g.ID {
		t.Errorf("Outgrown = %+v, want the grant %s", o, g.ID)
	}
	if o := a.Outgrown("run", "E1", "write", same); o != nil {
		t.Errorf("Outgrown names a grant that still covers write: %+v", o)
	}

	// A once grant a rewritten contract does not cover stays unspent.
	once := toolCard("run", "E1", "publish", []string{"publish"})
	once.ArgsDigest = "sha256:args"
	once.ToolContracts = map[string]string{"publish": "sha256:p1"}
	grantFor(t, a, once, Decision{Choice: ApproveOnce})
	if a.CheckContract("run", "E1", "publish", nil, "sha256:args", func(d string) bool { return d == "sha256:p2" }) != nil {
		t.Error("a once grant covers a rewritten contract")
	}
	if a.CheckContract("run", "E1", "publish", nil, "sha256:args", func(d string) bool { return d == "sha256:p1" }) == nil {
		t.Error("the once grant was spent by a call it did not cover")
	}
}
