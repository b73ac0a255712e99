// Package shim is `portcullis connect LABEL`: the stdio program an agent
// launches in place of an MCP server. It connects to the daemon's control
// socket (starting a daemon when none answers) and relays the agent's
// newline-delimited JSON-RPC (MCP stdio transport) in both directions for
// the life of the agent's connection, whatever happens to the daemon.
//
// The shim keeps the agent's stdin and stdout and tracks the agent's
// requests not yet answered, its initialize request, and which calls the
// daemon said wait for a person (control.HeldLine). When the daemon goes
// away (killed, crashed, stopped, replaced by a new version) the agent's
// connection stays open: every request in flight is answered with
// epoch_ended naming the restart (a call that waited for a person was never
// sent, and says to call again; any other may or may not have taken
// effect), never retried. Then the shim connects again, starting a daemon
// when none answers, as at first; a daemon that said it stops on purpose
// (control.StoppingLine) is connected again at the agent's next request
// rather than started at once. On the new daemon it replays the agent's
// initialize (its answer is not passed on), sends initialized, and tells
// the agent notifications/tools/list_changed: the run goes on with a new
// epoch, and the new daemon records which run it continues. Requests the
// agent sends meanwhile wait for the new daemon. When none can be reached,
// each request is answered with server_unavailable saying why, and each
// later request tries again.
//
// If no daemon can be reached at the start, each of the agent's requests is
// answered with server_unavailable saying why. The reason is written on
// stderr in every case, which agents show in their logs. An agent that
// kills the shim ends the run at once: the socket's end tells the daemon.
package shim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// Options configure Run.
type Options struct {
	Socket string // the daemon's control socket
	Label  string // server label to connect to
	// Start launches a daemon in the background; nil never starts one. It
	// returns an error when no daemon could be started (a *StartError
	// words the reason and the advice for the agent); otherwise a channel
	// that receives why, should the started daemon end before it answers
	// (a *StartError when it can be worded, nil when nothing is known), or
	// a nil channel when its end cannot be seen.
	Start func() (exited <-chan error, err error)
	// StartWait bounds the wait for a started daemon to answer (default 10 s).
	StartWait time.Duration
	// StartLog is where a started daemon writes its output, named in the
	// error when it does not come up.
	StartLog   string
	Stdin      io.Reader
	Stdout     io.Writer
	Stderr     io.Writer
	MaxMessage int // mcpwire.DefaultMaxMessage when 0
	// CloseAllowance is how long, after the drain timeout the daemon sent
	// in its reply to connect, the shim waits for the daemon to close once
	// the agent's input ended (control.CloseAllowance when 0).
	CloseAllowance time.Duration
	// ReconnectWait bounds how long, after the daemon went away, the shim
	// tries to reach a new one (besides StartWait for one it starts)
	// before it answers the agent's requests with server_unavailable
	// (default 10 s).
	ReconnectWait time.Duration
	// RetryEvery is how often, once no daemon could be reached, a request
	// of the agent makes the shim try again (default 2 s); requests in
	// between are answered at once.
	RetryEvery time.Duration
	// ReplayWait bounds the wait for the new daemon's answer to the
	// agent's replayed initialize (default 2 min: the server's launch may
	// wait for a person to approve its credentials).
	ReplayWait time.Duration
}

// Run serves the agent until it closes its input (exit code 0) or no daemon
// could be reached at the start (exit code 1), relaying its messages to the
// daemon and reconnecting when the daemon goes away (see the package doc).
func Run(ctx context.Context, o Options) int {
	if o.StartWait <= 0 {
		o.StartWait = 10 * time.Second
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = 10 * time.Second
	}
	if o.RetryEvery <= 0 {
		o.RetryEvery = 2 * time.Second
	}
	if o.ReplayWait <= 0 {
		o.ReplayWait = 2 * time.Minute
	}
	conn, err := dial(ctx, o, hello(o, nil))
	if err != nil {
		ref := dialRefusal(o, err)
		line := oneLine(ref.Reason)
		if ref.Retry != "" {
			line += "; " + oneLine(ref.Retry)
		}
		fmt.Fprintf(o.Stderr, "portcullis connect %s: %s\n", o.Label, line)
		answerRequests(o, ref)
		return 1
	}
	return newRelay(o).run(ctx, conn)
}

// hello is the shim's Hello to the daemon: a relaying connection that reads
// shim lines, continuing run cont when set.
func hello(o Options, cont *control.Continuation) control.Hello {
	return control.Hello{Op: control.OpConnect, Label: o.Label, ShimLines: true, Continues: cont}
}

// dialRefusal words why dial failed, for the agent.
func dialRefusal(o Options, err error) *control.Refusal {
	ref := unavailable(o, oneLine(err.Error()))
	var re *control.RefusedError
	var se *StartError
	switch {
	case errors.As(err, &re):
		ref = refused(o, re.Reply)
	case errors.As(err, &se):
		// Starting a daemon is what failed: the advice is the cause's.
		ref.Reason, ref.Retry = oneLine(se.Reason), oneLine(se.Retry)
	case errors.Is(err, control.ErrForeign):
		ref.Retry = "tell the person that Portcullis's socket is not theirs (another user may impersonate it); nothing was sent to it"
	}
	return ref
}

// StartError is why no daemon could be started for the agent, worded for
// it: Reason says what happened, Retry the one thing to do about it.
type StartError struct {
	Reason string
	Retry  string
	// Running is set when the started daemon exited because another one
	// holds the person's data: that one may still be coming up, so the
	// shim keeps trying its socket for the rest of StartWait.
	Running bool
}

func (e *StartError) Error() string { return e.Reason }

func dial(ctx context.Context, o Options, hello control.Hello) (*control.Conn, error) {
	connect := func() (*control.Conn, error) { return control.Dial(o.Socket, hello, 10*time.Second) }
	conn, err := connect()
	if err == nil || !errors.Is(err, control.ErrNoDaemon) || o.Start == nil {
		return conn, err
	}
	exited, serr := o.Start()
	if serr != nil {
		var se *StartError
		if errors.As(serr, &se) {
			return nil, se
		}
		return nil, &StartError{
			Reason: "no daemon was running and starting one failed: " + serr.Error(),
			Retry:  "ask the person to check Portcullis (`portcullis daemon` in a terminal shows why it does not start), then reconnect the agent",
		}
	}
	deadline := time.NewTimer(o.StartWait)
	defer deadline.Stop()
	var running *StartError
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err = connect()
		if err == nil || !errors.Is(err, control.ErrNoDaemon) {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case xerr := <-exited:
			// The daemon started here ended before it answered. Another
			// daemon may have won the race to the socket (the one started
			// here then exits at once): one more try tells.
			conn, err = connect()
			if err == nil || !errors.Is(err, control.ErrNoDaemon) {
				return conn, err
			}
			se := exitedError(o, xerr)
			if !se.Running {
				return nil, se
			}
			exited, running = nil, se // wait for the daemon that runs
		case <-deadline.C:
			if running != nil {
				return nil, running
			}
			return nil, &StartError{
				Reason: fmt.Sprintf("started a daemon but it did not answer within %s%s", o.StartWait, logWhere(o)),
				Retry:  "ask the person to check Portcullis (its output tells why it did not come up), then reconnect the agent",
			}
		case <-tick.C:
		}
	}
}

// exitedError words the end of a daemon started for this connection that
// never answered, from what Start's channel said about it.
func exitedError(o Options, xerr error) *StartError {
	var se *StartError
	if errors.As(xerr, &se) {
		return se
	}
	reason := "started a daemon but it exited at once"
	if xerr != nil {
		reason += " (" + xerr.Error() + ")"
	}
	return &StartError{
		Reason: reason + logWhere(o),
		Retry:  "ask the person to check Portcullis (`portcullis daemon` in a terminal shows why it does not start), then reconnect the agent",
	}
}

// logWhere names the started daemon's log, when there is one.
func logWhere(o Options) string {
	if o.StartLog == "" {
		return ""
	}
	return "; its output is in " + o.StartLog
}

// oneLine joins the lines of s (a multi-line error) into one.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	var b strings.Builder
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		if b.Len() > 0 {
			if strings.ContainsAny(b.String()[b.Len()-1:], ";:,") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(l)
	}
	return b.String()
}

func unavailable(o Options, reason string) *control.Refusal {
	return &control.Refusal{
		Error: control.ServerUnavailable, Server: o.Label, Reason: reason,
		Retry: "start Portcullis (run `portcullis` or `portcullis daemon`) and reconnect",
	}
}

// refused words a daemon's refusal of the connection for the agent.
func refused(o Options, r control.Reply) *control.Refusal {
	ref := unavailable(o, r.Error)
	switch r.Code {
	case "unknown_server":
		ref.Retry = "ask the person to add it (portcullis servers add " + o.Label + " -- COMMAND ARGS…) or to fix the label in the agent's configuration"
	case "version_mismatch":
		ref.Retry = "ask the person to restart Portcullis so that the daemon and this shim come from the same build"
	default:
		ref.Retry = "ask the person to check Portcullis"
	}
	return ref
}

// answerRequests answers every request the agent sends, until its input
// ends, with the reason no daemon could serve it: a dual-era client sends
// server/discover first and falls back to initialize on an error, so
// answering only the first request would leave the initialize that follows
// without an answer and the agent would see a bare EOF instead of the reason.
func answerRequests(o Options, ref *control.Refusal) {
	r := mcpwire.NewReader(o.Stdin, o.MaxMessage)
	for {
		line, err := r.ReadLine()
		if err != nil {
			var tl *mcpwire.TooLargeError
			if errors.As(err, &tl) {
				switch {
				case tl.ID != nil && tl.HasMethod:
					if _, err := o.Stdout.Write(append(ref.Response(tl.ID), '\n')); err != nil {
						return
					}
				case tl.ID != nil:
					stderrf(o, "dropped the agent's %d-byte answer %s: over the %d-byte limit, and no daemon to pass it on to", tl.Size, tl.ID, tl.Limit)
				default:
					stderrf(o, "dropped a %d-byte message from the agent: over the %d-byte limit, and without an id that could be answered", tl.Size, tl.Limit)
				}
				continue
			}
			return
		}
		m, err := mcpwire.Parse(line)
		if err != nil || m.Kind != mcpwire.KindRequest {
			continue
		}
		if _, err := o.Stdout.Write(append(ref.Response(m.ID), '\n')); err != nil {
			return
		}
	}
}

// stderrf writes one line on stderr.
func stderrf(o Options, format string, args ...any) {
	fmt.Fprintf(o.Stderr, "portcullis connect %s: %s\n", o.Label, fmt.Sprintf(format, args...))
}

// inflight is the set of the agent's request ids not yet answered, each
// with the number of its requests in flight: an agent that reuses an id
// gets an error for the second request from the daemon, and that answer
// must not make the shim forget the first.
type inflight struct {
	mu  sync.Mutex
	ids map[string]*pendingID // guarded by mu
}

type pendingID struct {
	id   json.RawMessage
	n    int
	tool string // the tool of a tools/call, for the refusal should the daemon go away
	call bool   // a tools/call
}

func (f *inflight) add(id json.RawMessage) { f.addCall(id, false, "") }

// addCall is add, for a request that is a tools/call (call) of tool.
func (f *inflight) addCall(id json.RawMessage, call bool, tool string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.ids[string(id)]
	if p == nil {
		p = &pendingID{id: bytes.Clone(id)}
		f.ids[string(id)] = p
	}
	p.n++
	p.call, p.tool = call, tool
}

// done forgets one request with id and reports whether there was one.
func (f *inflight) done(id json.RawMessage) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.ids[string(id)]
	if p == nil {
		return false
	}
	if p.n--; p.n <= 0 {
		delete(f.ids, string(id))
	}
	return true
}

// drain returns every request in flight (an id twice when two requests
// with it are) and forgets them.
func (f *inflight) drain() []pendingID {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []pendingID
	for _, p := range f.ids {
		for range p.n {
			out = append(out, pendingID{id: p.id, n: 1, tool: p.tool, call: p.call})
		}
	}
	clear(f.ids)
	return out
}

// requestName names an oversized request for stderr: "tools/call request".
func requestName(tl *mcpwire.TooLargeError) string {
	if tl.Method == "" {
		return "request"
	}
	return tl.Method + " request"
}

func refusalTooLarge(o Options, tl *mcpwire.TooLargeError, what string) *control.Refusal {
	return &control.Refusal{
		Error: control.MessageTooLarge, Server: o.Label, Limit: tl.Limit,
		Reason: fmt.Sprintf("the %s is %d bytes, over the %d-byte limit", what, tl.Size, tl.Limit),
	}
}

// agentTooLarge handles a line from the agent over the limit, which is
// never forwarded: a request is refused with message_too_large for its id;
// an answer to a server's request is replaced, toward the daemon, by a
// message_too_large error with the same id, so that the server's request
// is answered; anything else is dropped. Each case is told on stderr. It
// returns only the error of writing to the daemon.
func agentTooLarge(o Options, tl *mcpwire.TooLargeError, writeAgent, writeDaemon func([]byte) error, warn func(string, ...any)) error {
	switch {
	case tl.ID != nil && tl.HasMethod:
		warn("refused the agent's %d-byte %s %s: over the %d-byte limit", tl.Size, requestName(tl), tl.ID, tl.Limit)
		_ = writeAgent(append(refusalTooLarge(o, tl, "request").Response(tl.ID), '\n'))
		return nil
	case tl.ID != nil:
		warn("the agent's %d-byte answer %s is over the %d-byte limit; the server's request gets an error instead", tl.Size, tl.ID, tl.Limit)
		return writeDaemon(refusalTooLarge(o, tl, "agent's answer").Response(tl.ID))
	default:
		warn("dropped a %d-byte message from the agent: over the %d-byte limit, and without an id that could be answered", tl.Size, tl.Limit)
		return nil
	}
}

// daemonTooLarge handles a line from the daemon over the limit: an answer
// to a request of the agent in flight answers it with message_too_large; a
// server's request is answered to the daemon the same way; anything else
// is dropped. Each case is told on stderr. It returns only the error of
// writing to the agent.
func daemonTooLarge(o Options, tl *mcpwire.TooLargeError, pend *inflight, writeAgent, writeDaemon func([]byte) error, warn func(string, ...any)) error {
	switch {
	case tl.ID != nil && !tl.HasMethod && pend.done(tl.ID):
		warn("the %d-byte answer to the agent's request %s is over the %d-byte limit; the agent gets message_too_large", tl.Size, tl.ID, tl.Limit)
		r := refusalTooLarge(o, tl, "answer")
		r.Retry = "ask for less data (a narrower query or a smaller page)"
		return writeAgent(append(r.Response(tl.ID), '\n'))
	case tl.ID != nil && tl.HasMethod:
		warn("the server's %d-byte %s is over the %d-byte limit; it gets message_too_large", tl.Size, requestName(tl), tl.Limit)
		_ = writeDaemon(refusalTooLarge(o, tl, "request").Response(tl.ID))
		return nil
	default:
		warn("dropped a %d-byte message from the daemon: over the %d-byte limit, and it answers no request in flight", tl.Size, tl.Limit)
		return nil
	}
}
