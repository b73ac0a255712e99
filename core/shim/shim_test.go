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

// fakeDaemon accepts one connect on a Unix socket, replies OK and hands
// the connection to the test.
func fakeDaemon(t *testing.T) (socket string, conns <-chan net.Conn) {
	t.Helper()
	dir, err := os.MkdirTemp("", "shim-") // short: Unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket = filepath.Join(dir, "s")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		br := bufio.NewReader(c)
		if _, err := br.ReadBytes('\n'); err != nil {
			c.Close()
			return
		}
		_, _ = c.Write([]byte(`{"ok":true,"run":"R"}` + "\n"))
		ch <- &bufConn{Conn: c, r: br}
	}()
	return socket, ch
}

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

// TestRelayOversized: lines over the limit are handled by the id they
// carry, wherever it stands, in both directions, and every one that
// cannot be answered leaves a line on stderr.
func TestRelayOversized(t *testing.T) {
	const limit = 4096
	pad := strings.Repeat(`{"id":0,"s":"\"id\":1"},`, 1000) // ~24 KB with decoys
	socket, conns := fakeDaemon(t)
	agentIn, agentW := io.Pipe()
	out, errs := &lines{}, &lines{}
	code := make(chan int, 1)
	go func() {
		code <- Run(context.Background(), Options{Socket: socket, Label: "x", Stdin: agentIn, Stdout: out, Stderr: errs, MaxMessage: limit})
	}()
	var d *daemonSide
	select {
	case c := <-conns:
		d = newDaemonSide(t, c)
	case <-time.After(5 * time.Second):
		t.Fatal("the shim did not connect")
	}
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
	if got := out.answer(t, "9", 2); !strings.Contains(string(got), "server_unavailable") {
		t.Errorf("request 9 still in flight when the daemon went: answered %.300s, want server_unavailable", got)
	}
	select {
	case c := <-code:
		if c != 1 {
			t.Errorf("exit code %d, want 1", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the shim did not exit")
	}
	agentW.Close()

	stderr := errs.String()
	for _, want := range []string{
		`refused the agent's`, `tools/call request "big"`,
		`answer 17 is over the 4096-byte limit`,
		`dropped a`, `from the agent: over the 4096-byte limit, and without an id`,
		`answer to the agent's request 5`,
		`sampling/createMessage request is over`,
		`from the daemon: over the 4096-byte limit, and it answers no request in flight`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not mention %q:\n%s", want, stderr)
		}
	}
}

// TestNoDaemonAnswersOversized: without a daemon, an oversized request is
// answered too, by the id it carries at its end.
func TestNoDaemonAnswersOversized(t *testing.T) {
	in := `{"method":"tools/call","params":{"name":"t","arguments":{"a":"` + strings.Repeat("x", 10_000) + `"}},"jsonrpc":"2.0","id":3}` + "\n"
	out, errs := &lines{}, &lines{}
	c := Run(context.Background(), Options{Socket: filepath.Join(t.TempDir(), "none"), Label: "x",
		Stdin: strings.NewReader(in), Stdout: out, Stderr: errs, MaxMessage: 4096})
	if c != 1 {
		t.Errorf("exit code %d, want 1", c)
	}
	if got := out.answer(t, "3", 1); !strings.Contains(string(got), "server_unavailable") {
		t.Errorf("answered %.300s, want server_unavailable for id 3", got)
	}
}
