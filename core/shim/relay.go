package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// relay is the shim between the agent and the daemons that serve it, one
// after another (see the package doc).
type relay struct {
	o   Options
	ctx context.Context

	amu sync.Mutex // serializes writes to the agent

	mu   sync.Mutex
	cond *sync.Cond // signalled when link, reconnecting or down change
	// link is the daemon connection in use; nil while none serves.
	link *link
	// reconnecting says a reconnection runs: the agent's messages wait.
	reconnecting bool
	// down, when no daemon serves and none is being reached, says why;
	// lastTry is when the last attempt to reach one ended.
	down    *control.Refusal
	lastTry time.Time
	// stopped says the last daemon stopped on purpose: the next request
	// connects again (starting a daemon if none runs) at once.
	stopped bool
	pend    *inflight
	held    map[string]bool // ids of requests that wait for a person
	// initialize is the agent's initialize request, replayed to a new
	// daemon; nil until the agent sent one.
	initialize []byte
	// listen is the agent's subscriptions/listen request (2026-07-28), the
	// stream its list changes arrive on, and listenID its id: open when the
	// daemon goes away, it is sent to the new daemon rather than answered.
	listen, listenID []byte
	relisten         bool
	// prev is the run served last, which a new connection continues.
	prev       control.Continuation
	inputEnded bool
	replays    int
	exit       int // 1 once a daemon died with requests of an agent whose input had ended
	// agentGone is closed when writing to the agent failed: it is gone.
	agentGone     chan struct{}
	agentGoneOnce sync.Once
}

// link is one connection to a daemon.
type link struct {
	c    *control.Conn
	wmu  sync.Mutex
	done chan struct{} // closed when its reader ended
	// handled is closed once its end was handled (lost).
	handled chan struct{}
	// stopping says the daemon said it stops on purpose.
	stopping bool
	err      error // why the reader ended, once done is closed
	// replayID is the id of the replayed initialize, whose answer goes to
	// replayed instead of the agent.
	replayID string
	replayed chan *mcpwire.Message
}

func (l *link) write(line []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	buf := make([]byte, 0, len(line)+1)
	_, err := l.c.Write(append(append(buf, line...), '\n'))
	return err
}

func newRelay(o Options) *relay {
	r := &relay{o: o, pend: &inflight{ids: map[string]*pendingID{}}, held: map[string]bool{}, agentGone: make(chan struct{})}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *relay) writeAgent(b []byte) error {
	r.amu.Lock()
	defer r.amu.Unlock()
	_, err := r.o.Stdout.Write(b)
	if err != nil {
		r.agentGoneOnce.Do(func() { close(r.agentGone) })
	}
	return err
}

func (r *relay) warn(format string, args ...any) { stderrf(r.o, format, args...) }

// writeDaemon writes line to the daemon in use, if any (agentTooLarge).
func (r *relay) writeDaemon(line []byte) error {
	r.mu.Lock()
	l := r.link
	r.mu.Unlock()
	if l == nil {
		return nil
	}
	_ = l.write(line) // a connection that failed: its reader tells
	return nil
}

func (r *relay) run(ctx context.Context, conn *control.Conn) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.ctx = ctx
	l := r.newLink(conn)
	r.link = l
	r.prev = control.Continuation{Run: conn.Reply.Run, DaemonPID: conn.Reply.DaemonPID}
	go r.read(l)

	agentDone := make(chan error, 1)
	go func() { agentDone <- r.readAgent() }()
	select {
	case err := <-agentDone:
		if !errors.Is(err, io.EOF) {
			// The agent's input failed: it is gone. The daemon takes the
			// connection's end for that and ends the run at once.
			r.mu.Lock()
			l := r.link
			r.mu.Unlock()
			if l != nil {
				if uc, ok := l.c.Conn.(*net.UnixConn); ok {
					_ = uc.CloseWrite()
				}
			}
			return 0
		}
		return r.endInput()
	case <-r.agentGone:
		r.warn("writing to the agent failed: it is gone")
		return 1
	case <-ctx.Done():
		return 1
	}
}

// readAgent reads the agent's messages and passes them on until its input
// ends (io.EOF) or fails.
func (r *relay) readAgent() error {
	rd := mcpwire.NewReader(r.o.Stdin, r.o.MaxMessage)
	for {
		line, err := rd.ReadLine()
		if err != nil {
			var tl *mcpwire.TooLargeError
			if errors.As(err, &tl) {
				// Never forwarded: answered here by the id it carries,
				// wherever that stands in the line.
				_ = agentTooLarge(r.o, tl, r.writeAgent, r.writeDaemon, r.warn)
				continue
			}
			return err
		}
		if control.Reserved(line) {
			// Never JSON; and the daemon reserves such lines for
			// control.EndOfInput, which only this shim sends.
			r.warn("a line from the agent begins with a NUL byte; answered as a parse error, not forwarded")
			if err := r.writeAgent(append(mcpwire.NewError(nil, mcpwire.CodeParseError, "Parse error: the line begins with a NUL byte, which is not JSON", nil), '\n')); err != nil {
				return err
			}
			continue
		}
		m, perr := mcpwire.Parse(line)
		if perr != nil {
			m = nil
		}
		if err := r.forward(line, m); err != nil {
			return err
		}
	}
}

// forward passes one line of the agent on to the daemon in use, waiting
// for a reconnection that runs; with no daemon, a request is answered
// with why. It returns only the error of writing to the agent.
func (r *relay) forward(line []byte, m *mcpwire.Message) error {
	request := m != nil && m.Kind == mcpwire.KindRequest
	r.mu.Lock()
	if request && m.Method == "initialize" {
		r.initialize = append([]byte(nil), line...)
	}
	if request && m.Method == "subscriptions/listen" {
		r.listen, r.listenID = append([]byte(nil), line...), append([]byte(nil), m.ID...)
	}
	for r.link == nil && r.reconnecting {
		r.cond.Wait()
	}
	if r.link == nil && request && (r.stopped || time.Since(r.lastTry) >= r.o.RetryEvery) {
		// The daemon stopped on purpose, or none was reached a while
		// ago: this request tries again, as connect does at first.
		r.reconnecting = true
		r.mu.Unlock()
		r.reconnect(false)
		r.mu.Lock()
	}
	l := r.link
	if l == nil {
		down := r.down
		r.mu.Unlock()
		if !request {
			return nil // an answer or notification for a daemon that is gone
		}
		if down == nil {
			down = unavailable(r.o, "no Portcullis daemon serves this connection")
		}
		return r.writeAgent(append(down.Response(m.ID), '\n'))
	}
	if request {
		call, tool := m.Method == "tools/call", ""
		if call {
			var p struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal(m.Params, &p)
			tool = p.Name
		}
		r.pend.addCall(m.ID, call, tool)
	}
	r.mu.Unlock()
	_ = l.write(line) // a connection that failed: its reader tells, and answers
	return nil
}

func (r *relay) newLink(c *control.Conn) *link {
	return &link{c: c, done: make(chan struct{}), handled: make(chan struct{})}
}

// read passes the daemon's lines on to the agent until the connection
// ends, then handles its end (lost).
func (r *relay) read(l *link) {
	// The daemon keeps the lines of servers to the limit, but puts the
	// agent's own ids back into their answers, and an agent's id may be
	// as long as a whole line of its own: from the daemon, a line of twice
	// the limit is still an answer to pass on.
	limit := r.o.MaxMessage
	if limit <= 0 {
		limit = mcpwire.DefaultMaxMessage
	}
	rd := mcpwire.NewReader(l.c.Reader, 2*limit)
	var err error
	for {
		var line []byte
		line, err = rd.ReadLine()
		if err != nil {
			var tl *mcpwire.TooLargeError
			if errors.As(err, &tl) {
				// The daemon keeps to its own limit, but ids it rewrites
				// can lengthen a line, and this shim may have read a
				// lower limit from the configuration.
				if err = daemonTooLarge(r.o, tl, r.pend, r.writeAgent, l.write, r.warn); err != nil {
					break
				}
				continue
			}
			break
		}
		if held, released, stopping, ok := control.ParseShimLine(line); ok {
			r.mu.Lock()
			switch {
			case held != nil:
				r.held[string(held)] = true
			case released != nil:
				delete(r.held, string(released))
			case stopping:
				l.stopping = true
			}
			r.mu.Unlock()
			continue
		}
		if control.Reserved(line) {
			continue // a shim line of a newer daemon: never the agent's
		}
		m, perr := mcpwire.Parse(line)
		if perr == nil && m.Kind == mcpwire.KindResponse {
			if l.replayID != "" && string(m.ID) == l.replayID {
				l.replayed <- m
				continue
			}
			r.mu.Lock()
			delete(r.held, string(m.ID))
			r.mu.Unlock()
			r.pend.done(m.ID)
		}
		buf := make([]byte, 0, len(line)+1)
		if err = r.writeAgent(append(append(buf, line...), '\n')); err != nil {
			break
		}
	}
	l.err = err
	close(l.done)
	defer close(l.handled)
	select {
	case <-r.agentGone:
		return // nothing to answer, and no one to reconnect for
	default:
	}
	r.lost(l)
}

// why words the end of l for the agent.
func (r *relay) why(l *link) string {
	pid := ""
	if l.c.Reply.DaemonPID != 0 {
		pid = fmt.Sprintf(" (pid %d)", l.c.Reply.DaemonPID)
	}
	if l.stopping {
		return "the Portcullis daemon" + pid + " stopped"
	}
	reason := "the connection to the Portcullis daemon" + pid + " was lost"
	if l.err != nil && !errors.Is(l.err, io.EOF) {
		reason += ": " + l.err.Error()
	}
	return reason
}

// lost handles the end of link l: the requests in flight on it are
// answered, and unless the agent's input ended, the shim connects again
// (at once, or at the next request when the daemon stopped on purpose).
func (r *relay) lost(l *link) {
	r.mu.Lock()
	if r.link != l {
		r.mu.Unlock() // a link being set up, or replaced already
		return
	}
	r.link = nil
	left := r.pend.drain()
	held := r.held
	r.held = map[string]bool{}
	ended := r.inputEnded
	why := r.why(l)
	r.prev.Why = why
	if !ended {
		if l.stopping {
			r.stopped = true
			r.down = unavailable(r.o, why)
			r.down.Retry = "start Portcullis (run `portcullis` or `portcullis daemon`); the next request connects again"
		} else {
			r.reconnecting = true
		}
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	if len(left) > 0 || !ended {
		r.warn("%s", why)
	}
	for _, p := range left {
		if !ended && r.listen != nil && string(p.id) == string(r.listenID) {
			r.mu.Lock()
			r.relisten = true // the stream goes on on the new daemon
			r.mu.Unlock()
			continue
		}
		ref := r.endedRefusal(why, p, held[string(p.id)])
		if ended {
			// No new daemon will serve this agent, whose input ended.
			ref = unavailable(r.o, why+" while this request was in flight: it may or may not have taken effect; check before retrying anything that writes")
		}
		_ = r.writeAgent(append(ref.Response(p.id), '\n'))
	}
	if ended && len(left) > 0 {
		r.mu.Lock()
		r.exit = 1
		r.mu.Unlock()
	}
	if !ended && !l.stopping {
		go r.reconnect(true)
	}
}

// endedRefusal is the answer to request p, in flight when the daemon went
// away for why: epoch_ended, never retried by the shim.
func (r *relay) endedRefusal(why string, p pendingID, held bool) *control.Refusal {
	ref := &control.Refusal{Error: control.EpochEnded, Server: r.o.Label, Tool: p.tool}
	what := "request"
	if p.call {
		what = "call"
		if p.tool != "" {
			what = "call of " + p.tool
		}
	}
	switch {
	case held:
		ref.Reason = fmt.Sprintf("%s while this %s waited for the person's approval, so the daemon restarted with a new epoch: the call was never sent to the server", why, what)
		ref.Retry = "call the tool again: the new daemon asks the person again"
	case p.call:
		ref.Reason = fmt.Sprintf("%s while this %s was in flight, so the epoch that received it ended (the daemon restarts with a new one): it may or may not have taken effect", why, what)
		ref.Retry = "check whether it took effect before calling the tool again"
	default:
		ref.Reason = fmt.Sprintf("%s while this %s was in flight, so the epoch that received it ended (the daemon restarts with a new one)", why, what)
		ref.Retry = "send it again"
	}
	return ref
}

// reconnect reaches a daemon again and, on success, makes it the one in
// use; r.reconnecting is set. eager (after a daemon went away): it keeps
// trying for ReconnectWait while no daemon answers; otherwise (at a
// request) it tries once, starting a daemon if none answers.
func (r *relay) reconnect(eager bool) {
	r.mu.Lock()
	prev := r.prev
	r.mu.Unlock()
	deadline := time.Now().Add(r.o.ReconnectWait)
	var ref *control.Refusal
	for {
		conn, err := dial(r.ctx, r.o, hello(r.o, &prev))
		if err == nil {
			err = r.adopt(conn)
			if err == nil {
				return
			}
			conn.Close()
		}
		ref = dialRefusal(r.o, err)
		if r.ctx.Err() != nil || !eager || final(err) || time.Now().After(deadline) {
			break
		}
		select {
		case <-r.ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	ref.Reason = fmt.Sprintf("%s, and no daemon could be reached since: %s", prev.Why, ref.Reason)
	if ref.Retry == "" {
		ref.Retry = "start Portcullis (run `portcullis` or `portcullis daemon`); the next request connects again"
	}
	r.warn("%s", ref.Reason)
	r.mu.Lock()
	r.reconnecting, r.down, r.lastTry, r.stopped = false, ref, time.Now(), false
	var listenID []byte
	if r.relisten {
		// No daemon to carry the agent's subscription: it ends, saying why.
		listenID, r.relisten = r.listenID, false
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	if listenID != nil {
		_ = r.writeAgent(append(ref.Response(listenID), '\n'))
	}
}

// adopt makes conn, to a new daemon, the one in use: it replays the
// agent's initialize (its answer goes nowhere), sends initialized, and
// tells the agent that the tools changed.
func (r *relay) adopt(conn *control.Conn) error {
	l := r.newLink(conn)
	r.mu.Lock()
	init := r.initialize
	r.replays++
	n := r.replays
	r.mu.Unlock()
	var replay []byte
	if init != nil {
		id, _ := json.Marshal(fmt.Sprintf("portcullis-shim-replay-%d", n))
		var err error
		if replay, err = mcpwire.SetMember(init, "id", id); err != nil {
			return fmt.Errorf("replaying the agent's initialize: %w", err)
		}
		l.replayID, l.replayed = string(id), make(chan *mcpwire.Message, 1)
	}
	go r.read(l)
	if replay != nil {
		if err := l.write(replay); err != nil {
			return fmt.Errorf("replaying the agent's initialize to the new daemon: %w", err)
		}
		t := time.NewTimer(r.o.ReplayWait)
		defer t.Stop()
		select {
		case m := <-l.replayed:
			if m.Error != nil {
				var e struct {
					Message string `json:"message"`
				}
				_ = json.Unmarshal(m.Error, &e)
				return fmt.Errorf("the new daemon refused the agent's initialize, replayed: %s", e.Message)
			}
		case <-l.done:
			return fmt.Errorf("the new daemon closed the connection before it answered the agent's initialize, replayed")
		case <-t.C:
			return fmt.Errorf("the new daemon did not answer the agent's initialize, replayed, within %s", r.o.ReplayWait)
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
		if err := l.write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
			return fmt.Errorf("sending initialized to the new daemon: %w", err)
		}
	}
	r.mu.Lock()
	select {
	case <-l.done:
		r.mu.Unlock()
		return fmt.Errorf("the new daemon closed the connection at once")
	default:
	}
	old := r.prev
	if r.relisten {
		// Sent before any message of the agent can follow on l.
		r.pend.add(r.listenID)
		if err := l.write(r.listen); err != nil {
			r.pend.done(r.listenID)
			r.mu.Unlock()
			return fmt.Errorf("opening the agent's subscription again on the new daemon: %w", err)
		}
		r.relisten = false
	}
	r.link, r.reconnecting, r.down, r.stopped = l, false, nil, false
	r.prev = control.Continuation{Run: conn.Reply.Run, DaemonPID: conn.Reply.DaemonPID}
	r.cond.Broadcast()
	r.mu.Unlock()
	r.warn("connected again, to the Portcullis daemon (pid %d): run %s continues run %s", conn.Reply.DaemonPID, conn.Reply.Run, old.Run)
	if init != nil {
		// The new daemon's epoch is new, and so may be its tools.
		return r.writeAgent([]byte("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n"))
	}
	return nil
}

// endInput ends the run once the agent's input ended: the daemon in use
// answers what it was sent, then closes (bounded by its drain timeout).
func (r *relay) endInput() int {
	r.mu.Lock()
	r.inputEnded = true
	l := r.link
	r.mu.Unlock()
	if l == nil {
		// What was in flight was answered when the daemon went away, and
		// nothing more will be asked: a reconnection that runs is moot.
		return 0
	}
	// The connection stays open until the daemon closes it: its end tells
	// the daemon that this shim is gone.
	if err := l.write([]byte(control.EndOfInput)); err != nil {
		<-l.handled
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.exit
	}
	drain, allowance := l.c.Reply.DrainTimeout(), r.o.CloseAllowance
	if allowance <= 0 {
		allowance = control.CloseAllowance
	}
	wait := time.NewTimer(drain + allowance)
	defer wait.Stop()
	select {
	case <-l.handled:
		// lost answered what was left, if anything.
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.exit
	case <-wait.C:
		// The daemon is stuck: what it did not answer, it will not.
		r.mu.Lock()
		r.link = nil
		r.mu.Unlock()
		reason := fmt.Sprintf("the Portcullis daemon did not end the run within %s of the agent's input ending (its drain timeout is %s)", drain+allowance, drain)
		left := r.pend.drain()
		if len(left) > 0 {
			r.warn("%s", reason)
		}
		for _, p := range left {
			ref := unavailable(r.o, reason+" while this request was in flight: it may or may not have taken effect; check before retrying anything that writes")
			_ = r.writeAgent(append(ref.Response(p.id), '\n'))
		}
		if len(left) > 0 {
			return 1
		}
	case <-r.ctx.Done():
	}
	return 0
}

// final reports whether err, from reaching a daemon again, is an answer
// that trying again at once would not change: a daemon's refusal, a daemon
// that could not be started, a socket that is not the person's. Anything
// else (no daemon yet, a connection reset while one starts) is tried again.
func final(err error) bool {
	var re *control.RefusedError
	var se *StartError
	return errors.As(err, &re) || errors.As(err, &se) || errors.Is(err, control.ErrForeign)
}
