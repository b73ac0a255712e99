//go:build !darwin && !windows

package ui

import "github.com/godbus/dbus/v5"

// trayReachable says why the system tray cannot be reached, nil when it
// can: on Linux the tray (fyne.io/systray, StatusNotifierItem) lives on the
// session bus, and systray itself dereferences its missing connection
// when it quits without one.
func trayReachable() error {
	conn, err := dbus.ConnectSessionBus()
	if err != nil {
		return err
	}
	return conn.Close()
}
