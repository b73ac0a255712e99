// Package gateway is the per-agent-run proxy between one agent connection and
// the server processes that serve it, one execution epoch at a time.
//
// A Session reads newline-delimited JSON-RPC from the agent (through the
// `portcullis connect` shim) and from the current server process, and routes
// each message without re-encoding it (package mcpwire):
//
//   - requests from the agent get ids minted by the gateway toward the server,
//     and responses get the agent's own id back, type preserved;
//   - requests from the server (roots/list, sampling, elicitation) get
//     gateway ids toward the agent, and the agent's answers go back to the
//     epoch that asked, never to a later one;
//   - notifications/cancelled request ids and the 2026-07-28
//     io.modelcontextprotocol/subscriptionId are rewritten to match;
//   - ping is answered by the gateway itself, in both directions;
//   - messages from the server to the agent wait until the agent's handshake
//     is complete (MCP 2025-11-25, basic/lifecycle: nothing but pings and
//     logging before initialized);
//   - a request in flight when its epoch ends is answered at once with
//     epoch_ended and never retried.
//
// It also keeps the refresh contract (docs/DESIGN.md): the gateway fetches
// tools/list itself at every epoch and after every list change, answers the
// agent's tools/list from the current catalog revision, validates every
// tools/call against it, and holds the agent's requests while a new epoch is
// identity-pending.
//
// Progress tokens are chosen by the agent and pass through unchanged: a
// server process serves exactly one agent run, and the gateway's own requests
// carry no token, so tokens cannot collide. Progress for a token that no
// request of the current epoch carries is logged and not forwarded.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/supervisor"
	"github.com/portcullis/portcullis/core/textsafe"
)

// Process is a running server process; *supervisor.Process satisfies it.
type Process interface {
	Pid() int
	Stdin() io.WriteCloser
	Stdout() io.Reader
	Done() <-chan struct{}
	Exit() supervisor.ExitInfo
	Stop(ctx context.Context) error
	StderrTail(maxLines int) []string
}

// Epoch is one launch of the server: the identity measured by the supervisor
// and the process now running it. ID is the epoch's ULID (Record.Epoch).
type Epoch struct {
	ID     ids.EpochID
	Record identity.Record
	Proc   Process
	// Identify, when set, waits until the epoch's identity is known and
	// returns the processes the kernel shows running it (Record.Observed:
	// read after the launch settled and after the process first answered,
	// supervisor.Process.Identity). The session does not wait for it to
	// forward the handshake and the lists; every other request of the
	// agent, tools/call first, is held until it returned
	// (docs/DESIGN.md "identity-pending"). Nil: Record is complete.
	Identify func(ctx context.Context) ([]identity.Observed, error)
	// Refetch, when set, reports once Identify returned whether the
	// program changed while the identity was being fixed (an exec around
	// the first answers, supervisor.Process.ChangedWhenArmed): the catalog
	// is then fetched again before a call waiting for the identity passes.
	Refetch func() bool
}

// Launcher starts a new epoch for the session's server label.
type Launcher func(ctx context.Context) (*Epoch, error)

// Agent describes the program on the other side of the shim, as the kernel
// reported it to the daemon (never as the agent reports itself).
type Agent struct {
	ShimPID int    `json:"shimPid"`
	PID     int    `json:"pid"`
	Exe     string `json:"exe"`
}

// Options configure a Session.
type Options struct {
	RunID  ids.RunID // the agent run's ULID
	Label  string    // server label
	Agent  Agent
	Launch Launcher
	// Catalog keeps the catalog revisions of every label; required.
	Catalog *catalog.Store
	// Validator checks tools/call arguments; a new one when nil.
	Validator *catalog.Validator
	// Policy gives a tool's policy; every tool is config.PolicyApprove
	// when nil. config.PolicyDeny hides the tool and refuses calls.
	// It is asked at every use (each tools/list answer, each tools/call)
	// and must answer with the policy in force now; after it changes, call
	// PolicyChanged so that the agent hears of tools it no longer sees or
	// sees again.
	Policy func(tool string) config.Policy
	// RequestPolicy gives the policy of the server's requests to the agent
	// of a kind (config.RequestSampling…), asked at each request; the
	// defaults of config.Server.RequestPolicy when nil.
	RequestPolicy func(kind string) config.Policy
	// MaxMessage is the largest message accepted from either side, in
	// bytes (mcpwire.DefaultMaxMessage when 0).
	MaxMessage int
	// StartupTimeout bounds the wait for a new process's first response
	// (default 30 s). On expiry the request is refused with
	// server_unavailable and the process group is stopped.
	StartupTimeout time.Duration
	// HoldTimeout bounds how long a request is held while a new epoch is
	// identity-pending (default 30 s); then it is refused with hold_timeout.
	HoldTimeout time.Duration
	// DrainTimeout bounds how long the session goes on after the agent's
	// input ended with EndOfInput, for the answers to the requests sent
	// before (default DefaultDrainTimeout); see Serve.
	DrainTimeout time.Duration
	// RestartOnCrash relaunches a process that exits on its own, with
	// backoff; after CrashLimit crashes within CrashWindow the session is
	// crash-looping and waits for Restart.
	RestartOnCrash bool
	CrashLimit     int           // default 5
	CrashWindow    time.Duration // default 60 s
	// Authority checks grants and raises approval requests for tools whose
	// policy is config.PolicyApprove; nil forwards them unchecked (tests, tools only).
	Authority *authz.Authority
	// Credentials are the server's credential scopes; Secrets reads them.
	Credentials []Credential
	Secrets     SecretSource
	// SecretCheck, when set, says without reading it whether a credential
	// scope's secret can be had: nil when it is stored; an error matching
	// secrets.ErrLocked when the keychain is locked (the call still asks,
	// and its card says so); any other error (nothing stored, no keychain)
	// refuses a call needing it at once, before anyone is asked.
	SecretCheck func(scope string) error
	// SourceUnsettled is set when the server runs behind a launcher that
	// hands its stdin to whichever worker runs (identity.Launcher.Relays):
	// it returns a channel closed once the files the build watcher
	// watches for the server have settled and the build they made was
	// decided, nil when nothing is unsettled now (watch.Watcher.Unsettled).
	// A call that carries authority is not written to such a server while
	// its source is unsettled (settle.go).
	SourceUnsettled func() <-chan struct{}
	// Audit receives the events of the run; the tool_called intent is
	// durable before a call is forwarded, and calls fail closed with
	// audit_unavailable when it cannot be written. Nil: no audit.
	Audit Auditor
	// Arguments, when set, is told of each tool call forwarded (call is
	// its ULID in the audit log, once its tool_called intent is written);
	// args gives the call's argument values, without the values of the
	// credentials the server was given, for the telemetry export of a
	// server that the person chose to export them for. Nil: no one is.
	Arguments func(call ids.CallID, args func() json.RawMessage)
	Logger    *slog.Logger
	// OnChange, when set, is called (without locks held) after the
	// session's visible state changes.
	OnChange func()
	// ShimLines: the agent's side is a relaying shim that reads the
	// daemon's shim lines (control.HeldLine…): it is told which calls wait
	// for a person.
	ShimLines bool
	// Continues is the run this one continues, as its shim said after it
	// lost the daemon that served it; recorded in run_started.
	Continues *control.Continuation
	// PreviousLogHead is the last event the audit log held when this
	// daemon opened it, recorded with Continues; nil when unknown.
	PreviousLogHead *audit.LogHead
}

// State is where a session is in its life (docs/DESIGN.md, "The refresh
// contract").
type State string

// Session states.
const (
	StateStarting        State = "starting"         // first process launched, catalog not fetched yet
	StateIdentityPending State = "identity-pending" // a new epoch is starting: requests are held
	StateCatalogPending  State = "catalog-pending"  // the new epoch's tools/list is being fetched
	StateReady           State = "ready"
	StateRestarting      State = "restarting"    // the process crashed; a relaunch is scheduled
	StateCrashLooping    State = "crash-looping" // too many crashes; waits for a person
	StateFailed          State = "failed"
	StateEnded           State = "ended"
)

// Session is one agent run: the agent's connection and the epochs that serve
// it. Create it with New and run it with Serve.
type Session struct {
	opts Options
	log  *slog.Logger
	// redact is what s.log redacts with: the credentials given to the
	// newest epoch's process (redact.go).
	redact *logRedactor

	// vmu serializes what the agent is told of the tools it sees (a
	// tools/list answer, a list_changed) with the record of it, announced;
	// taken before amu.
	vmu      sync.Mutex
	amu      sync.Mutex // serializes writes to the agent; taken before mu
	abuf     []byte     // guarded by amu: the line being written to the agent, reused
	agentOut io.Writer  // guarded by amu

	mu               sync.Mutex
	state            State          // guarded by mu
	reason           string         // guarded by mu; why the state is what it is
	cur              *epoch         // guarded by mu; nil before the first launch
	flight           inflight       // guarded by mu; requests in flight, messages held (inflight.go)
	configFault      bool           // guarded by mu; the launch failed on the configured command itself
	launchFault      control.Reason // guarded by mu; the refusal of a first launch that failed
	diagnostics      []string       // guarded by mu; non-JSON-RPC lines from servers
	warnings         []string       // guarded by mu; things the person should know
	gate             gate           // guarded by mu; whether the agent's requests flow (gate.go)
	inputEnded       chan struct{}  // closed when the agent sent EndOfInput
	inputEndOnce     sync.Once
	reservedNoted    bool          // owned by readAgent; the run's reserved_meta_removed event was written
	agentGone        chan struct{} // closed when a write to the agent failed: nobody reads its answers
	agentGoneOnce    sync.Once
	agentRev         uint64                          // guarded by mu; catalog revision the agent last fetched
	announced        []string                        // guarded by mu; names of the tools the agent was last shown or told of (sorted), nil until it lists
	hs               handshake                       // guarded by mu; the agent's handshake (handshake.go)
	refreshing       bool                            // guarded by mu
	refreshAgain     bool                            // guarded by mu
	refreshGen       uint64                          // guarded by mu; fetches refresh completed (refreshWait)
	refreshedFor     *epoch                          // guarded by mu; the epoch of the last one
	refreshTick      chan struct{}                   // guarded by mu; closed at the next one's end
	buildNote        string                          // guarded by mu; a build seen on disk, not running
	crashes          []time.Time                     // guarded by mu
	replacing        bool                            // guarded by mu
	replaceAgain     bool                            // guarded by mu; a Replace arrived during one
	replaceWhy       string                          // guarded by mu
	replaceErr       error                           // guarded by mu; why the last replacement launched nothing (nil: it did)
	lastExit         *EpochExit                      // guarded by mu; the latest process of this run to exit
	work             group                           // catalog fetches, calls on their way, replacements, process watchers: Serve waits for them
	events           group                           // audit writes off the response path: Serve waits for them before run_ended
	epochs           int                             // guarded by mu; epochs launched so far
	agentListedEpoch ids.EpochID                     // guarded by mu; epoch of the agent's last tools/list
	announcedEpoch   ids.EpochID                     // guarded by mu; the epoch whose tools the agent was last shown (tools/list) or told of (list_changed)
	staleTold        map[string]ids.EpochID          // guarded by mu; tool → the epoch on which a call of it was refused authorization_stale
	told             map[string]string               // guarded by mu; tool → digest of the contract a refusal's message stated to the agent (decide.go, staleCall)
	verdicts         contractVerdicts                // whether a granted tool contract covers the current one (grantcontract.go)
	acted            bool                            // guarded by mu; the agent sent a request beyond the handshake, the lists and ping (status.go)
	endedAt          time.Time                       // guarded by mu; when the run ended
	approvedEpoch    ids.EpochID                     // guarded by mu; epoch of the last grant
	approvedRev      uint64                          // guarded by mu; catalog revision of the last grant
	records          map[ids.EpochID]identity.Record // guarded by mu; execution records of this run's epochs
	policyWake       chan struct{}                   // guarded by mu; nil until a call waits; closed by PolicyChanged so waiting calls re-check their tool's policy
	late             map[int64]lateCall              // guarded by mu; calls answered epoch_ended whose answer may still come (observe.go)
	asking           int                             // guarded by mu; server requests to the agent being decided (serverreq.go)
	buildHold        *epoch                          // guarded by mu; the epoch whose calls a build in progress holds (observe.go)
	buildDone        chan struct{}                   // guarded by mu; closed when the hold of buildHold ends; nil while none
	startedAt        time.Time
	ctx              context.Context // cancelled when Serve returns
	cancel           context.CancelFunc
}

type epoch struct {
	Epoch
	wmu        sync.Mutex // serializes writes to Proc.Stdin
	wbuf       []byte     // guarded by wmu: the line being written to Proc.Stdin, reused
	answered   bool       // guarded by Session.mu: the process has answered a request
	ended      bool       // guarded by Session.mu
	endWhy     string     // guarded by Session.mu
	replaced   bool       // guarded by Session.mu: ended because a newer epoch took over
	superseded bool       // guarded by Session.mu: a settled build measured other code; a replacement follows (settle.go)
	timer      *time.Timer
	catalog    *catalog.Catalog // guarded by Session.mu; this epoch's revision once fetched
	fallback   bool             // guarded by Session.mu; tools/list could not be fetched: pass through
	listExtra  json.RawMessage  // guarded by Session.mu; the first tools/list page without tools and nextCursor
	initResult json.RawMessage  // guarded by Session.mu; its initialize result
	idMismatch bool             // guarded by Session.mu; it answered a numeric id with a string
	next       *epoch           // guarded by Session.mu; the epoch observed to succeed it on the same process (observe.go)
	observed   string           // set once at creation: what the supervisor observed when it began (observe.go), "" for a launch
	answeredBy *audit.Answerer  // guarded by Session.mu; the other code that answered its calls when it ended (observe.go)
	identified chan struct{}    // closed once Record holds the epoch's observed identity (identify); nil: known at creation
	unasked    int              // guarded by Session.mu; answers it wrote to ids never sent to it (route.go)
}

const maxDiagnostics = 50

// New returns a Session; nothing runs until Serve.
func New(o Options) *Session {
	if o.StartupTimeout <= 0 {
		o.StartupTimeout = 30 * time.Second
	}
	if o.HoldTimeout <= 0 {
		o.HoldTimeout = 30 * time.Second
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = control.DefaultDrainTimeout
	}
	if o.MaxMessage <= 0 {
		o.MaxMessage = mcpwire.DefaultMaxMessage
	}
	if o.CrashLimit <= 0 {
		o.CrashLimit = 5
	}
	if o.CrashWindow <= 0 {
		o.CrashWindow = 60 * time.Second
	}
	if o.Validator == nil {
		o.Validator = catalog.NewValidator()
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	red := &logRedactor{}
	log = slog.New(redactingHandler{inner: log.Handler(), redact: red}).With("run", o.RunID, "server", o.Label)
	return &Session{
		opts:       o,
		redact:     red,
		log:        log,
		state:      StateStarting,
		flight:     newInflight(),
		inputEnded: make(chan struct{}),
		agentGone:  make(chan struct{}),
		records:    map[ids.EpochID]identity.Record{},
		gate:       newGate(),
		startedAt:  time.Now(),
		ctx:        context.Background(),
	}
}

// Serve launches the first epoch and proxies until the agent's input ends or
// ctx is cancelled, then stops the server process group and returns. A
// failed launch does not end the session: the agent's requests are answered
// with server_unavailable naming the cause, so the agent sees why.
func (s *Session) Serve(ctx context.Context, agentIn io.Reader, agentOut io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.ctx, s.cancel = ctx, cancel
	s.mu.Unlock()
	s.agentOut = agentOut
	started := audit.RunStarted{AgentRun: s.opts.RunID, ServerLabel: s.opts.Label,
		Agent: audit.Agent{Executable: s.opts.Agent.Exe, PID: s.opts.Agent.PID}}
	if c := s.opts.Continues; c != nil {
		started.Continues = &audit.RunContinued{AgentRun: c.Run, DaemonPID: c.DaemonPID, Why: c.Why, PreviousLogHead: s.opts.PreviousLogHead}
	}
	s.record(audit.TypeRunStarted, started)

	// The first launch may wait for a person (credentials at launch): the
	// agent's messages are read meanwhile, and its handshake waits for it.
	s.mu.Lock()
	s.closeGateLocked()
	s.mu.Unlock()
	launched := make(chan struct{})
	go func() {
		defer close(launched)
		e, err := s.startEpoch(ctx)
		s.mu.Lock()
		if err != nil {
			s.state, s.reason = StateFailed, launchFailedPrefix+err.Error()
			s.configFault = errors.Is(err, identity.ErrCommandNotFound)
			s.launchFault = launchRefusal(err)
		} else {
			s.cur = e
		}
		s.openGateLocked()
		s.mu.Unlock()
		if err != nil {
			s.log.Warn("launch failed", "err", err)
		}
		s.changed()
	}()

	agentDone := make(chan error, 1)
	go func() { agentDone <- s.readAgent(agentIn) }()

	var err error
	select {
	case err = <-agentDone:
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.inputEnded:
		err = s.drain(ctx, agentDone)
	}
	// From now on a write to an agent that does not read (it stopped
	// reading its stdout, its shim is frozen) must not hold the shutdown,
	// which answers what is left and then stops the server: writes get a
	// deadline, after which they fail and the agent counts as gone.
	if d, ok := agentOut.(interface{ SetWriteDeadline(time.Time) error }); ok {
		_ = d.SetWriteDeadline(time.Now().Add(agentWriteGrace))
	}
	// A launch still in progress (measurement, an approval for
	// credentials) gives up; one that completed is stopped by shutdown, so
	// that an agent leaving during the launch leaves no process behind.
	cancel()
	<-launched
	s.shutdown()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	// A catalog fetch or a call that began before the end returns at once
	// (its epoch ended), and the processes are stopped: waiting for them
	// keeps the catalog store quiet after Serve, and every event of the
	// run (server_exited, tool_completed) is written before run_ended.
	s.work.wait()
	s.events.wait()
	s.record(audit.TypeRunEnded, audit.RunEnded{AgentRun: s.opts.RunID, ServerLabel: s.opts.Label, Reason: "agent disconnected"})
	return err
}

// agentWriteGrace bounds the writes to the agent once its run ends (see
// Serve), when its connection can take a deadline (a net.Conn).
var agentWriteGrace = 5 * time.Second // a variable for tests

// drain waits until every request the agent sent before the end of its
// input is answered (none in flight or held, nothing held at the gate), at
// most DrainTimeout. It stops early when ctx ends, or when the agent is gone:
// its connection ended (agentDone: the shim died, since it keeps the
// connection open while the run drains) or cannot be written to. Requests
// left are refused by the shutdown that follows. It returns what Serve
// returns: nil, ctx's error, or the agent connection's.
func (s *Session) drain(ctx context.Context, agentDone <-chan error) error {
	deadline := time.NewTimer(s.opts.DrainTimeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		left := s.flight.unanswered()
		idle := s.flight.idleSignal()
		s.mu.Unlock()
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-agentDone:
			s.log.Info("the agent left while its run drained", "left", left)
			return err
		case <-s.agentGone:
			return nil
		case <-deadline.C:
			s.log.Warn("the agent's input ended; requests still unanswered after the drain timeout are refused", "left", left, "timeout", s.opts.DrainTimeout)
			return nil
		case <-idle:
		}
	}
}

// AgentName is the name the agent gave itself in its handshake (clientInfo's
// title, else its name), "" when it sent none: its own claim, for display on
// approval cards only. The first launch starts as the agent connects, before
// its first message is read: a handshake not arrived yet is waited for, up
// to wait, ctx's end or the agent's leaving.
func (s *Session) AgentName(ctx context.Context, wait time.Duration) string {
	s.mu.Lock()
	heard := s.hs.heardSignal()
	s.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-heard:
	case <-t.C:
	case <-ctx.Done():
	case <-s.inputEnded:
	case <-s.agentGone:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hs.clientName()
}

// startEpoch launches a process and starts reading it; the caller makes it
// current.
func (s *Session) startEpoch(ctx context.Context) (*epoch, error) {
	ep, err := s.opts.Launch(ctx)
	if err != nil {
		return nil, err
	}
	e := &epoch{Epoch: *ep, identified: make(chan struct{})}
	s.redact.use(e) // before anything of the process is logged
	s.mu.Lock()
	s.epochs++
	s.records[e.ID] = e.Record
	s.mu.Unlock()
	s.log.Info("epoch started", "epoch", e.ID, "pid", e.Proc.Pid())
	go s.readServer(e)
	s.watchTree(e)
	s.identify(ctx, e)
	watch := func() {
		<-e.Proc.Done()
		<-e.identified // server_started comes first (identify returns once the process is gone)
		e := s.lastOf(e)
		exit := e.Proc.Exit()
		s.record(audit.TypeServerExited, audit.ServerExited{ServerLabel: s.opts.Label, AgentRun: s.opts.RunID,
			Epoch: e.ID, PID: e.Proc.Pid(), ExitCode: exit.Code, Signal: exit.Signal})
		s.mu.Lock()
		s.lastExit = &EpochExit{Epoch: e.ID, PID: e.Proc.Pid(), Exit: exit}
		s.mu.Unlock()
		s.exited(e, "server process exited ("+exit.String()+")")
	}
	if !s.work.goFunc(watch) {
		// Launched after the run was over (its shutdown stops it): it is
		// still watched, though its exit comes after run_ended.
		s.log.Warn("server process launched after its agent run ended", "epoch", e.ID)
		go watch()
	}
	return e, nil
}

// background runs f (a catalog fetch) on its own goroutine, one Serve waits
// for before it returns. Once Serve has waited for all of them, nothing more
// is started: the session is over.
func (s *Session) background(f func()) { s.work.goFunc(f) }

func (s *Session) changed() {
	if s.opts.OnChange != nil {
		s.opts.OnChange()
	}
}

// shutdown stops every process the session started and fails what is left.
func (s *Session) shutdown() {
	s.mu.Lock()
	e := s.cur
	s.state, s.reason = StateEnded, "agent run ended"
	s.endedAt = time.Now()
	s.openGateLocked()
	s.mu.Unlock()
	if s.opts.Authority != nil {
		s.opts.Authority.EndRun(s.opts.RunID) // grants expire with the run
	}
	if e != nil {
		s.endEpoch(e, "agent run ended", nil)
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := e.Proc.Stop(stopCtx); err != nil {
			s.log.Warn("stopping server", "epoch", e.ID, "err", err)
		}
		cancel()
	}
	s.changed()
}

// exited handles the end of a process that nobody asked to stop.
func (s *Session) exited(e *epoch, why string) {
	s.mu.Lock()
	unexpected := !e.ended && s.cur == e && s.state != StateEnded
	served := e.answered
	s.mu.Unlock()
	if unexpected && !served {
		// It never answered: a start-up failure, not a crash to retry.
		// Its requests, and held ones, learn the exit status and stderr
		// at once, as server_unavailable: they never reached working code.
		why += " before answering any request"
		if last := lastStderrLine(e.Proc.Exit().StderrTail); last != "" {
			// Agents show the model error.message only: what the
			// process said last (a sandbox launcher's refusal, a missing
			// module) is the one thing the model can report.
			why += "; its last line on stderr: " + last
		}
		if sb, ok := e.Proc.(interface{ Sandbox() string }); ok && sb.Sandbox() != "" && !strings.HasPrefix(sb.Sandbox(), "off") {
			why += readOnlyHint(s.opts.Label, e.Proc.Exit().StderrTail)
		}
		s.failEpoch(e, why)
		return
	}
	if !unexpected {
		s.endEpoch(e, why, nil)
		return
	}
	// The decision comes before the epoch's end is announced, so that a
	// request arriving meanwhile is held for the restart (or refused as
	// crash-looping) rather than refused because no process runs.
	s.mu.Lock()
	now := time.Now()
	s.crashes = append(s.crashes, now)
	for len(s.crashes) > 0 && now.Sub(s.crashes[0]) > s.opts.CrashWindow {
		s.crashes = s.crashes[1:]
	}
	n := len(s.crashes)
	var restartIn time.Duration
	switch {
	case !s.opts.RestartOnCrash:
		s.state, s.reason = StateFailed, why
	case n >= s.opts.CrashLimit:
		s.state = StateCrashLooping
		s.reason = fmt.Sprintf("%s; %d crashes within %s, so it is not restarted until a person acts (portcullis restart %s)", why, n, s.opts.CrashWindow, s.opts.Label)
	default:
		restartIn = time.Duration(1<<min(n-1, 5)) * 500 * time.Millisecond
		s.state, s.reason = StateRestarting, fmt.Sprintf("%s; restarting in %s", why, restartIn)
		s.closeGateLocked()
	}
	ctx := s.ctx
	s.mu.Unlock()
	s.endEpoch(e, why, nil)
	switch {
	case restartIn > 0:
		time.AfterFunc(restartIn, func() {
			if ctx.Err() == nil {
				s.Replace("restart after a crash")
			}
		})
	case n >= s.opts.CrashLimit && s.opts.RestartOnCrash:
		s.log.Warn("server is crash-looping", "crashes", n)
		s.mu.Lock()
		s.openGateLocked() // held requests learn why at once
		s.mu.Unlock()
	}
	s.changed()
}

// endEpoch marks e ended and answers every request still waiting on it with
// epoch_ended, naming next when a newer epoch took over. A pending
// subscriptions/listen of the agent is kept when next is set (it moves to
// next). It is idempotent.
func (s *Session) endEpoch(e *epoch, why string, next *epoch) {
	s.mu.Lock()
	if e.ended {
		s.mu.Unlock()
		return
	}
	e.ended, e.endWhy, e.replaced = true, why, next != nil
	if e.timer != nil {
		e.timer.Stop()
	}
	var current ids.EpochID
	if next != nil {
		current = next.ID
	}
	var answers []refusedReq
	var ended []*callRecord
	for id, p := range s.flight.pending {
		if p.ep != e {
			continue
		}
		if p.call != nil {
			ended = append(ended, p.call)
			s.rememberLateLocked(id, e, p.call)
		}
		if next != nil && p.method == methodListen && s.hs.isListen(p.agentID) {
			delete(s.flight.pending, id) // re-opened on next, the agent's stream goes on
			continue
		}
		s.dropPendingLocked(id, p)
		if p.reply != nil {
			close(p.reply)
			continue
		}
		reason := fmt.Sprintf("%s before answering %s; the call was not retried and may or may not have taken effect", why, p.method)
		retry := "check the effect before calling again"
		if p.unsent {
			reason = fmt.Sprintf("%s before %s was sent to it; it was not sent", why, p.method)
			retry = "call again: nothing of this request reached the server"
		}
		if s.state == StateEnded {
			retry = "none in this agent run, which is over"
		}
		r := &control.Refusal{
			Error:        control.EpochEnded,
			Reason:       reason,
			Server:       s.opts.Label,
			Epoch:        e.ID,
			CurrentEpoch: current,
			Retry:        retry,
		}
		answers = append(answers, refusedOf(p, r))
	}
	s.flight.dropReverse(e)
	s.mu.Unlock()
	if a := s.opts.Authority; a != nil {
		// A call that waited for a person on e will never run on it: its
		// card goes away now, saying why (docs/DESIGN.md, "Authorization and
		// credentials").
		what := "the server's execution epoch " + string(e.ID) + " ended (" + why + ")"
		if next != nil {
			what = fmt.Sprintf("the server was replaced while the call waited (epoch %s → %s: %s)", e.ID, next.ID, why)
		}
		for _, id := range a.WithdrawEpoch(s.opts.RunID, e.ID, what) {
			s.log.Info("approval request withdrawn: its epoch ended", "request", id, "epoch", e.ID)
		}
	}
	s.log.Info("epoch ended", "epoch", e.ID, "why", why, "answered", len(answers))
	s.refuseAll(answers)
	for _, c := range ended {
		s.recordCompletion(e, c, "epoch_ended", why)
	}
	// Reap whatever the process group left behind (grandchildren that
	// hold stdout, for instance).
	if next == nil || next.Proc != e.Proc { // an observed epoch runs on
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = e.Proc.Stop(ctx)
		}()
	}
	s.changed()
}

func (s *Session) dropPendingLocked(id int64, p *pending) { s.flight.drop(id, p) }

// writeAgent writes one message to the agent.
func (s *Session) writeAgent(line []byte) {
	s.amu.Lock()
	defer s.amu.Unlock()
	s.writeAgentLocked(line)
}

func (s *Session) writeAgentLocked(line []byte) {
	s.abuf = appendLine(s.abuf, line)
	if _, err := s.agentOut.Write(s.abuf); err != nil {
		s.agentGoneOnce.Do(func() { close(s.agentGone) })
		s.log.Debug("writing to agent", "err", err)
	}
}

// sendServerMessage writes a message that originates on the server side
// (request or notification) to the agent, or queues it until the agent's
// handshake is complete.
func (s *Session) sendServerMessage(line []byte) {
	s.amu.Lock()
	defer s.amu.Unlock()
	s.mu.Lock()
	if s.hs.hold(line) {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.writeAgentLocked(line)
}

// completeHandshake flushes what the server said before the agent was ready
// and fetches the first catalog.
func (s *Session) completeHandshake(e *epoch) { s.completeHandshakeWith(e, nil) }

// completeHandshakeWith is completeHandshake that writes first (the answer
// that completes the handshake) to the agent once the gate is closed.
func (s *Session) completeHandshakeWith(e *epoch, first []byte) {
	s.amu.Lock()
	s.mu.Lock()
	q, ok := s.hs.complete()
	if !ok {
		s.mu.Unlock()
		if first != nil {
			s.writeAgentLocked(first)
		}
		s.amu.Unlock()
		return
	}
	if e != nil && !e.ended && e.catalog == nil && !e.fallback {
		// The agent's next requests wait for the catalog.
		s.closeGateLocked()
	}
	s.mu.Unlock()
	if first != nil {
		s.writeAgentLocked(first)
	}
	for _, line := range q {
		s.writeAgentLocked(line)
	}
	s.amu.Unlock()
	if e != nil {
		s.background(func() { s.refresh(e) })
	}
}

// write sends one message to the process of e.
func (e *epoch) write(line []byte) error {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	e.wbuf = appendLine(e.wbuf, line)
	_, err := e.Proc.Stdin().Write(e.wbuf)
	return err
}

// maxKeptLine bounds the write buffer kept for the next line (appendLine):
// a large message's buffer is not held on to.
const maxKeptLine = 64 << 10

// appendLine returns line and a newline in buf's array, one write's worth,
// reusing buf unless it is larger than maxKeptLine.
func appendLine(buf, line []byte) []byte {
	if cap(buf) > maxKeptLine {
		buf = nil
	}
	return append(append(buf[:0], line...), '\n')
}

func (s *Session) diagnostic(e *epoch, text string) {
	out, _ := e.Proc.(serverOutput)
	if out != nil {
		text = out.Redact(text)
	}
	s.mu.Lock()
	if len(s.diagnostics) >= maxDiagnostics {
		s.diagnostics = s.diagnostics[1:]
	}
	s.diagnostics = append(s.diagnostics, text)
	s.mu.Unlock()
	if out != nil {
		out.LogOutput("server diagnostic", text)
		return
	}
	s.log.Info("server diagnostic", "epoch", e.ID, "line", text)
}

// serverOutput is what *supervisor.Process adds to Process for text that
// comes from the server: Redact replaces the credentials' values it was
// given, LogOutput writes to the daemon's log within the epoch's bounds.
type serverOutput interface {
	Redact(text string) string
	LogOutput(msg, text string)
}

func (s *Session) warn(text string) {
	s.mu.Lock()
	if s.cur != nil {
		// A warning may quote the server (an error it answered).
		text = redactText(s.cur, text)
	}
	if len(s.warnings) >= maxDiagnostics {
		s.warnings = s.warnings[1:]
	}
	s.warnings = append(s.warnings, text)
	s.mu.Unlock()
	s.log.Warn(text)
}

// launchFailedPrefix starts the reason of a session whose first launch
// failed.
const launchFailedPrefix = "the server could not be launched: "

// unavailableLocked describes why no epoch can take a request now.
func (s *Session) unavailableLocked() *control.Refusal {
	r := &control.Refusal{Error: control.ServerUnavailable, Server: s.opts.Label, Reason: s.reason,
		Retry: "wait for the server to be restarted, or ask the person to fix it"}
	if s.state == StateEnded {
		// Nothing restarts: the answer can only reach an agent that is
		// leaving (its input ended, and the drain is over).
		r.Retry = "none in this agent run, which is over"
	}
	if s.state == StateCrashLooping || s.state == StateFailed {
		// Neither is restarted automatically.
		r.Retry = "ask the person to fix the server and run `portcullis restart " + s.opts.Label + "`"
		if s.configFault {
			// A restart would run the same command: the configuration
			// must change first.
			r.Retry = "ask the person to correct the command of " + s.opts.Label + " in Portcullis's configuration (Preferences, or `portcullis servers edit " + s.opts.Label + " -- /absolute/path/to/command …`), then reconnect"
		}
	}
	e := s.cur
	if e == nil {
		if r.Reason == "" {
			r.Reason = "the server has not started"
		}
		switch s.launchFault {
		case control.CredentialUnavailable:
			// The launch error says what happened and what the person
			// should do; the refusal's name is not repeated.
			r.Error = control.CredentialUnavailable
			r.Reason = strings.TrimPrefix(strings.TrimPrefix(r.Reason, launchFailedPrefix), string(control.CredentialUnavailable)+": ")
			r.Retry = "tell the person; once they have done so, they reconnect this server in the agent"
		case control.ApprovalDenied:
			r.Error = control.ApprovalDenied
			r.Retry = "tell the person that the server was not started because they denied its launch"
		case control.ApprovalTimeout:
			r.Error = control.ApprovalTimeout
			r.Retry = "tell the person that the server's launch needs their approval in Portcullis: they reconnect this server in the agent and approve the launch when Portcullis asks"
		case control.AuditUnavailable:
			r.Error = control.AuditUnavailable
			r.Retry = "tell the person that Portcullis cannot write its audit log (they should check the disk and the data directory), then reconnect this server in the agent"
		}
		return r
	}
	if r.Reason == "" {
		r.Reason = e.endWhy
	}
	r.Epoch = e.ID
	r.ExitStatus, r.StderrTail = exitDetails(e)
	return r
}

// lastStderrLine is the last non-blank line of tail (already redacted of
// the server's secrets by the supervisor), escaped and cut to 300
// characters; "" when there is none.
func lastStderrLine(tail []string) string {
	for i := len(tail) - 1; i >= 0; i-- {
		line := strings.TrimSpace(tail[i])
		if line == "" {
			continue
		}
		if r := []rune(line); len(r) > 300 {
			line = string(r[:300]) + "…"
		}
		return textsafe.Line(line)
	}
	return ""
}

// readOnlyHint returns, when the last lines of a sandboxed server's stderr
// say that a write failed on a read-only file system (EROFS: the sandbox
// mounts the person's home read-only), the path they name and the one
// command that lets the server write there; "" otherwise.
func readOnlyHint(label string, tail []string) string {
	for i := len(tail) - 1; i >= 0 && i >= len(tail)-10; i-- {
		line := tail[i]
		if !strings.Contains(strings.ToLower(line), "read-only file system") && !strings.Contains(line, "EROFS") {
			continue
		}
		for _, m := range absPathRe.FindAllString(line, -1) {
			p := filepath.Clean(m)
			if p == "/" {
				continue
			}
			dir := p
			if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
				dir = filepath.Dir(p)
			}
			return fmt.Sprintf("; it could not write %s, which its sandbox keeps read-only: to let it write there, run portcullis servers edit %s --write %s",
				textsafe.Line(p), label, textsafe.Line(dir))
		}
		return fmt.Sprintf("; it could not write a path its sandbox keeps read-only: let it write there with portcullis servers edit %s --write DIR", label)
	}
	return ""
}

// absPathRe finds absolute paths in a line of stderr.
var absPathRe = regexp.MustCompile(`/[^\s'"(),:;]+`)

// exitDetails returns the exit status of e's process ("" while it runs) and
// the last lines it wrote on stderr.
func exitDetails(e *epoch) (status string, stderrTail []string) {
	select {
	case <-e.Proc.Done():
		exit := e.Proc.Exit()
		return exit.String(), exit.StderrTail
	default:
		return "", e.Proc.StderrTail(10)
	}
}
