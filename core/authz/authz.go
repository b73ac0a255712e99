// Package authz holds what a person approved: grants bound to an agent run,
// a server label and an execution epoch, and the approval requests that
// produce them (docs/DESIGN.md, "Authorization and credentials").
//
// A Grant covers a tool scope and a credential scope for one epoch of one
// agent run, until the run ends or for one call. An epoch change voids every
// grant of the old epoch before any credential is used; the voided grants
// are remembered so that a call prepared under them is refused as
// authorization_stale, naming both epochs, rather than as a first request.
//
// Approval requests carry a Card: everything the person needs to decide
// (agent, server, old and new epoch, identity digests that changed, the
// catalog diff, the arguments with the defaults omitted ones will take, the
// tool and credential scope). The Authority is the approval broker: the
// command line and the menu-bar app both watch its requests (Subscribe,
// Pending) and answer them (Decide). A request nobody answers within the
// timeout is denied as approval_timeout.
package authz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// Expiry values of Grant.ExpiresWhen.
const (
	ExpiresRunEnds = "agent-run-ends"
	ExpiresOnce    = "once"
)

// Grant is what a person approved (docs/DESIGN.md, "Authorization and credentials": {agentRun, serverLabel,
// executionEpoch, toolScope[], credentialScope[], issuedAt, expiresWhen}).
// Identity, when set, is the identity digest the grant approved for env
// credential injection at launch. Request names the approval request that
// produced it.
type Grant struct {
	ID              string    `json:"id"`
	AgentRun        string    `json:"agentRun"`
	ServerLabel     string    `json:"serverLabel"`
	ExecutionEpoch  string    `json:"executionEpoch"`
	ToolScope       []string  `json:"toolScope"`
	CredentialScope []string  `json:"credentialScope"`
	IssuedAt        time.Time `json:"issuedAt"`
	ExpiresWhen     string    `json:"expiresWhen"`
	Identity        string    `json:"identity,omitempty"`
	// ArgsDigest binds a grant approved once to the call its card showed:
	// only a call of the tool with these arguments may spend it.
	ArgsDigest string `json:"argsDigest,omitempty"`
	Request    string `json:"request"`
	Voided     string `json:"voided,omitempty"` // why it no longer holds
}

// Covers reports whether g allows tool (and every credential in creds).
func (g *Grant) Covers(tool string, creds []string) bool {
	if tool != "" && !slices.Contains(g.ToolScope, tool) {
		return false
	}
	for _, c := range creds {
		if !slices.Contains(g.CredentialScope, c) {
			return false
		}
	}
	return true
}

// Choice is a person's answer to an approval request.
type Choice string

// The choices of the approval card.
const (
	ApproveRun  Choice = "approve-run"  // Approve for this run
	ApproveOnce Choice = "approve-once" // Approve once
	Deny        Choice = "deny"
	timedOut    Choice = "timeout"
)

// Decision answers a request. Tools, for ApproveRun, is the subset of the
// card's tool scope the person ticked (nil: all of it).
type Decision struct {
	Choice Choice   `json:"choice"`
	Tools  []string `json:"tools,omitempty"`
	By     string   `json:"by,omitempty"` // "cli", "app", …
}

// Errors of Decide and Ask.
var (
	ErrNoRequest = errors.New("no such pending approval request")
	ErrDenied    = errors.New("approval denied")
	ErrTimeout   = errors.New("approval timed out")
	ErrBadChoice = errors.New("unknown choice")
	// ErrWithdrawn is what Wait returns for a request withdrawn by the
	// gateway rather than denied by a person (its call was cancelled, or
	// the tool policy changed while it waited); it wraps ErrDenied.
	ErrWithdrawn = fmt.Errorf("%w: the request was withdrawn", ErrDenied)
	// ErrUnrecorded is what Decide and Wait return for an approval the
	// audit log could not record (see Options.OnGranted); it wraps
	// ErrDenied: nothing was granted.
	ErrUnrecorded = fmt.Errorf("%w: the audit log could not record the approval", ErrDenied)
)

// withdrawnPrefix starts the Decision.By of a withdrawal (see Withdraw);
// unrecordedPrefix that of an approval the audit log could not record.
const (
	withdrawnPrefix  = "withdrawn"
	unrecordedPrefix = "audit_unavailable"
)

// Request is a pending approval request.
type Request struct {
	ID       string    `json:"id"`
	Card     Card      `json:"card"`
	Created  time.Time `json:"created"`
	Deadline time.Time `json:"deadline"`

	done     chan struct{}
	decision Decision
	grant    *Grant
}

// EventKind says what happened to a request.
type EventKind string

// Event kinds.
const (
	EventRaised   EventKind = "raised"
	EventResolved EventKind = "resolved"
)

// Event tells a subscriber (the CLI, the menu-bar app) about a request.
type Event struct {
	Kind     EventKind `json:"kind"`
	Request  Request   `json:"request"`
	Decision *Decision `json:"decision,omitempty"`
}

// Options configure an Authority.
type Options struct {
	// Timeout is how long a request waits for a person (default 120 s).
	Timeout time.Duration
	Clock   func() time.Time
	Logger  *slog.Logger
	// OnGranted and OnDenied are called (without locks) after a decision,
	// for the audit log. A grant OnGranted cannot record (it returns an
	// error) is not made: the request is denied instead, Decide returns
	// an error wrapping ErrUnrecorded and waiters get ErrUnrecorded, so
	// that no grant exists that the audit log never saw.
	OnRequested func(r Request)
	OnGranted   func(r Request, g Grant) error
	OnDenied    func(r Request, reason string)
	// ToolDenied reports whether tool of server label is denied by the
	// person's policy now; a grant never includes such a tool, whatever
	// the card's tool scope said when it was raised. Called without locks.
	ToolDenied func(label, tool string) bool
}

// Authority keeps grants and approval requests for every agent run of a
// daemon. It is safe for concurrent use.
type Authority struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	grants   map[string][]*Grant     // guarded by mu; run → live grants
	voided   map[string][]*Grant     // guarded by mu; run → grants voided by an epoch change
	requests map[string]*Request     // guarded by mu; pending requests by id
	decided  []*Request              // guarded by mu; the last maxDecided resolved requests, for a late Wait
	subs     map[chan Event]struct{} // guarded by mu
}

// New returns an Authority.
func New(o Options) *Authority {
	if o.Timeout <= 0 {
		o.Timeout = 120 * time.Second
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Authority{
		opts:     o,
		log:      log,
		grants:   map[string][]*Grant{},
		voided:   map[string][]*Grant{},
		requests: map[string]*Request{},
		subs:     map[chan Event]struct{}{},
	}
}

// Timeout is how long requests wait for a decision.
func (a *Authority) Timeout() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.opts.Timeout
}

// SetTimeout changes how long requests raised from now on wait for a
// decision (a configuration reloaded while the daemon runs); requests
// already pending keep their deadline.
func (a *Authority) SetTimeout(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.opts.Timeout = d
}

// Check returns a live grant of run on epoch covering tool and creds, or
// nil. It consumes a once grant it returns (use it for exactly one call).
// A once grant bound to a call's arguments is not returned (see CheckCall).
func (a *Authority) Check(run, epoch, tool string, creds []string) *Grant {
	return a.CheckCall(run, epoch, tool, creds, "")
}

// CheckCall is Check for a call whose arguments have digest args: a once
// grant bound to arguments (Grant.ArgsDigest) covers only a call with the
// same digest.
func (a *Authority) CheckCall(run, epoch, tool string, creds []string, args string) *Grant {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, g := range a.grants[run] {
		if g.ExpiresWhen == ExpiresOnce && g.ArgsDigest != "" && g.ArgsDigest != args {
			continue
		}
		if g.ExecutionEpoch == epoch && g.Covers(tool, creds) && g.Identity == "" {
			if g.ExpiresWhen == ExpiresOnce {
				a.grants[run] = slices.Delete(a.grants[run], i, i+1)
			}
			return g
		}
	}
	return nil
}

// Stale returns the grant of run that covered tool on an older epoch and
// was voided by an epoch change, when no live grant on epoch covers tool.
// It consumes nothing.
func (a *Authority) Stale(run, epoch, tool string) *Grant {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range a.grants[run] {
		if g.ExecutionEpoch == epoch && g.Identity == "" && g.Covers(tool, nil) {
			return nil
		}
	}
	for _, g := range slices.Backward(a.voided[run]) {
		if g.ExecutionEpoch != epoch && g.Covers(tool, nil) {
			return g
		}
	}
	return nil
}

// Consume removes the grant id of run (a once grant spent by its call). It
// reports whether the grant was still there: of several calls that waited
// on one request approved once, only the one that consumes it may go.
func (a *Authority) Consume(run, id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.grants[run])
	a.grants[run] = slices.DeleteFunc(a.grants[run], func(g *Grant) bool { return g.ID == id })
	return len(a.grants[run]) < n
}

// IdentityApproved reports whether run holds a grant for credential
// injection into the execution identity digest ident. A grant approved once
// was spent by the launch that waited for it, so it never counts here: a
// later launch of the same identity asks again.
func (a *Authority) IdentityApproved(run, ident string, creds []string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range a.grants[run] {
		if g.Identity == ident && g.ExpiresWhen != ExpiresOnce && g.Covers("", creds) {
			return true
		}
	}
	return false
}

// VoidEpoch voids every grant of run bound to an epoch other than current:
// called when a new epoch starts, before any credential reaches it. Identity
// grants (env credentials) survive: they are bound to measured digests and a
// relaunch of the very same identity keeps them.
func (a *Authority) VoidEpoch(run, current, why string) []Grant {
	a.mu.Lock()
	defer a.mu.Unlock()
	var kept []*Grant
	var voided []Grant
	for _, g := range a.grants[run] {
		if g.Identity == "" && g.ExecutionEpoch != current {
			g.Voided = why
			a.voided[run] = append(a.voided[run], g)
			voided = append(voided, *g)
			continue
		}
		kept = append(kept, g)
	}
	a.grants[run] = kept
	if n := len(a.voided[run]); n > 32 {
		a.voided[run] = a.voided[run][n-32:]
	}
	return voided
}

// EndRun expires every grant of run and withdraws its pending requests
// (their waiters get ErrWithdrawn: nobody denied them).
func (a *Authority) EndRun(run string) {
	a.mu.Lock()
	delete(a.grants, run)
	delete(a.voided, run)
	var ids []string
	for id, r := range a.requests {
		if r.Card.AgentRun == run {
			ids = append(ids, id)
		}
	}
	a.mu.Unlock()
	for _, id := range ids {
		_ = a.Withdraw(id, "the agent run ended")
	}
}

// Grants returns copies of the live grants of run.
func (a *Authority) Grants(run string) []Grant {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Grant, 0, len(a.grants[run]))
	for _, g := range a.grants[run] {
		out = append(out, *g)
	}
	return out
}

// Pending returns the pending requests, oldest first.
func (a *Authority) Pending() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Request, 0, len(a.requests))
	for _, r := range a.requests {
		out = append(out, r.snapshot())
	}
	slices.SortFunc(out, func(x, y Request) int { return x.Created.Compare(y.Created) })
	return out
}

func (r *Request) snapshot() Request {
	return Request{ID: r.ID, Card: r.Card, Created: r.Created, Deadline: r.Deadline}
}

// Subscribe delivers request events from now on until cancel is called.
// A subscriber that does not keep up loses events rather than blocking the
// gateway; Pending gives the full picture at any time.
func (a *Authority) Subscribe() (<-chan Event, func()) {
	ch := make(chan Event, 64)
	a.mu.Lock()
	a.subs[ch] = struct{}{}
	a.mu.Unlock()
	return ch, func() {
		a.mu.Lock()
		if _, ok := a.subs[ch]; ok {
			delete(a.subs, ch)
			close(ch)
		}
		a.mu.Unlock()
	}
}

func (a *Authority) publishLocked(ev Event) {
	for ch := range a.subs {
		select {
		case ch <- ev:
		default:
			a.log.Warn("approval event subscriber is behind; event dropped for it", "kind", ev.Kind, "request", ev.Request.ID)
		}
	}
}

// Find returns the pending request of run on epoch whose tool scope covers
// tool, if any, so that calls share one decision per run and epoch.
func (a *Authority) Find(run, epoch, tool string, creds []string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, r := range a.requests {
		c := r.Card
		if c.AgentRun == run && c.CurrentEpoch == epoch && c.Identity == "" &&
			(tool == "" || slices.Contains(c.ToolScope, tool)) && containsAll(c.CredentialScope, creds) {
			return id, true
		}
	}
	return "", false
}

func containsAll(set, items []string) bool {
	for _, it := range items {
		if !slices.Contains(set, it) {
			return false
		}
	}
	return true
}

// Raise opens an approval request for card and returns its id. The request
// is denied as a timeout when nobody decides before the deadline.
func (a *Authority) Raise(card Card) string {
	now, timeout := a.opts.Clock(), a.Timeout()
	r := &Request{
		ID:       "apr_" + ulid.Make().String(),
		Card:     card,
		Created:  now,
		Deadline: now.Add(timeout),
		done:     make(chan struct{}),
	}
	a.mu.Lock()
	a.requests[r.ID] = r
	a.publishLocked(Event{Kind: EventRaised, Request: r.snapshot()})
	a.mu.Unlock()
	a.log.Info("approval requested", "request", r.ID, "run", card.AgentRun, "server", card.ServerLabel, "epoch", card.CurrentEpoch, "tools", card.ToolScope)
	if a.opts.OnRequested != nil {
		a.opts.OnRequested(r.snapshot())
	}
	time.AfterFunc(timeout, func() { _ = a.resolve(r.ID, Decision{Choice: timedOut, By: "timeout"}) })
	return r.ID
}

// maxDecided is how many resolved requests Wait still knows: a call that
// found a pending request (Find) may start waiting only after a person
// decided it.
const maxDecided = 256

// Wait blocks until request id is decided or ctx ends. It returns the grant
// made (nil with ErrDenied or ErrTimeout otherwise). A request decided
// before Wait was called gives its outcome as well, as long as it is among
// the last 256 decided; an unknown or forgotten one gives ErrNoRequest.
func (a *Authority) Wait(ctx context.Context, id string) (*Grant, error) {
	a.mu.Lock()
	r, ok := a.requests[id]
	for i := len(a.decided) - 1; !ok && i >= 0; i-- {
		r, ok = a.decided[i], a.decided[i].ID == id
	}
	a.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNoRequest, id)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	switch r.decision.Choice {
	case ApproveRun, ApproveOnce:
		return r.grant, nil
	case timedOut:
		return nil, ErrTimeout
	}
	if strings.HasPrefix(r.decision.By, withdrawnPrefix) {
		return nil, ErrWithdrawn
	}
	if strings.HasPrefix(r.decision.By, unrecordedPrefix) {
		return nil, ErrUnrecorded
	}
	return nil, ErrDenied
}

// CardOf returns the card of request id, pending or among the last
// decided ones.
func (a *Authority) CardOf(id string) (Card, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.requests[id]; ok {
		return r.Card, true
	}
	for _, r := range slices.Backward(a.decided) {
		if r.ID == id {
			return r.Card, true
		}
	}
	return Card{}, false
}

// Withdraw denies pending request id on the gateway's behalf, because no
// call needs it any more (why says what happened): it leaves Pending and
// the approval window, and its waiters get ErrWithdrawn.
func (a *Authority) Withdraw(id, why string) error {
	return a.resolve(id, Decision{Choice: Deny, By: withdrawnPrefix + ": " + why})
}

// Decide answers a pending request (from the CLI or the app).
func (a *Authority) Decide(id string, d Decision) error {
	switch d.Choice {
	case ApproveRun, ApproveOnce, Deny:
	default:
		return fmt.Errorf("%w %q (approve-run, approve-once, deny)", ErrBadChoice, d.Choice)
	}
	return a.resolve(id, d)
}

func (a *Authority) resolve(id string, d Decision) error {
	// The tools denied now are looked up before the lock is taken (the
	// lookup may read the configuration file).
	var denied []string
	if (d.Choice == ApproveRun || d.Choice == ApproveOnce) && a.opts.ToolDenied != nil {
		a.mu.Lock()
		r, ok := a.requests[id]
		var c Card
		if ok {
			c = r.Card
		}
		a.mu.Unlock()
		for _, t := range c.ToolScope {
			if a.opts.ToolDenied(c.ServerLabel, t) {
				denied = append(denied, t)
			}
		}
		if c.Tool != "" && !slices.Contains(c.ToolScope, c.Tool) && a.opts.ToolDenied(c.ServerLabel, c.Tool) {
			denied = append(denied, c.Tool)
		}
	}
	a.mu.Lock()
	r, ok := a.requests[id]
	if !ok {
		a.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNoRequest, id)
	}
	delete(a.requests, id)
	if a.decided = append(a.decided, r); len(a.decided) > maxDecided {
		a.decided = slices.Delete(a.decided, 0, len(a.decided)-maxDecided)
	}
	r.decision = d
	var g *Grant
	if d.Choice == ApproveRun || d.Choice == ApproveOnce {
		c := r.Card
		tools := c.ToolScope
		if d.Choice == ApproveRun && d.Tools != nil {
			tools = intersect(c.ToolScope, d.Tools)
		}
		exp, argsDigest := ExpiresRunEnds, ""
		// A credential that asks on every use is never approved for the
		// run: whatever the choice, the grant serves this one call or
		// launch.
		if d.Choice == ApproveOnce || c.AskEveryUse {
			exp = ExpiresOnce
			if c.Tool != "" {
				tools, argsDigest = []string{c.Tool}, c.ArgsDigest
			}
		}
		g = &Grant{
			ID: "grt_" + ulid.Make().String(), AgentRun: c.AgentRun, ServerLabel: c.ServerLabel,
			ExecutionEpoch: c.CurrentEpoch, ToolScope: tools, CredentialScope: c.CredentialScope,
			IssuedAt: a.opts.Clock(), ExpiresWhen: exp, Identity: c.Identity, Request: id, ArgsDigest: argsDigest,
		}
		if c.Identity != "" {
			g.ToolScope = nil
		}
		// A tool denied by the person's policy is never granted, even
		// if it was in the card's scope when the request was raised.
		g.ToolScope = slices.DeleteFunc(slices.Clone(g.ToolScope), func(t string) bool { return slices.Contains(denied, t) })
		r.grant = g
	}
	a.mu.Unlock()

	// The hooks (the audit log's approval_granted / approval_denied) run
	// before the grant can be used and before waiters learn the decision,
	// so that the record of a decision always precedes the calls it let go.
	var unrecorded error
	if g != nil && a.opts.OnGranted != nil {
		if err := a.opts.OnGranted(r.snapshot(), *g); err != nil {
			// Fail closed: a grant the audit log never saw is not made.
			unrecorded = err
			a.log.Error("approval not granted: the audit log cannot record it", "request", id, "err", err)
			a.mu.Lock()
			r.grant, r.decision = nil, Decision{Choice: Deny, By: unrecordedPrefix + ": " + err.Error()}
			a.mu.Unlock()
			g = nil
			if a.opts.OnDenied != nil {
				a.opts.OnDenied(r.snapshot(), unrecordedPrefix)
			}
		}
	}
	if g != nil {
		a.log.Info("approval granted", "request", id, "grant", g.ID, "expires", g.ExpiresWhen, "tools", g.ToolScope)
	} else if unrecorded == nil {
		reason := "denied"
		if d.Choice == timedOut {
			reason = "timeout"
		} else if d.By != "" && d.By != "cli" && d.By != "app" {
			reason = d.By
		}
		a.log.Info("approval denied", "request", id, "reason", reason)
		if a.opts.OnDenied != nil {
			a.opts.OnDenied(r.snapshot(), reason)
		}
	}
	a.mu.Lock()
	if g != nil {
		a.grants[g.AgentRun] = append(a.grants[g.AgentRun], g)
	}
	close(r.done)
	dd := r.decision
	a.publishLocked(Event{Kind: EventResolved, Request: r.snapshot(), Decision: &dd})
	a.mu.Unlock()
	if unrecorded != nil {
		return fmt.Errorf("%w (%v); request %s is denied", ErrUnrecorded, unrecorded, id)
	}
	return nil
}

func intersect(scope, chosen []string) []string {
	var out []string
	for _, t := range scope {
		if slices.Contains(chosen, t) {
			out = append(out, t)
		}
	}
	return out
}
