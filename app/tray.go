package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	fyneapp "fyne.io/fyne/v2/app"
	"fyne.io/fyne/v2/driver/desktop"

	"github.com/portcullis/portcullis/app/ui"
	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/loginitem"
	"github.com/portcullis/portcullis/platform"
)

// AppID is the application identifier (FyneApp.toml, the macOS bundle id).
const AppID = "dev.portcullis.app"

// runTray runs the daemon and the menu-bar app in one process.
func (a *App) runTray(ctx context.Context) error {
	if headlessBuild {
		return errors.New("this is the headless build of portcullis (no menu-bar window: built without cgo, -tags ci); run `portcullis daemon` for the same daemon without UI (approvals with `portcullis approvals` and `portcullis approve`), or install the menu-bar app with `make install` on a machine with a C toolchain")
	}
	if runtime.GOOS != "darwin" && runtime.GOOS != "windows" && os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		// GLFW would panic without a display; say what to run instead.
		return errors.New("no graphical session (DISPLAY and WAYLAND_DISPLAY are unset), so the menu-bar app cannot start; run `portcullis daemon` for the same daemon without UI (approvals with `portcullis approvals` and `portcullis approve`)")
	}
	return a.RunMenuBar(ctx, selfCommand, false)
}

// lockedDaemon takes the daemon's lock, before the daemon reads anything
// (as runDaemon does), and makes the daemon the app runs; release lets the
// lock go.
func (a *App) lockedDaemon(log *slog.Logger) (d *daemon.Daemon, release func(), err error) {
	lock, err := daemon.TakeLock(a.Dirs)
	if err != nil {
		return nil, nil, err
	}
	d, err = a.newDaemon(log)
	if err != nil {
		lock.Release()
		return nil, nil, configError(err, "start Portcullis again")
	}
	return d, lock.Release, nil
}

// RunMenuBar runs the daemon with the menu-bar icon (fyne.io/systray, no
// Fyne app) until ctx ends, the person quits from the menu, or the daemon
// fails. Windows are shown by the window process, which command starts
// (this program's hidden window-process command) on demand: when a request
// is raised or the menu asks for a window; it exits once no window is
// shown and no request waits. noTray leaves the desktop's tray alone
// (tests). On macOS it must run on the main goroutine (the tray's loop).
func (a *App) RunMenuBar(ctx context.Context, command func() *exec.Cmd, noTray bool) error {
	log := a.logger("app")
	d, release, err := a.lockedDaemon(log)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var win *windows
	notifier := platform.NewNotifier(platform.NotifierOptions{
		Logger: log,
		// Fyne's notification (macOS) is posted by the window process.
		Fallback: func(title, body string) { win.Open(ui.Command{Op: ui.CmdNotify, Title: title, Body: body}) },
	})
	defer notifier.Close()
	var login loginitem.Item
	if li, err := platform.NewLoginItem(); err != nil {
		log.Warn("launch at login is unavailable", "err", err)
	} else {
		login = li
	}
	approvals := d.WindowApprovals() // OS authentication first, when settings.approvalAuthentication asks
	win = newWindows(ui.LinkDeps{
		Daemon:      d,
		Approvals:   approvals,
		AuditStatus: d.AuditStatus,
		ConfigState: d.ConfigState,
		EditFrom: func(base string, edited []byte, in daemon.WindowInput) (*config.Config, error) {
			return d.EditConfigFrom("app (Preferences)", base, edited, in)
		},
		InputNote: d.WindowAuthNote,
		Quit:      cancel,
	}, command, log)
	bar := ui.NewMenuBar(ui.MenuBarOptions{
		Daemon:    d,
		Approvals: approvals,
		Notifier:  notifier,
		LoginItem: login,
		SetupKeys: func() (string, error) {
			r, err := d.SetupAuditKeys(ctx)
			switch {
			case errors.Is(err, daemon.ErrAuditNotOpen):
				return "", fmt.Errorf("%w: %v", ui.ErrKeysNotYet, err)
			case errors.Is(err, audit.ErrSealKeysExist):
				return "", nil
			}
			return r.Key, err
		},
		Open:         win.Open,
		Quit:         cancel,
		Logger:       log,
		NoSystemTray: noTray,
	})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		bar.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		win.Run(ctx)
	}()
	served := make(chan error, 1)
	go func() {
		err := d.Serve(ctx)
		cancel()
		served <- err
	}()
	bar.RunSystray(ctx) // until ctx ends: quit from the menu, a signal, or the daemon's end
	err = <-served
	wg.Wait()
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	return nil
}

// runWindowProcess is the window process (windowProcessArg): Fyne's
// windows for the app that started it, over the link it was given.
func (a *App) runWindowProcess(ctx context.Context) error {
	if headlessBuild {
		return errors.New("this is the headless build of portcullis: it has no windows")
	}
	log := a.logger("window")
	log.Debug("window process running")
	conn, err := linkConn()
	if err != nil {
		return err
	}
	fa := fyneapp.NewWithID(AppID)
	log.Debug("window process: Fyne app made")
	fa.Lifecycle().SetOnStarted(func() { log.Debug("window process: Fyne's loop running") })
	a.windowProcess(ctx, fa, ui.NewRemote(conn), func() { fyne.Do(fa.Driver().Quit) }, nil)
	fa.Run()
	return nil
}

// windowLinger is how long the window process stays awake once no window
// is shown and no request waits, before it stands by: the next card of a
// burst then finds Fyne's loop running (from standby it is woken in
// milliseconds, its windows kept).
var windowLinger = 3 * time.Second

// windowProcess shows the windows of the link r in fa; done quits fa.
// started, if not nil, receives the tray (tests).
func (a *App) windowProcess(ctx context.Context, fa fyne.App, r *ui.Remote, done func(), started func(*ui.Tray)) {
	log := a.logger("window")
	secrets := platform.NewSecretStore()
	// The window process holds the display connection, so it judges the
	// press behind each approval (synthetic input never approves); the
	// app's daemon takes the judgement with the decision.
	input := newInputCheck()
	quit := done
	done = func() { input.Close(); quit() }
	ui.RunWindowProcess(ctx, fa, r, ui.WindowProcess{
		Input:     input,
		InputNote: func() string { return r.InputNote(input.Unknown()) },
		Prefs: func() ui.PrefsDeps {
			// A store opened now reads the revisions the daemon wrote so far.
			cats, err := catalog.OpenStore(filepath.Join(a.Dirs.State, "catalog"))
			if err != nil {
				log.Warn("reading the catalog store for Preferences", "err", err)
				cats = nil
			}
			var login loginitem.Item
			if li, err := platform.NewLoginItem(); err == nil {
				login = li
			}
			return ui.PrefsDeps{ConfigFile: a.Dirs.ConfigFile(), Catalogs: cats, Secrets: secrets, Login: login}
		},
		Audit: func() ui.AuditDeps {
			key, err := daemon.ReadAuditKey(secrets)
			if err != nil {
				log.Info("the audit viewer checks the hash chain only", "err", err)
			}
			return ui.AuditDeps{Dir: daemon.AuditDir(a.Dirs), Key: key}
		},
		Linger:  windowLinger,
		Warm:    true,
		Logger:  log,
		Started: started,
	}, done)
}

// RunUI runs the daemon with the whole UI in one Fyne app fa (tray,
// approval window, notifications) until ctx ends, the person quits from the menu, or the
// daemon fails; it returns the daemon's error. Quitting stops every server
// cleanly: the daemon's context is cancelled, the daemon ends each agent
// run (connected shims get EOF), and Fyne quits once the daemon returned.
//
// The menu-bar app runs RunMenuBar instead (Fyne's loop only in the
// window process, while a window is shown); RunUI is the same UI wired in
// one process, as the end-to-end tests drive it on Fyne's test driver.
//
// With a desktop driver, RunUI runs Fyne's event loop and must be called on
// the main goroutine. With a headless driver (-tags ci, or the test app of
// fyne.io/fyne/v2/test) there is no loop: RunUI waits for ctx. started, if
// not nil, receives the tray once it exists (tests drive it).
func (a *App) RunUI(ctx context.Context, fa fyne.App, started func(*ui.Tray)) error {
	log := a.logger("app")
	d, release, err := a.lockedDaemon(log)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	fa.SetIcon(ui.AppIcon())
	notifier := platform.NewNotifier(platform.NotifierOptions{
		Logger:   log,
		Fallback: func(title, body string) { fa.SendNotification(fyne.NewNotification(title, body)) },
	})
	defer notifier.Close()
	secrets := platform.NewSecretStore()
	var login loginitem.Item
	if li, err := platform.NewLoginItem(); err != nil {
		log.Warn("launch at login is unavailable", "err", err)
	} else {
		login = li
	}
	input := newInputCheck() // synthetic input never approves in the window
	defer input.Close()
	tray := ui.NewTray(fa, ui.Options{
		Daemon:    d,
		Approvals: d.WindowApprovals(), // OS authentication first, when settings.approvalAuthentication asks
		Input:     input,
		InputNote: func() string { return d.WindowAuthNote(input.Unknown()) },
		Notifier:  notifier,
		LoginItem: login,
		Preferences: func() ui.PrefsDeps {
			// A store opened now reads the revisions the daemon wrote so far.
			cats, err := catalog.OpenStore(filepath.Join(a.Dirs.State, "catalog"))
			if err != nil {
				log.Warn("reading the catalog store for Preferences", "err", err)
				cats = nil
			}
			return ui.PrefsDeps{ConfigFile: a.Dirs.ConfigFile(), Catalogs: cats, Secrets: secrets, Login: login, AuditStatus: d.AuditStatus,
				Edit: func(window uint64, change func(*config.Config) error) (*config.Config, error) {
					// A widening edit takes the window's rule for
					// approvals: never from synthetic input.
					return d.EditConfigFromWindow("app (Preferences)", change, input.Judge(window, ""))
				}}
		},
		Audit: func() ui.AuditDeps {
			key, err := daemon.ReadAuditKey(secrets)
			if err != nil {
				log.Info("the audit viewer checks the hash chain only", "err", err)
			}
			return ui.AuditDeps{Dir: daemon.AuditDir(a.Dirs), Key: key}
		},
		SetupKeys: func() (string, error) {
			r, err := d.SetupAuditKeys(ctx)
			switch {
			case errors.Is(err, daemon.ErrAuditNotOpen):
				return "", fmt.Errorf("%w: %v", ui.ErrKeysNotYet, err)
			case errors.Is(err, audit.ErrSealKeysExist):
				return "", nil
			}
			return r.Key, err
		},
		Quit:   cancel,
		Logger: log,
	})
	if started != nil {
		started(tray)
	}

	_, gui := fa.Driver().(desktop.Driver)
	// Once Fyne's loop has ended, fyne.Do runs its function at once on the
	// caller's goroutine, after GLFW was terminated: a window or menu
	// update then panics ("GLFW library is not initialized"). The loop
	// ends before the daemon does on SIGTERM and SIGINT, which Fyne's
	// driver catches itself and quits on. So the tray stops before the
	// app quits, and the app is quit through its driver, whose Quit only
	// ends the loop (once) and touches no window: fa.Quit would close each
	// window with GLFW calls.
	trayCtx, stopTray := context.WithCancel(ctx)
	trayDone := make(chan struct{})
	go func() {
		defer close(trayDone)
		tray.Run(trayCtx)
	}()
	served := make(chan error, 1)
	go func() {
		err := d.Serve(ctx)
		cancel()
		stopTray()
		<-trayDone
		if gui {
			fyne.Do(fa.Driver().Quit)
		}
		served <- err
	}()
	if gui {
		fa.Run() // until Quit: from the menu (after the daemon stopped) or from the system
		cancel()
	}
	err = <-served
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	return nil
}
