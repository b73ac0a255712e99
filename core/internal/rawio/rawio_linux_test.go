//go:build linux

package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// unixPair returns the two ends of a connected Unix stream socket on a
// socket file in a temporary directory.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   *net.UnixConn
		err error
	}
	accepted := make(chan res, 1)
	go func() { c, err := ln.AcceptUnix(); accepted <- res{c, err} }()
	a, err := net.DialUnix("unix", nil, ln.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

func TestRawPathIsTakenForPipesAndSockets(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	a, b := unixPair(t)
	if _, ok := NewReader(pr).(*reader); !ok {
		t.Error("NewReader(pipe) took the ordinary path")
	}
	if _, ok := NewWriter(pw).(*writer); !ok {
		t.Error("NewWriter(pipe) took the ordinary path")
	}
	if _, ok := NewReader(a).(*reader); !ok {
		t.Error("NewReader(unix socket) took the ordinary path")
	}
	if _, ok := NewWriter(b).(*writer); !ok {
		t.Error("NewWriter(unix socket) took the ordinary path")
	}
}

func TestBlockingDescriptorKeepsTheOrdinaryPath(t *testing.T) {
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil { // blocking, unlike os.Pipe
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
	defer r.Close()
	defer w.Close()
	if got := NewReader(r); got != io.Reader(r) {
		t.Errorf("NewReader(blocking pipe) = %T, want the *os.File itself", got)
	}
	if got := NewWriter(w); got != io.Writer(w) {
		t.Errorf("NewWriter(blocking pipe) = %T, want the *os.File itself", got)
	}
	var buf bytes.Buffer
	if got := NewReader(&buf); got != io.Reader(&buf) {
		t.Errorf("NewReader(bytes.Buffer) = %T, want it unchanged", got)
	}
}

// TestPipeCarriesEveryByte writes more than a pipe holds through the raw
// writer while the raw reader reads it, so that the writer waits for room
// and the reader for data, and checks the bytes and the end of stream.
func TestPipeCarriesEveryByte(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	want := make([]byte, 1<<20+7)
	for i := range want {
		want[i] = byte(i * 7)
	}
	wrote := make(chan error, 1)
	go func() {
		w := NewWriter(pw)
		_, err := w.Write(want[:100])
		if err == nil {
			var n int
			n, err = w.Write(want[100:])
			if err == nil && n != len(want)-100 {
				err = io.ErrShortWrite
			}
		}
		pw.Close()
		wrote <- err
	}()
	got, err := io.ReadAll(NewReader(pr))
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d, equal %v", len(got), len(want), bytes.Equal(got, want))
	}
}

func TestSocketBothWays(t *testing.T) {
	a, b := unixPair(t)
	ar, aw, br, bw := NewReader(a), NewWriter(a), NewReader(b), NewWriter(b)
	buf := make([]byte, 64)
	for _, msg := range []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n", "x"} {
		if _, err := aw.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		n, err := io.ReadFull(br, buf[:len(msg)])
		if err != nil || string(buf[:n]) != msg {
			t.Fatalf("b read %q, %v; want %q", buf[:n], err, msg)
		}
		if _, err := bw.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		n, err = io.ReadFull(ar, buf[:len(msg)])
		if err != nil || string(buf[:n]) != msg {
			t.Fatalf("a read %q, %v; want %q", buf[:n], err, msg)
		}
	}
	a.CloseWrite()
	if n, err := br.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer's CloseWrite = %d, %v; want 0, io.EOF", n, err)
	}
}

// TestErrorsKeepTheirShape: a closed descriptor and a passed deadline give
// the errors callers test for (os.ErrClosed, net.ErrClosed,
// os.ErrDeadlineExceeded), as the ordinary Read and Write do, and a write to
// a pipe without reader gives EPIPE.
func TestErrorsKeepTheirShape(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(pr)
	pr.Close()
	if _, err := r.Read(make([]byte, 8)); !errors.Is(err, os.ErrClosed) {
		t.Errorf("read of a closed pipe: %v, want os.ErrClosed", err)
	}
	w := NewWriter(pw)
	if _, err := w.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Errorf("write to a pipe without reader: %v, want EPIPE", err)
	}
	pw.Close()
	if _, err := w.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("write to a closed pipe: %v, want os.ErrClosed", err)
	}

	a, b := unixPair(t)
	ar, bw := NewReader(a), NewWriter(b)
	if err := a.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := ar.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	// A writer whose peer does not read fills the socket (or finds no room
	// for a first buffer of that size), then waits in the poller until its
	// deadline.
	if err := b.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := bw.Write(make([]byte, 8<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= 8<<20 {
		t.Errorf("write to a full socket: %d bytes, %v; want fewer than all and os.ErrDeadlineExceeded", n, err)
	}
	a.Close()
	if _, err := ar.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read of a closed socket: %v, want net.ErrClosed", err)
	}
}

// TestCloseWakesAWaitingReader: a reader parked in the poller (nothing to
// read) returns once another goroutine closes the descriptor, as the
// supervisor's Stop does to the server's stdout.
func TestCloseWakesAWaitingReader(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	r := NewReader(pr)
	first := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 8)
		_, err := r.Read(buf) // the byte written below
		first <- err
		_, err = r.Read(buf) // nothing more: waits until Close
		done <- err
	}()
	pw.Write([]byte("a"))
	if err := <-first; err != nil {
		t.Fatalf("first read: %v", err)
	}
	pr.Close()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("read: %v, want os.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a reader waiting on a pipe did not return after Close")
	}
}

// TestSocketMadeBlockingDoesNotBlock: os.File.Fd of a copy of a connection
// (what passing it to another process can involve) makes the shared
// descriptor blocking; a raw read with nothing to read must still wait in
// the poller (here until its deadline), not block its thread and processor
// in the kernel, and a raw write to a full socket likewise.
func TestSocketMadeBlockingDoesNotBlock(t *testing.T) {
	a, _ := unixPair(t) // read, with nothing sent to it
	_, b := unixPair(t) // written, its peer reading nothing
	ar, bw := NewReader(a), NewWriter(b)
	for _, c := range []*net.UnixConn{a, b} {
		f, err := c.File()
		if err != nil {
			t.Fatal(err)
		}
		f.Fd() // sets the shared file description blocking
		defer f.Close()
	}
	flags, err := fcntlFlags(a)
	if err != nil || flags&syscall.O_NONBLOCK != 0 {
		t.Fatalf("the socket is still non-blocking (flags %#x, %v): the test proves nothing", flags, err)
	}
	defer watchdog("TestSocketMadeBlockingDoesNotBlock: a raw read or write on a blocking socket did not return by its deadline: it blocked in the kernel")()
	for name, call := range map[string]func() error{
		"read": func() error {
			a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			_, err := ar.Read(make([]byte, 8))
			return err
		},
		"write": func() error {
			b.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			_, err := bw.Write(make([]byte, 8<<20))
			return err
		},
	} {
		done := make(chan error, 1)
		go func() { done <- call() }()
		if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: got %v, want os.ErrDeadlineExceeded", name, err)
		}
	}
}

func fcntlFlags(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var flags uintptr
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		flags, _, errno = syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
	}); err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, errno
	}
	return int(flags), nil
}

// setBlocking switches the open file description of f back to blocking,
// as another holder of a shared descriptor may.
func setBlocking(t *testing.T, f *os.File) {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		flags, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		if e == 0 {
			_, _, e = syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_SETFL, flags&^syscall.O_NONBLOCK)
		}
		errno = e
	}); err != nil || errno != 0 {
		t.Fatalf("making the descriptor blocking: %v %v", err, errno)
	}
}

// TestSharedPipeMadeBlockingDoesNotBlock: the agent's stdio, handed to the
// daemon, is shared with other processes, and one of them may make it
// blocking again after the daemon took it. A shared reader or writer
// (RWF_NOWAIT) must still wait in the poller, never in the kernel: a read
// with nothing to read and a write to a full pipe each return at their
// deadline; the bytes sent before and after arrive whole.
func TestSharedPipeMadeBlockingDoesNotBlock(t *testing.T) {
	pr, pw, err := os.Pipe() // non-blocking: os.Pipe registers both with the poller
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	r, w := NewSharedReader(pr), NewSharedWriter(pw)
	if _, ok := r.(*reader); !ok {
		t.Fatalf("NewSharedReader of a pipe gave %T, not the raw reader", r)
	}
	if _, err := w.Write([]byte("before\n")); err != nil {
		t.Fatal(err)
	}
	setBlocking(t, pr)
	setBlocking(t, pw)
	defer watchdog("TestSharedPipeMadeBlockingDoesNotBlock: a shared read or write on a pipe made blocking did not return by its deadline: it blocked in the kernel")()
	buf := make([]byte, 64)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "before\n" {
		t.Fatalf("read %q, %v; want the line written before", buf[:n], err)
	}
	pr.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read of an empty pipe made blocking: %v, want os.ErrDeadlineExceeded", err)
	}
	pw.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := w.Write(make([]byte, 8<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("write to a full pipe made blocking: %v, want os.ErrDeadlineExceeded", err)
	}
	if r.(*reader).plain.Load() || w.(*writer).plain.Load() {
		t.Error("the kernel's RWF_NOWAIT was taken as refused for a pipe")
	}
}

// TestSharedTerminalTakesTheOrdinaryPath: a terminal does not take
// RWF_NOWAIT; the shared writer says nothing of it and writes through the
// file's own Write from then on.
func TestSharedTerminalTakesTheOrdinaryPath(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptmx.Close()
	w := NewSharedWriter(ptmx)
	ww, ok := w.(*writer)
	if !ok {
		t.Skipf("the terminal is not pollable here (%T)", w)
	}
	// The pseudo-terminal's input queue takes a line without a reader.
	if n, err := w.Write([]byte("x\n")); err != nil || n != 2 {
		t.Fatalf("write to a terminal: %d, %v", n, err)
	}
	if !ww.plain.Load() {
		t.Skip("this kernel takes RWF_NOWAIT for a terminal: nothing to fall back from")
	}
	if n, err := w.Write([]byte("y\n")); err != nil || n != 2 {
		t.Errorf("second write, on the ordinary path: %d, %v", n, err)
	}
}

// watchdog ends the test binary with a panic saying why unless the
// function it returns is called within 10 s. A call that blocks in the
// kernel holds its processor and can keep the runtime's timers from
// running, so the watchdog sleeps in a system call of its own (on its own
// thread), with a second processor to run on.
func watchdog(why string) (finished func()) {
	prev := runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	var done atomic.Bool
	go func() {
		ts := syscall.NsecToTimespec(int64(10 * time.Second))
		for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
		}
		if !done.Load() {
			panic(why)
		}
	}()
	return func() {
		done.Store(true)
		runtime.GOMAXPROCS(prev)
	}
}
