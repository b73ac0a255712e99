//go:build linux

package platform

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/portcullis/portcullis/core/loginitem"
)

// NewLoginItem returns the "launch at login" setting of the current user. On
// Linux it is the XDG autostart entry $XDG_CONFIG_HOME/autostart/
// dev.portcullis.app.desktop (Desktop Application Autostart Specification
// 0.5; $XDG_CONFIG_HOME defaults to ~/.config and is ignored when relative),
// running the current executable (see [loginitem.DesktopEntry]). Disabled
// means the file is missing or says Hidden=true or
// X-GNOME-Autostart-enabled=false. Errors: no home directory, or an
// executable path a desktop entry cannot carry.
func NewLoginItem() (loginitem.Item, error) {
	exe, err := loginExecutable()
	if err != nil {
		return nil, err
	}
	dir, err := xdgConfigHome()
	if err != nil {
		return nil, err
	}
	return newAutostartItem(dir, exe), nil
}

// newAutostartItem returns the autostart entry under configHome that runs exe.
func newAutostartItem(configHome, exe string) *fileItem {
	return &fileItem{
		path:    filepath.Join(configHome, "autostart", loginitem.ID+".desktop"),
		content: loginitem.DesktopEntry(exe),
		active:  loginitem.DesktopEntryEnabled,
	}
}

// xdgConfigHome returns $XDG_CONFIG_HOME when it is an absolute path, else
// ~/.config (XDG Base Directory Specification 0.8).
func xdgConfigHome() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("launch at login: %w", err)
	}
	return filepath.Join(home, ".config"), nil
}
