//go:build linux || darwin

package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/control"
)

// fdAgent is an agent whose shim handed its stdio to the daemon: the test
// writes the agent's requests on toDaemon and reads the daemon's answers
// from lines; shim is the shim's connection.
type fdAgent struct {
	toDaemon *os.File
	fromFile *os.File
	shim     *control.Conn
	lines    chan string // what the daemon writes to the agent; closed at its EOF
}

// handOff connects to label as a shim that hands its stdio over, and
// closes its own copies as the shim does.
func handOff(t *testing.T, socket, label string) *fdAgent {
	t.Helper()
	return handOffWith(t, socket, label, nil)
}

// handOffWith is handOff that calls keep, when not nil, with the shim's
// stdin and stdout after the hand-off and before the shim closes them.
func handOffWith(t *testing.T, socket, label string, keep func(in, out *os.File)) *fdAgent {
	t.Helper()
	shimIn, toDaemon, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromFile, shimOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c, err := control.Dial(socket, control.Hello{Op: control.OpConnect, Label: label, Pass: control.PassStdio}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); toDaemon.Close(); fromFile.Close() })
	if c.Reply.Pass != control.PassStdio {
		t.Fatalf("the daemon's reply %+v does not ask for the agent's stdio", c.Reply)
	}
	if err := control.SendStdio(c.Conn, shimIn, shimOut); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, err := control.ReadHandoff(c)
	if err != nil || h.Mode != control.ModeFD {
		t.Fatalf("hand-off: %+v, %v; want mode fd", h, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if keep != nil {
		keep(shimIn, shimOut)
	}
	shimIn.Close()
	shimOut.Close()
	a := &fdAgent{toDaemon: toDaemon, fromFile: fromFile, shim: c, lines: make(chan string, 64)}
	go func() {
		defer close(a.lines)
		sc := bufio.NewScanner(fromFile)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
	}()
	return a
}

func (a *fdAgent) send(t *testing.T, line string) {
	t.Helper()
	if _, err := a.toDaemon.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
}

// next returns the next line the daemon wrote to the agent ("" and false
// at its EOF), failing after 10 s.
func (a *fdAgent) next(t *testing.T) (string, bool) {
	t.Helper()
	select {
	case l, ok := <-a.lines:
		return l, ok
	case <-time.After(10 * time.Second):
		t.Fatal("nothing from the daemon within 10 s")
	}
	return "", false
}

// runPID waits until the daemon's only run has a server process and
// returns its pid.
func runPID(t *testing.T, d *Daemon) int {
	t.Helper()
	ch, cancel := d.Changes()
	defer cancel()
	deadline := time.After(10 * time.Second)
	for {
		if runs := d.Status().Runs; len(runs) == 1 && runs[0].PID > 0 {
			return runs[0].PID
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no server process within 10 s: %+v", d.Status().Runs)
		}
	}
}

// runsGone waits until the daemon has no live run.
func runsGone(t *testing.T, d *Daemon) {
	t.Helper()
	ch, cancel := d.Changes()
	defer cancel()
	deadline := time.After(10 * time.Second)
	for len(d.Status().Runs) > 0 {
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("the run did not end within 10 s: %+v", d.Status().Runs)
		}
	}
}

func fdDaemon(t *testing.T) (*Daemon, string) {
	t.Helper()
	dirs := shortHome(t)
	if err := dirs.Ensure(); err != nil {
		t.Fatal(err)
	}
	saveServers(t, dirs.ConfigFile(), "x")
	d, err := New(Options{Dirs: dirs, Peers: selfPeers{}, DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, d, dirs)
	return d, dirs.Socket()
}

// TestConnectStdioHandOff: with the agent's stdio handed over, the daemon
// answers the agent on it directly; a line from the agent that looks like
// the shim's EndOfInput is a parse error, not the end of its input; the
// server inherits none of the agent's descriptors; when the agent closes
// its input, the shim is told exit 0 and the agent's input ends.
func TestConnectStdioHandOff(t *testing.T) {
	d, socket := fdDaemon(t)
	a := handOff(t, socket, "x")
	a.send(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if l, _ := a.next(t); l != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Errorf("ping answered %q", l)
	}
	a.send(t, control.EndOfInput)
	a.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if l, _ := a.next(t); !strings.Contains(l, `"code":-32700`) || !strings.Contains(l, `"id":null`) {
		t.Errorf("the agent's NUL line answered %q, want a parse error", l)
	}
	if l, _ := a.next(t); l != `{"jsonrpc":"2.0","id":2,"result":{}}` {
		t.Errorf("after the agent's NUL line, ping answered %q: its input must go on", l)
	}

	if runtime.GOOS == "linux" {
		pid := runPID(t, d)
		mine := map[string]bool{}
		for _, f := range []*os.File{a.toDaemon, a.fromFile} {
			var ino uint64
			if fi, err := f.Stat(); err == nil {
				ino = inode(fi)
			}
			mine[fmt.Sprintf("pipe:[%d]", ino)] = true
		}
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); mine[l] {
				t.Errorf("the server (pid %d) holds the agent's %s as fd %s", pid, l, e.Name())
			}
		}
	}

	a.toDaemon.Close() // the agent closes its input
	for {
		if _, ok := a.next(t); !ok {
			break
		}
	}
	_ = a.shim.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := a.shim.Reader.ReadBytes('\n')
	var end control.RunEnd
	if err != nil || json.Unmarshal(line, &end) != nil || end.Exit != 0 {
		t.Errorf("the shim was told %q (%v), want exit 0", line, err)
	}
	if _, err := a.shim.Reader.ReadByte(); err != io.EOF {
		t.Errorf("after the run's end, the shim's connection gave %v, want EOF", err)
	}
	runsGone(t, d)
}

// TestConnectStdioShimGone: when the shim goes (the agent killed it) while
// the agent's pipes are open, the run ends at once and the daemon closes
// its copy of the agent's stdout, so the agent sees its server's output
// end, as when the shim held it.
func TestConnectStdioShimGone(t *testing.T) {
	d, socket := fdDaemon(t)
	a := handOff(t, socket, "x")
	a.send(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if l, _ := a.next(t); l != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Errorf("ping answered %q", l)
	}
	a.shim.Close()
	if l, ok := a.next(t); ok {
		t.Errorf("after the shim left, the agent read %q, want the end of its input", l)
	}
	runsGone(t, d)
}

// TestConnectStdioMadeBlockingElsewhere: the agent's stdin is an open file
// description the shim shares with whatever else holds it (a wrapper
// script, a launcher that passed its own stdio on), and one of those may
// switch it back to blocking while the daemon serves it. The daemon must
// then still work: a read of the agent's input that blocks in the kernel
// must be one the Go scheduler knows of. A raw read (package rawio) would
// block there unseen, and the next garbage collection would wait for it
// for ever, stopping the whole daemon; this test then hangs until go
// test's -timeout ends it.
func TestConnectStdioMadeBlockingElsewhere(t *testing.T) {
	_, socket := fdDaemon(t)
	other := -1
	a := handOffWith(t, socket, "x", func(in, _ *os.File) {
		rc, err := in.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		if cerr := rc.Control(func(fd uintptr) { other, err = syscall.Dup(int(fd)) }); cerr != nil || err != nil {
			t.Fatal(cerr, err)
		}
	})
	t.Cleanup(func() { syscall.Close(other) })
	if err := syscall.SetNonblock(other, false); err != nil {
		t.Fatal(err)
	}
	a.send(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if l, _ := a.next(t); l != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Fatalf("ping answered %q", l)
	}
	// The daemon's reader now waits in read(2) on a blocking description.
	collected := make(chan struct{})
	go func() {
		runtime.GC()
		close(collected)
	}()
	select {
	case <-collected:
	case <-time.After(10 * time.Second):
		t.Fatal("a garbage collection did not finish within 10 s while the daemon waited for the agent's input")
	}
	a.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if l, _ := a.next(t); l != `{"jsonrpc":"2.0","id":2,"result":{}}` {
		t.Errorf("after the description was made blocking, ping answered %q", l)
	}
}
