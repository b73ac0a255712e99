package app

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY returns the controller and terminal ends of a new pseudo-terminal
// (pty(7): /dev/ptmx, TIOCSPTLCK, TIOCGPTN).
func openPTY(t *testing.T) (controller, tty *os.File) {
	t.Helper()
	controller, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { controller.Close() })
	// Not controller.Fd(): that would make the file blocking and void the read
	// deadline below.
	raw, err := controller.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ioErr error
	if err := raw.Control(func(fd uintptr) {
		if ioErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioErr == nil {
			n, ioErr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if ioErr != nil {
		t.Fatal(ioErr)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return controller, tty
}

// lockedBuffer is a bytes.Buffer safe for one writer and one reader.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestCredsSetTerminal types a secret on a real pseudo-terminal: it is read
// without echo, after a prompt on stderr.
func TestCredsSetTerminal(t *testing.T) {
	e := newCredsEnv(t)
	controller, tty := openPTY(t)
	var stderr lockedBuffer
	e.a.Stdin = tty
	e.a.Stderr = &stderr
	const secret = "s3cr3t-typed"

	done := make(chan error, 1)
	go func() { done <- e.a.runCreds([]string{"set", "api", "--meta"}) }()

	// Type only once echo is off, as a person would after the prompt.
	deadline := time.Now().Add(10 * time.Second)
	for {
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("echo was not turned off within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := controller.Write([]byte(secret + "\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("creds set did not return within 10s")
	}
	if got := e.stored("api"); got != secret {
		t.Errorf("stored %q, want %q", got, secret)
	}
	if !strings.Contains(stderr.String(), "Secret for api (typing is not shown): ") {
		t.Errorf("stderr %q has no prompt", stderr.String())
	}
	// Whatever the terminal showed must not include the secret.
	if err := controller.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	shown := make([]byte, 1024)
	n, _ := controller.Read(shown)
	if bytes.Contains(shown[:n], []byte(secret)) {
		t.Errorf("the terminal echoed the secret: %q", shown[:n])
	}
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&unix.ECHO == 0 {
		t.Error("echo was not turned back on")
	}
}
