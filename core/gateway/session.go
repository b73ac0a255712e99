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
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/supervisor"
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
	ID     string
	Record identity.Record
	Proc   Process
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
	RunID  string // the agent run's ULID
	Label  string // server label
	Agent  Agent
	Launch Launcher
	// MaxMessage is the largest message accepted from either side, in
	// bytes (mcpwire.DefaultMaxMessage when 0).
	MaxMessage int
	// StartupTimeout bounds the wait for a new process's first response
	// (default 30 s). On expiry the request is refused with
	// server_unavailable and the process group is stopped.
	StartupTimeout time.Duration
	Logger         *slog.Logger
	// OnChange, when set, is called (without locks held) after the
	// session's visible state changes.
	OnChange func()
}

// State is where a session is in its life.
type State string

// Session states. Later epochs pass through identity-pending and
// catalog-ready on their way to ready (DESIGN.md, "The refresh contract").
const (
	StateStarting State = "starting"
	StateReady    State = "ready"
	StateFailed   State = "failed"
	StateEnded    State = "ended"
)

// Session is one agent run: the agent's connection and the epochs that serve
// it. Create it with New and run it with Serve.
type Session struct {
	opts Options
	log  *slog.Logger

	amu      sync.Mutex // serializes writes to the agent; taken before mu
	agentOut io.Writer  // guarded by amu

	mu            sync.Mutex
	state         State                   // guarded by mu
	cur           *epoch                  // guarded by mu; nil before the first launch
	nextID        int64                   // guarded by mu
	pending       map[int64]*pending      // guarded by mu; gateway id → request toward the server
	byAgentID     map[string]int64        // guarded by mu; agent's raw id → gateway id
	reverse       map[int64]*reverseEntry // guarded by mu; gateway id → server's request toward the agent
	handshakeDone bool                    // guarded by mu
	queue         [][]byte                // guarded by mu; server → agent messages before the handshake
	diagnostics   []string                // guarded by mu; non-JSON-RPC lines from servers
	startedAt     time.Time
	ctx           context.Context // cancelled when Serve returns
}

type epoch struct {
	Epoch
	wmu      sync.Mutex // serializes writes to Proc.Stdin
	answered bool       // guarded by Session.mu: the process has answered a request
	ended    bool       // guarded by Session.mu
	endWhy   string     // guarded by Session.mu
	timer    *time.Timer
}

type pending struct {
	agentID json.RawMessage // the agent's id, nil for the gateway's own requests
	method  string
	ep      *epoch
	token   string // progress token, raw JSON; "" when none
	reply   chan *mcpwire.Message
}

type reverseEntry struct {
	ep       *epoch
	serverID json.RawMessage
}

const maxDiagnostics = 50

// New returns a Session; nothing runs until Serve.
func New(o Options) *Session {
	if o.StartupTimeout <= 0 {
		o.StartupTimeout = 30 * time.Second
	}
	if o.MaxMessage <= 0 {
		o.MaxMessage = mcpwire.DefaultMaxMessage
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("run", o.RunID, "server", o.Label)
	return &Session{
		opts:      o,
		log:       log,
		state:     StateStarting,
		nextID:    1,
		pending:   map[int64]*pending{},
		byAgentID: map[string]int64{},
		reverse:   map[int64]*reverseEntry{},
		startedAt: time.Now(),
	}
}

// Serve launches the first epoch and proxies until the agent's input ends or
// ctx is cancelled, then stops the server process group and returns. A
// failed launch does not end the session: the agent's requests are answered
// with server_unavailable naming the cause, so the agent sees why.
func (s *Session) Serve(ctx context.Context, agentIn io.Reader, agentOut io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.ctx = ctx
	s.agentOut = agentOut

	if err := s.launch(ctx); err != nil {
		s.log.Warn("launch failed", "err", err)
	}

	agentDone := make(chan error, 1)
	go func() { agentDone <- s.readAgent(agentIn) }()

	var err error
	select {
	case err = <-agentDone:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.shutdown()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// launch starts a new epoch and makes it current.
func (s *Session) launch(ctx context.Context) error {
	ep, err := s.opts.Launch(ctx)
	if err != nil {
		s.mu.Lock()
		s.state = StateFailed
		s.cur = &epoch{ended: true, endWhy: err.Error()}
		s.mu.Unlock()
		s.changed()
		return err
	}
	e := &epoch{Epoch: *ep}
	s.mu.Lock()
	s.cur = e
	s.state = StateReady
	s.mu.Unlock()
	s.log.Info("epoch started", "epoch", e.ID, "pid", e.Proc.Pid())
	go s.readServer(e)
	go func() {
		<-e.Proc.Done()
		exit := e.Proc.Exit()
		s.endEpoch(e, "server process exited ("+exit.String()+")")
	}()
	s.changed()
	return nil
}

func (s *Session) changed() {
	if s.opts.OnChange != nil {
		s.opts.OnChange()
	}
}

// shutdown stops every process the session started and fails what is left.
func (s *Session) shutdown() {
	s.mu.Lock()
	ep := s.cur
	s.state = StateEnded
	s.mu.Unlock()
	if ep != nil && ep.Proc != nil {
		s.endEpoch(ep, "agent run ended")
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := ep.Proc.Stop(stopCtx); err != nil {
			s.log.Warn("stopping server", "epoch", ep.ID, "err", err)
		}
		cancel()
	}
	s.changed()
}

// endEpoch marks e ended and answers every request still waiting on it with
// epoch_ended. It is idempotent.
func (s *Session) endEpoch(e *epoch, why string) {
	s.mu.Lock()
	if e.ended {
		s.mu.Unlock()
		return
	}
	e.ended, e.endWhy = true, why
	if e.timer != nil {
		e.timer.Stop()
	}
	current := ""
	if s.cur != nil && s.cur != e && !s.cur.ended {
		current = s.cur.ID
	}
	var answers [][]byte
	for id, p := range s.pending {
		if p.ep != e {
			continue
		}
		s.dropPendingLocked(id, p)
		if p.reply != nil {
			close(p.reply)
			continue
		}
		r := &Refusal{
			Error:        EpochEnded,
			Reason:       fmt.Sprintf("%s before answering %s; the call was not retried and may or may not have taken effect", why, p.method),
			Server:       s.opts.Label,
			Epoch:        e.ID,
			CurrentEpoch: current,
			Retry:        "check the effect before calling again",
		}
		answers = append(answers, r.Response(p.agentID))
	}
	for id, r := range s.reverse {
		if r.ep == e {
			delete(s.reverse, id)
		}
	}
	if s.cur == e && s.state != StateEnded {
		s.state = StateFailed
	}
	s.mu.Unlock()
	s.log.Info("epoch ended", "epoch", e.ID, "why", why, "answered", len(answers))
	for _, a := range answers {
		s.writeAgent(a)
	}
	if e.Proc != nil {
		// Reap whatever the process group left behind (grandchildren that
		// hold stdout, for instance).
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = e.Proc.Stop(ctx)
		}()
	}
	s.changed()
}

func (s *Session) dropPendingLocked(id int64, p *pending) {
	delete(s.pending, id)
	if p.agentID != nil {
		if cur, ok := s.byAgentID[string(p.agentID)]; ok && cur == id {
			delete(s.byAgentID, string(p.agentID))
		}
	}
}

// writeAgent writes one message to the agent.
func (s *Session) writeAgent(line []byte) {
	s.amu.Lock()
	defer s.amu.Unlock()
	s.writeAgentLocked(line)
}

func (s *Session) writeAgentLocked(line []byte) {
	if _, err := s.agentOut.Write(append(line, '\n')); err != nil {
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
	if !s.handshakeDone {
		s.queue = append(s.queue, line)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.writeAgentLocked(line)
}

// completeHandshake flushes what the server said before the agent was ready.
func (s *Session) completeHandshake() {
	s.amu.Lock()
	defer s.amu.Unlock()
	s.mu.Lock()
	if s.handshakeDone {
		s.mu.Unlock()
		return
	}
	s.handshakeDone = true
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, line := range q {
		s.writeAgentLocked(line)
	}
}

// write sends one message to the process of e.
func (e *epoch) write(line []byte) error {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	_, err := e.Proc.Stdin().Write(buf)
	return err
}

func (s *Session) diagnostic(e *epoch, text string) {
	s.mu.Lock()
	if len(s.diagnostics) >= maxDiagnostics {
		s.diagnostics = s.diagnostics[1:]
	}
	s.diagnostics = append(s.diagnostics, text)
	s.mu.Unlock()
	s.log.Info("server diagnostic", "epoch", e.ID, "line", text)
}

// unavailableLocked describes why no epoch can take a request now.
func (s *Session) unavailableLocked() *Refusal {
	r := &Refusal{Error: ServerUnavailable, Server: s.opts.Label, Retry: "wait for the server to be restarted, or ask the person to fix it"}
	e := s.cur
	switch {
	case e == nil:
		r.Reason = "the server has not started"
	case e.Proc == nil:
		r.Reason = "the server could not be launched: " + e.endWhy
	default:
		r.Reason = e.endWhy
		r.Epoch = e.ID
		select {
		case <-e.Proc.Done():
			exit := e.Proc.Exit()
			r.ExitStatus = exit.String()
			r.StderrTail = exit.StderrTail
		default:
			r.StderrTail = e.Proc.StderrTail(10)
		}
	}
	return r
}
