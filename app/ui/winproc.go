package ui

import (
	"context"
	"log/slog"
	"time"

	"fyne.io/fyne/v2"
)

// Command shows what the app asks for (Fyne goroutine).
func (t *Tray) Command(c Command) {
	switch c.Op {
	case CmdApprovals:
		t.Approval.Show()
	case CmdRequest:
		t.openRequest(c.Request)
	case CmdOutcome:
		if c.Event != nil {
			t.showOutcome(decidedOf(*c.Event, t.opts.Clock()))
		}
	case CmdPrefs:
		t.run(menuEntry{Kind: entryPrefs})
	case CmdServer:
		t.run(menuEntry{Kind: entryServer, Server: c.Server})
	case CmdAudit:
		t.run(menuEntry{Kind: entryAudit})
	case CmdKeys:
		k, err := showKeyWindow(t.app, c.Key, t.opts.Daemon.Status().Authentication) // the status over the link
		if err != nil {
			t.log.Error("showing the verification key", "err", err)
			return
		}
		t.keys = k
	case CmdQuit:
		t.confirmQuit()
	case CmdNotify:
		t.app.SendNotification(fyne.NewNotification(c.Title, c.Body))
	default:
		t.log.Warn("unknown command from the app", "op", c.Op)
	}
}

// run does what clicking the menu entry e does.
func (t *Tray) run(e menuEntry) {
	if f := t.action(e); f != nil {
		f()
	}
}

// Idle reports whether no window is shown: the approval window hidden and
// every other window closed, but those of other, which existed before the
// tray showed any (Fyne goroutine).
func (t *Tray) Idle(other map[fyne.Window]bool) bool {
	if t.Approval.Visible() {
		return false
	}
	for _, w := range t.app.Driver().AllWindows() {
		if w != t.Approval.Window() && !other[w] {
			return false
		}
	}
	return true
}

// silentNotifier is the window process's Notifier: the app posts the
// notifications (it runs while the window process comes and goes).
type silentNotifier struct{}

func (silentNotifier) Notify(string, string, string, func()) error { return nil }
func (silentNotifier) Withdraw(string) error                       { return nil }

// WindowProcess configures RunWindowProcess.
type WindowProcess struct {
	// Prefs and Audit are what Preferences and the audit viewer read in
	// this process (the configuration file, the catalogs, the secret
	// store); their edits and the daemon's state go over the link.
	Prefs func() PrefsDeps
	Audit func() AuditDeps
	// IdleCheck is how often the process looks whether it may exit
	// (default 1 s): no window shown and nothing waiting.
	IdleCheck time.Duration
	// Linger is how long it stays once idle, so that the cards of a burst
	// (a rebuild asks once per run) need no new process; 0: it exits at
	// the first idle check.
	Linger time.Duration
	Logger *slog.Logger
	// Started, if not nil, receives the tray once it exists (tests).
	Started func(*Tray)
	// Input tells whether an approve button (or a widening Save) was
	// pressed with a device of the person's; InputNote is what the
	// cards say when it cannot tell (Options.Input, Options.InputNote).
	Input     InputCheck
	InputNote func() string
}

// RunWindowProcess shows the app's windows over the link r in fa until the
// link ends or the process has been idle for o.Linger (no window shown, no
// request waiting, and the app agrees: Remote.Bye). It runs Fyne's loop and must be called
// on the main goroutine with a desktop driver; done is called once the
// process should end (it quits Fyne).
func RunWindowProcess(ctx context.Context, fa fyne.App, r *Remote, o WindowProcess, done func()) {
	if o.IdleCheck <= 0 {
		o.IdleCheck = time.Second
	}
	prefs := o.Prefs
	if prefs != nil {
		prefs = func() PrefsDeps {
			d := o.Prefs()
			d.Edit, d.AuditStatus = r.Edit, r.AuditStatus
			return d
		}
	}
	fa.SetIcon(AppIcon())
	r.Input = o.Input
	t := NewTray(fa, Options{
		Daemon:      r,
		Approvals:   r,
		Input:       o.Input,
		InputNote:   o.InputNote,
		Notifier:    silentNotifier{},
		Preferences: prefs,
		Audit:       o.Audit,
		Quit:        r.Quit,
		Logger:      o.Logger,
		WindowsOnly: true,
	})
	other := map[fyne.Window]bool{}
	for _, w := range fa.Driver().AllWindows() {
		other[w] = true
	}
	if o.Started != nil {
		o.Started(t)
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t.Run(ctx)
	}()
	go func() {
		for c := range r.Commands() {
			fyne.Do(func() { t.Command(c) })
		}
	}()
	go func() {
		defer done()
		defer cancel()
		linkEnded := make(chan struct{})
		go func() {
			defer close(linkEnded)
			_ = r.Run()
		}()
		tick := time.NewTicker(o.IdleCheck)
		defer tick.Stop()
		var idleSince time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-linkEnded:
				return
			case <-tick.C:
				idle := false
				fyne.DoAndWait(func() { idle = t.Idle(other) })
				switch {
				case !idle:
					idleSince = time.Time{}
				case idleSince.IsZero():
					idleSince = time.Now()
				}
				if idle && time.Since(idleSince) >= o.Linger && len(r.Pending()) == 0 && r.Bye() {
					return
				}
			}
		}
	}()
}
