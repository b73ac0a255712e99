package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"net/rpc/jsonrpc"
	"sync"
	"sync/atomic"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/codediff"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/ids"
)

// The window link is the one channel between the app (the daemon and the
// menu-bar icon, which stay running) and its window process (Fyne's
// windows, started on demand): a connected socket pair the app creates and
// hands to the process it starts, never a named socket. The window process
// calls the app (JSON-RPC, net/rpc) for the daemon's state, the pending
// approval requests, and to decide them as the person's window; what the
// app wants shown (the menu's Preferences…, a notification clicked) comes
// back in the answers to the window process's Next.

// linkService is the name of the app's side on the link.
const linkService = "Link"

// Command is what the app asks the window process to show.
type Command struct {
	// Op is one of the Cmd… operations.
	Op string `json:"op"`
	// Server is the server label of CmdServer.
	Server string `json:"server,omitempty"`
	// Request is the request id of CmdRequest.
	Request string `json:"request,omitempty"`
	// Event is the resolved request of CmdOutcome.
	Event *authz.Event `json:"event,omitempty"`
	// Key is the audit log's verification key of CmdKeys.
	Key string `json:"key,omitempty"`
	// Runs is the number of connected agent runs of CmdQuit.
	Runs int `json:"runs,omitempty"`
	// Title and Body are the notification of CmdNotify.
	Title string `json:"title,omitempty"`
	Body  string `json:"body,omitempty"`
}

// CmdApprovals and the other Cmd… constants are a Command's Op: each names
// what the window process opens or brings forward, with the Command's
// fields it uses.
const (
	CmdApprovals = "approvals" // the approval window
	CmdRequest   = "request"   // the approval window on Request, or what became of it
	CmdOutcome   = "outcome"   // what became of the resolved request Event
	CmdPrefs     = "prefs"     // Preferences
	CmdServer    = "server"    // Preferences on Server
	CmdAudit     = "audit"     // the audit viewer
	CmdKeys      = "keys"      // the verification key, shown once on first start
	CmdQuit      = "quit"      // the quit confirmation (agent runs are connected)
	CmdNotify    = "notify"    // Fyne's notification (Title, Body), where the system has no other
)

// Batch is what Next returns: what happened since the last Next. One
// blocking call carries all three, so the window process learns of changes
// without a second channel or a timer.
type Batch struct {
	Changed  bool          `json:"changed,omitempty"`  // the daemon's state changed (Daemon.Changes)
	Events   []authz.Event `json:"events,omitempty"`   // approval events (Approvals.Subscribe)
	Commands []Command     `json:"commands,omitempty"` // what the app asks to show
}

// Link error codes: the sentinel errors the window tells apart.
const (
	codeNoRequest  = "no_request"
	codeUnrecorded = "unrecorded"
)

// DecideArgs and the other …Args are the link's requests.
type DecideArgs struct {
	ID       ids.RequestID  `json:"id"`
	Decision authz.Decision `json:"decision"`
	// Input is what the window process judged of the press behind an
	// approval (Approvals.DecideInput); nil for a denial.
	Input *daemon.WindowInput `json:"input,omitempty"`
}

// LinkError is an error answered over the link as a value: net/rpc carries
// only an error's text, and the window process tells the sentinel errors
// apart by Code (a link error code, "" for any other error).
type LinkError struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// RestartArgs asks to restart every run of Label.
type RestartArgs struct {
	Label string `json:"label"`
	Why   string `json:"why"`
}

// EditArgs is an edit of the configuration made from Base (a digest).
type EditArgs struct {
	Base   string             `json:"base"`
	Config json.RawMessage    `json:"config"`
	Input  daemon.WindowInput `json:"input"` // the press behind Save, as the window process judged it
}

// Empty is the argument or answer of the calls that have none.
type Empty struct{}

// LinkDeps is what the app serves on the link.
type LinkDeps struct {
	Daemon    Daemon
	Approvals Approvals
	// AuditStatus is the daemon's audit signing state (Preferences).
	AuditStatus func() daemon.AuditStatus
	// ConfigState and EditFrom are the daemon's configuration in force and
	// an edit of it made by the person in Preferences.
	ConfigState func() daemon.ConfigState
	// The edit carries what the window process judged of the press behind
	// Save (a widening edit never comes from synthetic input).
	EditFrom func(base string, edited []byte, in daemon.WindowInput) (*config.Config, error)
	// InputNote is what the cards say of the window's input when the
	// window process cannot tell the person's press (daemon.WindowAuthNote).
	InputNote func(in daemon.WindowInput) string
	// Quit quits the app (the quit confirmation's "Quit and end them").
	Quit func()
	// Next blocks until something happened for the window process or
	// closed is closed (the link ended), and returns it.
	Next func(closed <-chan struct{}) Batch
}

// link is the app's side of the link.
type link struct {
	deps   LinkDeps
	closed chan struct{}
}

// ServeLink serves deps on conn until the window process closes it (or
// exits), then closes conn.
func ServeLink(conn io.ReadWriteCloser, deps LinkDeps) {
	l := &link{deps: deps, closed: make(chan struct{})}
	srv := rpc.NewServer()
	if err := srv.RegisterName(linkService, l); err != nil {
		panic(err) // the method set is fixed: a programming error
	}
	srv.ServeCodec(jsonrpc.NewServerCodec(conn))
	close(l.closed)
}

// Status is Daemon.Status.
func (l *link) Status(_ Empty, rep *daemon.StatusReport) error {
	*rep = l.deps.Daemon.Status()
	return nil
}

// Pending is Approvals.Pending.
func (l *link) Pending(_ Empty, rs *[]authz.Request) error {
	*rs = l.deps.Approvals.Pending()
	return nil
}

// Decide is the window's decision: Approvals.Decide (the daemon's window
// path), the error answered with its code.
func (l *link) Decide(a DecideArgs, e *LinkError) error {
	var err error
	if a.Input != nil {
		err = l.deps.Approvals.DecideInput(a.ID, a.Decision, *a.Input)
	} else {
		err = l.deps.Approvals.Decide(a.ID, a.Decision)
	}
	switch {
	case err == nil:
	case errors.Is(err, authz.ErrNoRequest):
		*e = LinkError{Code: codeNoRequest, Message: err.Error()}
	case errors.Is(err, authz.ErrUnrecorded):
		*e = LinkError{Code: codeUnrecorded, Message: err.Error()}
	default:
		*e = LinkError{Message: err.Error()}
	}
	return nil
}

// Restart is Daemon.Restart.
func (l *link) Restart(a RestartArgs, n *int) error {
	*n = l.deps.Daemon.Restart(a.Label, a.Why)
	return nil
}

// InputNote is LinkDeps.InputNote.
func (l *link) InputNote(in daemon.WindowInput, note *string) error {
	if l.deps.InputNote != nil {
		*note = l.deps.InputNote(in)
	}
	return nil
}

// CodeArgs names the request whose code report the window asks for.
type CodeArgs struct{ ID ids.RequestID }

// CodeChanges is CodeSource.CodeChanges of the app's daemon.
func (l *link) CodeChanges(a CodeArgs, rep *codediff.Report) error {
	cs, ok := l.deps.Daemon.(CodeSource)
	if !ok {
		return errors.New("this daemon keeps no source snapshots")
	}
	r, err := cs.CodeChanges(context.Background(), a.ID)
	*rep = r
	return err
}

// AuditStatus is LinkDeps.AuditStatus.
func (l *link) AuditStatus(_ Empty, st *daemon.AuditStatus) error {
	*st = l.deps.AuditStatus()
	return nil
}

// ConfigState is LinkDeps.ConfigState.
func (l *link) ConfigState(_ Empty, st *daemon.ConfigState) error {
	*st = l.deps.ConfigState()
	return nil
}

// Edit is LinkDeps.EditFrom.
func (l *link) Edit(a EditArgs, e *LinkError) error {
	if a.Base == "" {
		*e = LinkError{Message: "an edit needs the digest of the configuration it was made from"}
		return nil
	}
	if _, err := l.deps.EditFrom(a.Base, a.Config, a.Input); err != nil {
		*e = LinkError{Message: err.Error()}
	}
	return nil
}

// Quit is LinkDeps.Quit.
func (l *link) Quit(_ Empty, _ *Empty) error {
	l.deps.Quit()
	return nil
}

// Next is LinkDeps.Next.
func (l *link) Next(_ Empty, b *Batch) error {
	*b = l.deps.Next(l.closed)
	return nil
}

// linkErr turns a LinkError answered by the app back into an error that
// errors.Is tells apart as the app's was.
func linkErr(e LinkError) error {
	switch {
	case e.Message == "":
		return nil
	case e.Code == codeNoRequest:
		return fmt.Errorf("%w (%s)", authz.ErrNoRequest, e.Message)
	case e.Code == codeUnrecorded:
		return fmt.Errorf("%w (%s)", authz.ErrUnrecorded, e.Message)
	}
	return errors.New(e.Message)
}

// Remote is the window process's side of the link: the daemon and the
// approvals as the app serves them (it implements Daemon and Approvals).
// Its Run delivers the app's changes, approval events and commands.
type Remote struct {
	c *rpc.Client
	// Input judges the press behind a Save in Preferences (Edit); set
	// before the windows open. Approvals carry the window's own judgement.
	Input InputCheck

	mu       sync.Mutex
	changes  map[chan struct{}]struct{}
	events   map[chan authz.Event]struct{}
	commands chan Command
	err      error // why the link ended, once it has

	// asked counts what came for a window (a request raised, a command
	// handed on: Nudge); each count is signalled on wake (standby).
	asked atomic.Uint64
	wake  chan struct{}
}

var (
	_ Daemon     = (*Remote)(nil)
	_ Approvals  = (*Remote)(nil)
	_ CodeSource = (*Remote)(nil)
)

// NewRemote is the window process's side of the link on conn.
func NewRemote(conn io.ReadWriteCloser) *Remote {
	return &Remote{
		c:        rpc.NewClientWithCodec(jsonrpc.NewClientCodec(conn)),
		changes:  map[chan struct{}]struct{}{},
		events:   map[chan authz.Event]struct{}{},
		commands: make(chan Command, 16),
		wake:     make(chan struct{}, 1),
	}
}

// Nudge counts something that needs a window and wakes a window process
// in standby (RunWindowProcess).
func (r *Remote) Nudge() {
	r.asked.Add(1)
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// asks returns how many times something needed a window so far (Nudge).
func (r *Remote) asks() uint64 { return r.asked.Load() }

// Commands delivers what the app asks to show; it is closed when the link
// ends.
func (r *Remote) Commands() <-chan Command { return r.commands }

// Run asks the app for what happened, and hands it to the subscribers and
// to Commands, until the link ends; it returns why it ended and closes
// every subscription.
func (r *Remote) Run() error {
	defer r.end()
	for {
		var b Batch
		if err := r.c.Call(linkService+".Next", Empty{}, &b); err != nil {
			return err
		}
		r.mu.Lock()
		if b.Changed {
			for ch := range r.changes {
				select {
				case ch <- struct{}{}:
				default: // coalesced: one is waiting
				}
			}
		}
		subs := make([]chan authz.Event, 0, len(r.events))
		for ch := range r.events {
			subs = append(subs, ch)
		}
		r.mu.Unlock()
		raised := false
		for _, ev := range b.Events {
			for _, ch := range subs {
				ch <- ev // the tray reads them at once; order matters
			}
			raised = raised || ev.Kind == authz.EventRaised
		}
		if raised {
			r.Nudge() // after the tray got it: a standby process wakes for it
		}
		for _, c := range b.Commands {
			r.commands <- c
		}
	}
}

// end closes the subscriptions once the link ended.
func (r *Remote) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.changes {
		close(ch)
	}
	for ch := range r.events {
		close(ch)
	}
	r.changes, r.events = map[chan struct{}]struct{}{}, map[chan authz.Event]struct{}{}
	close(r.commands)
	r.err = io.EOF
}

// Status is Daemon.Status over the link (an empty report when it ended).
func (r *Remote) Status() daemon.StatusReport {
	var rep daemon.StatusReport
	_ = r.c.Call(linkService+".Status", Empty{}, &rep)
	return rep
}

// Changes is Daemon.Changes over the link.
func (r *Remote) Changes() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		close(ch)
		return ch, func() {}
	}
	r.changes[ch] = struct{}{}
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.changes[ch]; ok {
			delete(r.changes, ch)
			close(ch)
		}
	}
}

// Restart is Daemon.Restart over the link.
func (r *Remote) Restart(label, why string) int {
	var n int
	_ = r.c.Call(linkService+".Restart", RestartArgs{Label: label, Why: why}, &n)
	return n
}

// Subscribe is Approvals.Subscribe over the link.
func (r *Remote) Subscribe() (<-chan authz.Event, func()) {
	ch := make(chan authz.Event, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		close(ch)
		return ch, func() {}
	}
	r.events[ch] = struct{}{}
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.events[ch]; ok {
			delete(r.events, ch)
			close(ch)
		}
	}
}

// Pending is Approvals.Pending over the link (none when it ended).
func (r *Remote) Pending() []authz.Request {
	var rs []authz.Request
	_ = r.c.Call(linkService+".Pending", Empty{}, &rs)
	return rs
}

// Decide is Approvals.Decide over the link: the app decides as its
// window.
func (r *Remote) Decide(id ids.RequestID, d authz.Decision) error {
	var e LinkError
	if err := r.c.Call(linkService+".Decide", DecideArgs{ID: id, Decision: d}, &e); err != nil {
		return fmt.Errorf("the decision did not reach Portcullis (%v); decide with portcullis approve or deny", err)
	}
	return linkErr(e)
}

// DecideInput is Approvals.DecideInput over the link: the press behind
// the approval, judged in the window process, goes with it.
func (r *Remote) DecideInput(id ids.RequestID, d authz.Decision, in daemon.WindowInput) error {
	var e LinkError
	if err := r.c.Call(linkService+".Decide", DecideArgs{ID: id, Decision: d, Input: &in}, &e); err != nil {
		return fmt.Errorf("the decision did not reach Portcullis (%v); decide with portcullis approve or deny", err)
	}
	return linkErr(e)
}

// InputNote is what the cards say of the window's input, in is the
// window process's "cannot tell" (daemon.WindowAuthNote).
func (r *Remote) InputNote(in daemon.WindowInput) string {
	var note string
	_ = r.c.Call(linkService+".InputNote", in, &note)
	return note
}

// CodeChanges is CodeSource.CodeChanges over the link.
func (r *Remote) CodeChanges(ctx context.Context, id ids.RequestID) (codediff.Report, error) {
	var rep codediff.Report
	call := r.c.Go(linkService+".CodeChanges", CodeArgs{ID: id}, &rep, nil)
	select {
	case <-call.Done:
		return rep, call.Error
	case <-ctx.Done():
		return rep, ctx.Err()
	}
}

// AuditStatus is the daemon's audit signing state over the link.
func (r *Remote) AuditStatus() daemon.AuditStatus {
	var st daemon.AuditStatus
	_ = r.c.Call(linkService+".AuditStatus", Empty{}, &st)
	return st
}

// Edit applies change to the configuration in force and has the app put
// the result in force (PrefsDeps.Edit).
func (r *Remote) Edit(window uint64, change func(*config.Config) error) (*config.Config, error) {
	var st daemon.ConfigState
	if err := r.c.Call(linkService+".ConfigState", Empty{}, &st); err != nil {
		return nil, fmt.Errorf("nothing was changed: Portcullis did not answer (%v)", err)
	}
	if st.Pending != nil {
		return nil, fmt.Errorf("%w: see it with portcullis changes, then confirm or reject it before editing; nothing was changed", daemon.ErrChangePending)
	}
	if st.Error != "" {
		return nil, fmt.Errorf("%s is not in force as it is on disk: %s; nothing was changed", st.File, st.Error)
	}
	cfg, err := config.Parse(st.Config, st.File)
	if err != nil {
		return nil, err
	}
	if cfg.Servers == nil {
		cfg.Servers = map[string]config.Server{}
	}
	if err := change(cfg); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b, err := config.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var e LinkError
	in := daemon.WindowInput{Origin: daemon.InputUnknown, Reason: "this window has no input check"}
	if r.Input != nil {
		in = r.Input.Judge(window, "")
	}
	if err := r.c.Call(linkService+".Edit", EditArgs{Base: st.Digest, Config: b, Input: in}, &e); err != nil {
		return nil, fmt.Errorf("nothing was changed: Portcullis did not answer (%v)", err)
	}
	if err := linkErr(e); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Quit asks the app to quit.
func (r *Remote) Quit() { _ = r.c.Call(linkService+".Quit", Empty{}, &Empty{}) }

// Close ends the link.
func (r *Remote) Close() error { return r.c.Close() }
