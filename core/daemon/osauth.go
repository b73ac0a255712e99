package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/ids"
)

// Authenticator asks the operating system to authenticate the person
// before a grant is issued (settings.approvalAuthentication; docs/DESIGN.md
// "Who decides"): polkit on Linux,
// LocalAuthentication on macOS. Package platform implements it; a daemon
// without one (Options.Authenticator nil) has no such mechanism.
type Authenticator interface {
	// Mechanism names the mechanism for a person: "polkit",
	// "LocalAuthentication".
	Mechanism() string
	// Available returns nil when the mechanism can authenticate now, or
	// an error that says why not (no polkitd on the system bus, the
	// action not installed…).
	Available() error
	// Authenticate asks the system to authenticate the user of process
	// subject, the one that asked for the decision: polkit asks the
	// authentication agent registered for that process or its session
	// (pkttyagent at the person's terminal, the desktop's agent). reason
	// says what is being approved. It returns nil once the system has
	// authenticated the person, an error wrapping ErrAuthDismissed when
	// the person cancelled, and another error (wrapping ErrAuthFailed
	// when the system answered no) otherwise.
	Authenticate(ctx context.Context, subject AuthSubject, reason string) error
}

// AuthSubject is the process a decision came from, as the kernel reports
// it: pid, its start time (identity.Observed.StartTime, so a reused pid is
// not mistaken for it) and uid.
type AuthSubject struct {
	PID       int
	StartTime uint64
	UID       int
}

// Errors of Authenticator.Authenticate.
var (
	ErrAuthDismissed = errors.New("authentication cancelled")
	ErrAuthFailed    = errors.New("authentication failed")
)

// codeAuthentication is the control Reply.Code of an approval that the
// operating system's authentication did not confirm (or could not be
// asked to).
const codeAuthentication = "authentication_failed"

// Refusal kinds of decision_refused events written here.
const (
	refusedAuthFailed      = "authentication"             // the OS did not authenticate the person
	refusedAuthUnavailable = "authentication_unavailable" // the setting asks for it and the OS cannot
)

// UnavailableError is what an Authenticator's Available returns when the
// mechanism cannot authenticate: Reason is one of the AuthReason codes,
// Text the sentence for the person (why, and the one step that fixes it).
type UnavailableError struct {
	Reason string
	Text   string
}

func (e *UnavailableError) Error() string { return e.Text }

// Reasons why approvals are not OS-authenticated (AuthStatus.Reason).
const (
	AuthReasonOff         = "setting_off"          // settings.approvalAuthentication is off
	AuthReasonRoot        = "root_daemon"          // the daemon runs as root, whom polkit lets through
	AuthReasonNotFound    = "not_installed"        // the mechanism (polkit) is not installed
	AuthReasonNotRunning  = "not_running"          // its daemon (polkitd) does not answer
	AuthReasonNoAction    = "action_not_installed" // polkit does not know Portcullis's action
	AuthReasonUnsupported = "unsupported"          // this build or system has no mechanism
	AuthReasonUnavailable = "unavailable"          // any other reason the mechanism gave
)

// AuthStatus is what `portcullis status` shows of
// settings.approvalAuthentication.
type AuthStatus struct {
	// Setting is the value in the configuration file ("" when absent).
	Setting string `json:"setting,omitempty"`
	// Mode is the one in force: config.AuthOff, AuthCredentials, AuthCLI
	// or AuthAlways.
	Mode string `json:"mode"`
	// Mechanism names the system's mechanism ("" when this build has
	// none).
	Mechanism string `json:"mechanism,omitempty"`
	// Available says whether the mechanism can authenticate now.
	Available bool `json:"available"`
	// OSAuthenticated says whether the operating system authenticates the
	// person for the decisions Mode covers: Mode is not off and the
	// mechanism is available.
	OSAuthenticated bool `json:"osAuthenticated"`
	// Reason says why approvals are not OS-authenticated, as one of the
	// AuthReason codes; "" when OSAuthenticated.
	Reason string `json:"reason,omitempty"`
	// Unavailable is the mechanism's reason it cannot authenticate now,
	// with the step that fixes it; "" when Available.
	Unavailable string `json:"unavailable,omitempty"`
	// Meaning says, in one or two sentences, what Mode means for the
	// person: which decisions are OS-authenticated and what code of the
	// person's user can still decide without it.
	Meaning string `json:"meaning"`
	// Note says why Mode differs from what the setting asks, or why no
	// approval can be granted, "" otherwise.
	Note string `json:"note,omitempty"`
}

// AuthenticationApplies reports whether a decision choice on card, made
// through channel (audit.ChannelCLI or audit.ChannelWindow), needs the
// operating system's authentication when mode is in force: never for a
// denial; for every approval under config.AuthAlways; under
// config.AuthCLI for every approval made with the portcullis command and
// for one in the window whose card carries a credential scope; under
// config.AuthCredentials for an approval whose card carries a credential
// scope.
func AuthenticationApplies(mode, channel string, card authz.Card, choice authz.Choice) bool {
	if choice == authz.Deny {
		return false
	}
	switch mode {
	case config.AuthAlways:
		return true
	case config.AuthCLI:
		return channel == audit.ChannelCLI || len(card.CredentialScope) > 0
	case config.AuthCredentials:
		return len(card.CredentialScope) > 0
	}
	return false
}

// authStatus resolves settings.approvalAuthentication against the system
// (ResolveAuth).
func (d *Daemon) authStatus() AuthStatus {
	cfg, _ := d.config()
	return ResolveAuth(cfg.Settings.ApprovalAuthentication, d.opts.Authenticator)
}

// ResolveAuth resolves setting (settings.approvalAuthentication) against
// the mechanism a (nil: none): absent, it is cli where the mechanism is
// available and off where it is not; set, it is what it says, with a note
// when the mechanism is missing. The status says whether approvals are
// OS-authenticated, why not, and what that means.
func ResolveAuth(setting string, a Authenticator) AuthStatus {
	st := AuthStatus{Setting: setting}
	var avail error
	if a == nil {
		avail = &UnavailableError{Reason: AuthReasonUnsupported, Text: fmt.Sprintf("this build has no operating-system authentication on %s", runtime.GOOS)}
	} else {
		st.Mechanism = a.Mechanism()
		avail = a.Available()
	}
	st.Available = avail == nil
	reason := ""
	if avail != nil {
		st.Unavailable = avail.Error()
		reason = AuthReasonUnavailable
		var ue *UnavailableError
		if errors.As(avail, &ue) && ue.Reason != "" {
			reason = ue.Reason
		}
	}
	switch st.Setting {
	case "":
		if avail == nil {
			st.Mode = config.AuthCLI
			break
		}
		st.Mode = config.AuthOff
		st.Note = fmt.Sprintf("settings.approvalAuthentication is not set and the system cannot authenticate you (%v): approvals need no OS authentication", avail)
	case config.AuthOff:
		st.Mode = config.AuthOff
	default:
		st.Mode = st.Setting
		if avail != nil {
			st.Note = fmt.Sprintf("settings.approvalAuthentication is %q but the system cannot authenticate you (%v): such approvals are refused until it can", st.Setting, avail)
		}
	}
	st.OSAuthenticated = st.Mode != config.AuthOff && st.Available
	switch {
	case st.OSAuthenticated:
	case st.Setting == config.AuthOff:
		st.Reason = AuthReasonOff
	default:
		st.Reason = reason
	}
	st.Meaning = authMeaning(st)
	return st
}

// escapes is what code of the person's user can still do where approvals
// are not OS-authenticated.
const escapes = "they resist only code that stays in the process trees Portcullis sees (servers, agents and what they start); " +
	"a process of your user started outside them (systemd-run --user, cron, at, a double fork) can %s at a terminal it fakes (script)"

// authMeaning is AuthStatus.Meaning: what the mode in force means for the
// person, in one or two sentences.
func authMeaning(st AuthStatus) string {
	mech := orMechanism(st.Mechanism)
	if !st.OSAuthenticated {
		var why string
		switch st.Reason {
		case AuthReasonOff:
			why = "settings.approvalAuthentication is off"
		case AuthReasonRoot:
			why = "the daemon runs as root, whom " + mech + " lets through without asking"
		case AuthReasonNotFound:
			why = mech + " is not installed"
		case AuthReasonNotRunning:
			why = mech + " does not answer on this system"
		case AuthReasonNoAction:
			why = mech + " does not know Portcullis's action (it is not installed)"
		case AuthReasonUnsupported:
			why = "this system has no mechanism Portcullis can ask"
		default:
			why = mech + " cannot authenticate you now"
		}
		if st.Mode == config.AuthOff {
			return "Approvals are not OS-authenticated (" + why + "): " + fmt.Sprintf(escapes, "approve any card and confirm held changes of the configuration") + "."
		}
		return fmt.Sprintf("Approvals that settings.approvalAuthentication %q asks OS authentication for are refused until the system can authenticate you (%s); the others are not OS-authenticated: %s.", st.Mode, why, fmt.Sprintf(escapes, "approve them"))
	}
	switch st.Mode {
	case config.AuthAlways:
		return "Approvals are OS-authenticated: every approval, in the window too, and every trust-widening change of the configuration asks " + mech + " to authenticate you."
	case config.AuthCLI:
		return "Approvals are OS-authenticated: every approval and every trust-widening change made with the portcullis command asks " + mech +
			" to authenticate you, so a process that fakes a terminal cannot decide for you; in the window, approvals of a card that carries a credential ask it too."
	}
	return "Only approvals of a card that carries a credential, and changes that bear on credentials, ask " + mech + " to authenticate you (settings.approvalAuthentication credentials); " +
		"the others are not OS-authenticated: " + fmt.Sprintf(escapes, "approve them and confirm other held changes") + "."
}

func orMechanism(mech string) string {
	if mech == "" {
		return "the operating system"
	}
	return mech
}

// authenticateDecision runs the operating system's authentication for a
// decision of request that arrived on c from the process pid, when
// settings.approvalAuthentication asks for it. It returns nil when the
// decision may go ahead (no authentication applies, or it succeeded, or
// the request is no longer pending: Decide says so). Otherwise nothing is
// granted, a decision_refused event is written, and the error is the
// sentence the person is answered with: when the system cannot
// authenticate, the request stays pending (a denial needs no
// authentication); when the authentication failed or was cancelled, the
// request is denied.
func (d *Daemon) authenticateDecision(ctx context.Context, c net.Conn, request ids.RequestID, choice authz.Choice, pid int) (osAuth, error) {
	var subject AuthSubject
	subject.PID, subject.UID = pid, d.uid
	if c != nil {
		if chain, err := d.peerOf(c); err == nil && len(chain) > 0 && chain[0].PID == pid {
			subject.StartTime = chain[0].StartTime
		}
	}
	return d.authenticate(ctx, request, choice, subject, audit.ChannelCLI, "portcullis "+verbOf(choice))
}

// osAuth is what the operating system's authentication did for a
// decision, for its record (audit.Decider): the mode in force, and the
// mechanism that authenticated the person or audit.AuthNotAsked.
type osAuth struct {
	mode, by string
}

// authenticate is authenticateDecision for subject, deciding through
// channel (audit.ChannelCLI, audit.ChannelWindow); by names who decides in
// the audit log ("portcullis approve", "the Portcullis window").
func (d *Daemon) authenticate(ctx context.Context, request ids.RequestID, choice authz.Choice, subject AuthSubject, channel, by string) (osAuth, error) {
	return d.authenticateMode(ctx, request, choice, subject, channel, by, "", false)
}

// authenticateMode is authenticate under mode rather than the mode in
// force ("": the mode in force). forced says that mode is
// config.AuthAlways because the window cannot tell the person's press from
// synthetic input (WindowApprovals.DecideInput), which the refusals say.
func (d *Daemon) authenticateMode(ctx context.Context, request ids.RequestID, choice authz.Choice, subject AuthSubject, channel, by, mode string, forced bool) (osAuth, error) {
	var req authz.Request
	found := false
	for _, r := range d.authz.Pending() {
		if r.ID == request {
			req, found = r, true
			break
		}
	}
	st := d.authStatus()
	if mode == "" {
		mode = st.Mode
	}
	done := osAuth{mode: st.Mode, by: audit.AuthNotAsked}
	if !found {
		return done, nil // Decide answers with authz.ErrNoRequest
	}
	if !AuthenticationApplies(mode, channel, req.Card, choice) {
		return done, nil
	}
	what := verbOf(choice) + " approval request " + string(request)
	mech := st.Mechanism
	if mech == "" {
		mech = "operating-system authentication"
	}
	if !st.Available {
		msg := fmt.Sprintf("refused to %s: %s; nothing was granted and the request is still pending — deny it with `portcullis deny %s`, or set settings.approvalAuthentication to %q in the configuration file to approve without OS authentication", what, st.Note, request, config.AuthOff)
		if forced {
			msg = fmt.Sprintf("refused to %s in the window: the window cannot tell your click from synthetic input, so it approves only once the operating system authenticates you, and it cannot (%s unavailable); nothing was granted and the request is still pending — approve it in your terminal with `portcullis approve %s`, or deny it", what, mech, request)
		}
		d.auditAuthRefusal(what, request, subject, req, refusedAuthUnavailable, msg)
		return done, errors.New(msg)
	}
	reason := fmt.Sprintf("approve request %s of %s", request, req.Card.ServerLabel)
	if len(req.Card.CredentialScope) > 0 {
		reason += " with credentials " + strings.Join(req.Card.CredentialScope, ", ")
	}
	err := d.opts.Authenticator.Authenticate(ctx, subject, reason)
	if err == nil {
		d.log.Info("the operating system authenticated the person", "request", request, "mechanism", mech, "pid", subject.PID)
		done.by = mech
		return done, nil
	}
	how := "could not authenticate you"
	switch {
	case errors.Is(err, ErrAuthDismissed):
		how = "was cancelled"
	case errors.Is(err, ErrAuthFailed):
		how = "did not authenticate you"
	}
	msg := fmt.Sprintf("not approved: %s %s (%v), so request %s was denied and nothing was granted (settings.approvalAuthentication is %q); the agent can call again to ask anew", mech, how, err, request, st.Mode)
	if forced {
		msg = fmt.Sprintf("not approved: %s %s (%v), so request %s was denied and nothing was granted (the window cannot tell your click from synthetic input, so it asks for authentication); the agent can call again to ask anew", mech, how, err, request)
	}
	d.auditAuthRefusal(what, request, subject, req, refusedAuthFailed, msg)
	if derr := d.authz.Decide(request, authz.Decision{Choice: authz.Deny, By: fmt.Sprintf("%s: %s %s", by, mech, how)}); derr != nil && !errors.Is(derr, authz.ErrNoRequest) {
		d.log.Warn("denying after a failed authentication", "request", request, "err", derr)
	}
	return done, errors.New(msg)
}

func (d *Daemon) auditAuthRefusal(what string, request ids.RequestID, subject AuthSubject, req authz.Request, kind, msg string) {
	d.log.Warn("an approval was not confirmed by the operating system's authentication", "request", request, "pid", subject.PID, "refusal", kind)
	d.appendAudit(audit.TypeDecisionRefused, audit.DecisionRefused{
		What: what, Request: request, PID: subject.PID, Refusal: kind, Reason: msg,
		ServerLabel: req.Card.ServerLabel, AgentRun: req.Card.AgentRun,
	})
}

func verbOf(choice authz.Choice) string {
	if choice == authz.Deny {
		return "deny"
	}
	return "approve"
}

// WindowApprovals is the approval broker as the approval window in the
// daemon's own process sees it (app/ui's Approvals): Decide first has the
// operating system authenticate the person when
// settings.approvalAuthentication asks for it, with the app's own process
// as the subject, so the desktop's authentication agent answers.
type WindowApprovals struct {
	*authz.Authority
	d *Daemon
}

// WindowApprovals returns the approval broker for the approval window.
func (d *Daemon) WindowApprovals() *WindowApprovals {
	return &WindowApprovals{Authority: d.authz, d: d}
}

// Decide answers a pending request for the window, the press behind it
// not considered: DecideInput with a device's press. When no
// authentication applies it is authz.Authority.Decide. When it applies and
// the system cannot authenticate, it returns that error at once and the
// request stays pending. Otherwise the authentication runs without
// blocking the caller (the window's event loop): the grant, or the denial
// after a failed authentication, arrives as the authority's event.
func (w *WindowApprovals) Decide(id ids.RequestID, dec authz.Decision) error {
	return w.decide(id, dec, false, WindowInput{})
}

// ChangeNeedsAuthentication reports whether a change of the configuration
// that widens trust with held (config.SplitTrust), confirmed or made by the
// person, needs the operating system's authentication when mode is in
// force: under config.AuthAlways and config.AuthCLI (such a change comes
// through the portcullis command) any such change; under
// config.AuthCredentials one that bears on credentials (a scope added, the
// launch of a server with credentials, how a secret is injected, the
// session bus, where the Secret Service answers, given to a server) or lowers
// settings.approvalAuthentication itself, since code that could confirm
// that could then approve without authentication.
func ChangeNeedsAuthentication(mode string, held []config.Widening) bool {
	for _, w := range held {
		switch {
		case mode == config.AuthAlways, mode == config.AuthCLI:
			return true
		case mode != config.AuthCredentials:
			return false
		case w.Kind == config.WidenCredential, w.Kind == config.WidenLaunch, w.Kind == config.WidenCredentialUse, w.Kind == config.WidenApprovalAuthentication, w.Kind == config.WidenSessionBus:
			return true
		}
	}
	return false
}

// authenticateChange runs the operating system's authentication before a
// change that widens trust with held is confirmed or made for the process
// pid on c, when ChangeNeedsAuthentication says so. what says what is
// asked ("confirm change 3f…"). It returns nil when the change may go
// ahead; otherwise nothing is changed (a held change stays held), a
// decision_refused event is written, and the error is the sentence the
// person is answered with.
func (d *Daemon) authenticateChange(c net.Conn, pid int, what string, held []config.Widening) (osAuth, error) {
	return d.authenticateChangeMode(c, pid, what, held, "", d.authStatus())
}

// authenticateChangeMode is authenticateChange under mode rather than the
// mode in force ("": the mode in force), st being the status of
// settings.approvalAuthentication (read by the caller: it takes the
// configuration's lock).
func (d *Daemon) authenticateChangeMode(c net.Conn, pid int, what string, held []config.Widening, mode string, st AuthStatus) (osAuth, error) {
	done := osAuth{mode: st.Mode, by: audit.AuthNotAsked}
	if mode == "" {
		mode = st.Mode
	}
	if !ChangeNeedsAuthentication(mode, held) {
		return done, nil
	}
	subject := AuthSubject{PID: pid, UID: d.uid}
	if c != nil {
		if chain, err := d.peerOf(c); err == nil && len(chain) > 0 && chain[0].PID == pid {
			subject.StartTime = chain[0].StartTime
		}
	}
	mech := st.Mechanism
	if mech == "" {
		mech = "operating-system authentication"
	}
	refuse := func(kind, msg string) error {
		d.log.Warn("a change of the configuration was not confirmed by the operating system's authentication", "what", what, "pid", pid, "refusal", kind)
		d.appendAudit(audit.TypeDecisionRefused, audit.DecisionRefused{What: what, PID: pid, Refusal: kind, Reason: msg})
		return errors.New(msg)
	}
	if !st.Available {
		note := st.Note
		if mode != st.Mode { // raised by the caller: the window cannot tell the person's press
			note = "the window cannot tell your click from synthetic input, and " + mech + " cannot authenticate you; make the change with `portcullis` at your terminal"
		}
		return done, refuse(refusedAuthUnavailable, fmt.Sprintf("refused to %s: %s; nothing was changed", what, note))
	}
	err := d.opts.Authenticator.Authenticate(context.Background(), subject, what)
	if err == nil {
		done.by = mech
		return done, nil
	}
	return done, refuse(refusedAuthFailed, fmt.Sprintf("not done: %s did not confirm it is you (%v), so %s was refused and nothing was changed (settings.approvalAuthentication is %q)", mech, err, what, st.Mode))
}
