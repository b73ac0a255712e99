//go:build linux || darwin

package control

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// socketPair returns both ends of a Unix socket of type typ.
func socketPair(t *testing.T, typ int) (a, b *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, typ, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b = os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// connPair is a connected Unix stream socket, as the shim and the daemon
// hold their connection.
func connPair(t *testing.T) (shim, daemon net.Conn) {
	t.Helper()
	a, b := socketPair(t, unix.SOCK_STREAM)
	shim, err := net.FileConn(a)
	if err != nil {
		t.Fatal(err)
	}
	daemon, err = net.FileConn(b)
	if err != nil {
		t.Fatal(err)
	}
	a.Close() // FileConn made copies: each end now lives in one conn only
	b.Close()
	// Bounded, as the daemon bounds its wait for a hand-off.
	_ = daemon.SetReadDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { shim.Close(); daemon.Close() })
	return shim, daemon
}

func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// TestStdioKind: pipes and stream sockets can be handed over; terminals'
// kin (character devices), regular files and datagram sockets cannot, and
// the error names which.
func TestStdioKind(t *testing.T) {
	r, w := pipe(t)
	sa, _ := socketPair(t, unix.SOCK_STREAM)
	da, _ := socketPair(t, unix.SOCK_DGRAM)
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
		f    *os.File
		want string // "" for accepted
	}{
		{"pipe read end", r, ""},
		{"pipe write end", w, ""},
		{"stream socket", sa, ""},
		{"datagram socket", da, "not a stream"},
		{"regular file", reg, "regular file"},
		{"/dev/null", null, "character device"},
	} {
		err := StdioKind(tc.f)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrNoStdio) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want ErrNoStdio naming %q", tc.name, err, tc.want)
		}
	}
}

// TestHandOffStdio: the descriptors sent arrive as the same pipes, close-
// on-exec (no server launched later inherits them) and nonblocking, and
// the sender's copies stay usable until it closes them.
func TestHandOffStdio(t *testing.T) {
	shim, daemon := connPair(t)
	agentToShim, shimIn := pipe(t)  // the agent writes shimIn; the shim's stdin is agentToShim
	shimToAgent, shimOut := pipe(t) // the shim's stdout is shimOut; the agent reads shimToAgent
	_ = shimIn
	if err := SendStdio(shim, agentToShim, shimOut); err != nil {
		t.Fatal(err)
	}
	in, out, err := ReceiveStdio(daemon)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	defer out.Close()
	for _, f := range []*os.File{in, out} {
		rc, _ := f.SyscallConn()
		_ = rc.Control(func(fd uintptr) {
			if fl, err := unix.FcntlInt(fd, unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
				t.Errorf("%s: FD flags %#x (%v), want FD_CLOEXEC", f.Name(), fl, err)
			}
			if fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK == 0 {
				t.Errorf("%s: status flags %#x (%v), want O_NONBLOCK", f.Name(), fl, err)
			}
		})
	}
	// Agent → daemon through the received stdin.
	if _, err := shimIn.Write([]byte("to the daemon\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := in.Read(buf); err != nil || string(buf[:n]) != "to the daemon\n" {
		t.Errorf("read through the received stdin: %q, %v", buf[:n], err)
	}
	// Daemon → agent through the received stdout, after the sender
	// closed its copy: the agent's pipe is the daemon's alone.
	shimOut.Close()
	if _, err := out.Write([]byte("to the agent\n")); err != nil {
		t.Fatal(err)
	}
	out.Close()
	if b, err := io.ReadAll(shimToAgent); err != nil || string(b) != "to the agent\n" {
		t.Errorf("the agent read %q, %v; want the daemon's line, then EOF once the daemon closed its copy", b, err)
	}
}

// TestReceiveStdioRelay: a shim that relays after all, or sends what is
// not its stdin and stdout, gets ErrNoStdio saying why; a shim gone before
// its hand-off gets another error.
func TestReceiveStdioRelay(t *testing.T) {
	reg, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	r, _ := pipe(t)
	for _, tc := range []struct {
		name   string
		send   func(c *net.UnixConn) error
		noStd  bool
		reason string
	}{
		{"relay", func(c *net.UnixConn) error { return SendRelay(c) }, true, "the shim relays"},
		{"one descriptor", func(c *net.UnixConn) error {
			_, _, err := c.WriteMsgUnix([]byte{handoffFD}, unix.UnixRights(int(r.Fd())), nil)
			return err
		}, true, "carried 1 descriptors"},
		{"a regular file", func(c *net.UnixConn) error {
			_, _, err := c.WriteMsgUnix([]byte{handoffFD}, unix.UnixRights(int(reg.Fd()), int(r.Fd())), nil)
			return err
		}, true, "stdin: the agent's stdio was not handed over: a regular file"},
		{"bad byte", func(c *net.UnixConn) error { _, err := c.Write([]byte{'x'}); return err }, false, "not valid"},
		{"shim gone", func(c *net.UnixConn) error { return c.Close() }, false, "closed the connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shim, daemon := connPair(t)
			if err := tc.send(shim.(*net.UnixConn)); err != nil {
				t.Fatal(err)
			}
			in, out, err := ReceiveStdio(daemon)
			if in != nil || out != nil {
				t.Fatalf("got files %v %v, want none", in, out)
			}
			if errors.Is(err, ErrNoStdio) != tc.noStd || err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("ReceiveStdio: %v; want an error naming %q (ErrNoStdio: %v)", err, tc.reason, tc.noStd)
			}
		})
	}
}
