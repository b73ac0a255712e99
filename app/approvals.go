package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/codediff"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/textsafe"
	"github.com/portcullis/portcullis/platform"
)

// runApprovals lists the pending approval requests with their cards.
func (a *App) runApprovals(args []string) error {
	o := approvalsFlags()
	if err := parseFlags(o.fs, args); err != nil {
		return err
	}
	asJSON := o.json
	if *o.standing {
		return a.listStanding(*asJSON)
	}
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpApprovals}, 5*time.Second)
	if err != nil {
		return daemonError(err)
	}
	var reqs []authz.Request
	if err := json.Unmarshal(data, &reqs); err != nil {
		return fmt.Errorf("reading the daemon's answer: %w", err)
	}
	if *asJSON && !*o.diff {
		return writeJSON(a.Stdout, reqs) // no code asked for: no wait on snapshots
	}
	code := make([]*codediff.Report, len(reqs))
	for i, r := range reqs {
		code[i] = a.codeChanges(string(r.ID))
	}
	if *asJSON {
		type withCode struct {
			authz.Request
			Code *codediff.Report `json:"code,omitempty"`
		}
		out := make([]withCode, len(reqs))
		for i, r := range reqs {
			out[i] = withCode{r, code[i]}
		}
		return writeJSON(a.Stdout, out)
	}
	if len(reqs) == 0 {
		fmt.Fprintln(a.Stdout, "No approval requests are waiting.")
		return nil
	}
	for i, r := range reqs {
		left := time.Until(r.Deadline).Round(time.Second)
		fmt.Fprintf(a.Stdout, "%s  (expires in %s)\n", r.ID, left)
		for _, l := range r.Card.Lines() {
			fmt.Fprintf(a.Stdout, "  %s\n", textsafe.Line(l)) // a name cannot start a line of its own
		}
		writeCode(a.Stdout, code[i], *o.diff)
		for _, w := range textsafe.Warnings(r.Card.Offered()) {
			fmt.Fprintf(a.Stdout, "  ⚠ %s\n", w)
		}
		fmt.Fprintf(a.Stdout, "  → %s\n\n", decideHint(r))
	}
	return nil
}

// codeChanges asks the daemon what changed in the source tree of request
// id's server since the code last approved; nil when it cannot say (an
// older daemon, a request decided meanwhile).
func (a *App) codeChanges(id string) *codediff.Report {
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpCode, Request: id}, 15*time.Second)
	if err != nil {
		return nil
	}
	var rep codediff.Report
	if json.Unmarshal(data, &rep) != nil {
		return nil
	}
	return &rep
}

// writeCode prints a card's code section: the summary line, each changed
// file with its added and removed lines, and with diff each file's diff.
// Everything in it is the server's tree's text: escaped, as all server
// text is.
func writeCode(w io.Writer, rep *codediff.Report, diff bool) {
	if rep == nil {
		return
	}
	fmt.Fprintf(w, "  CODE      %s\n", textsafe.Line(rep.Summary()))
	if rep.Since != "" && rep.Note != "" {
		fmt.Fprintf(w, "            %s\n", textsafe.Line(rep.Note))
	}
	if len(rep.Changes) == 0 {
		return
	}
	fmt.Fprintf(w, "            in %s, since the code approved for epoch %s (%s)\n", textsafe.Line(rep.Root), rep.Since.Short(), rep.SinceAt.Local().Format("2006-01-02 15:04"))
	for _, c := range rep.Changes {
		fmt.Fprintf(w, "            %s\n", textsafe.Line(c.Stat()))
	}
	if !diff {
		if slices.ContainsFunc(rep.Changes, func(c codediff.Change) bool { return c.Diff != "" }) {
			fmt.Fprintln(w, "            (portcullis approvals --diff shows the lines)")
		}
		return
	}
	for _, c := range rep.Changes {
		if c.Diff == "" {
			continue
		}
		fmt.Fprintln(w)
		for _, l := range strings.Split(strings.TrimRight(c.Diff, "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", textsafe.Block(l)) // tabs kept, controls escaped
		}
	}
	fmt.Fprintln(w)
}

// decideHint is the line under a card that says how to answer it: what a
// plain approve grants (the proposed scope), --tools and --all when the card
// offers other tools, --once unless the card's call was refused already.
func decideHint(r authz.Request) string {
	c := r.Card
	if c.AskEveryUse {
		// Every approval of such a card serves one call or launch.
		what := "this call only"
		if c.Identity != "" {
			what = "this launch only"
		}
		return "portcullis approve " + string(r.ID) + " (" + what + ": a credential asks on every use)   |   portcullis deny " + string(r.ID)
	}
	run := "portcullis approve " + string(r.ID)
	if len(c.ToolScope) > 0 {
		run += " (grants " + toolList(c.ToolScope, c.Offered()) + ")"
	}
	if len(c.OtherTools) > 0 {
		run += " [--tools a,b | --all]"
	}
	if c.Identity == "" && c.ServerRequest == nil && c.Code != "" {
		run += " [--code: this code, every run of the agent program]"
	}
	if len(c.AlsoRuns) > 0 {
		run += " [--skip-run RUN]"
	}
	if c.Stale {
		// Its call was refused already: there is no call to approve once.
		return run + "   |   portcullis deny " + string(r.ID)
	}
	once := "portcullis approve " + string(r.ID) + " --once"
	if c.Identity != "" {
		once += " (this launch only)"
	} else if c.ServerRequest != nil {
		once += " (this request only)"
	} else if c.Tool != "" {
		once += " (this call only)"
	}
	return run + "   |   " + once + "   |   portcullis deny " + string(r.ID)
}

// runDecide answers one approval request: approve (for the agent run, or
// --once) or deny. Approving for the run grants the tools the card proposes;
// --tools grants the called tool and the tools named (each shown on the
// card), --all every tool the card shows. An id that is no longer pending is
// still sent, so that the daemon says what became of it (withdrawn, and
// why; decided; timed out).
func (a *App) runDecide(choice authz.Choice, args []string) error {
	name := "approve"
	if choice == authz.Deny {
		name = "deny"
	}
	o := decideFlags(name)
	fs, once, tools, all, code := o.fs, o.once, o.tools, o.all, o.code
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
	if *code {
		if choice != authz.ApproveRun {
			return usagef("--code goes with approve (for this run), not with --once or deny")
		}
		choice = authz.ApproveCode
	}
	if (*tools != "" || *all) && choice != authz.ApproveRun && choice != authz.ApproveCode {
		return usagef("--tools and --all go with approve (for this run)")
	}
	if *tools != "" && *all {
		return usagef("--tools or --all, not both")
	}
	if err := a.atTerminal(name, id); err != nil {
		return err
	}
	req, pending, err := a.pendingRequest(id)
	if err != nil {
		return err
	}
	if !pending {
		return a.decideGone(id)
	}
	c := req.Card
	var chosen []string
	switch {
	case *all:
		chosen = c.Offered()
	case *tools != "":
		offered := c.Offered()
		for _, t := range strings.Split(*tools, ",") {
			t = strings.TrimSpace(t)
			if t == "" {
				continue
			}
			if !slices.Contains(offered, t) {
				return usagef("--tools: %q is not on the card of %s (it shows %s)", t, id, strings.Join(offered, ", "))
			}
			if !slices.Contains(chosen, t) {
				chosen = append(chosen, t)
			}
		}
		if c.Tool != "" && !slices.Contains(chosen, c.Tool) {
			// The call that waits is what a run approval approves first.
			chosen = append([]string{c.Tool}, chosen...)
		}
	}
	if choice == authz.ApproveOnce && c.Stale {
		return fmt.Errorf("%s cannot be approved once: its call (%s) was refused already as authorization_stale, so there is no call to approve; `portcullis approve %s` allows the new code for this run, `portcullis deny %s` refuses", id, c.Tool, id, id)
	}
	// The runs decided are those the card showed when it was read here:
	// a run the daemon merged into the request since is not among them.
	var runs []ids.RunID
	for _, run := range c.RunNames() {
		if !slices.Contains(*o.skip, string(run)) {
			runs = append(runs, run)
		}
	}
	for _, run := range *o.skip {
		if !slices.Contains(c.RunNames(), ids.RunID(run)) {
			return usagef("--skip-run: %q is not a run of %s (it decides %s)", run, id, strings.Join(ids.Strings(c.RunNames()), ", "))
		}
	}
	if len(runs) == 0 {
		return usagef("--skip-run leaves out every run of %s: nothing would be decided", id)
	}
	hello := control.Hello{Op: control.OpDecide, Request: id, Choice: string(choice), Tools: chosen, Runs: runs}
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
	granted := c.ToolScope
	if chosen != nil {
		granted = chosen
	}
	// The daemon answers with the grants it made: tools denied by a policy
	// meanwhile are left out of them, so they are what the person gave;
	// InForce is every tool the run holds now, given before or now.
	var g authz.DecideReply
	inForce := granted
	if len(data) > 0 && json.Unmarshal(data, &g) == nil && g.ID != "" {
		granted = g.ToolScope
		inForce = granted
		if held, ok := g.InForce[g.AgentRun]; ok {
			inForce = held
		}
	}
	if len(c.AlsoRuns) > 0 && choice != authz.Deny {
		fmt.Fprintf(a.Stdout, "%s decides %d agent runs of %s (one grant per run and epoch); decided now: %s.", id, len(c.Runs()), c.AgentExe, strings.Join(ids.Strings(runs), ", "))
		if len(*o.skip) > 0 {
			fmt.Fprintf(a.Stdout, " Left out, still held: %s.", strings.Join(*o.skip, ", "))
		}
		fmt.Fprintln(a.Stdout)
	}
	switch {
	case choice == authz.ApproveOnce && c.ServerRequest != nil:
		fmt.Fprintf(a.Stdout, "Approved %s once: this %s request of %s goes to the agent; the next one asks again.\n", id, c.ServerRequest.Method, c.ServerLabel)
	case choice == authz.ApproveRun && c.ServerRequest != nil:
		fmt.Fprintf(a.Stdout, "Approved %s: %s requests of %s (epoch %s) go to the agent for this agent run; a new epoch asks again.\n", id, c.ServerRequest.Kind, c.ServerLabel, c.CurrentEpoch)
	case choice != authz.Deny && c.AskEveryUse && c.Identity != "":
		fmt.Fprintf(a.Stdout, "Approved %s for this launch only: %s asks on every use, so the next launch asks again.\n", id, strings.Join(c.CredentialScope, ", "))
	case choice != authz.Deny && c.AskEveryUse:
		fmt.Fprintf(a.Stdout, "Approved %s for the call shown only (%s): a credential of %s asks on every use, so the next call asks again.\n", id, textsafe.Name(c.Tool, c.Offered()), c.ServerLabel)
	case choice == authz.ApproveRun && c.Identity != "":
		tools := ""
		if len(granted) > 0 {
			tools = fmt.Sprintf(", and %s on the process it starts, for this run", toolList(granted, c.Offered()))
		}
		fmt.Fprintf(a.Stdout, "Approved %s: this build of %s may receive %s%s (if the code on disk changes before it starts, you are asked again).\n", id, c.ServerLabel, strings.Join(c.CredentialScope, ", "), tools)
	case choice == authz.ApproveRun || choice == authz.ApproveCode:
		left := ""
		// Not granted: the tools of the card the run holds neither from
		// this decision nor from one made before on this epoch.
		if rest := slices.DeleteFunc(c.Offered(), func(t string) bool { return slices.Contains(granted, t) || slices.Contains(inForce, t) }); len(rest) > 0 {
			left = fmt.Sprintf(" Not granted: %s (they ask when called).", toolList(rest, c.Offered()))
		}
		before := ""
		if earlier := slices.DeleteFunc(slices.Clone(inForce), func(t string) bool { return slices.Contains(granted, t) }); len(earlier) > 0 {
			before = fmt.Sprintf(" Granted before on this epoch: %s.", toolList(earlier, append(c.Offered(), earlier...)))
		}
		scope := "for this agent run and epoch " + c.CurrentEpoch
		if choice == authz.ApproveCode {
			scope = ids.EpochID(fmt.Sprintf("for this code of %s and every run of %s (each run's epoch of this code; new code asks again)", c.ServerLabel, c.AgentExe))
		}
		fmt.Fprintf(a.Stdout, "Approved %s %s: %s.%s%s\n", id, scope, toolList(granted, c.Offered()), before, left)
	case choice == authz.ApproveOnce && c.Identity != "":
		fmt.Fprintf(a.Stdout, "Approved %s once: this launch of %s may receive %s; a later launch asks again.\n", id, c.ServerLabel, strings.Join(c.CredentialScope, ", "))
	case choice == authz.ApproveOnce && c.Tool != "":
		fmt.Fprintf(a.Stdout, "Approved %s for the call shown: %s with these arguments, once; other calls ask again.\n", id, textsafe.Name(c.Tool, c.Offered()))
	case choice == authz.ApproveOnce:
		fmt.Fprintf(a.Stdout, "Approved %s for one call.\n", id)
	default:
		fmt.Fprintf(a.Stdout, "Denied %s.\n", id)
	}
	return nil
}

// toolList joins tool names for a line of text, each escaped and flagged
// among all (textsafe.Name).
func toolList(names, all []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = textsafe.Name(n, all)
	}
	return strings.Join(out, ", ")
}

// authLine is the status of settings.approvalAuthentication: whether
// approvals are OS-authenticated, the mode in force and why, then what
// that means for the person and, when the setting cannot be followed, the
// reason with the step that fixes it.
func authLine(st daemon.AuthStatus) string {
	mode := st.Mode
	if st.Setting == "" {
		mode += " (the default)"
	}
	var line string
	switch {
	case st.OSAuthenticated:
		line = "Approval authentication: " + mode + ", OS-authenticated by " + orNone(st.Mechanism)
	case st.Reason == daemon.AuthReasonOff:
		line = "Approval authentication: off, NOT OS-authenticated (settings.approvalAuthentication is off)"
	default:
		line = "Approval authentication: " + mode + ", NOT OS-authenticated: " + authReasonText(st)
	}
	if st.Meaning != "" {
		line += "\n  " + st.Meaning
	}
	if st.Note != "" {
		line += "\n  " + st.Note
	}
	return line
}

// authReasonText names AuthStatus.Reason for a person.
func authReasonText(st daemon.AuthStatus) string {
	mech := orNone(st.Mechanism)
	switch st.Reason {
	case daemon.AuthReasonRoot:
		return "the daemon runs as root"
	case daemon.AuthReasonNotFound:
		return mech + " is not installed"
	case daemon.AuthReasonNotRunning:
		return mech + " is not running"
	case daemon.AuthReasonNoAction:
		return mech + "'s action " + platform.PolkitAction + " is not installed"
	case daemon.AuthReasonUnsupported:
		return "no mechanism on this system"
	}
	return mech + " is unavailable"
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
	return a.authAgentFor(string(req.ID)+" is approved", func(st daemon.StatusReport) bool {
		return daemon.AuthenticationApplies(st.Authentication.Mode, audit.ChannelCLI, req.Card, choice)
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
	if u, ok := f.(interface{ Unwrap() io.Writer }); ok {
		f = u.Unwrap() // a textsafe.Writer
	}
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// decideGone asks the daemon what became of request id, which is not
// pending (withdrawn, and why; decided; timed out), by sending a denial of
// it. Nothing can be granted by it.
func (a *App) decideGone(id string) error {
	// Sent as a denial: should the request be pending after all, the
	// safe answer is no.
	_, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpDecide, Request: id, Choice: string(authz.Deny)}, 5*time.Second)
	var re *control.RefusedError
	if errors.As(err, &re) && !strings.HasPrefix(re.Reply.Code, control.CodeResolvedPrefix) {
		// The daemon does not know it (any more).
		return fmt.Errorf("no pending approval request %s (it was decided, timed out, or its agent run ended); see portcullis approvals", id)
	}
	if err != nil {
		return daemonError(err)
	}
	// A request that was not pending can never be pending again.
	return fmt.Errorf("request %s was not pending, and was denied; see portcullis approvals", id)
}

// pendingRequest fetches one pending approval request from the daemon; ok
// is false when it is not pending.
func (a *App) pendingRequest(id string) (r authz.Request, ok bool, err error) {
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpApprovals}, 5*time.Second)
	if err != nil {
		return authz.Request{}, false, daemonError(err)
	}
	var reqs []authz.Request
	if err := json.Unmarshal(data, &reqs); err != nil {
		return authz.Request{}, false, fmt.Errorf("reading the daemon's answer: %w", err)
	}
	for _, r := range reqs {
		if string(r.ID) == id {
			return r, true, nil
		}
	}
	return authz.Request{}, false, nil
}

// listStanding prints the standing approvals in force (approvals
// --standing), and why none is when their file was refused at start.
func (a *App) listStanding(asJSON bool) error {
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpStatus}, 5*time.Second)
	if err != nil {
		return daemonError(err)
	}
	var rep daemon.StatusReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("reading the daemon's status: %w", err)
	}
	if asJSON {
		return writeJSON(a.Stdout, rep.Standing)
	}
	writeStanding(a.Stdout, rep, true)
	return nil
}

// writeStanding prints the standing approvals of rep; all: one line each
// (approvals --standing), else a count (status).
func writeStanding(w io.Writer, rep daemon.StatusReport, all bool) {
	if rep.StandingError != "" {
		fmt.Fprintf(w, "Standing approvals: none in force: their file was refused when the daemon started, so every run is asked (approve --code again to make one):\n  %s\n", textsafe.Line(rep.StandingError))
	}
	if !all {
		if n := len(rep.Standing); n > 0 {
			fmt.Fprintf(w, "Standing approvals (approve --code): %s in force; see portcullis approvals --standing\n", count(n, "approval", "approvals"))
		}
		return
	}
	if len(rep.Standing) == 0 {
		if rep.StandingError == "" {
			fmt.Fprintln(w, "No standing approvals (approve --code) are in force.")
		}
		return
	}
	for _, st := range rep.Standing {
		fmt.Fprintf(w, "%s  %s: %s for every run of %s while its code is %s (approved %s)\n", st.ID, textsafe.Line(st.ServerLabel),
			textsafe.Line(strings.Join(st.Tools, ", ")), textsafe.Line(st.AgentExe), identity.ShortDigest(st.Code), st.Granted.Local().Format("2006-01-02 15:04"))
		if len(st.Credentials) > 0 {
			fmt.Fprintf(w, "  with credentials %s\n", textsafe.Line(strings.Join(st.Credentials, ", ")))
		}
	}
	fmt.Fprintln(w, "Each ends when the server's code changes. End one now: portcullis revoke ID")
}

// runRevoke ends a standing approval (approve --code): later runs of the
// agent program are asked again. It narrows trust, so it runs anywhere
// (a script, an agent's shell) and asks for no authentication.
func (a *App) runRevoke(args []string) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return usagef("revoke needs exactly one standing approval's ID (portcullis approvals --standing lists them)")
	}
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpRevokeStanding, Request: args[0]}, 5*time.Second)
	if err != nil {
		return daemonError(err)
	}
	var st authz.StandingApproval
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("reading the daemon's answer: %w", err)
	}
	fmt.Fprintf(a.Stdout, "Revoked %s: runs of %s on %s are asked again; grants it already made end with their runs or their server's code.\n",
		st.ID, textsafe.Line(st.AgentExe), textsafe.Line(st.ServerLabel))
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
