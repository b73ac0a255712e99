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
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/ids"
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
	ID              ids.GrantID `json:"id"`
	AgentRun        ids.RunID   `json:"agentRun"`
	ServerLabel     string      `json:"serverLabel"`
	ExecutionEpoch  ids.EpochID `json:"executionEpoch"`
	ToolScope       []string    `json:"toolScope"`
	CredentialScope []string    `json:"credentialScope"`
	IssuedAt        time.Time   `json:"issuedAt"`
	ExpiresWhen     string      `json:"expiresWhen"`
	Identity        string      `json:"identity,omitempty"`
	// ArgsDigest binds a grant approved once to the call its card showed:
	// only a call of the tool with these arguments may spend it.
	ArgsDigest string `json:"argsDigest,omitempty"`
	// ServerRequest, when set, is the kind of server request
	// (config.RequestSampling…) the grant lets through to the agent on its
	// epoch; such a grant covers no tool.
	ServerRequest string `json:"serverRequest,omitempty"`
	// Contracts binds each tool of ToolScope to the contract its card
	// showed: tool name → digest of the tool as the catalog offered it
	// (Card.ToolContracts). A tool the server rewrote since, in a way that
	// widens what a call may do, is no longer covered (see CheckContract);
	// a tool without an entry was granted while no catalog was known.
	Contracts map[string]string `json:"toolContracts,omitempty"`
	Request   ids.RequestID     `json:"request"`
	Voided    string            `json:"voided,omitempty"` // why it no longer holds
}

// Contract is the digest of the contract of tool that g was granted for,
// "" when g recorded none.
func (g *Grant) Contract(tool string) string { return g.Contracts[tool] }

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
	// ApproveCode approves as ApproveRun does, and also this code for
	// every run of the card's agent program: a later card of such a run
	// whose epoch runs the same code (Card.Code), for tools of the scope
	// with the contracts shown, is granted without asking. New code asks
	// again, and drops the approval.
	ApproveCode Choice = "approve-code"
	Deny        Choice = "deny"
	timedOut    Choice = "timeout"
)

// Decision answers a request. Tools, for ApproveRun, are the tools the
// person ticked, from the card's ToolScope and OtherTools (nil: the card's
// ToolScope, what it proposed); the called tool is always part of a run
// approval (the call waits for it). A tool the card did not show is
// refused (ErrNotOnCard): a grant covers what the person saw.
type Decision struct {
	Choice Choice   `json:"choice"`
	Tools  []string `json:"tools,omitempty"`
	// Runs are the agent runs of the card the decision answers (nil:
	// every run the card shows). A run left out stays held on a request
	// of its own; a run the card does not show is refused
	// (ErrRunNotOnCard).
	Runs []ids.RunID `json:"runs,omitempty"`
	By   string      `json:"by,omitempty"` // "cli", "app", …
	// Decider is who decided, for the audit log (Request.Decider in
	// Options.OnGranted); nil when the caller did not say.
	Decider *audit.Decider `json:"-"`
}

// Errors of Decide and Ask.
var (
	ErrNoRequest = errors.New("no such pending approval request")
	ErrDenied    = errors.New("approval denied")
	ErrTimeout   = errors.New("approval timed out")
	ErrBadChoice = errors.New("unknown choice")
	// ErrNotOnCard is what Decide returns for a decision that names a tool
	// the card did not show; the request stays pending.
	ErrNotOnCard = errors.New("the tool is not on the approval card")
	// ErrRunNotOnCard is what Decide returns for a decision that names an
	// agent run the card does not decide; the request stays pending.
	ErrRunNotOnCard = errors.New("the agent run is not on the approval card")
	// ErrStaleOnce is what Decide returns for "approve once" on a card
	// raised with an authorization_stale refusal (Card.Stale): its call
	// was refused already, so there is no call to approve once; the
	// request stays pending.
	ErrStaleOnce = fmt.Errorf("%w: the call of this card was refused already (authorization_stale); approve for this run to allow the new code, or deny", ErrBadChoice)
	// ErrWithdrawn is what Wait returns for a request withdrawn by the
	// gateway rather than denied by a person (its call was cancelled, or
	// the tool policy changed while it waited); it wraps ErrDenied.
	ErrWithdrawn = fmt.Errorf("%w: the request was withdrawn", ErrDenied)
	// ErrUnrecorded is what Decide and Wait return for an approval the
	// audit log could not record (see Options.OnGranted); it wraps
	// ErrDenied: nothing was granted.
	ErrUnrecorded = fmt.Errorf("%w: the audit log could not record the approval", ErrDenied)
)

// ResolvedError is what Decide returns for a request that is no longer
// pending but still remembered: it says how it ended (Outcome: approved,
// denied, timeout, withdrawn, audit_unavailable) and why. It matches
// ErrNoRequest.
type ResolvedError struct {
	ID      ids.RequestID
	Outcome string
	Why     string // the withdrawal's reason, or who decided
}

func (e *ResolvedError) Error() string {
	switch e.Outcome {
	case "withdrawn":
		return fmt.Sprintf("approval request %s was withdrawn (%s); nothing was granted", e.ID, e.Why)
	case "timeout":
		return fmt.Sprintf("approval request %s timed out before anyone decided it; nothing was granted", e.ID)
	case "audit_unavailable":
		return fmt.Sprintf("approval request %s was denied: the audit log could not record its approval; nothing was granted", e.ID)
	}
	return fmt.Sprintf("approval request %s was %s already (%s)", e.ID, e.Outcome, e.Why)
}

// Is makes a ResolvedError match ErrNoRequest.
func (e *ResolvedError) Is(target error) bool { return target == ErrNoRequest }

// Withdrawal is a request withdrawn by the gateway, as status shows it.
type Withdrawal struct {
	Request ids.RequestID `json:"request"`
	Tool    string        `json:"tool,omitempty"`
	Epoch   ids.EpochID   `json:"epoch,omitempty"`
	Reason  string        `json:"reason"`
	At      time.Time     `json:"at"`
}

// withdrawnPrefix starts the Decision.By of a withdrawal (see Withdraw);
// unrecordedPrefix that of an approval the audit log could not record.
const (
	withdrawnPrefix  = "withdrawn"
	unrecordedPrefix = "audit_unavailable"
)

// Request is a pending approval request.
type Request struct {
	ID       ids.RequestID `json:"id"`
	Card     Card          `json:"card"`
	Created  time.Time     `json:"created"`
	Deadline time.Time     `json:"deadline"`
	// DecidedBy says who resolved a request that is no longer pending
	// ("cli", "app", "timeout", "withdrawn: why"…); empty while pending.
	DecidedBy string `json:"decidedBy,omitempty"`
	// Decider is the Decision's, for the hooks (Options.OnGranted).
	Decider *audit.Decider `json:"-"`

	done     chan struct{}
	decision Decision
	grant    *Grant                      // the grant of the card's own run
	grants   map[ids.RunID]*Grant        // run → its grant
	moved    map[ids.RunID]ids.RequestID // run → the request its call waits on now (a fold or a run left out)
	quiet    bool                        // granted under a standing approval: never shown to anyone
	resolved time.Time
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
	//
	// OnWithdrawn is called instead of OnDenied for a request withdrawn by
	// the gateway (nobody decided it: its epoch ended, its call went away);
	// without it, OnDenied is called with reason "withdrawn: why".
	OnRequested func(r Request)
	OnGranted   func(r Request, g Grant) error
	OnDenied    func(r Request, reason string)
	OnWithdrawn func(r Request, why string)
	// OnStanding is called (without locks) before a standing approval
	// (ApproveCode) is kept; when it returns an error (it could not be
	// recorded) none is kept: the decision's grants stand, later runs are
	// asked. OnStandingEnded is called (without locks) when one ends:
	// revoked (RevokeStanding), dropped for new code or for room, why
	// says which.
	OnStanding      func(st StandingApproval) error
	OnStandingEnded func(st StandingApproval, why string)
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
	grants   map[ids.RunID][]*Grant     // guarded by mu; run → live grants
	voided   map[ids.RunID][]*Grant     // guarded by mu; run → grants voided by an epoch change
	requests map[ids.RequestID]*Request // guarded by mu; pending requests by id
	chosen   map[ids.RunID]chosenScope  // guarded by mu; run → the tool scope the person last chose for the run
	ended    map[ids.RunID][]endedEpoch // guarded by mu; run → epochs that ended (requests raised on them are withdrawn)
	decided  []*Request                 // guarded by mu; the last maxDecided resolved requests, for a late Wait
	subs     map[chan Event]struct{}    // guarded by mu
	standing []StandingApproval         // guarded by mu; "this code, for every run of AGENT"
	// superseded is, per server and agent program, the standing approval
	// that new code ended (the reason of the cards for the new code says
	// so). Guarded by mu.
	superseded map[[2]string]StandingApproval
}

// MaxStanding is how many standing approvals are kept; granting one more
// ends the oldest.
const MaxStanding = 32

// StandingApproval is a person's ApproveCode: the tools (with the
// contracts shown) of server ServerLabel that every run of agent program
// AgentExe may call while its epoch runs Code. It is bound to the code:
// a card for other code of the same server and program ends it.
type StandingApproval struct {
	// ID is the approval request the person approved with --code.
	ID          ids.RequestID     `json:"id"`
	ServerLabel string            `json:"serverLabel"`
	AgentExe    string            `json:"agentExe"`
	Code        string            `json:"code"`
	Tools       []string          `json:"tools"`
	Credentials []string          `json:"credentials,omitempty"`
	Contracts   map[string]string `json:"contracts,omitempty"`
	Granted     time.Time         `json:"granted"`
	Decider     *audit.Decider    `json:"decider,omitempty"`
}

func (st StandingApproval) clone() StandingApproval {
	st.Tools, st.Credentials, st.Contracts = slices.Clone(st.Tools), slices.Clone(st.Credentials), maps.Clone(st.Contracts)
	return st
}

// Standing returns the standing approvals kept, oldest first.
func (a *Authority) Standing() []StandingApproval {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]StandingApproval, 0, len(a.standing))
	for _, st := range a.standing {
		out = append(out, st.clone())
	}
	return out
}

// RestoreStanding makes list the standing approvals (a daemon's start:
// those it kept and checked), the last MaxStanding of them; nothing is
// reported to OnStanding.
func (a *Authority) RestoreStanding(list []StandingApproval) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.standing = nil
	for _, st := range list[max(0, len(list)-MaxStanding):] {
		a.standing = append(a.standing, st.clone())
	}
}

// ErrNoStanding is returned by RevokeStanding for an id no standing
// approval has.
var ErrNoStanding = errors.New("no standing approval")

// RevokeStanding ends the standing approval of request id: later runs are
// asked again (grants it made already stand until their runs end or their
// code changes). OnStandingEnded is called with why.
func (a *Authority) RevokeStanding(id ids.RequestID, why string) (StandingApproval, error) {
	a.mu.Lock()
	i := slices.IndexFunc(a.standing, func(st StandingApproval) bool { return st.ID == id })
	if i < 0 {
		a.mu.Unlock()
		return StandingApproval{}, fmt.Errorf("%w %s", ErrNoStanding, id)
	}
	st := a.standing[i]
	a.standing = slices.Delete(a.standing, i, i+1)
	a.mu.Unlock()
	a.log.Info("standing approval revoked", "request", id, "why", why)
	if a.opts.OnStandingEnded != nil {
		a.opts.OnStandingEnded(st.clone(), why)
	}
	return st.clone(), nil
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
		grants:   map[ids.RunID][]*Grant{},
		voided:   map[ids.RunID][]*Grant{},
		requests: map[ids.RequestID]*Request{},
		chosen:   map[ids.RunID]chosenScope{},
		ended:    map[ids.RunID][]endedEpoch{},
		subs:     map[chan Event]struct{}{},
	}
}

// chosenScope is the tool scope a person chose for one epoch of a run (the
// union of the run approvals given on it).
type chosenScope struct {
	epoch ids.EpochID
	tools []string
}

// endedEpoch is an epoch of a run that ended, and why.
type endedEpoch struct {
	epoch ids.EpochID
	why   string
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
func (a *Authority) Check(run ids.RunID, epoch ids.EpochID, tool string, creds []string) *Grant {
	return a.CheckCall(run, epoch, tool, creds, "")
}

// CheckCall is Check for a call whose arguments have digest args: a once
// grant bound to arguments (Grant.ArgsDigest) covers only a call with the
// same digest.
func (a *Authority) CheckCall(run ids.RunID, epoch ids.EpochID, tool string, creds []string, args string) *Grant {
	return a.CheckContract(run, epoch, tool, creds, args, nil)
}

// CheckContract is CheckCall for a tool whose contract may have changed
// since it was granted: covers says whether the contract a grant was made
// for (its digest, Grant.Contract; "" when it recorded none) still covers
// the tool as offered now, and a grant it rejects is neither returned nor
// consumed. nil covers every contract. covers is called with the
// Authority's lock held: it must not call the Authority.
func (a *Authority) CheckContract(run ids.RunID, epoch ids.EpochID, tool string, creds []string, args string, covers func(granted string) bool) *Grant {
	return a.take(run, func(g *Grant) bool { return g.CoversCall(epoch, tool, creds, args, covers) })
}

// CoversCall reports whether g, a live grant, lets a call of tool on epoch
// go with creds, its arguments of digest args, the tool's contract judged
// by covers (see CheckContract). It consumes nothing.
func (g *Grant) CoversCall(epoch ids.EpochID, tool string, creds []string, args string, covers func(granted string) bool) bool {
	if g.ExpiresWhen == ExpiresOnce && g.ArgsDigest != "" && g.ArgsDigest != args {
		return false
	}
	return g.ExecutionEpoch == epoch && g.Covers(tool, creds) && g.Identity == "" && g.ServerRequest == "" &&
		(covers == nil || covers(g.Contract(tool)))
}

// Outgrown returns the newest live grant of run on epoch that names tool
// but whose contract for it covers rejects (see CheckContract), nil when
// there is none: the grant a person gave for a contract the server has
// since rewritten. It consumes nothing.
func (a *Authority) Outgrown(run ids.RunID, epoch ids.EpochID, tool string, covers func(granted string) bool) *Grant {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range slices.Backward(a.grants[run]) {
		if g.ExecutionEpoch == epoch && g.Identity == "" && g.ServerRequest == "" && slices.Contains(g.ToolScope, tool) && !covers(g.Contract(tool)) {
			c := *g
			return &c
		}
	}
	return nil
}

// take returns the first live grant of run that match accepts, and
// consumes it when it is a once grant; nil when none does.
func (a *Authority) take(run ids.RunID, match func(*Grant) bool) *Grant {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, g := range a.grants[run] {
		if match(g) {
			if g.ExpiresWhen == ExpiresOnce {
				a.grants[run] = slices.Delete(a.grants[run], i, i+1)
			}
			return g
		}
	}
	return nil
}

// CheckServerRequest returns a live grant of run on epoch that lets the
// server's requests of kind (config.RequestSampling…) through, or nil; it
// consumes a once grant it returns.
func (a *Authority) CheckServerRequest(run ids.RunID, epoch ids.EpochID, kind string) *Grant {
	return a.take(run, func(g *Grant) bool {
		return g.ExecutionEpoch == epoch && g.ServerRequest == kind && kind != ""
	})
}

// Stale returns the grant of run that covered tool on an older epoch and
// was voided by an epoch change, when no live grant on epoch covers tool.
// It consumes nothing.
func (a *Authority) Stale(run ids.RunID, epoch ids.EpochID, tool string) *Grant {
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
func (a *Authority) Consume(run ids.RunID, id ids.GrantID) bool {
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
func (a *Authority) IdentityApproved(run ids.RunID, ident string, creds []string) bool {
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
func (a *Authority) VoidEpoch(run ids.RunID, current ids.EpochID, why string) []Grant {
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
func (a *Authority) EndRun(run ids.RunID) {
	a.mu.Lock()
	delete(a.grants, run)
	delete(a.voided, run)
	delete(a.chosen, run)
	delete(a.ended, run)
	var reqs []ids.RequestID
	for id, r := range a.requests {
		if _, ok := r.Card.Run(run); ok {
			reqs = append(reqs, id)
		}
	}
	a.mu.Unlock()
	for _, id := range reqs {
		_ = a.WithdrawRun(id, run, "the agent run ended")
	}
}

// Grants returns copies of the live grants of run.
func (a *Authority) Grants(run ids.RunID) []Grant {
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
	return Request{ID: r.ID, Card: r.Card, Created: r.Created, Deadline: r.Deadline, DecidedBy: r.decision.By, Decider: r.decision.Decider}
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

// Find returns the pending request of run on epoch whose card shows this
// very call: tool with arguments of digest args (and every credential of
// creds), if any. Only such calls share a decision: a call that arrives
// while a card for another call is open gets its own card, so no call runs
// under a decision whose card did not show it (docs/DESIGN.md, "Authorization
// and credentials"). Cards never change once raised.
func (a *Authority) Find(run ids.RunID, epoch ids.EpochID, tool string, creds []string, args string) (ids.RequestID, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, r := range a.requests {
		c := r.Card
		if c.Identity != "" || !containsAll(c.CredentialScope, creds) {
			continue
		}
		for _, rc := range c.Runs() {
			if rc.AgentRun == run && rc.CurrentEpoch == epoch && rc.Tool == tool && rc.ArgsDigest == args {
				return id, true
			}
		}
	}
	return "", false
}

// Propose fills in the tool scope of card c, a card for a call on an epoch
// of a run, given offered, the tools of the current catalog revision that
// need approval (catalog order). ToolScope becomes the called tool, plus,
// on the first card of an epoch after the person chose a scope for an
// earlier epoch of the run, the tools of that choice the new code still
// offers; a tool the revision added (Card.CatalogChanges) is never
// proposed. The other offered tools go to OtherTools, unticked. NewTools
// and ChangedTools are taken from CatalogChanges. A card whose credential
// asks on every use proposes the called tool alone, with nothing else to
// tick: its approval serves one call.
func (a *Authority) Propose(c Card, offered []string) Card {
	var added, changed []string
	for _, ch := range c.CatalogChanges {
		switch {
		case ch.Kind == catalog.KindToolAdded || ch.Kind == catalog.KindToolRenamed:
			added = appendNew(added, ch.Tool)
		case ch.Kind == catalog.KindToolRemoved:
		case ch.Severity == catalog.Contract || ch.Severity == catalog.Authority:
			changed = appendNew(changed, ch.Tool)
		}
	}
	changed = slices.DeleteFunc(changed, func(t string) bool { return slices.Contains(added, t) })
	keep := func(ts []string) []string {
		var out []string
		for _, t := range ts {
			if slices.Contains(offered, t) || t == c.Tool {
				out = append(out, t)
			}
		}
		return out
	}
	c.NewTools, c.ChangedTools = keep(added), keep(changed)
	c.ToolScope, c.OtherTools = nil, nil
	if c.Tool != "" && !slices.Contains(offered, c.Tool) {
		c.ToolScope = []string{c.Tool}
	}
	if c.AskEveryUse {
		c.ToolScope = []string{c.Tool}
		return c
	}
	a.mu.Lock()
	prior, ok := a.chosen[c.AgentRun]
	a.mu.Unlock()
	if !ok || prior.epoch == c.CurrentEpoch {
		// No choice yet, or one made on this very epoch (its tools are
		// granted already): the card proposes its call only.
		prior = chosenScope{}
	}
	for _, t := range offered {
		if t == c.Tool || (slices.Contains(prior.tools, t) && !slices.Contains(added, t)) {
			c.ToolScope = append(c.ToolScope, t)
		} else {
			c.OtherTools = append(c.OtherTools, t)
		}
	}
	return c
}

func appendNew(s []string, v string) []string {
	if v == "" || slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// WithdrawEpoch withdraws at once every pending request of run raised for
// a call on epoch, which ended (why: the server was replaced or exited),
// and remembers the epoch as ended: a request raised on it later is
// withdrawn as it is raised. Their waiters get ErrWithdrawn; Decide of
// them says why (ResolvedError). It returns the ids withdrawn.
func (a *Authority) WithdrawEpoch(run ids.RunID, epoch ids.EpochID, why string) []ids.RequestID {
	if epoch == "" {
		return nil
	}
	a.mu.Lock()
	if !slices.ContainsFunc(a.ended[run], func(e endedEpoch) bool { return e.epoch == epoch }) {
		a.ended[run] = append(a.ended[run], endedEpoch{epoch, why})
		if n := len(a.ended[run]); n > 32 {
			a.ended[run] = a.ended[run][n-32:]
		}
	}
	var reqs []ids.RequestID
	for id, r := range a.requests {
		if rc, ok := r.Card.Run(run); ok && rc.CurrentEpoch == epoch && r.Card.Identity == "" {
			reqs = append(reqs, id)
		}
	}
	a.mu.Unlock()
	slices.Sort(reqs)
	var out []ids.RequestID
	for _, id := range reqs {
		if a.WithdrawRun(id, run, why) == nil {
			out = append(out, id)
		}
	}
	return out
}

// Withdrawn lists the requests of run withdrawn by the gateway that Wait
// still knows (the last 256 decided requests), oldest first.
func (a *Authority) Withdrawn(run ids.RunID) []Withdrawal {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Withdrawal
	for _, r := range a.decided {
		why, ok := strings.CutPrefix(r.decision.By, withdrawnPrefix+": ")
		rc, on := r.Card.Run(run)
		if _, moved := r.moved[run]; !on || !ok || moved || (r.decision.Runs != nil && !slices.Contains(r.decision.Runs, run)) {
			continue
		}
		out = append(out, Withdrawal{Request: r.ID, Tool: rc.Tool, Epoch: rc.CurrentEpoch, Reason: why, At: r.resolved})
	}
	return out
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
//
// One card per change, not per run: a card for a run's call whose epoch
// runs the same code as a pending card of another run of the same agent
// program (foldable) is not raised on its own. The pending request is
// replaced by one whose card lists both runs (withdrawn as merged, its
// waiters moved), and the id returned is the new one: "cards never change
// once raised" still holds, a decision answers the card the person saw. A
// card a standing approval covers (ApproveCode) is granted at once,
// without being shown.
func (a *Authority) Raise(card Card) ids.RequestID {
	now, timeout := a.opts.Clock(), a.Timeout()
	a.mu.Lock()
	endedWhy := ""
	for _, e := range a.ended[card.AgentRun] {
		if card.Identity == "" && card.CurrentEpoch != "" && e.epoch == card.CurrentEpoch {
			endedWhy = e.why
		}
	}
	if endedWhy != "" {
		// Raised for a call on an epoch that ended meanwhile: nobody can
		// approve anything useful on it.
		r := a.newRequestLocked(card, now, now.Add(timeout), false)
		a.mu.Unlock()
		a.raised(r)
		_ = a.Withdraw(r.ID, endedWhy)
		return r.ID
	}
	dropped := a.dropStandingLocked(card)
	defer a.standingEnded(dropped, "the code of "+card.ServerLabel+" changed: a card for other code was raised")
	if st, tools := a.standingLocked(card); st != nil {
		card.Reason = fmt.Sprintf("%s (granted: you approved this code of %s for every run of %s, request %s)", card.Reason, card.ServerLabel, card.AgentExe, st.ID)
		r := a.newRequestLocked(card, now, now.Add(timeout), true)
		a.mu.Unlock()
		a.raised(r)
		if err := a.resolve(r.ID, Decision{Choice: ApproveRun, Tools: tools, By: "standing approval " + string(st.ID), Decider: st.Decider}); err != nil {
			a.log.Warn("standing approval not applied", "request", r.ID, "err", err)
		}
		return r.ID
	}
	if old, ok := a.superseded[[2]string{card.ServerLabel, card.AgentExe}]; ok && card.Code != "" && card.Identity == "" && old.Code != card.Code &&
		!card.Stale && !card.Rewritten && !card.AskEveryUse {
		// What the person approved for every run of this program no longer
		// runs: that is why this card is shown (a stale, rewritten or
		// ask-every-use card keeps its own, more pressing reason).
		card.Reason = fmt.Sprintf("the code of %s changed since you approved it for every run of %s (request %s, %s): new code asks for the authority you gave the old code",
			card.ServerLabel, card.AgentExe, old.ID, old.Granted.Local().Format("2006-01-02 15:04"))
		card.StandingEnded = old.ID
	}
	var fold *Request
	for _, x := range a.requests {
		if !x.quiet && foldable(x.Card, card) && (fold == nil || x.Created.Before(fold.Created)) {
			fold = x
		}
	}
	if fold == nil {
		r := a.newRequestLocked(card, now, now.Add(timeout), false)
		a.mu.Unlock()
		a.raised(r)
		return r.ID
	}
	merged := fold.Card
	merged.AlsoRuns = append(slices.Clone(merged.AlsoRuns), card.Runs()[0])
	if card.Tool != "" && !slices.Contains(merged.Offered(), card.Tool) {
		merged.OtherTools = append(slices.Clone(merged.OtherTools), card.Tool)
	}
	if len(card.ToolContracts) > 0 {
		merged.ToolContracts = maps.Clone(merged.ToolContracts)
		if merged.ToolContracts == nil {
			merged.ToolContracts = map[string]string{}
		}
		for t, d := range card.ToolContracts {
			merged.ToolContracts[t] = d
		}
	}
	m := a.newRequestLocked(merged, now, now.Add(timeout), false)
	why := fmt.Sprintf("merged into %s: another run of the same agent program asks for the same code", m.ID)
	delete(a.requests, fold.ID)
	fold.moved = map[ids.RunID]ids.RequestID{}
	for _, rc := range fold.Card.Runs() {
		fold.moved[rc.AgentRun] = m.ID
	}
	fold.decision = Decision{Choice: Deny, By: withdrawnPrefix + ": " + why}
	a.decidedLocked(fold)
	close(fold.done)
	dd := fold.decision
	a.publishLocked(Event{Kind: EventResolved, Request: fold.snapshot(), Decision: &dd})
	a.mu.Unlock()
	a.log.Info("approval request merged", "request", fold.ID, "into", m.ID, "run", card.AgentRun)
	if a.opts.OnWithdrawn != nil {
		a.opts.OnWithdrawn(fold.snapshot(), why)
	}
	a.raised(m)
	return m.ID
}

// newRequestLocked registers a pending request for card with deadline and
// tells the subscribers, unless quiet (a standing approval grants it at
// once). a.mu is held.
func (a *Authority) newRequestLocked(card Card, now, deadline time.Time, quiet bool) *Request {
	r := &Request{
		ID:       ids.NewRequest(),
		Card:     card,
		Created:  now,
		Deadline: deadline,
		done:     make(chan struct{}),
		quiet:    quiet,
	}
	a.requests[r.ID] = r
	if !quiet {
		a.publishLocked(Event{Kind: EventRaised, Request: r.snapshot()})
	}
	return r
}

// raised records a request registered by newRequestLocked (OnRequested)
// and arms its timeout. a.mu is not held.
func (a *Authority) raised(r *Request) {
	after := r.Deadline.Sub(r.Created)
	card := r.Card
	a.log.Info("approval requested", "request", r.ID, "runs", card.RunNames(), "server", card.ServerLabel, "epoch", card.CurrentEpoch, "tools", card.ToolScope)
	if a.opts.OnRequested != nil {
		a.opts.OnRequested(r.snapshot())
	}
	time.AfterFunc(after, func() { _ = a.resolve(r.ID, Decision{Choice: timedOut, By: "timeout"}) })
}

// decidedLocked remembers r among the decided requests. a.mu is held.
func (a *Authority) decidedLocked(r *Request) {
	r.resolved = a.opts.Clock()
	if a.decided = append(a.decided, r); len(a.decided) > maxDecided {
		a.decided = slices.Delete(a.decided, 0, len(a.decided)-maxDecided)
	}
}

// standingLocked returns the standing approval that covers card, and the
// tools it grants (those of its scope the card offers with the contract
// the person approved), or nil. a.mu is held.
func (a *Authority) standingLocked(card Card) (*StandingApproval, []string) {
	if card.Identity != "" || card.ServerRequest != nil || card.AskEveryUse || card.Stale || card.Rewritten ||
		card.Code == "" || card.Tool == "" || card.AgentExe == "" {
		return nil, nil
	}
	for i := range a.standing {
		st := &a.standing[i]
		if st.ServerLabel != card.ServerLabel || st.AgentExe != card.AgentExe || st.Code != card.Code ||
			!containsAll(st.Credentials, card.CredentialScope) {
			continue
		}
		var tools []string
		for _, t := range intersect(card.Offered(), st.Tools) {
			if card.ToolContracts[t] == st.Contracts[t] {
				tools = append(tools, t)
			}
		}
		if slices.Contains(tools, card.Tool) {
			return st, tools
		}
	}
	return nil, nil
}

// dropStandingLocked forgets the standing approvals of the card's server
// and agent program for other code, and returns them: a card for new code
// means the code they approved no longer runs. a.mu is held.
func (a *Authority) dropStandingLocked(card Card) []StandingApproval {
	if card.Code == "" || card.Identity != "" {
		return nil
	}
	var dropped []StandingApproval
	a.standing = slices.DeleteFunc(a.standing, func(st StandingApproval) bool {
		if st.ServerLabel == card.ServerLabel && st.AgentExe == card.AgentExe && st.Code != card.Code {
			dropped = append(dropped, st)
			return true
		}
		return false
	})
	for _, st := range dropped {
		if a.superseded == nil {
			a.superseded = map[[2]string]StandingApproval{}
		}
		if len(a.superseded) >= MaxStanding {
			clear(a.superseded) // a bound; only the reason of later cards loses it
		}
		a.superseded[[2]string{st.ServerLabel, st.AgentExe}] = st
	}
	return dropped
}

// standingEnded reports standing approvals that ended (OnStandingEnded).
// a.mu is not held.
func (a *Authority) standingEnded(list []StandingApproval, why string) {
	for _, st := range list {
		a.log.Info("standing approval ended", "request", st.ID, "why", why)
		if a.opts.OnStandingEnded != nil {
			a.opts.OnStandingEnded(st.clone(), why)
		}
	}
}

// maxDecided is how many resolved requests Wait still knows: a call that
// found a pending request (Find) may start waiting only after a person
// decided it.
const maxDecided = 256

// Wait blocks until request id is decided or ctx ends, for the card's own
// run (see WaitRun).
func (a *Authority) Wait(ctx context.Context, id ids.RequestID) (*Grant, error) {
	return a.WaitRun(ctx, id, "")
}

// WaitRun blocks until request id is decided for run ("": the card's own
// run) or ctx ends. It returns the grant made for run (nil with ErrDenied
// or ErrTimeout otherwise). A run the request moved to another one (its
// card was merged into a card of several runs, or the person decided the
// other runs and left this one out) waits on that one. A request decided
// before WaitRun was called gives its outcome as well, as long as it is
// among the last 256 decided; an unknown or forgotten one gives
// ErrNoRequest.
func (a *Authority) WaitRun(ctx context.Context, id ids.RequestID, run ids.RunID) (*Grant, error) {
	for {
		a.mu.Lock()
		r, ok := a.requests[id]
		for i := len(a.decided) - 1; !ok && i >= 0; i-- {
			r, ok = a.decided[i], a.decided[i].ID == id
		}
		a.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrNoRequest, id)
		}
		if run == "" {
			run = r.Card.AgentRun
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		a.mu.Lock()
		next, moved := r.moved[run]
		g, d := r.grants[run], r.decision
		a.mu.Unlock()
		if moved {
			id = next
			continue
		}
		switch d.Choice {
		case ApproveRun, ApproveOnce, ApproveCode:
			if g == nil {
				return nil, ErrDenied
			}
			return g, nil
		case timedOut:
			return nil, ErrTimeout
		}
		if strings.HasPrefix(d.By, withdrawnPrefix) {
			return nil, ErrWithdrawn
		}
		if strings.HasPrefix(d.By, unrecordedPrefix) {
			return nil, ErrUnrecorded
		}
		return nil, ErrDenied
	}
}

// CardOf returns the card of request id, pending or among the last
// decided ones.
func (a *Authority) CardOf(id ids.RequestID) (Card, bool) {
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

// Withdraw denies pending request id on the gateway's behalf, for every
// run it decides, because no call needs it any more (why says what
// happened): it leaves Pending and the approval window, and its waiters
// get ErrWithdrawn.
func (a *Authority) Withdraw(id ids.RequestID, why string) error {
	return a.resolve(id, Decision{Choice: Deny, By: withdrawnPrefix + ": " + why})
}

// WithdrawRun withdraws the part of request id about run, which no longer
// needs it (its call was cancelled, its epoch or the run ended): the other
// runs of the card stay held, on a request of their own. It follows the
// request the run moved to.
func (a *Authority) WithdrawRun(id ids.RequestID, run ids.RunID, why string) error {
	for range maxDecided {
		a.mu.Lock()
		r, pending := a.requests[id]
		var next ids.RequestID
		if !pending {
			for _, d := range slices.Backward(a.decided) {
				if d.ID == id {
					next = d.moved[run]
					break
				}
			}
		}
		a.mu.Unlock()
		switch {
		case pending:
			if _, ok := r.Card.Run(run); !ok {
				return fmt.Errorf("request %s: %w: %s", id, ErrRunNotOnCard, run)
			}
			return a.resolve(id, Decision{Choice: Deny, By: withdrawnPrefix + ": " + why, Runs: []ids.RunID{run}})
		case next != "":
			id = next
		default:
			return a.resolvedError(id)
		}
	}
	return a.resolvedError(id)
}

// Decide answers a pending request (from the CLI or the app).
func (a *Authority) Decide(id ids.RequestID, d Decision) error {
	switch d.Choice {
	case ApproveRun, ApproveOnce, ApproveCode, Deny:
	default:
		return fmt.Errorf("%w %q (approve-run, approve-once, approve-code, deny)", ErrBadChoice, d.Choice)
	}
	a.mu.Lock()
	r, ok := a.requests[id]
	var c Card
	if ok && !r.quiet {
		c = r.Card
	}
	a.mu.Unlock()
	if !ok || r.quiet {
		return a.resolvedError(id)
	}
	if d.Choice == ApproveOnce && c.Stale {
		return fmt.Errorf("request %s: %w", id, ErrStaleOnce)
	}
	if d.Choice == ApproveCode && (c.Identity != "" || c.ServerRequest != nil || c.AskEveryUse || c.Code == "") {
		return fmt.Errorf("request %s: %w: approve-code approves the tools of a call for every run of the agent program, and this card is not about such a call", id, ErrBadChoice)
	}
	if (d.Choice == ApproveRun || d.Choice == ApproveCode) && d.Tools != nil {
		offered := c.Offered()
		for _, t := range d.Tools {
			if !slices.Contains(offered, t) {
				return fmt.Errorf("request %s: %w: %q (the card shows %s)", id, ErrNotOnCard, t, strings.Join(offered, ", "))
			}
		}
	}
	if d.Runs != nil {
		shown := c.RunNames()
		for _, run := range d.Runs {
			if !slices.Contains(shown, run) {
				return fmt.Errorf("request %s: %w: %q (the card decides %s)", id, ErrRunNotOnCard, run, strings.Join(ids.Strings(shown), ", "))
			}
		}
		if len(d.Runs) == 0 {
			return fmt.Errorf("request %s: %w: the decision leaves out every run of the card", id, ErrRunNotOnCard)
		}
	}
	return a.resolve(id, d)
}

// resolvedError says what became of request id, no longer pending.
func (a *Authority) resolvedError(id ids.RequestID) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range slices.Backward(a.decided) {
		if r.ID != id {
			continue
		}
		e := &ResolvedError{ID: id, Why: r.decision.By}
		switch {
		case r.decision.Choice == ApproveRun || r.decision.Choice == ApproveOnce || r.decision.Choice == ApproveCode:
			e.Outcome = "approved"
		case r.decision.Choice == timedOut:
			e.Outcome = "timeout"
		case strings.HasPrefix(r.decision.By, withdrawnPrefix+": "):
			e.Outcome, e.Why = "withdrawn", strings.TrimPrefix(r.decision.By, withdrawnPrefix+": ")
		case strings.HasPrefix(r.decision.By, unrecordedPrefix):
			e.Outcome = "audit_unavailable"
		default:
			e.Outcome = "denied"
		}
		if e.Why == "" {
			e.Why = "decided"
		} else if e.Outcome == "approved" || e.Outcome == "denied" {
			e.Why = "by " + e.Why
		}
		return e
	}
	return fmt.Errorf("%w: %s", ErrNoRequest, id)
}

// grantFor is the grant decision d makes from card c (request id) for
// its run rc, without the tools in denied.
func (a *Authority) grantFor(id ids.RequestID, c Card, rc RunCall, d Decision, denied []string) *Grant {
	tools := slices.Clone(c.ToolScope)
	if (d.Choice == ApproveRun || d.Choice == ApproveCode) && d.Tools != nil {
		tools = intersect(c.Offered(), d.Tools)
	}
	if rc.Tool != "" && c.Identity == "" && !slices.Contains(tools, rc.Tool) {
		// The call that waits is what a run approval approves first.
		tools = append([]string{rc.Tool}, tools...)
	}
	exp, argsDigest := ExpiresRunEnds, ""
	// A credential that asks on every use is never approved for the run:
	// whatever the choice, the grant serves this one call or launch.
	if d.Choice == ApproveOnce || c.AskEveryUse {
		exp = ExpiresOnce
		if rc.Tool != "" {
			tools, argsDigest = []string{rc.Tool}, rc.ArgsDigest
		} else if c.Identity != "" {
			tools = nil // a launch approved once carries no tools
		}
	}
	g := &Grant{
		ID: ids.NewGrant(), AgentRun: rc.AgentRun, ServerLabel: c.ServerLabel,
		ExecutionEpoch: rc.CurrentEpoch, ToolScope: tools, CredentialScope: c.CredentialScope,
		IssuedAt: a.opts.Clock(), ExpiresWhen: exp, Identity: c.Identity, Request: id, ArgsDigest: argsDigest,
	}
	if c.ServerRequest != nil {
		g.ToolScope, g.CredentialScope, g.ServerRequest = nil, nil, c.ServerRequest.Kind
	}
	// A tool denied by the person's policy is never granted, even if it
	// was in the card's scope when the request was raised.
	g.ToolScope = slices.DeleteFunc(slices.Clone(g.ToolScope), func(t string) bool { return slices.Contains(denied, t) })
	// Each tool is granted with the contract the card showed.
	for _, t := range g.ToolScope {
		if d := c.ToolContracts[t]; d != "" {
			if g.Contracts == nil {
				g.Contracts = map[string]string{}
			}
			g.Contracts[t] = d
		}
	}
	return g
}

func (a *Authority) resolve(id ids.RequestID, d Decision) error {
	approve := d.Choice == ApproveRun || d.Choice == ApproveOnce || d.Choice == ApproveCode
	// The tools denied now are looked up before the lock is taken (the
	// lookup may read the configuration file).
	var denied []string
	if approve && a.opts.ToolDenied != nil {
		a.mu.Lock()
		r, ok := a.requests[id]
		var c Card
		if ok {
			c = r.Card
		}
		a.mu.Unlock()
		for _, t := range c.Offered() {
			if a.opts.ToolDenied(c.ServerLabel, t) {
				denied = append(denied, t)
			}
		}
	}
	a.mu.Lock()
	r, ok := a.requests[id]
	if !ok {
		a.mu.Unlock()
		return a.resolvedError(id)
	}
	// The runs decided; the others stay held on a request of their own,
	// with the same deadline (leaving a run out never buys it time).
	var decided, rest []RunCall
	for _, rc := range r.Card.Runs() {
		if d.Runs == nil || slices.Contains(d.Runs, rc.AgentRun) {
			decided = append(decided, rc)
		} else {
			rest = append(rest, rc)
		}
	}
	var split *Request
	if len(rest) > 0 {
		split = a.newRequestLocked(r.Card.withRuns(rest), a.opts.Clock(), r.Deadline, false)
		r.moved = map[ids.RunID]ids.RequestID{}
		for _, rc := range rest {
			r.moved[rc.AgentRun] = split.ID
		}
	}
	delete(a.requests, id)
	a.decidedLocked(r)
	r.decision = d
	var grants []*Grant
	if approve {
		r.grants = map[ids.RunID]*Grant{}
		for _, rc := range decided {
			g := a.grantFor(id, r.Card, rc, d, denied)
			grants = append(grants, g)
			r.grants[rc.AgentRun] = g
			if rc.AgentRun == r.Card.AgentRun {
				r.grant = g
			}
		}
	}
	a.mu.Unlock()
	if split != nil {
		a.log.Info("approval request split: runs left out stay held", "request", id, "held", split.ID)
		a.raised(split)
	}

	// The hooks (the audit log's approval_granted / approval_denied) run
	// before the grant can be used and before waiters learn the decision,
	// so that the record of a decision always precedes the calls it let go.
	var unrecorded error
	for _, g := range grants {
		if a.opts.OnGranted == nil {
			break
		}
		if err := a.opts.OnGranted(r.snapshot(), *g); err != nil {
			// Fail closed: a grant the audit log never saw is not made,
			// and neither is any other grant of the decision.
			unrecorded = err
			a.log.Error("approval not granted: the audit log cannot record it", "request", id, "err", err)
			a.mu.Lock()
			r.grant, r.grants, r.decision = nil, nil, Decision{Choice: Deny, By: unrecordedPrefix + ": " + err.Error(), Runs: d.Runs}
			a.mu.Unlock()
			grants = nil
			if a.opts.OnDenied != nil {
				a.opts.OnDenied(r.snapshot(), unrecordedPrefix)
			}
			break
		}
	}
	for _, g := range grants {
		a.log.Info("approval granted", "request", id, "grant", g.ID, "run", g.AgentRun, "expires", g.ExpiresWhen, "tools", g.ToolScope)
	}
	if !approve {
		reason := "denied"
		if d.Choice == timedOut {
			reason = "timeout"
		} else if d.By != "" && d.By != "cli" && d.By != "app" {
			reason = d.By
		}
		a.log.Info("approval denied", "request", id, "reason", reason)
		if why, ok := strings.CutPrefix(d.By, withdrawnPrefix+": "); ok && a.opts.OnWithdrawn != nil {
			a.opts.OnWithdrawn(r.snapshot(), why)
		} else if a.opts.OnDenied != nil {
			a.opts.OnDenied(r.snapshot(), reason)
		}
	}
	// A standing approval is recorded (OnStanding) before it is kept; one
	// that cannot be is not kept.
	var st *StandingApproval
	if d.Choice == ApproveCode && len(grants) > 0 {
		c := r.Card
		st = &StandingApproval{ID: id, ServerLabel: c.ServerLabel, AgentExe: c.AgentExe, Code: c.Code, Credentials: slices.Clone(c.CredentialScope),
			Contracts: map[string]string{}, Granted: a.opts.Clock().UTC(), Decider: d.Decider}
		for _, g := range grants {
			for _, t := range g.ToolScope {
				st.Tools = appendNew(st.Tools, t)
				st.Contracts[t] = g.Contract(t)
			}
		}
		if a.opts.OnStanding != nil {
			if err := a.opts.OnStanding(st.clone()); err != nil {
				a.log.Error("standing approval not kept: it could not be recorded", "request", id, "err", err)
				st = nil
			}
		}
	}
	var evicted []StandingApproval
	a.mu.Lock()
	for _, g := range grants {
		a.grants[g.AgentRun] = append(a.grants[g.AgentRun], g)
		if g.Identity == "" && g.ExpiresWhen == ExpiresRunEnds {
			a.noteChosenLocked(g)
		}
	}
	if st != nil {
		a.standing = append(a.standing, *st)
		if n := len(a.standing); n > MaxStanding {
			evicted = slices.Clone(a.standing[:n-MaxStanding])
			a.standing = slices.Delete(a.standing, 0, n-MaxStanding)
		}
	}
	close(r.done)
	dd := r.decision
	if !r.quiet {
		a.publishLocked(Event{Kind: EventResolved, Request: r.snapshot(), Decision: &dd})
	}
	a.mu.Unlock()
	a.standingEnded(evicted, fmt.Sprintf("more than %d standing approvals: the oldest ends", MaxStanding))
	if unrecorded != nil {
		return fmt.Errorf("%w (%v); request %s is denied", ErrUnrecorded, unrecorded, id)
	}
	return nil
}

// noteChosenLocked adds the tools of g to what the person chose for its
// run's epoch: the next epoch's first card proposes it (Propose). a.mu is
// held.
func (a *Authority) noteChosenLocked(g *Grant) {
	ch := a.chosen[g.AgentRun]
	if ch.epoch != g.ExecutionEpoch {
		ch = chosenScope{epoch: g.ExecutionEpoch}
	}
	for _, t := range g.ToolScope {
		ch.tools = appendNew(ch.tools, t)
	}
	a.chosen[g.AgentRun] = ch
}

// ProposeLaunch fills in the tools launch card c proposes: after a
// rebuild of a server with a launch credential, the tools the person chose
// for the run's previous epoch, each with the contract its grant holds, so
// that one card approves the launch credentials and the tools of the new
// epoch together (see BindLaunch). A first launch, or a credential that
// asks on every use, proposes none.
func (a *Authority) ProposeLaunch(c Card) Card {
	if c.AskEveryUse || c.Identity == "" {
		return c
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	prior, ok := a.chosen[c.AgentRun]
	if !ok || len(prior.tools) == 0 {
		return c
	}
	contracts := map[string]string{}
	for _, g := range slices.Concat(a.voided[c.AgentRun], a.grants[c.AgentRun]) {
		if g.ExecutionEpoch != prior.epoch || g.Identity != "" {
			continue
		}
		for t, d := range g.Contracts {
			if slices.Contains(prior.tools, t) {
				contracts[t] = d
			}
		}
	}
	c.ToolScope = slices.Clone(prior.tools)
	if len(contracts) > 0 {
		c.ToolContracts = contracts
	}
	return c
}

// BindLaunch turns the tools of launch grant id of run (approved on a
// launch card that proposed them, ProposeLaunch) into a grant of those
// tools for epoch, the epoch that launch started, recorded through
// Options.OnGranted first. It does so once: a later launch of the same
// code asks for its tools again. A grant without tools binds nothing.
func (a *Authority) BindLaunch(run ids.RunID, id ids.GrantID, epoch ids.EpochID) error {
	a.mu.Lock()
	var lg *Grant
	for _, g := range a.grants[run] {
		if g.ID == id && g.Identity != "" && len(g.ToolScope) > 0 {
			lg = g
		}
	}
	if lg == nil || epoch == "" {
		a.mu.Unlock()
		return nil
	}
	g := &Grant{
		ID: ids.NewGrant(), AgentRun: run, ServerLabel: lg.ServerLabel, ExecutionEpoch: epoch,
		ToolScope: lg.ToolScope, CredentialScope: slices.Clone(lg.CredentialScope), IssuedAt: a.opts.Clock(),
		ExpiresWhen: ExpiresRunEnds, Request: lg.Request, Contracts: lg.Contracts,
	}
	lg.ToolScope, lg.Contracts = nil, nil
	var req Request
	for _, r := range slices.Backward(a.decided) {
		if r.ID == lg.Request {
			req = r.snapshot()
			break
		}
	}
	a.mu.Unlock()
	if a.opts.OnGranted != nil {
		if err := a.opts.OnGranted(req, *g); err != nil {
			return fmt.Errorf("%w (%v): the tools approved with the launch are not granted", ErrUnrecorded, err)
		}
	}
	a.mu.Lock()
	a.grants[run] = append(a.grants[run], g)
	a.noteChosenLocked(g)
	a.mu.Unlock()
	return nil
}

// InForce lists the tools the live grants of run cover on epoch (once
// grants included), in grant order.
func (a *Authority) InForce(run ids.RunID, epoch ids.EpochID) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, g := range a.grants[run] {
		if g.ExecutionEpoch == epoch && g.Identity == "" && g.ServerRequest == "" {
			for _, t := range g.ToolScope {
				out = appendNew(out, t)
			}
		}
	}
	return out
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

// DecideReply is what the daemon answers a decision with: the grant made
// for the card's own run (its fields, empty for a denial), every grant
// the decision made (one per run and epoch), and for each run every tool
// its live grants cover on its epoch now, those given before included.
type DecideReply struct {
	Grant
	Grants  []Grant                `json:"grants,omitempty"`
	InForce map[ids.RunID][]string `json:"inForce,omitempty"`
}

// GrantsOf returns the grants decided request id made, one per run in the
// card's order (none for a denial, or for a request no longer known).
func (a *Authority) GrantsOf(id ids.RequestID) []Grant {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range slices.Backward(a.decided) {
		if r.ID != id {
			continue
		}
		var out []Grant
		for _, rc := range r.Card.Runs() {
			if g := r.grants[rc.AgentRun]; g != nil {
				out = append(out, *g)
			}
		}
		return out
	}
	return nil
}
