//go:build linux

package platform

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/daemon"
)

var _ daemon.Terminals = Peers{}

// openPTY returns the controller and terminal ends of a new pseudo-terminal.
func openPTY(t *testing.T) (controller, tty *os.File) {
	t.Helper()
	c, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := unix.IoctlSetPointerInt(int(c.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(c.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return c, tty
}

// TestAtTerminal: a process whose stdin and stdout are a pseudo-terminal
// runs at a terminal; one with a pipe or /dev/null for either does not;
// a start time that is not the process's is an error (a reused pid).
func TestAtTerminal(t *testing.T) {
	_, tty := openPTY(t)
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, tc := range []struct {
		name    string
		in, out *os.File
		want    bool
	}{
		{"terminal", tty, tty, true},
		{"stdin a pipe", r, tty, false},
		{"stdout a pipe", tty, w, false},
		{"/dev/null", null, null, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "30")
			cmd.Stdin, cmd.Stdout = tc.in, tc.out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			st, err := (procfs{root: "/proc"}).readStat(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Peers{}.AtTerminal(cmd.Process.Pid, st.startTime)
			if err != nil || got != tc.want {
				t.Fatalf("AtTerminal = %v, %v; want %v", got, err, tc.want)
			}
			if _, err := (Peers{}).AtTerminal(cmd.Process.Pid, st.startTime+1); err == nil {
				t.Error("AtTerminal with another start time: no error")
			}
		})
	}
}
