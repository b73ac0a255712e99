//go:build linux

package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// RunAtTerminal runs `portcullis ARGS…` as the person would at a terminal
// of their own: in a new session, with a new pseudo-terminal as its
// controlling terminal and as stdin, stdout and stderr, and outside the
// caller's process tree (setsid -f forks and its parent exits, so the
// command is reparented to init or the session's subreaper). The caller is
// typically also the agent of the tests' agent runs (the shims' parent), and
// a person's terminal is not below the agent: the daemon refuses decisions
// from the agent's descendants.
//
// Result.Stdout holds what the terminal showed (stdout and stderr
// together, with the terminal's CRLF turned into LF); the error is as
// for Run.
func (h *Home) RunAtTerminal(ctx context.Context, args ...string) (Result, error) {
	controller, tty, err := openPTY()
	if err != nil {
		return Result{}, err
	}
	defer controller.Close()
	codeFile := filepath.Join(h.Dir, fmt.Sprintf("terminal-%d-%p.code", os.Getpid(), controller))
	defer os.Remove(codeFile)
	// sh records the command's exit code where the caller can read it,
	// since the caller is not its parent and cannot wait for it.
	script := `"$0" "$@"; echo $? > "$PORTCULLIS_TEST_CODE"`
	cmd := exec.Command("setsid", append([]string{"-f", "-c", "sh", "-c", script, h.Bin}, args...)...)
	cmd.Env = append(h.Environ(), "PORTCULLIS_TEST_CODE="+codeFile)
	cmd.Dir = h.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	err = cmd.Run()
	tty.Close() // the command holds its own copies
	if err != nil {
		return Result{}, fmt.Errorf("setsid -f: %w", err)
	}
	out := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, controller) // ends with EIO once every copy of the terminal is closed
		out <- b.Bytes()
	}()
	var shown []byte
	select {
	case shown = <-out:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("portcullis %s at a terminal: %w", strings.Join(args, " "), ctx.Err())
	}
	r := Result{Stdout: strings.ReplaceAll(string(shown), "\r\n", "\n"), Code: -1}
	b, err := os.ReadFile(codeFile)
	if err != nil {
		return r, fmt.Errorf("portcullis %s at a terminal left no exit code: %w (terminal: %q)", strings.Join(args, " "), err, r.Stdout)
	}
	if r.Code, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return r, fmt.Errorf("exit code %q: %w", b, err)
	}
	if r.Code != 0 {
		r.Stderr = r.Stdout
		return r, &ExitError{Args: args, Result: r}
	}
	return r, nil
}

// openPTY returns the controller and terminal ends of a new
// pseudo-terminal (pty(7): /dev/ptmx, TIOCSPTLCK, TIOCGPTN).
func openPTY() (controller, tty *os.File, err error) {
	controller, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("no pseudo-terminals here: %w", err)
	}
	raw, err := controller.SyscallConn()
	if err != nil {
		controller.Close()
		return nil, nil, err
	}
	var n int
	var ioErr error
	if err := raw.Control(func(fd uintptr) {
		if ioErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioErr == nil {
			n, ioErr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	}); err != nil {
		ioErr = err
	}
	if ioErr != nil {
		controller.Close()
		return nil, nil, ioErr
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		controller.Close()
		return nil, nil, err
	}
	return controller, tty, nil
}
