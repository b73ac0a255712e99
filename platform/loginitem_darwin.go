//go:build darwin

package platform

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/portcullis/portcullis/core/loginitem"
	"github.com/portcullis/portcullis/platform/spawn"
)

// NewLoginItem returns the "launch at login" setting of the current user. On
// macOS it is the LaunchAgent ~/Library/LaunchAgents/dev.portcullis.app.plist
// (launchd.plist(5); see [loginitem.LaunchAgentPlist]) running the current
// executable, associated with the bundle identifier when the executable lies
// inside an application bundle. launchd reads that directory when the person
// logs in; no signed bundle is needed (unlike SMAppService).
//
// Enable writes the plist and then, when `launchctl print-disabled gui/UID`
// lists a "disabled" override for the label (set with `launchctl disable`),
// clears it with `launchctl enable gui/UID/LABEL`; a failure of that step is
// returned but leaves the file in place. It deliberately does not run
// `launchctl bootstrap`: with RunAtLoad that would start a second copy of the
// app right away. Disable removes the plist and does not run `launchctl
// bootout`, which would terminate the running app when launchd started it.
// Errors: no home directory, or an executable path a plist cannot carry.
func NewLoginItem() (loginitem.Item, error) {
	exe, err := loginExecutable()
	if err != nil {
		return nil, err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, fmt.Errorf("launch at login: %w", err)
	}
	bundleID := ""
	if _, ok := spawn.BundleOf(exe); ok {
		bundleID = loginitem.ID
	}
	return &fileItem{
		path:        filepath.Join(home, "Library", "LaunchAgents", loginitem.ID+".plist"),
		content:     loginitem.LaunchAgentPlist(loginitem.ID, exe, bundleID),
		active:      func([]byte) bool { return true },
		afterEnable: launchctlEnable,
	}, nil
}

// launchctlEnable clears a "disabled" override of the Portcullis job in the
// person's GUI domain, if there is one, so that the plist is honoured at the
// next login. When the overrides cannot be listed it does nothing.
func launchctlEnable() error {
	domain := fmt.Sprintf("gui/%d", os.Getuid())
	list, err := exec.Command("/bin/launchctl", "print-disabled", domain).Output()
	if err != nil || !loginitem.LaunchdDisabled(list, loginitem.ID) {
		return nil
	}
	target := domain + "/" + loginitem.ID
	out, err := exec.Command("/bin/launchctl", "enable", target).CombinedOutput()
	if err != nil {
		return fmt.Errorf("launch at login: the LaunchAgent is written, but `launchctl enable %s` failed: %w: %s", target, err, out)
	}
	return nil
}
