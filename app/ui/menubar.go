package ui

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/theme"
	"fyne.io/systray"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/loginitem"
	"github.com/portcullis/portcullis/core/textsafe"
)

// MenuBar is the menu-bar icon and menu of the app process, through
// fyne.io/systray directly: no Fyne app and no GL, so that nothing runs
// while no window is shown. The windows (approval, Preferences, audit
// viewer, …) are shown by the window process, which the app starts on
// demand; MenuBarOptions.Open asks for them.
type MenuBar struct {
	opts MenuBarOptions
	log  *slog.Logger

	redraw chan struct{} // a menu rebuild is wanted (the login setting changed)

	// Run's goroutine only:
	recent   []decided              // newest first, at most maxRecent
	events   map[string]authz.Event // the resolved events of recent, by request id
	state    TrayState
	iconSet  bool
	auditErr string
	keysDone bool

	mu      sync.Mutex
	entries []menuEntry // the menu model last shown (tests)
}

// MenuBarOptions configure a MenuBar. Daemon, Approvals, Open and Quit are
// required.
type MenuBarOptions struct {
	Daemon    Daemon
	Approvals Approvals
	// Notifier announces approval requests; nil: none.
	Notifier  Notifier
	LoginItem loginitem.Item
	// SetupKeys is Options.SetupKeys: the verification key is shown by
	// the window process (CmdKeys).
	SetupKeys func() (key string, err error)
	// Open asks the window process (started when none runs) to show c.
	Open func(c Command)
	// Quit stops the daemon (cancels its context).
	Quit   func()
	Clock  func() time.Time
	Logger *slog.Logger
	// NoSystemTray leaves the desktop's tray alone (tests): the menu model
	// is kept, nothing is exported.
	NoSystemTray bool
}

// NewMenuBar makes the menu bar; call Run on a goroutine of its own, and
// RunSystray on the main goroutine.
func NewMenuBar(o MenuBarOptions) *MenuBar {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Notifier == nil {
		o.Notifier = silentNotifier{}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &MenuBar{opts: o, log: log, redraw: make(chan struct{}, 1), events: map[string]authz.Event{}}
}

// RunSystray runs the system tray's loop until ctx ends (on macOS it must
// be called on the main goroutine; on Linux it waits on D-Bus and a
// channel).
func (m *MenuBar) RunSystray(ctx context.Context) {
	if m.opts.NoSystemTray {
		<-ctx.Done()
		return
	}
	if err := trayReachable(); err != nil {
		m.log.Warn("no menu-bar icon: the desktop's tray cannot be reached; approvals still open their window, and `portcullis status` shows the rest", "err", err)
		<-ctx.Done()
		return
	}
	go func() {
		<-ctx.Done()
		systray.Quit()
	}()
	systray.Run(func() {
		systray.SetTitle("Portcullis") // some XDG trays fail without one
		systray.SetTooltip("Portcullis")
	}, nil)
}

// Entries returns the menu model last shown (tests).
func (m *MenuBar) Entries() []menuEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.entries)
}

// Run keeps the menu and the icon up to date from core events until ctx
// ends, and posts the notifications. It does nothing periodic: the
// sealing keys of a first start are retried every second only until they
// are set up.
func (m *MenuBar) Run(ctx context.Context) {
	changes, stopChanges := m.opts.Daemon.Changes()
	defer stopChanges()
	events, stopEvents := m.opts.Approvals.Subscribe()
	defer stopEvents()
	var retry *time.Ticker
	if m.opts.SetupKeys != nil {
		retry = time.NewTicker(time.Second)
		defer retry.Stop()
	} else {
		m.keysDone = true
	}
	refresh := func(raised []authz.Request) {
		rep, pending := m.opts.Daemon.Status(), m.opts.Approvals.Pending()
		for _, r := range raised {
			m.notify(r)
		}
		if rep.Audit.Error != "" && m.auditErr == "" {
			m.post("audit", "Portcullis: audit log cannot be written",
				"Every tool call is refused until it can: "+rep.Audit.Error, func() { m.opts.Open(Command{Op: CmdAudit}) })
		}
		m.auditErr = rep.Audit.Error
		m.setupKeys(rep.Audit.Sealed, rep.Audit.Error)
		if m.keysDone && retry != nil {
			retry.Stop()
		}
		m.show(menuModel(rep, pending, m.login(), m.recent), trayStateOf(rep, len(pending)))
	}
	refresh(nil)
	var tick <-chan time.Time
	if retry != nil {
		tick = retry.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				return
			}
			refresh(nil)
		case <-m.redraw:
			refresh(nil)
		case ev, ok := <-events:
			if !ok {
				return
			}
			var raised []authz.Request
			switch ev.Kind {
			case authz.EventRaised:
				raised = append(raised, ev.Request)
			case authz.EventResolved:
				m.resolved(ev)
			}
			refresh(raised)
		case <-tick:
			if m.keysDone {
				tick = nil
				continue
			}
			st := m.opts.Daemon.Status().Audit
			m.setupKeys(st.Sealed, st.Error)
		}
	}
}

// setupKeys is Tray.setupKeys: the key is shown by the window process.
func (m *MenuBar) setupKeys(sealed bool, auditErr string) {
	if m.keysDone || m.opts.SetupKeys == nil || auditErr != "" {
		return
	}
	if sealed {
		m.keysDone = true
		return
	}
	key, err := m.opts.SetupKeys()
	switch {
	case errorsIsNotYet(err):
		return
	case err != nil:
		m.log.Warn("setting up the audit log's sealing keys", "err", err)
	case key != "":
		m.opts.Open(Command{Op: CmdKeys, Key: key})
	}
	m.keysDone = true
}

// notify announces a raised request; a click opens its card.
func (m *MenuBar) notify(r authz.Request) {
	title, body := notificationText(r)
	id := r.ID
	m.post(string(id), title, body, func() { m.opts.Open(Command{Op: CmdRequest, Request: string(id)}) })
}

// resolved withdraws the notification of a request, remembers what became
// of it for the menu, and announces a missed one.
func (m *MenuBar) resolved(ev authz.Event) {
	d := decidedOf(ev, m.opts.Clock())
	if err := m.opts.Notifier.Withdraw(d.ID); err != nil {
		m.log.Warn("approval notification not withdrawn", "request", d.ID, "err", err)
	}
	open := func() { m.opts.Open(Command{Op: CmdOutcome, Event: &ev}) }
	if d.Missed {
		title, body := missedText(d)
		m.post(missedKey(d.ID), title, body, open)
	}
	m.recent = slices.Insert(m.recent, 0, d)
	m.events[d.ID] = ev
	if len(m.recent) > maxRecent {
		for _, old := range m.recent[maxRecent:] {
			delete(m.events, old.ID)
		}
		m.recent = m.recent[:maxRecent]
	}
}

// post shows a notification (Tray.post).
func (m *MenuBar) post(key, title, body string, onClick func()) {
	err := m.opts.Notifier.Notify(key, textsafe.Controls(strings.ReplaceAll(title, "\n", " ")), textsafe.Controls(body), onClick)
	if err != nil {
		m.log.Warn("notification not shown", "key", key, "err", err)
	}
}

// login reads the launch-at-login state.
func (m *MenuBar) login() loginState {
	if m.opts.LoginItem == nil {
		return loginState{}
	}
	on, err := m.opts.LoginItem.Enabled()
	if err != nil {
		m.log.Warn("reading the launch-at-login setting", "err", err)
		return loginState{}
	}
	return loginState{Available: true, Enabled: on}
}

// show rebuilds the menu and sets the icon.
func (m *MenuBar) show(entries []menuEntry, state TrayState) {
	m.mu.Lock()
	same := slices.Equal(entries, m.entries)
	m.entries = entries
	m.mu.Unlock()
	if m.opts.NoSystemTray {
		m.state = state
		return
	}
	if state != m.state || !m.iconSet {
		setSystrayIcon(trayResources[state])
		m.iconSet = true
	}
	m.state = state
	if same {
		return
	}
	systray.ResetMenu()
	for _, e := range entries {
		if e.Kind == entrySeparator {
			systray.AddSeparator()
			continue
		}
		var it *systray.MenuItem
		if e.Checked {
			it = systray.AddMenuItemCheckbox(menuLabel(e.Label), "", true)
		} else {
			it = systray.AddMenuItem(menuLabel(e.Label), "")
		}
		do := m.action(e)
		if e.Disabled || do == nil && e.Kind != entryInfo {
			it.Disable()
		}
		if e.Icon {
			it.SetIcon(checkOffIcon.Content())
		}
		go func() {
			for range it.ClickedCh { // closed when the menu is reset
				if do != nil {
					do()
				}
			}
		}()
	}
}

// setSystrayIcon sets the tray icon: a template image on macOS (a themed
// resource, see trayIcon), the PNG elsewhere.
func setSystrayIcon(res fyne.Resource) {
	if _, ok := res.(*theme.ThemedResource); ok {
		systray.SetTemplateIcon(res.Content(), res.Content())
		return
	}
	systray.SetIcon(res.Content())
}

// action is what clicking a menu entry does (on a goroutine of the menu
// item).
func (m *MenuBar) action(e menuEntry) func() {
	switch e.Kind {
	case entryApprovals:
		return func() { m.opts.Open(Command{Op: CmdApprovals}) }
	case entryRestart:
		label := e.Server
		return func() {
			n := m.opts.Daemon.Restart(label, "restart requested from the menu bar")
			m.log.Info("restart requested from the menu bar", "server", label, "runs", n)
		}
	case entryPrefs:
		return func() { m.opts.Open(Command{Op: CmdPrefs}) }
	case entryAudit:
		return func() { m.opts.Open(Command{Op: CmdAudit}) }
	case entryLogin:
		if m.opts.LoginItem == nil {
			return nil
		}
		want := !e.Checked
		return func() { m.setLogin(want) }
	case entryServer:
		label := e.Server
		return func() { m.opts.Open(Command{Op: CmdServer, Server: label}) }
	case entryRecent:
		ev, ok := m.events[e.Request]
		if !ok {
			return nil
		}
		return func() { m.opts.Open(Command{Op: CmdOutcome, Event: &ev}) }
	case entryQuit:
		return func() {
			if n := len(m.opts.Daemon.Status().Runs); n > 0 {
				m.opts.Open(Command{Op: CmdQuit, Runs: n})
				return
			}
			m.opts.Quit()
		}
	}
	return nil
}

// setLogin turns launch at login on or off and redraws the menu.
func (m *MenuBar) setLogin(on bool) {
	var err error
	if on {
		err = m.opts.LoginItem.Enable()
	} else {
		err = m.opts.LoginItem.Disable()
	}
	if err != nil {
		m.log.Warn("changing the launch-at-login setting", "enable", on, "err", err)
	}
	select {
	case m.redraw <- struct{}{}:
	default:
	}
}

// errorsIsNotYet reports whether err says the audit log is not open yet.
func errorsIsNotYet(err error) bool { return errors.Is(err, ErrKeysNotYet) }
