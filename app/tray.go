package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

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
	return a.RunUI(ctx, fyneapp.NewWithID(AppID), nil)
}

// RunUI runs the daemon with the menu-bar UI of fa (tray, approval window,
// notifications) until ctx ends, the person quits from the menu, or the
// daemon fails; it returns the daemon's error. Quitting stops every server
// cleanly: the daemon's context is cancelled, the daemon ends each agent
// run (connected shims get EOF), and Fyne quits once the daemon returned.
//
// With a desktop driver, RunUI runs Fyne's event loop and must be called on
// the main goroutine. With a headless driver (-tags ci, or the test app of
// fyne.io/fyne/v2/test) there is no loop: RunUI waits for ctx. started, if
// not nil, receives the tray once it exists (tests drive it).
func (a *App) RunUI(ctx context.Context, fa fyne.App, started func(*ui.Tray)) error {
	log := a.logger("app")
	lock, err := daemon.TakeLock(a.Dirs) // before the daemon reads anything (runDaemon)
	if err != nil {
		return err
	}
	defer lock.Release()
	d, err := a.newDaemon(log)
	if err != nil {
		return configError(err, "start Portcullis again")
	}
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
				Edit: func(change func(*config.Config) error) (*config.Config, error) {
					// A widening edit takes the window's rule for
					// approvals: never from synthetic input.
					return d.EditConfigFromWindow("app (Preferences)", change, input.Judge())
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
