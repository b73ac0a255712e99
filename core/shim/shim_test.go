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
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// lines collects what a writer receives, line by line.
type lines struct {
	mu  sync.Mutex
	buf strings.Builder // guarded by mu
}

func (l *lines) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// answer returns the n-th (from 1) response with the raw id, failing after 5 s.
func (l *lines) answer(t *testing.T, id string, n int) json.RawMessage {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		seen := 0
		for _, s := range strings.Split(l.String(), "\n") {
			m, err := mcpwire.Parse([]byte(s))
			if err == nil && m.Kind == mcpwire.KindResponse && string(m.ID) == id {
				if seen++; seen == n {
					return json.RawMessage(s)
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer %d with id %s within 5 s; got:\n%.2000s", n, id, l.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// bufConn is a connection whose reads go through r, which may hold what
// was read past the Hello.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// daemonSide reads the lines the shim sends to the daemon.
type daemonSide struct {
	t    *testing.T
	conn net.Conn
	got  chan string
}

func newDaemonSide(t *testing.T, c net.Conn) *daemonSide {
	d := &daemonSide{t: t, conn: c, got: make(chan string, 64)}
	go func() {
		r := mcpwire.NewReader(c, 64<<20)
		for {
			l, err := r.ReadLine()
			if err != nil {
				close(d.got)
				return
			}
			d.got <- string(l)
		}
	}()
	return d
}

func (d *daemonSide) next() string {
	d.t.Helper()
	select {
	case l, ok := <-d.got:
		if !ok {
			d.t.Fatal("the shim closed the connection")
		}
		return l
	case <-time.After(5 * time.Second):
		d.t.Fatal("the daemon received nothing within 5 s")
	}
	return ""
}

func (d *daemonSide) send(line string) {
	d.t.Helper()
	if _, err := d.conn.Write([]byte(line + "\n")); err != nil {
		d.t.Fatal(err)
	}
}

// relayed is a shim running against a fake daemon that it has connected
// to, and the daemon's side of that connection.
type relayed struct {
	*agentSide
	d *connected
}

// startRelay runs the shim for label "x" with a message limit of limit
// (0: the default) and waits until it connected to a fake daemon.
func startRelay(t *testing.T, limit int) *relayed {
	t.Helper()
	return startRelayReplying(t, Options{MaxMessage: limit}, control.Reply{OK: true, Run: "R"})
}

// startRelayReplying is startRelay with the options o (as startAgent sets
// them) and a daemon that answers the connect with reply and accepts no
// other connect.
func startRelayReplying(t *testing.T, o Options, reply control.Reply) *relayed {
	t.Helper()
	f := newFakeDaemon(t)
	f.serveReply(reply, 1)
	a := startAgent(t, f, o)
	return &relayed{agentSide: a, d: f.next()}
}

// wantExit waits up to 5 s for the shim's exit status and fails t unless
// it is want.
func wantExit(t *testing.T, code <-chan int, want int) {
	t.Helper()
	select {
	case c := <-code:
		if c != want {
			t.Errorf("exit code %d, want %d", c, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the shim did not exit")
	}
}

// TestRelayOversized: lines over the limit are handled by the id they
// carry, wherever it stands, in both directions, and every one that
// cannot be answered leaves a line on stderr.
func TestRelayOversized(t *testing.T) {
	const limit = 4096
	pad := strings.Repeat(`{"id":0,"s":"\"id\":1"},`, 1000) // ~24 KB with decoys
	r := startRelay(t, limit)
	agentW, out, errs, code, d := r.w, r.out, r.errs, r.code, r.d
	send := func(line string) {
		t.Helper()
		if _, err := agentW.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}

	// An oversized request, id last: refused here, never forwarded.
	send(`{"method":"tools/call","params":{"name":"t","arguments":{"a":[` + pad + `{}]}},"jsonrpc":"2.0","id":"big"}`)
	if got := out.answer(t, `"big"`, 1); !strings.Contains(string(got), `"code":-31040`) {
		t.Errorf("oversized request answered %.300s, want -31040", got)
	}
	// The agent's oversized answer to a server request: the daemon gets an
	// error with its id instead.
	send(`{"result":{"roots":[` + pad + `{}]},"jsonrpc":"2.0","id":17}`)
	if got := d.next(); !strings.Contains(got, `"id":17`) || !strings.Contains(got, `"code":-31040`) {
		t.Errorf("the daemon received %.300s, want an error -31040 with id 17", got)
	}
	// Without an id: dropped, told on stderr.
	send(`{"jsonrpc":"2.0","method":"notifications/message","params":{"a":[` + pad + `{}]}}`)

	// A request in flight whose answer from the daemon is over the limit.
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"t"}}`)
	if got := d.next(); !strings.Contains(got, `"id":5`) {
		t.Fatalf("the daemon received %.300s, want request 5", got)
	}
	d.send(`{"result":{"content":[` + pad + `{}]},"jsonrpc":"2.0","id":5}`)
	if got := out.answer(t, "5", 1); !strings.Contains(string(got), `"code":-31040`) {
		t.Errorf("oversized answer to 5 became %.300s, want -31040", got)
	}
	// A server's oversized request through the daemon: answered to the daemon.
	d.send(`{"method":"sampling/createMessage","params":{"m":[` + pad + `{}]},"jsonrpc":"2.0","id":900}`)
	if got := d.next(); !strings.Contains(got, `"id":900`) || !strings.Contains(got, `"code":-31040`) {
		t.Errorf("the daemon received %.300s, want an error -31040 with id 900", got)
	}
	d.send(`{"jsonrpc":"2.0","result":{"content":[` + pad + `{}]}}`)

	// A request sent twice with one id: the daemon refuses the second,
	// and the first still counts as in flight when the daemon goes.
	send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t"}}`)
	send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t"}}`)
	d.next()
	d.next()
	d.send(`{"jsonrpc":"2.0","id":9,"error":{"code":-32600,"message":"Invalid Request: request id 9 is already in use by a request in flight"}}`)
	out.answer(t, "9", 1)
	d.conn.Close()
	if got := out.answer(t, "9", 2); !strings.Contains(string(got), "epoch_ended") {
		t.Errorf("request 9 still in flight when the daemon went: answered %.300s, want epoch_ended", got)
	}
	agentW.Close()
	wantExit(t, code, 0)

	stderr := errs.String()
	for _, want := range []string{
		`refused the agent's`, `tools/call request "big"`,
		`answer 17 is over the 4096-byte limit`,
		`dropped a`, `from the agent: over the 4096-byte limit, and without an id`,
		`answer to the agent's request 5`,
		`sampling/createMessage request is over`,
		`from the daemon: over the 8192-byte limit, and it answers no request in flight`, // twice the limit: ids are put back
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not mention %q:\n%s", want, stderr)
		}
	}
}

// TestLongIDAnswerPasses: an answer from the daemon that is over the limit
// only because the agent's own long id was put back in it reaches the agent.
func TestLongIDAnswerPasses(t *testing.T) {
	const limit = 4096
	r := startRelay(t, limit)
	agentW, out, errs, d := r.w, r.out, r.errs, r.d
	defer agentW.Close()
	id := `"` + strings.Repeat("i", 3000) + `"`
	if _, err := agentW.Write([]byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"t"}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	d.next()
	text := strings.Repeat("r", limit-200) // the server's answer was within the limit
	d.send(`{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"` + text + `"}]}}`)
	if got := out.answer(t, id, 1); !strings.Contains(string(got), text) {
		t.Errorf("answer to the long id: %.200s; stderr:\n%s", got, errs.String())
	}
}

// TestEndOfInput: when the agent closes its input, the shim sends the
// daemon control.EndOfInput (so that the daemon answers what was sent
// before) and waits for the daemon's answers and its close before it
// exits 0; an agent line beginning with NUL, which could pass for that
// marker, is answered as a parse error and never forwarded.
func TestEndOfInput(t *testing.T) {
	r := startRelay(t, 0)
	agentW, out, errs, code, d := r.w, r.out, r.errs, r.code, r.d
	if _, err := agentW.Write([]byte(control.EndOfInput + "\n" + `{"jsonrpc":"2.0","id":3,"method":"ping"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if got := out.answer(t, "null", 1); !strings.Contains(string(got), `"code":-32700`) {
		t.Errorf("a line beginning with NUL answered %.300s, want -32700", got)
	}
	if !strings.Contains(errs.String(), "begins with a NUL byte") {
		t.Errorf("stderr does not mention the NUL line:\n%s", errs.String())
	}
	if got := d.next(); !strings.Contains(got, `"id":3`) {
		t.Fatalf("the daemon received %q, want the ping (and not the NUL line)", got)
	}
	agentW.Close()
	if got := d.next(); got != control.EndOfInput {
		t.Fatalf("after the agent's input ended the daemon received %q, want EndOfInput", got)
	}
	// The daemon still answers, then closes; the shim passes the answer on.
	d.send(`{"jsonrpc":"2.0","id":3,"result":{}}`)
	out.answer(t, "3", 1)
	select {
	case c := <-code:
		t.Fatalf("the shim exited (%d) before the daemon closed", c)
	case <-time.After(50 * time.Millisecond):
	}
	d.conn.Close()
	wantExit(t, code, 0)
}

// TestNoDaemonAnswersOversized: without a daemon, an oversized request is
// answered too, by the id it carries at its end.
func TestNoDaemonAnswersOversized(t *testing.T) {
	in := `{"method":"tools/call","params":{"name":"t","arguments":{"a":"` + strings.Repeat("x", 10_000) + `"}},"jsonrpc":"2.0","id":3}` + "\n"
	out, _, c := runToEnd(t, Options{MaxMessage: 4096}, in)
	if c != 1 {
		t.Errorf("exit code %d, want 1", c)
	}
	if got := out.answer(t, "3", 1); !strings.Contains(string(got), "server_unavailable") {
		t.Errorf("answered %.300s, want server_unavailable for id 3", got)
	}
}

// runToEnd runs the shim for label "x" with the options o on a socket
// nobody listens on, the agent's input being in, and returns what the
// agent and stderr received and the exit status once it exits.
func runToEnd(t *testing.T, o Options, in string) (out, errs *lines, code int) {
	t.Helper()
	out, errs = &lines{}, &lines{}
	o.Socket, o.Label, o.Stdin, o.Stdout, o.Stderr = filepath.Join(t.TempDir(), "none"), "x", strings.NewReader(in), out, errs
	return out, errs, Run(context.Background(), o)
}

// runNoDaemon runs the shim on a socket nobody listens on, with start as
// Options.Start and a start-up wait far longer than any test waits, and
// returns the agent's input, what the agent and stderr receive, and the
// exit code once it exits.
func runNoDaemon(t *testing.T, socket string, start func() (<-chan error, error)) (io.WriteCloser, *lines, *lines, <-chan int) {
	t.Helper()
	if socket == "" {
		socket = filepath.Join(t.TempDir(), "none")
	}
	// An OS pipe, as an agent's: what the agent writes while the shim waits
	// for a daemon is buffered, not blocked.
	agentIn, agentW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agentIn.Close() })
	out, errs := &lines{}, &lines{}
	code := make(chan int, 1)
	go func() {
		code <- Run(context.Background(), Options{Socket: socket, Label: "x", Start: start,
			StartWait: time.Minute, StartLog: "/state/daemon.log",
			Stdin: agentIn, Stdout: out, Stderr: errs, MaxMessage: 4096})
	}()
	t.Cleanup(func() { agentW.Close() })
	return agentW, out, errs, code
}

// stderrLines returns the non-empty lines of s.
func stderrLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestStartedDaemonExits: a daemon started for the connection that exits
// before it answers ends the start-up wait at once: the agent's request
// (sent while the shim waits) is answered with the reason Start's channel
// gave, with its advice (not "start Portcullis", which is what failed),
// and stderr gets the same on one line.
func TestStartedDaemonExits(t *testing.T) {
	exited := make(chan error, 1)
	started := make(chan struct{})
	agent, out, errs, code := runNoDaemon(t, "", func() (<-chan error, error) {
		close(started)
		return exited, nil
	})
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the shim did not start a daemon")
	}
	if _, err := agent.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the request is read while the shim waits
	exited <- &StartError{
		Reason: "started a daemon but it exited at once: the audit log is signed but its key cannot be used: locked;\nmove /state/audit aside",
		Retry:  "once the person has dealt with that, reconnect the agent",
	}
	got := string(out.answer(t, "1", 1)) // fails after 5 s, far less than StartWait
	for _, want := range []string{"server_unavailable", "the audit log is signed but its key cannot be used", "move /state/audit aside", "reconnect the agent"} {
		if !strings.Contains(got, want) {
			t.Errorf("initialize answered %s, want it to carry %q", got, want)
		}
	}
	if strings.Contains(got, "start Portcullis") || strings.Contains(got, "did not answer within") {
		t.Errorf("initialize answered %s: advice to start Portcullis, or a wait that did not happen", got)
	}
	agent.Close()
	wantExit(t, code, 1)
	if l := stderrLines(errs.String()); len(l) != 1 || !strings.Contains(l[0], "the audit log is signed but its key cannot be used: locked; move /state/audit aside") {
		t.Errorf("stderr %q, want one line with the daemon's reason", errs.String())
	}
}

// TestStartedDaemonLostRace: the daemon started here exits because another
// one, started at the same moment by another shim, took the socket: the
// shim connects to that one instead of reporting a failure.
func TestStartedDaemonLostRace(t *testing.T) {
	lostRace(t, &StartError{Reason: "another Portcullis daemon is already running"}, 0)
}

// TestStartedDaemonLostRaceToSlowerWinner: the daemon started here exits
// because another one holds the person's data but does not listen yet (it
// is still starting): the shim keeps waiting for that one's socket instead
// of failing at once (issue 34).
func TestStartedDaemonLostRaceToSlowerWinner(t *testing.T) {
	lostRace(t, &StartError{Reason: "another Portcullis daemon started at the same time and did not answer yet", Running: true}, 500*time.Millisecond)
}

// lostRace runs the shim with no daemon at its socket and a Start whose
// daemon exits with lost, having lost the socket to another daemon: one
// that listens before ours exits (later 0) or only later after it. The
// shim must connect to the winner rather than report lost.
func lostRace(t *testing.T, lost *StartError, later time.Duration) {
	t.Helper()
	f := newFakeDaemon(t)
	winner := func() { f.serveReply(control.Reply{OK: true, Run: "R"}, 1) }
	exited := make(chan error, 1)
	var once sync.Once
	agentW, _, errs, code := runNoDaemon(t, f.socket, func() (<-chan error, error) {
		first := false
		once.Do(func() { first = true })
		if !first {
			// A shim that lost the daemon before it read the agent's end.
			return nil, &StartError{Reason: "the test is over"}
		}
		if later == 0 {
			winner()
			exited <- lost
		} else {
			exited <- lost
			go func() {
				time.Sleep(later)
				winner()
			}()
		}
		return exited, nil
	})
	select {
	case c := <-f.conns:
		// The agent ends first: a shim whose daemon goes away while the
		// agent is there connects again (and would start one).
		agentW.Close()
		c.conn.Close()
		<-code
	case <-time.After(10 * time.Second):
		t.Fatalf("the shim did not connect to the daemon that won; stderr: %s", errs.String())
	}
}

// TestStartFails: when Start itself fails with a StartError, the agent gets
// its reason and its one piece of advice, and stderr one line.
func TestStartFails(t *testing.T) {
	in := `{"jsonrpc":"2.0","id":"a","method":"server/discover"}` + "\n" + `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}` + "\n"
	out, errs, c := runToEnd(t, Options{Start: func() (<-chan error, error) {
		return nil, &StartError{
			Reason: "no daemon was running, and none can start with this configuration file: /c/config.json: 2 problems in configuration\n\t/c/config.json:3:4: one\n\t/c/config.json:5:6: two",
			Retry:  "ask the person to fix /c/config.json, then reconnect the agent",
		}
	}}, in)
	if c != 1 {
		t.Errorf("exit code %d, want 1", c)
	}
	for _, id := range []string{`"a"`, "2"} {
		got := string(out.answer(t, id, 1))
		if !strings.Contains(got, "ask the person to fix /c/config.json, then reconnect the agent") || !strings.Contains(got, "/c/config.json:5:6: two") || strings.Contains(got, "start Portcullis") {
			t.Errorf("request %s answered %s, want the configuration problem and one piece of advice", id, got)
		}
	}
	if l := stderrLines(errs.String()); len(l) != 1 || !strings.Contains(l[0], "/c/config.json:3:4: one; /c/config.json:5:6: two; ask the person to fix") {
		t.Errorf("stderr %q, want one line with the reason and the advice", errs.String())
	}
}

// TestNoDaemonNotesDropped: without a daemon, an oversized notification
// and an oversized answer cannot be answered; each is noted on stderr, as
// when connected.
func TestNoDaemonNotesDropped(t *testing.T) {
	big := strings.Repeat("x", 10_000)
	in := `{"jsonrpc":"2.0","method":"notifications/message","params":{"a":"` + big + `"}}` + "\n" +
		`{"jsonrpc":"2.0","id":7,"result":{"a":"` + big + `"}}` + "\n"
	out, errs, _ := runToEnd(t, Options{MaxMessage: 4096}, in)
	stderr := errs.String()
	for _, want := range []string{
		`dropped a 10`, `-byte message from the agent: over the 4096-byte limit, and without an id`,
		`dropped the agent's 10`, `-byte answer 7: over the 4096-byte limit`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not mention %q:\n%s", want, stderr)
		}
	}
	if out.String() != "" {
		t.Errorf("the agent received %q, want nothing", out.String())
	}
}

// TestDaemonDiesWhileDraining: a daemon that goes away after the agent's
// input ended, with a request still unanswered, died: the shim answers
// that request server_unavailable, says so on stderr and exits 1, as when
// the agent's input is still open.
func TestDaemonDiesWhileDraining(t *testing.T) {
	r := startRelay(t, 0)
	agentW, out, errs, code, d := r.w, r.out, r.errs, r.code, r.d
	if _, err := agentW.Write([]byte(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"slow"}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	d.next()
	agentW.Close()
	if got := d.next(); got != control.EndOfInput {
		t.Fatalf("the daemon received %q, want EndOfInput", got)
	}
	d.conn.Close() // killed, without answering 4
	if got := out.answer(t, "4", 1); !strings.Contains(string(got), "server_unavailable") || !strings.Contains(string(got), "may or may not have taken effect") {
		t.Errorf("request 4 when the daemon died while draining: %.300s, want server_unavailable", got)
	}
	wantExit(t, code, 1)
	if !strings.Contains(errs.String(), "connection to the Portcullis daemon was lost") {
		t.Errorf("stderr does not say the daemon was lost:\n%s", errs.String())
	}
}

// TestDrainTimeoutFromDaemon: after the agent's input ended, the shim
// waits for the daemon as long as the drain timeout the daemon sent in its
// reply to connect (not the default), plus CloseAllowance; a daemon that
// neither answers nor closes by then is stuck, and the request it holds is
// answered server_unavailable.
func TestDrainTimeoutFromDaemon(t *testing.T) {
	r := startRelayReplying(t, Options{CloseAllowance: 100 * time.Millisecond}, control.Reply{OK: true, Run: "R", DrainTimeoutMS: 150})
	agentW, out, errs, code, d := r.w, r.out, r.errs, r.code, r.d
	if _, err := agentW.Write([]byte(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"slow"}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	d.next()
	ended := time.Now()
	agentW.Close()
	if got := d.next(); got != control.EndOfInput {
		t.Fatalf("the daemon received %q, want EndOfInput", got)
	}
	// The daemon neither answers 4 nor closes.
	select {
	case c := <-code:
		if c != 1 {
			t.Errorf("exit code %d, want 1", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shim did not give up on the daemon within 10 s, with a drain timeout of 150 ms")
	}
	if waited := time.Since(ended); waited < 250*time.Millisecond {
		t.Errorf("the shim gave up after %s, before the daemon's drain timeout (150 ms) and the allowance (100 ms)", waited)
	}
	if got := out.answer(t, "4", 1); !strings.Contains(string(got), "server_unavailable") || !strings.Contains(string(got), "within 250ms") {
		t.Errorf("request 4 left by a stuck daemon: %.300s, want server_unavailable naming 250ms", got)
	}
	if !strings.Contains(errs.String(), "did not end the run") {
		t.Errorf("stderr does not say the daemon did not end the run:\n%s", errs.String())
	}
}
