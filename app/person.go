package app

import (
	"errors"
	"fmt"
	"time"

	"github.com/portcullis/portcullis/core/control"
)

// runStop is `portcullis stop`: the daemon stops every server and exits.
// Only the person stops it (the daemon checks who asks, as for approve),
// at a terminal of their own: a server or an agent that stopped the daemon
// could bind its socket itself.
func (a *App) runStop(args []string) error {
	if len(args) > 0 {
		return usagef("stop takes no arguments")
	}
	if !isTerminal(a.Stdin) || !isTerminal(a.Stdout) {
		return fmt.Errorf("%w: portcullis stop runs only at a terminal of your own (stdin and stdout a terminal, not a pipe or a file); run it in your terminal, or quit from the Portcullis menu", errNoTerminal)
	}
	if _, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpStop}, 10*time.Second); err != nil {
		if errors.Is(err, control.ErrNoDaemon) {
			return fmt.Errorf("no Portcullis daemon is running: nothing to stop")
		}
		return fmt.Errorf("stop: %w", err)
	}
	fmt.Fprintln(a.Stdout, "Portcullis is stopping: every server is stopped, agents are told.")
	return nil
}

// requirePerson refuses what (a change that widens trust done by the CLI
// itself, such as putting secrets back into an agent's configuration)
// unless it runs at a terminal of the person's own and, when a daemon
// runs, the daemon finds that the process asking is the person's (not a
// supervised server's, not an agent's), which it records in the audit log.
// With no daemon running no server or agent run exists to tell apart, and
// the terminal rule alone applies.
func (a *App) requirePerson(name, what string) error {
	if !isTerminal(a.Stdin) || !isTerminal(a.Stdout) {
		return fmt.Errorf("%w: portcullis %s decides for you, so it runs only at a terminal of your own (stdin and stdout a terminal, not a pipe or a file); nothing was done; run it in your terminal", errNoTerminal, name)
	}
	_, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpPerson, What: what}, 10*time.Second)
	if err == nil || errors.Is(err, control.ErrNoDaemon) {
		return nil
	}
	return fmt.Errorf("not done: %w", err)
}
