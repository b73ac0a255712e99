//go:build linux || darwin

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
)

// fdDaemon is a fake daemon's side of one connect: the Hello the shim
// sent, the connection (nothing read past the Hello) and its reader.
type fdDaemon struct {
	hello control.Hello
	conn  net.Conn
	br    *bufio.Reader
}

// fakeFDDaemon accepts one connect and answers it with reply.
func fakeFDDaemon(t *testing.T, reply control.Reply) (socket string, conns <-chan *fdDaemon) {
	t.Helper()
	dir, err := os.MkdirTemp("", "shim-")
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
	ch := make(chan *fdDaemon, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // bounded
		d := &fdDaemon{conn: c, br: bufio.NewReader(c)}
		line, err := d.br.ReadBytes('\n')
		if err != nil || json.Unmarshal(line, &d.hello) != nil {
			c.Close()
			return
		}
		reply.OK = true
		_ = control.WriteLine(c, reply)
		ch <- d
	}()
	return socket, ch
}

// agentPipes are an agent's ends of a shim's stdin and stdout.
type agentPipes struct {
	toShim   *os.File // the agent writes here
	fromShim *os.File // the agent reads here
	shimIn   *os.File // the shim's stdin
	shimOut  *os.File // the shim's stdout
}

func newAgentPipes(t *testing.T) *agentPipes {
	t.Helper()
	var p agentPipes
	var err error
	if p.shimIn, p.toShim, err = os.Pipe(); err != nil {
		t.Fatal(err)
	}
	if p.fromShim, p.shimOut, err = os.Pipe(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.toShim.Close(); p.fromShim.Close(); p.shimIn.Close(); p.shimOut.Close() })
	return &p
}

// readAll reads what the agent receives until its EOF, failing after 10 s.
func (p *agentPipes) readAll(t *testing.T) string {
	t.Helper()
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(p.fromShim); got <- b }()
	select {
	case b := <-got:
		return string(b)
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's input did not end within 10 s")
	}
	return ""
}

func runShim(t *testing.T, socket string, p *agentPipes, errs io.Writer) <-chan int {
	t.Helper()
	code := make(chan int, 1)
	go func() {
		code <- Run(context.Background(), Options{Socket: socket, Label: "x", Stdin: p.shimIn, Stdout: p.shimOut, Stderr: errs})
	}()
	return code
}

func exitOf(t *testing.T, code <-chan int) int {
	t.Helper()
	select {
	case c := <-code:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the shim did not exit within 10 s")
	}
	return -1
}

// TestHandOff: with pipes for stdin and stdout, the shim offers them,
// hands them over when asked, closes its own copies (the agent's input
// ends when the daemon closes its copy), and exits with the code of the
// daemon's RunEnd.
func TestHandOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  control.RunEnd
	}{
		{"agent closed its input", control.RunEnd{}},
		{"daemon stopped", control.RunEnd{Exit: 1, Reason: "the Portcullis daemon stopped"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket, conns := fakeFDDaemon(t, control.Reply{Run: "R", Pass: control.PassStdio})
			p := newAgentPipes(t)
			errs := &lines{}
			code := runShim(t, socket, p, errs)
			var d *fdDaemon
			select {
			case d = <-conns:
			case <-time.After(10 * time.Second):
				t.Fatal("the shim did not connect")
			}
			defer d.conn.Close()
			if d.hello.Pass != control.PassStdio {
				t.Fatalf("hello %+v does not offer the agent's stdio", d.hello)
			}
			in, out, err := control.ReceiveStdio(d.conn)
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			if err := control.WriteLine(d.conn, control.Handoff{Mode: control.ModeFD}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.toShim.Write([]byte("from the agent\n")); err != nil {
				t.Fatal(err)
			}
			if l, err := bufio.NewReader(in).ReadString('\n'); err != nil || l != "from the agent\n" {
				t.Errorf("the daemon read %q, %v from the agent's stdin", l, err)
			}
			if _, err := out.Write([]byte("to the agent\n")); err != nil {
				t.Fatal(err)
			}
			out.Close()
			// The shim's copy is closed too: the agent's input ends now,
			// while the shim still waits for the run's end.
			if got := p.readAll(t); got != "to the agent\n" {
				t.Errorf("the agent read %q", got)
			}
			if err := control.WriteLine(d.conn, tc.end); err != nil {
				t.Fatal(err)
			}
			if c := exitOf(t, code); c != tc.end.Exit {
				t.Errorf("exit %d, want %d", c, tc.end.Exit)
			}
			if tc.end.Reason != "" && !strings.Contains(errs.String(), tc.end.Reason) {
				t.Errorf("stderr %q does not give the daemon's reason", errs.String())
			}
		})
	}
}

// TestHandOffDaemonDies: a daemon that dies after taking the agent's stdio
// leaves the agent with its input ended at once, and the shim exits 1
// saying why on stderr.
func TestHandOffDaemonDies(t *testing.T) {
	socket, conns := fakeFDDaemon(t, control.Reply{Run: "R", Pass: control.PassStdio})
	p := newAgentPipes(t)
	errs := &lines{}
	code := runShim(t, socket, p, errs)
	d := <-conns
	in, out, err := control.ReceiveStdio(d.conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := control.WriteLine(d.conn, control.Handoff{Mode: control.ModeFD}); err != nil {
		t.Fatal(err)
	}
	// A request in flight, then the daemon dies: its descriptors close.
	if _, err := p.toShim.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	in.Close()
	out.Close()
	d.conn.Close()
	if got := p.readAll(t); got != "" {
		t.Errorf("the agent read %q, want only the end of its input", got)
	}
	if c := exitOf(t, code); c != 1 {
		t.Errorf("exit %d, want 1", c)
	}
	if !strings.Contains(errs.String(), "connection to the Portcullis daemon was lost") || !strings.Contains(errs.String(), "may or may not have taken effect") {
		t.Errorf("stderr %q does not say what happened", errs.String())
	}
}

// TestHandOffRefused: a daemon that answers the hand-off with ModeRelay
// (what the shim sent cannot be served) gets the agent's lines relayed.
func TestHandOffRefused(t *testing.T) {
	socket, conns := fakeFDDaemon(t, control.Reply{Run: "R", Pass: control.PassStdio})
	p := newAgentPipes(t)
	code := runShim(t, socket, p, &lines{})
	d := <-conns
	in, out, err := control.ReceiveStdio(d.conn)
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	out.Close()
	if err := control.WriteLine(d.conn, control.Handoff{Mode: control.ModeRelay, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.toShim.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := d.br.ReadString('\n'); err != nil || l != `{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n" {
		t.Fatalf("the daemon got %q, %v; want the agent's line relayed", l, err)
	}
	if err := control.WriteLine(d.conn, json.RawMessage(`{"jsonrpc":"2.0","id":1,"result":{}}`)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(p.fromShim)
	if l, err := r.ReadString('\n'); err != nil || l != `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n" {
		t.Errorf("the agent got %q, %v; want the daemon's answer relayed", l, err)
	}
	p.toShim.Close()
	if l, err := d.br.ReadString('\n'); err != nil || l != control.EndOfInput+"\n" {
		t.Errorf("after the agent's end, the daemon got %q, %v", l, err)
	}
	d.conn.Close()
	if c := exitOf(t, code); c != 0 {
		t.Errorf("exit %d, want 0", c)
	}
}

// TestNoOffer: the shim offers its stdio only when both are pipes or
// stream sockets and relaying was not asked for, and says why not.
func TestNoOffer(t *testing.T) {
	p := newAgentPipes(t)
	reg, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for _, tc := range []struct {
		name string
		o    Options
		why  string // "": offered
	}{
		{"pipes", Options{Stdin: p.shimIn, Stdout: p.shimOut}, ""},
		{"relay asked for", Options{Stdin: p.shimIn, Stdout: p.shimOut, Relay: true}, "relay asked for"},
		{"not files", Options{Stdin: strings.NewReader(""), Stdout: &lines{}}, "not a file"},
		{"stdin a regular file", Options{Stdin: reg, Stdout: p.shimOut}, "stdin: the agent's stdio was not handed over: a regular file"},
		{"stdout /dev/null", Options{Stdin: p.shimIn, Stdout: null}, "stdout: the agent's stdio was not handed over: a character device"},
	} {
		ok, why := offer(tc.o)
		if ok != (tc.why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("%s: offer %v, %q; want offered %v, reason %q", tc.name, ok, why, tc.why == "", tc.why)
		}
	}
}
