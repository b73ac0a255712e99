// Package shim is `portcullis connect LABEL`: the stdio program an agent
// launches in place of an MCP server. It connects to the daemon's control
// socket (starting a daemon when none answers), then either hands the
// agent's stdin and stdout to the daemon or relays the agent's
// newline-delimited JSON-RPC (MCP stdio transport) in both directions.
//
// Handing over (fd mode, control.PassStdio) is the default when the
// agent's stdin and stdout are pipes or stream sockets: the shim sends both
// descriptors over the socket (SCM_RIGHTS), closes its own copies, and the
// daemon reads and writes the agent directly, one hop as a byte relay would
// be. The shim then only waits for the run's end, which the daemon sends
// with the exit code (0 when the agent closed its input), and exits. It
// relays instead when its stdin or stdout is a terminal, a regular file or
// /dev/null, when the daemon does not ask for them (an older daemon), when
// handing them over fails, or when Options.Relay says so
// (PORTCULLIS_CONNECT_RELAY=1).
//
// The agent is never left hanging, whatever happens to the daemon. If no
// daemon can be reached, each of the agent's requests is answered with a
// server_unavailable error saying why. If the daemon goes away mid-session:
// in relay mode the shim, which tracks the agent's requests not yet
// answered, answers every request in flight the same way; in fd mode only
// the daemon held the agent's descriptors, so the kernel closes them as the
// daemon dies and the agent sees its server's output end at once, as when a
// server crashes (its client fails what it had in flight), while the shim
// sees the socket end without the run's end and exits 1. The reason is
// written on stderr in every case, which agents show in their logs. An
// agent that kills the shim ends the run at once in both modes: the
// socket's end tells the daemon, which closes its copies of the agent's
// descriptors.
package shim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
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
	// Relay keeps the agent's stdio in the shim, relayed over the socket,
	// even when it could be handed to the daemon (see the package doc).
	Relay bool
}

// Run serves the agent until it closes its input (exit code 0) or the
// daemon connection fails (exit code 1), by relaying or, in fd mode, by
// waiting for the daemon's end of the run (see the package doc).
func Run(ctx context.Context, o Options) int {
	if o.StartWait <= 0 {
		o.StartWait = 10 * time.Second
	}
	hello := control.Hello{Op: control.OpConnect, Label: o.Label}
	pass, why := offer(o)
	if pass {
		hello.Pass = control.PassStdio
	} else {
		hello.NoPass = why
	}
	conn, err := dial(ctx, o, hello)
	if err != nil {
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
		line := oneLine(ref.Reason)
		if ref.Retry != "" {
			line += "; " + oneLine(ref.Retry)
		}
		fmt.Fprintf(o.Stderr, "portcullis connect %s: %s\n", o.Label, line)
		answerRequests(o, ref)
		return 1
	}
	defer conn.Close()
	if conn.Reply.Pass != control.PassStdio {
		return relay(ctx, o, conn)
	}
	// The daemon waits for the hand-off message: the descriptors, or the
	// byte that says the shim relays (also to a daemon that asked for
	// what was not offered).
	in, out := o.Stdin.(*os.File), o.Stdout.(*os.File) // both are when pass
	var serr error = control.ErrNoStdio
	if pass {
		if serr = control.SendStdio(conn.Conn, in, out); serr != nil {
			stderrf(o, "could not hand the agent's stdio to the daemon (%v); relaying it", serr)
		}
	}
	if serr != nil {
		if err := control.SendRelay(conn.Conn); err != nil {
			return handoffLost(o, err)
		}
	}
	h, err := control.ReadHandoff(conn)
	if err != nil {
		return handoffLost(o, err)
	}
	if h.Mode != control.ModeFD {
		return relay(ctx, o, conn)
	}
	// The daemon reads and writes the agent itself. Only its copies of
	// the descriptors stay open: when it dies, the kernel closes them
	// and the agent sees its server's output end at once.
	in.Close()
	out.Close()
	return waitEnd(ctx, o, conn)
}

// offer says whether the agent's stdin and stdout can be handed to the
// daemon (control.PassStdio), and when not why.
func offer(o Options) (ok bool, why string) {
	if o.Relay {
		return false, "relay asked for"
	}
	in, ok1 := o.Stdin.(*os.File)
	out, ok2 := o.Stdout.(*os.File)
	if !ok1 || !ok2 {
		return false, "the shim's stdin or stdout is not a file"
	}
	if err := control.StdioKind(in); err != nil {
		return false, "stdin: " + err.Error()
	}
	if err := control.StdioKind(out); err != nil {
		return false, "stdout: " + err.Error()
	}
	return true, ""
}

// handoffLost is the end of a connection lost during the hand-off of the
// agent's stdio: nothing of the agent's was sent, so its requests are
// answered here as when no daemon answers.
func handoffLost(o Options, err error) int {
	ref := unavailable(o, "the connection to the Portcullis daemon was lost as it began: "+oneLine(err.Error()))
	stderrf(o, "%s", ref.Reason)
	answerRequests(o, ref)
	return 1
}

// waitEnd waits, once the agent's stdio is the daemon's (control.ModeFD),
// for the daemon's control.RunEnd, and returns its exit code. A
// connection that ends without it means the daemon died: the agent's
// connection went with it (its client fails what it had in flight), and
// the reason goes to stderr.
func waitEnd(ctx context.Context, o Options, conn *control.Conn) int {
	type result struct {
		end control.RunEnd
		err error
	}
	got := make(chan result, 1)
	go func() {
		var r result
		line, err := conn.Reader.ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &r.end)
		}
		r.err = err
		got <- r
	}()
	select {
	case r := <-got:
		if r.err != nil {
			reason := "the connection to the Portcullis daemon was lost"
			if !errors.Is(r.err, io.EOF) {
				reason += ": " + r.err.Error()
			}
			stderrf(o, "%s; the agent's connection ended with it: requests in flight were not answered and may or may not have taken effect; check before retrying anything that writes", reason)
			return 1
		}
		if r.end.Exit != 0 && r.end.Reason != "" {
			stderrf(o, "%s", oneLine(r.end.Reason))
		}
		return r.end.Exit
	case <-ctx.Done():
		return 1
	}
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
	tick := time.NewTicker(100 * time.Millisecond)
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
	id json.RawMessage
	n  int
}

func (f *inflight) add(id json.RawMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.ids[string(id)]
	if p == nil {
		p = &pendingID{id: bytes.Clone(id)}
		f.ids[string(id)] = p
	}
	p.n++
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

// drain returns the id of every request in flight (an id twice when two
// requests with it are) and forgets them.
func (f *inflight) drain() []json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []json.RawMessage
	for _, p := range f.ids {
		for range p.n {
			out = append(out, p.id)
		}
	}
	clear(f.ids)
	return out
}

func relay(ctx context.Context, o Options, conn *control.Conn) int {
	pend := &inflight{ids: map[string]*pendingID{}}
	var wmu sync.Mutex // serializes writes to the agent
	writeAgent := func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := o.Stdout.Write(b)
		return err
	}
	var dmu sync.Mutex // serializes writes to the daemon
	writeDaemon := func(line []byte) error {
		dmu.Lock()
		defer dmu.Unlock()
		buf := make([]byte, 0, len(line)+1)
		_, err := conn.Write(append(append(buf, line...), '\n'))
		return err
	}
	warn := func(format string, args ...any) { stderrf(o, format, args...) }

	agentDone := make(chan error, 1)
	var inputEnded atomic.Bool // set before EndOfInput is sent
	go func() {
		r := mcpwire.NewReader(o.Stdin, o.MaxMessage)
		var err error
		for {
			var line []byte
			line, err = r.ReadLine()
			if err != nil {
				var tl *mcpwire.TooLargeError
				if errors.As(err, &tl) {
					// Never forwarded: answered here by the id it
					// carries, wherever that stands in the line.
					err = agentTooLarge(o, tl, writeAgent, writeDaemon, warn)
					if err != nil {
						break
					}
					continue
				}
				break
			}
			if control.Reserved(line) {
				// Never JSON; and the daemon reserves such lines for
				// control.EndOfInput, which only this shim sends.
				warn("a line from the agent begins with a NUL byte; answered as a parse error, not forwarded")
				if err = writeAgent(append(mcpwire.NewError(nil, mcpwire.CodeParseError, "Parse error: the line begins with a NUL byte, which is not JSON", nil), '\n')); err != nil {
					break
				}
				continue
			}
			if m, perr := mcpwire.Parse(line); perr == nil && m.Kind == mcpwire.KindRequest {
				pend.add(m.ID)
			}
			if err = writeDaemon(line); err != nil {
				break
			}
		}
		if errors.Is(err, io.EOF) {
			// Before the line: a daemon may end the run as soon as it
			// reads it, and its close must not pass for a lost daemon.
			inputEnded.Store(true)
		}
		if errors.Is(err, io.EOF) && writeDaemon([]byte(control.EndOfInput)) == nil {
			// The agent closed its input (MCP stdio's shutdown): the
			// daemon answers what it sent before, then stops the server
			// and closes. The connection stays open until then: its end
			// tells the daemon that this shim is gone.
			agentDone <- err
			return
		}
		// The daemon takes the end of the connection for an agent that
		// is gone, and stops at once.
		if uc, ok := conn.Conn.(*net.UnixConn); ok {
			_ = uc.CloseWrite()
		}
		agentDone <- err
	}()

	// The daemon keeps the lines of servers to the limit, but puts the
	// agent's own ids back into their answers, and an agent's id may be
	// as long as a whole line of its own: from the daemon, a line of twice
	// the limit is still an answer to pass on.
	fromDaemon := o.MaxMessage
	if fromDaemon <= 0 {
		fromDaemon = mcpwire.DefaultMaxMessage
	}
	fromDaemon *= 2
	daemonErr := make(chan error, 1)
	go func() {
		r := mcpwire.NewReader(conn.Reader, fromDaemon)
		for {
			line, err := r.ReadLine()
			if err != nil {
				var tl *mcpwire.TooLargeError
				if errors.As(err, &tl) {
					// The daemon keeps to its own limit, but ids it
					// rewrites can lengthen a line, and this shim may
					// have read a lower limit from the configuration.
					if err := daemonTooLarge(o, tl, pend, writeAgent, writeDaemon, warn); err != nil {
						daemonErr <- err
						return
					}
					continue
				}
				daemonErr <- err
				return
			}
			if m, perr := mcpwire.Parse(line); perr == nil && m.Kind == mcpwire.KindResponse {
				pend.done(m.ID)
			}
			buf := make([]byte, 0, len(line)+1)
			if err := writeAgent(append(append(buf, line...), '\n')); err != nil {
				daemonErr <- err
				return
			}
		}
	}()

	// answerLost answers the requests left waiting, with reason the
	// daemon will not answer them, says it on stderr and gives the exit
	// status.
	answerLost := func(reason string, left []json.RawMessage) int {
		fmt.Fprintf(o.Stderr, "portcullis connect %s: %s\n", o.Label, reason)
		// Each of these was handed to the daemon, which may have sent it
		// to the server.
		inFlight := reason + " while this request was in flight: it may or may not have taken effect; check before retrying anything that writes"
		for _, id := range left {
			_ = writeAgent(append(unavailable(o, inFlight).Response(id), '\n'))
		}
		return 1
	}
	// lost answers the requests left waiting when the daemon went away
	// (it stopped, crashed or was killed) and gives the exit status.
	lost := func(err error, left []json.RawMessage) int {
		reason := "the connection to the Portcullis daemon was lost"
		if err != nil && !errors.Is(err, io.EOF) {
			reason += ": " + err.Error()
		}
		return answerLost(reason, left)
	}
	select {
	case err := <-daemonErr:
		// The daemon closed first: it stopped, crashed or was killed, or
		// it ended the run at the agent's EndOfInput, having answered
		// everything (then nothing is in flight).
		if inputEnded.Load() {
			if left := pend.drain(); len(left) > 0 {
				return lost(err, left)
			}
			return 0
		}
		select {
		case <-agentDone:
			return 0 // the agent had already finished
		default:
		}
		return lost(err, pend.drain())
	case <-agentDone:
		// Wait (bounded) for the daemon to answer what is in flight (it
		// drains for at most the drain timeout it sent in its reply to
		// connect) and to close once it has stopped the server.
		drain, allowance := conn.Reply.DrainTimeout(), o.CloseAllowance
		if allowance <= 0 {
			allowance = control.CloseAllowance
		}
		wait := time.NewTimer(drain + allowance)
		defer wait.Stop()
		select {
		case err := <-daemonErr:
			// A daemon that ends the run has answered everything first:
			// a request still waiting means it died (or was killed).
			if left := pend.drain(); len(left) > 0 {
				return lost(err, left)
			}
			return 0
		case <-wait.C:
			// The daemon is stuck: what it did not answer, it will not.
			if left := pend.drain(); len(left) > 0 {
				return answerLost(fmt.Sprintf("the Portcullis daemon did not end the run within %s of the agent's input ending (its drain timeout is %s)", drain+allowance, drain), left)
			}
		case <-ctx.Done():
		}
		return 0
	case <-ctx.Done():
		return 1
	}
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
