package app

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/paths"
)

// TestDecideNeedsATerminal: approve and deny refuse to run unless stdin and
// stdout are a terminal, before asking the daemon anything; at a real
// pseudo-terminal they go on to the daemon (none runs here, so that is the
// error they end with).
func TestDecideNeedsATerminal(t *testing.T) {
	dir := t.TempDir()
	dirs := paths.Dirs{Config: dir, State: dir, Runtime: dir}
	_, tty := openPTY(t)
	for _, tc := range []struct {
		name     string
		args     []string
		stdin    io.Reader
		stdout   io.Writer
		terminal bool
	}{
		{"approve, pipes", []string{"approve", "01REQ"}, strings.NewReader(""), &bytes.Buffer{}, false},
		{"deny, pipes", []string{"deny", "01REQ"}, strings.NewReader(""), &bytes.Buffer{}, false},
		{"approve, stdin a terminal only", []string{"approve", "01REQ", "--once"}, tty, &bytes.Buffer{}, false},
		{"deny, stdout a terminal only", []string{"deny", "01REQ"}, strings.NewReader(""), tty, false},
		{"approve at a terminal", []string{"approve", "01REQ"}, tty, tty, true},
		{"deny at a terminal", []string{"deny", "01REQ"}, tty, tty, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &App{Dirs: dirs, Stdin: tc.stdin, Stdout: tc.stdout, Stderr: &bytes.Buffer{}}
			choice := authz.ApproveRun
			if tc.args[0] == "deny" {
				choice = authz.Deny
			}
			err := a.runDecide(choice, tc.args[1:])
			if tc.terminal {
				if errors.Is(err, errNoTerminal) || !errors.Is(err, control.ErrNoDaemon) {
					t.Fatalf("at a terminal: %v, want the daemon to be asked (no daemon runs here)", err)
				}
				return
			}
			if !errors.Is(err, errNoTerminal) {
				t.Fatalf("err = %v, want the terminal refusal", err)
			}
			for _, want := range []string{"runs only at a terminal of your own", "portcullis " + tc.args[0] + " 01REQ", "Portcullis window"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}
