package ui

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/theme"
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

// warmUp does ahead of time what the first window would (Fyne goroutine).
func (t *Tray) warmUp() {
	if err := warmGL(); err != nil {
		t.log.Warn("the OpenGL warm-up failed; the first window takes longer", "err", err)
	}
	t.Approval.ensure()
	for _, st := range []fyne.TextStyle{{}, {Bold: true}, {Monospace: true}} {
		fyne.MeasureText("Portcullis", theme.TextSize(), st)
	}
	fyne.MeasureText("Portcullis", theme.Size(theme.SizeNameSubHeadingText), fyne.TextStyle{Bold: true})
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
	// IdleCheck is how often the process looks whether it may go to
	// standby (default 1 s): no window shown and nothing waiting.
	IdleCheck time.Duration
	// Linger is how long it stays awake once idle after showing windows,
	// so that the cards of a burst find Fyne's loop running; 0: standby at
	// the first idle check. Before its first window it goes to standby at
	// the first idle check.
	Linger time.Duration
	// Warm makes the first window quick before the first standby: the
	// OpenGL driver loaded (warmGL), the approval window's widgets made,
	// the theme's fonts parsed.
	Warm   bool
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
// link ends. The app starts it ahead of its first window: it warms up
// (o.Warm), then stands by, and so again whenever it has been idle for
// o.Linger (no window shown, no request waiting). In standby Fyne's loop is
// blocked in a function on its goroutine, so that it neither polls nor
// draws (its 60 Hz ticker does not fire while nobody receives from it),
// and the tray is stopped; a request raised or a command from the app
// (Remote.Nudge) wakes it. It runs Fyne's loop and must be called on the
// main goroutine with a desktop driver; done is called once the process
// should end (it quits Fyne).
func RunWindowProcess(ctx context.Context, fa fyne.App, r *Remote, o WindowProcess, done func()) {
	if o.IdleCheck <= 0 {
		o.IdleCheck = time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
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
		for c := range r.Commands() {
			fyne.Do(func() { t.Command(c) })
			r.Nudge() // after it was queued: a standby process wakes for it
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
		if o.Warm {
			began := time.Now()
			fyne.DoAndWait(t.warmUp)
			log.Debug("window process warmed up", "ms", time.Since(began).Milliseconds())
		}
		// The tray runs while the process is awake: it follows the
		// requests and the countdown, which standby must not.
		startTray := func() (stop func()) {
			tctx, stopCtx := context.WithCancel(ctx)
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				t.Run(tctx)
			}()
			return func() { stopCtx(); <-ended }
		}
		stopTray := startTray()
		defer func() { stopTray() }()
		// standby blocks Fyne's loop until something needs a window after
		// the asks-th (Remote.Nudge) or the link ends; false when a window
		// is shown or a request waits after all (what was queued before it
		// ran on the loop first).
		standby := func(asks uint64) (slept bool) {
			fyne.DoAndWait(func() {
				if !t.Idle(other) || len(r.Pending()) > 0 {
					return
				}
				slept = true
				debug.FreeOSMemory() // what the windows shown left behind
				log.Info("window process in standby")
				for r.asks() == asks {
					select {
					case <-r.wake:
					case <-linkEnded:
						return
					case <-ctx.Done(): // a signal: the process ends
						return
					}
				}
			})
			return slept
		}
		tick := time.NewTicker(o.IdleCheck)
		defer tick.Stop()
		linger := time.Duration(0) // ahead of its first window
		var idleSince time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-linkEnded:
				return
			case <-tick.C:
			}
			idle := false
			fyne.DoAndWait(func() { idle = t.Idle(other) })
			switch {
			case !idle:
				idleSince = time.Time{}
				continue
			case idleSince.IsZero():
				idleSince = time.Now()
			}
			if time.Since(idleSince) < linger || len(r.Pending()) > 0 {
				continue
			}
			asks := r.asks()
			stopTray()
			slept := standby(asks)
			select {
			case <-linkEnded:
				stopTray = func() {}
				return
			case <-ctx.Done():
				stopTray = func() {}
				return
			default:
			}
			if slept {
				log.Info("window process awake")
				linger = o.Linger
			}
			idleSince = time.Time{}
			stopTray = startTray()
		}
	}()
}
