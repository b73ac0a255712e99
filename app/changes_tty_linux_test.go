package app

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/paths"
)

// TestChangesDecideNeedsATerminal: changes confirm and reject refuse to run
// unless stdin and stdout are a terminal, before asking the daemon; at a
// pseudo-terminal they go on to the daemon (none runs here). Listing the
// changes needs no terminal.
func TestChangesDecideNeedsATerminal(t *testing.T) {
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
		{"confirm, pipes", []string{"confirm", "chg-1"}, strings.NewReader(""), &bytes.Buffer{}, false},
		{"reject, stdout a terminal only", []string{"reject", "chg-1"}, strings.NewReader(""), tty, false},
		{"confirm at a terminal", []string{"confirm", "chg-1"}, tty, tty, true},
		{"reject at a terminal", []string{"reject", "chg-1"}, tty, tty, true},
		{"list, pipes", nil, strings.NewReader(""), &bytes.Buffer{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &App{Dirs: dirs, Stdin: tc.stdin, Stdout: tc.stdout, Stderr: &bytes.Buffer{}}
			err := a.runChanges(tc.args)
			if tc.terminal {
				if errors.Is(err, errNoTerminal) || !errors.Is(err, control.ErrNoDaemon) {
					t.Fatalf("%v, want the daemon to be asked (no daemon runs here)", err)
				}
				return
			}
			if !errors.Is(err, errNoTerminal) || !strings.Contains(err.Error(), "portcullis changes "+tc.args[0]+" chg-1") {
				t.Fatalf("err = %v, want the terminal refusal naming the command", err)
			}
		})
	}
}
