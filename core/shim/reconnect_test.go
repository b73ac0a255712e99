package shim

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// connected is one connect a fake daemon accepted: the Hello the shim
// sent and the daemon's side of the connection.
type connected struct {
	hello control.Hello
	*daemonSide
}

// fakeDaemon is a daemon at a socket that can die (kill) and be replaced
// by a new one at the same place (serve).
type fakeDaemon struct {
	t      *testing.T
	socket string
	ln     net.Listener
	conns  chan *connected
}

// newFakeDaemon returns a fakeDaemon at a new socket in a short temporary
// directory (Unix socket paths are limited); nothing listens there yet.
func newFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "shim-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &fakeDaemon{t: t, socket: filepath.Join(dir, "s"), conns: make(chan *connected, 4)}
}

// serve starts a daemon of pid pid at the socket: each connect is answered
// as run run.
func (f *fakeDaemon) serve(pid int, run string) {
	f.t.Helper()
	f.serveReply(control.Reply{OK: true, Run: ids.RunID("R-" + run), DaemonPID: pid}, 0)
}

// serveReply starts a daemon at the socket that answers each connect with
// reply. After n connects (0: no limit) it accepts no more, though it still
// listens: a shim that connects again waits for a reply that never comes.
func (f *fakeDaemon) serveReply(reply control.Reply, n int) {
	f.t.Helper()
	_ = os.Remove(f.socket)
	ln, err := net.Listen("unix", f.socket)
	if err != nil {
		f.t.Fatal(err)
	}
	f.ln = ln
	f.t.Cleanup(func() { ln.Close() })
	rb, err := json.Marshal(reply)
	if err != nil {
		f.t.Fatal(err)
	}
	go func() {
		for accepted := 0; n == 0 || accepted < n; {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			line, err := br.ReadBytes('\n')
			var h control.Hello
			if err != nil || json.Unmarshal(line, &h) != nil {
				c.Close()
				continue
			}
			accepted++
			_, _ = c.Write(append(rb, '\n'))
			f.conns <- &connected{hello: h, daemonSide: newDaemonSide(f.t, &bufConn{Conn: c, r: br})}
		}
	}()
}

// kill ends the daemon: no one listens, and conn (its connection to the
// shim) ends.
func (f *fakeDaemon) kill(conn *connected) {
	f.ln.Close()
	_ = os.Remove(f.socket)
	conn.conn.Close()
}

func (f *fakeDaemon) next() *connected {
	f.t.Helper()
	select {
	case c := <-f.conns:
		return c
	case <-time.After(10 * time.Second):
		f.t.Fatal("the shim did not connect within 10 s")
	}
	return nil
}

// agentSide is an agent running the shim against a fakeDaemon: the
// agent's side of the shim's stdin, what the shim writes to stdout and
// stderr, and Run's exit status.
type agentSide struct {
	w    *io.PipeWriter
	out  *lines
	errs *lines
	code <-chan int
}

// startAgent runs the shim for label "x" against f with the options o
// (Socket, Label and the standard streams are set here; ReconnectWait is 5 s
// unless o sets it) until the test ends.
func startAgent(t *testing.T, f *fakeDaemon, o Options) *agentSide {
	t.Helper()
	in, w := io.Pipe()
	a := &agentSide{w: w, out: &lines{}, errs: &lines{}}
	code := make(chan int, 1)
	a.code = code
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		o.Socket, o.Label, o.Stdin, o.Stdout, o.Stderr = f.socket, "x", in, a.out, a.errs
		if o.ReconnectWait == 0 {
			o.ReconnectWait = 5 * time.Second
		}
		code <- Run(ctx, o)
	}()
	t.Cleanup(func() { w.Close() })
	return a
}

func (a *agentSide) send(t *testing.T, line string) {
	t.Helper()
	if _, err := a.w.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
}

// refusal returns the refusal data of the answer with id, failing when it
// is not an error.
func refusal(t *testing.T, answer json.RawMessage) (code int, message string, r control.Refusal) {
	t.Helper()
	var m struct {
		Error *struct {
			Code    int             `json:"code"`
			Message string          `json:"message"`
			Data    control.Refusal `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(answer, &m); err != nil || m.Error == nil {
		t.Fatalf("answer %s is not an error", answer)
	}
	return m.Error.Code, m.Error.Message, m.Error.Data
}

const initLine = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}}`

// handshake runs the agent's initialize and initialized through the
// daemon d.
func handshake(t *testing.T, a *agentSide, d *connected) {
	t.Helper()
	a.send(t, initLine)
	if got := d.next(); got != initLine {
		t.Fatalf("the daemon got %q, want the agent's initialize", got)
	}
	d.send(`{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"s","version":"1"}}}`)
	a.out.answer(t, "0", 1)
	a.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if got := d.next(); !strings.Contains(got, "notifications/initialized") {
		t.Fatalf("the daemon got %q, want initialized", got)
	}
}

// continued checks that d is the new daemon of a run that continues run
// R-1 of daemon pid 101, that it got the agent's initialize replayed with
// an id of the shim's (whose answer the agent never sees) and
// initialized, and that the agent was told its tools changed.
func continued(t *testing.T, a *agentSide, d *connected, why string) {
	t.Helper()
	c := d.hello.Continues
	if c == nil || c.Run != "R-1" || c.DaemonPID != 101 || !strings.Contains(c.Why, why) {
		t.Fatalf("the new daemon's hello continues %+v; want run R-1 of pid 101, why %q", c, why)
	}
	if !d.hello.ShimLines {
		t.Error("the hello does not ask for shim lines")
	}
	replay := d.next()
	m, err := mcpwire.Parse([]byte(replay))
	if err != nil || m.Method != "initialize" || string(m.ID) == "0" || !strings.Contains(replay, `"clientInfo":{"name":"agent","version":"1"}`) {
		t.Fatalf("the new daemon got %q, want the agent's initialize with an id of the shim's", replay)
	}
	d.send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"s","version":"1"}}}`)
	if got := d.next(); !strings.Contains(got, "notifications/initialized") {
		t.Fatalf("the new daemon got %q, want initialized", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(a.out.String(), "notifications/tools/list_changed") {
		if time.Now().After(deadline) {
			t.Fatalf("the agent was not told its tools changed; got:\n%s", a.out.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if strings.Contains(a.out.String(), string(m.ID)) {
		t.Errorf("the agent saw the answer to the replayed initialize:\n%s", a.out.String())
	}
}

// callGoesTo checks that a call of the agent reaches d and its answer the
// agent.
func callGoesTo(t *testing.T, a *agentSide, d *connected, id string) {
	t.Helper()
	call := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"echo","arguments":{}}}`
	a.send(t, call)
	if got := d.next(); got != call {
		t.Fatalf("the new daemon got %q, want the agent's call", got)
	}
	d.send(`{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[]}}`)
	if ans := a.out.answer(t, id, 1); strings.Contains(string(ans), `"error"`) {
		t.Fatalf("the call was answered %s", ans)
	}
}

// TestReconnectBetweenCalls: the daemon dies between two calls; the shim
// reaches the new one, replays the agent's initialize, tells the agent
// that the tools changed, and the next call goes to the new daemon, with
// no answer to the agent lost or made up.
func TestReconnectBetweenCalls(t *testing.T) {
	f := newFakeDaemon(t)
	f.serve(101, "1")
	a := startAgent(t, f, Options{})
	d1 := f.next()
	handshake(t, a, d1)
	callGoesTo(t, a, d1, "1")
	f.kill(d1)
	f.serve(202, "2")
	d2 := f.next()
	continued(t, a, d2, "was lost")
	callGoesTo(t, a, d2, "2")
	if strings.Count(a.out.String(), `"error"`) != 0 {
		t.Errorf("the agent got an error:\n%s", a.out.String())
	}
	a.w.Close()
	if got := d2.next(); got != control.EndOfInput {
		t.Errorf("after the agent's end the daemon got %q", got)
	}
	d2.conn.Close()
	if c := <-a.code; c != 0 {
		t.Errorf("exit %d, want 0", c)
	}
}

// TestReconnectMidCall: a call in flight when the daemon dies is answered
// epoch_ended, saying it may have taken effect, and never sent again; a
// request sent while the shim reconnects waits for the new daemon.
func TestReconnectMidCall(t *testing.T) {
	f := newFakeDaemon(t)
	f.serve(101, "1")
	a := startAgent(t, f, Options{})
	d1 := f.next()
	handshake(t, a, d1)
	a.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"write_file","arguments":{}}}`)
	d1.next()
	f.kill(d1)
	code, msg, r := refusal(t, a.out.answer(t, "7", 1))
	if code != control.EpochEnded.Code() || r.Error != control.EpochEnded || r.Tool != "write_file" ||
		!strings.Contains(msg, "daemon (pid 101)") || !strings.Contains(msg, "may or may not have taken effect") || !strings.Contains(r.Retry, "check whether it took effect") {
		t.Fatalf("the call in flight was answered %d %q %+v", code, msg, r)
	}
	a.send(t, `{"jsonrpc":"2.0","id":8,"method":"tools/list"}`) // waits for the new daemon
	f.serve(202, "2")
	d2 := f.next()
	continued(t, a, d2, "was lost")
	if got := d2.next(); !strings.Contains(got, `"id":8`) {
		t.Fatalf("the new daemon got %q, want the request sent meanwhile (and never the call in flight)", got)
	}
	d2.send(`{"jsonrpc":"2.0","id":8,"result":{"tools":[]}}`)
	a.out.answer(t, "8", 1)
	callGoesTo(t, a, d2, "9")
	if n := strings.Count(a.out.String(), `"id":7`); n != 1 {
		t.Errorf("the call in flight was answered %d times", n)
	}
}

// TestReconnectHeldCall: a call the daemon said waits for a person is
// refused precisely when the daemon dies: never sent, call again; a call
// released before is answered as in flight.
func TestReconnectHeldCall(t *testing.T) {
	f := newFakeDaemon(t)
	f.serve(101, "1")
	a := startAgent(t, f, Options{})
	d1 := f.next()
	handshake(t, a, d1)
	a.send(t, `{"jsonrpc":"2.0","id":"h","method":"tools/call","params":{"name":"deploy","arguments":{}}}`)
	d1.next()
	a.send(t, `{"jsonrpc":"2.0","id":"r","method":"tools/call","params":{"name":"deploy","arguments":{}}}`)
	d1.next()
	d1.send(string(control.HeldLine([]byte(`"h"`))))
	d1.send(string(control.HeldLine([]byte(`"r"`))))
	d1.send(string(control.ReleasedLine([]byte(`"r"`))))
	time.Sleep(50 * time.Millisecond) // the lines are read before the end
	f.kill(d1)
	_, msg, r := refusal(t, a.out.answer(t, `"h"`, 1))
	if r.Error != control.EpochEnded || !strings.Contains(msg, "waited for the person's approval") || !strings.Contains(msg, "never sent") || !strings.Contains(r.Retry, "call the tool again") {
		t.Errorf("the held call was answered %q %+v", msg, r)
	}
	_, msg, r = refusal(t, a.out.answer(t, `"r"`, 1))
	if r.Error != control.EpochEnded || !strings.Contains(msg, "may or may not have taken effect") {
		t.Errorf("the released call was answered %q %+v", msg, r)
	}
	if strings.Contains(a.out.String(), "portcullis: ") {
		t.Errorf("a shim line reached the agent:\n%q", a.out.String())
	}
}

// TestReconnectNever: when no daemon comes back, each request is answered
// with server_unavailable saying why, and a daemon that comes back later
// is reached at a later request.
func TestReconnectNever(t *testing.T) {
	f := newFakeDaemon(t)
	f.serve(101, "1")
	a := startAgent(t, f, Options{ReconnectWait: 300 * time.Millisecond, RetryEvery: time.Hour})
	d1 := f.next()
	handshake(t, a, d1)
	f.kill(d1)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(a.errs.String(), "no daemon could be reached since") {
		if time.Now().After(deadline) {
			t.Fatalf("the shim did not give up; stderr:\n%s", a.errs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	code, msg, r := refusal(t, a.out.answer(t, "3", 1))
	if code != control.ServerUnavailable.Code() || !strings.Contains(msg, "the connection to the Portcullis daemon (pid 101) was lost") ||
		!strings.Contains(msg, "no daemon could be reached since") || !strings.Contains(msg, "no Portcullis daemon is running") || r.Retry == "" {
		t.Fatalf("the request was answered %d %q %+v", code, msg, r)
	}
	a.w.Close()
	if c := <-a.code; c != 0 {
		t.Errorf("exit %d, want 0", c)
	}
}

// TestReconnectAfterStop: a daemon that says it stops on purpose is not
// replaced at once; the agent's next request connects again (starting a
// daemon when none runs, as connect does).
func TestReconnectAfterStop(t *testing.T) {
	f := newFakeDaemon(t)
	f.serve(101, "1")
	started := make(chan struct{}, 4)
	a := startAgent(t, f, Options{Start: func() (<-chan error, error) {
		started <- struct{}{}
		f.serve(202, "2")
		return nil, nil
	}})
	d1 := f.next()
	handshake(t, a, d1)
	d1.send(control.StoppingLine)
	f.kill(d1)
	time.Sleep(300 * time.Millisecond)
	select {
	case <-started:
		t.Fatal("the shim started a daemon after the person stopped it, before any request")
	default:
	}
	a.send(t, `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`)
	d2 := f.next()
	continued(t, a, d2, "stopped")
	if got := d2.next(); !strings.Contains(got, `"id":4`) {
		t.Fatalf("the new daemon got %q, want the request", got)
	}
	select {
	case <-started:
	default:
		t.Error("no daemon was started")
	}
}

// TestReconnectBeforeInitialize: a daemon lost before the agent's
// handshake is replaced without a replay or a list_changed.
func TestReconnectBeforeInitialize(t *testing.T) {
	f := newFakeDaemon(t)
	f.serve(101, "1")
	a := startAgent(t, f, Options{})
	d1 := f.next()
	f.kill(d1)
	f.serve(202, "2")
	d2 := f.next()
	if d2.hello.Continues == nil || d2.hello.Continues.Run != "R-1" {
		t.Fatalf("hello continues %+v", d2.hello.Continues)
	}
	time.Sleep(50 * time.Millisecond)
	a.send(t, initLine)
	if got := d2.next(); got != initLine {
		t.Fatalf("the new daemon got %q first, want the agent's own initialize", got)
	}
	if strings.Contains(a.out.String(), "list_changed") {
		t.Errorf("the agent got %q", a.out.String())
	}
}

// TestReconnectListenStream: the agent's subscriptions/listen stream
// (2026-07-28), open when the daemon dies, is not answered but opened again
// on the new daemon, with the agent's id; a plain call in flight is
// answered epoch_ended.
func TestReconnectListenStream(t *testing.T) {
	f := newFakeDaemon(t)
	f.serve(101, "1")
	a := startAgent(t, f, Options{})
	d1 := f.next()
	listen := `{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	a.send(t, listen)
	d1.next()
	a.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`)
	d1.next()
	f.kill(d1)
	refusal(t, a.out.answer(t, "5", 1))
	f.serve(202, "2")
	d2 := f.next()
	if got := d2.next(); got != listen {
		t.Fatalf("the new daemon got %q first, want the agent's subscription as it sent it", got)
	}
	d2.send(`{"jsonrpc":"2.0","id":"L","result":{}}`)
	a.out.answer(t, `"L"`, 1)
	if n := strings.Count(a.out.String(), `"id":"L"`); n != 1 {
		t.Errorf("the subscription was answered %d times:\n%s", n, a.out.String())
	}
}
