package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
)

// runApprovals lists the pending approval requests with their cards.
func (a *App) runApprovals(args []string) error {
	fs := newFlags("approvals")
	asJSON := fs.Bool("json", false, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpApprovals}, 5*time.Second)
	if err != nil {
		return daemonError(err)
	}
	var reqs []authz.Request
	if err := json.Unmarshal(data, &reqs); err != nil {
		return fmt.Errorf("reading the daemon's answer: %w", err)
	}
	if *asJSON {
		return writeJSON(a.Stdout, reqs)
	}
	if len(reqs) == 0 {
		fmt.Fprintln(a.Stdout, "No approval requests are waiting.")
		return nil
	}
	for _, r := range reqs {
		left := time.Until(r.Deadline).Round(time.Second)
		fmt.Fprintf(a.Stdout, "%s  (expires in %s)\n", r.ID, left)
		for _, l := range r.Card.Lines() {
			fmt.Fprintf(a.Stdout, "  %s\n", l)
		}
		fmt.Fprintf(a.Stdout, "  → portcullis approve %s   |   portcullis approve %s --once   |   portcullis deny %s\n\n", r.ID, r.ID, r.ID)
	}
	return nil
}

// runDecide answers one approval request: approve (for the agent run, or
// --once) or deny.
func (a *App) runDecide(choice authz.Choice, args []string) error {
	name := "approve"
	if choice == authz.Deny {
		name = "deny"
	}
	fs := newFlags(name)
	once := fs.Bool("once", false, "")
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		// Accept the id before or after the flags.
		args = append(args[1:], args[0])
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("%s needs exactly one approval request id (see portcullis approvals)", name)
	}
	if *once {
		if choice == authz.Deny {
			return usagef("--once goes with approve")
		}
		choice = authz.ApproveOnce
	}
	id := fs.Arg(0)
	if _, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpDecide, Request: id, Choice: string(choice)}, 5*time.Second); err != nil {
		return daemonError(err)
	}
	switch choice {
	case authz.ApproveRun:
		fmt.Fprintf(a.Stdout, "Approved %s for this agent run and epoch.\n", id)
	case authz.ApproveOnce:
		fmt.Fprintf(a.Stdout, "Approved %s for one call.\n", id)
	default:
		fmt.Fprintf(a.Stdout, "Denied %s.\n", id)
	}
	return nil
}

// daemonError words a failure to talk to the daemon.
func daemonError(err error) error {
	var re *control.RefusedError
	switch {
	case errors.As(err, &re):
		return errors.New(re.Reply.Error)
	case errors.Is(err, control.ErrNoDaemon):
		return fmt.Errorf("%w; start it with `portcullis` or `portcullis daemon`", err)
	}
	return err
}
