package app

import (
	"context"
	"fmt"
	"time"

	"fyne.io/fyne/v2"
	fyneapp "fyne.io/fyne/v2/app"
	"fyne.io/fyne/v2/driver/desktop"

	"github.com/portcullis/portcullis/assets"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
)

// AppID is the application identifier (FyneApp.toml, the macOS bundle id).
const AppID = "dev.portcullis.app"

// runTray runs the daemon and the menu-bar icon in one process. Quitting
// from the menu stops every server cleanly.
func (a *App) runTray(ctx context.Context) error {
	log := a.logger("app")
	d, err := a.newDaemon(log)
	if err != nil {
		return configError(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	fa := fyneapp.NewWithID(AppID)
	desk, ok := fa.(desktop.App)
	if !ok {
		return fmt.Errorf("this platform has no system tray; run `portcullis daemon` instead")
	}
	icon := fyne.NewStaticResource("tray-template.png", assets.TrayReady)
	desk.SetSystemTrayIcon(icon)
	quit := func() {
		cancel()
	}
	desk.SetSystemTrayMenu(fyne.NewMenu("Portcullis", trayItems(d.Status(), quit)...))

	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	go func() {
		// The status is refreshed from the daemon once a second until core
		// events exist for the menu to subscribe to.
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				fyne.Do(fa.Quit)
				return
			case <-t.C:
				items := trayItems(d.Status(), quit)
				fyne.Do(func() { desk.SetSystemTrayMenu(fyne.NewMenu("Portcullis", items...)) })
			}
		}
	}()
	fa.Run()
	cancel()
	return <-served
}

// trayItems is the menu for a status report: one line per agent run, then
// Quit.
func trayItems(rep daemon.StatusReport, quit func()) []*fyne.MenuItem {
	var items []*fyne.MenuItem
	if len(rep.Runs) == 0 {
		it := fyne.NewMenuItem("No agent connected", nil)
		it.Disabled = true
		items = append(items, it)
	}
	for _, r := range rep.Runs {
		it := fyne.NewMenuItem(runLine(r), nil)
		it.Disabled = true
		items = append(items, it)
	}
	items = append(items, fyne.NewMenuItemSeparator(), fyne.NewMenuItem("Quit Portcullis", quit))
	return items
}

// runLine is one menu line: label, state, short epoch and pid.
func runLine(r gateway.Status) string {
	line := fmt.Sprintf("%s — %s", r.Label, r.State)
	if r.Epoch != "" {
		e := r.Epoch
		if len(e) > 8 {
			e = e[len(e)-8:]
		}
		line += fmt.Sprintf(" · epoch …%s · pid %d", e, r.PID)
	}
	return line
}
