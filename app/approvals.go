package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/platform"
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
		fmt.Fprintf(a.Stdout, "  → %s\n\n", decideHint(r))
	}
	return nil
}

// decideHint is the line under a card that says how to answer it: --tools
// only when the card has tools to narrow, and what --once means for it.
func decideHint(r authz.Request) string {
	run := "portcullis approve " + r.ID
	if len(r.Card.ToolScope) > 1 {
		run += " [--tools a,b]"
	}
	if r.Card.AskEveryUse {
		// Every approval of such a card serves one call or launch.
		what := "this call only"
		if r.Card.Identity != "" {
			what = "this launch only"
		}
		return "portcullis approve " + r.ID + " (" + what + ": a credential asks on every use)   |   portcullis deny " + r.ID
	}
	once := "portcullis approve " + r.ID + " --once"
	if r.Card.Identity != "" {
		once += " (this launch only)"
	} else if r.Card.Tool != "" {
		once += " (this call only)"
	}
	return run + "   |   " + once + "   |   portcullis deny " + r.ID
}

// runDecide answers one approval request: approve (for the agent run, or
// --once; --tools narrows the run approval to some of the card's tools) or
// deny.
func (a *App) runDecide(choice authz.Choice, args []string) error {
	name := "approve"
	if choice == authz.Deny {
		name = "deny"
	}
	fs := newFlags(name)
	once := fs.Bool("once", false, "")
	tools := fs.String("tools", "", "")
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:] // the id may come before the flags
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if id == "" && fs.NArg() == 1 {
		id = fs.Arg(0)
	} else if fs.NArg() != 0 || id == "" {
		return usagef("%s needs exactly one approval request id (see portcullis approvals)", name)
	}
	if *once {
		if choice == authz.Deny {
			return usagef("--once goes with approve")
		}
		choice = authz.ApproveOnce
	}
	var narrowed []string
	if *tools != "" {
		if choice != authz.ApproveRun {
			return usagef("--tools goes with approve (for this run)")
		}
		narrowed = strings.Split(*tools, ",")
	}
	if err := a.atTerminal(name, id); err != nil {
		return err
	}
	req, err := a.pendingRequest(id)
	if err != nil {
		return err
	}
	for _, t := range narrowed {
		if !slices.Contains(req.Card.ToolScope, t) {
			return usagef("--tools: %q is not in the request's tool scope (%s)", t, strings.Join(req.Card.ToolScope, ", "))
		}
	}
	if narrowed != nil && req.Card.Tool != "" && !slices.Contains(narrowed, req.Card.Tool) {
		return usagef("--tools must include %s, the tool of the call that waits (to refuse that call, use portcullis deny %s)", req.Card.Tool, id)
	}
	hello := control.Hello{Op: control.OpDecide, Request: id, Choice: string(choice), Tools: narrowed}
	timeout := 5 * time.Second
	if authed, err := a.startAuthentication(choice, req); err != nil {
		return err
	} else if authed != nil {
		defer authed()
		timeout = authTimeout // the person types a password meanwhile
	}
	data, err := control.Call(a.Dirs.Socket(), hello, timeout)
	if err != nil {
		return daemonError(err)
	}
	granted := req.Card.ToolScope
	if narrowed != nil {
		granted = narrowed
	}
	// The daemon answers with the grant it made: tools denied by a policy
	// meanwhile are left out of it, so it is what the person gave.
	var g authz.Grant
	if len(data) > 0 && json.Unmarshal(data, &g) == nil && g.ID != "" {
		granted = g.ToolScope
	}
	switch {
	case choice != authz.Deny && req.Card.AskEveryUse && req.Card.Identity != "":
		fmt.Fprintf(a.Stdout, "Approved %s for this launch only: %s asks on every use, so the next launch asks again.\n", id, strings.Join(req.Card.CredentialScope, ", "))
	case choice != authz.Deny && req.Card.AskEveryUse:
		fmt.Fprintf(a.Stdout, "Approved %s for the call shown only (%s): a credential of %s asks on every use, so the next call asks again.\n", id, req.Card.Tool, req.Card.ServerLabel)
	case choice == authz.ApproveRun && req.Card.Identity != "":
		fmt.Fprintf(a.Stdout, "Approved %s: this build of %s may receive %s (if the code on disk changes before it starts, you are asked again).\n", id, req.Card.ServerLabel, strings.Join(req.Card.CredentialScope, ", "))
	case choice == authz.ApproveRun:
		fmt.Fprintf(a.Stdout, "Approved %s for this agent run and epoch %s: %s.\n", id, req.Card.CurrentEpoch, strings.Join(granted, ", "))
	case choice == authz.ApproveOnce && req.Card.Identity != "":
		fmt.Fprintf(a.Stdout, "Approved %s once: this launch of %s may receive %s; a later launch asks again.\n", id, req.Card.ServerLabel, strings.Join(req.Card.CredentialScope, ", "))
	case choice == authz.ApproveOnce && req.Card.Tool != "":
		fmt.Fprintf(a.Stdout, "Approved %s for the call shown: %s with these arguments, once; other calls ask again.\n", id, req.Card.Tool)
	case choice == authz.ApproveOnce:
		fmt.Fprintf(a.Stdout, "Approved %s for one call.\n", id)
	default:
		fmt.Fprintf(a.Stdout, "Denied %s.\n", id)
	}
	return nil
}

// authLine is the status line of settings.approvalAuthentication.
func authLine(st daemon.AuthStatus) string {
	var line string
	switch st.Mode {
	case config.AuthAlways:
		line = "Approval authentication: always (every approval asks " + orNone(st.Mechanism) + " to authenticate you)"
	case config.AuthCredentials:
		line = "Approval authentication: credentials (approvals that carry a credential ask " + orNone(st.Mechanism) + " to authenticate you)"
	default:
		line = "Approval authentication: off"
	}
	if st.Note != "" {
		line += "\n  " + st.Note
	}
	return line
}

func orNone(mech string) string {
	if mech == "" {
		return "the operating system"
	}
	return mech
}

// authTimeout bounds a decision that waits for the operating system's
// authentication (the person answering a password prompt).
const authTimeout = 5 * time.Minute

// startAuthentication prepares the operating system's authentication of a
// decision, when the daemon's settings.approvalAuthentication applies to
// it (daemon.AuthenticationApplies); see authAgentFor.
func (a *App) startAuthentication(choice authz.Choice, req authz.Request) (func(), error) {
	if choice == authz.Deny {
		return nil, nil // a denial needs no authentication
	}
	return a.authAgentFor(req.ID+" is approved", func(st daemon.StatusReport) bool {
		return daemon.AuthenticationApplies(st.Authentication.Mode, req.Card, choice)
	})
}

// authAgentFor prepares the operating system's authentication of what the
// daemon is about to be asked (what: "X is approved"), when needs says the
// daemon's status calls for it: on Linux it registers polkit's terminal
// agent (pkttyagent) for this process, so that the daemon's pkcheck asks
// for the password at this terminal, and keeps an interrupt (^C at the
// prompt, which ends pkttyagent and so cancels) from ending this command
// before the daemon's answer is shown. It returns nil when no
// authentication applies (or the system cannot authenticate: the daemon
// then refuses with the reason), else the function that undoes it.
func (a *App) authAgentFor(what string, needs func(daemon.StatusReport) bool) (func(), error) {
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpStatus}, 5*time.Second)
	if err != nil {
		return nil, daemonError(err)
	}
	var st daemon.StatusReport
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("reading the daemon's status: %w", err)
	}
	auth := st.Authentication
	if !auth.Available || !needs(st) {
		return nil, nil
	}
	fmt.Fprintf(a.Stdout, "settings.approvalAuthentication is %q: %s asks you to authenticate before %s.\n", auth.Mode, auth.Mechanism, what)
	ints := make(chan os.Signal, 1)
	signal.Notify(ints, os.Interrupt)
	agent, err := platform.StartTerminalAgent(os.Getpid(), nil)
	if err != nil {
		signal.Stop(ints)
		return nil, fmt.Errorf("not done: %s cannot ask for your password at this terminal: %w; nothing was sent to the daemon — use the Portcullis window instead", auth.Mechanism, err)
	}
	return func() {
		agent.Stop()
		signal.Stop(ints)
	}, nil
}

// errNoTerminal says that approve or deny did not run at a terminal.
var errNoTerminal = errors.New("not at a terminal")

// atTerminal refuses approve and deny unless both stdin and stdout are a
// terminal: a decision is the person's, typed at their own terminal, not
// the output of a script or of an agent's shell tool. This is the client's
// side only; the daemon decides from the kernel's view of who asks (the
// process's ancestry), not from this check.
func (a *App) atTerminal(name, id string) error {
	if isTerminal(a.Stdin) && isTerminal(a.Stdout) {
		return nil
	}
	return fmt.Errorf("%w: portcullis %s decides for you, so it runs only at a terminal of your own (stdin and stdout a terminal, not a pipe or a file); run `portcullis %s %s` in your terminal, or decide in the Portcullis window", errNoTerminal, name, name, id)
}

func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// pendingRequest fetches one pending approval request from the daemon.
func (a *App) pendingRequest(id string) (authz.Request, error) {
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpApprovals}, 5*time.Second)
	if err != nil {
		return authz.Request{}, daemonError(err)
	}
	var reqs []authz.Request
	if err := json.Unmarshal(data, &reqs); err != nil {
		return authz.Request{}, fmt.Errorf("reading the daemon's answer: %w", err)
	}
	for _, r := range reqs {
		if r.ID == id {
			return r, nil
		}
	}
	return authz.Request{}, fmt.Errorf("no pending approval request %s (it was decided, timed out, or its agent run ended); see portcullis approvals", id)
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
