package platform

import (
	"os"
	"path/filepath"
	"strings"
)

// PolkitAction is the polkit action that guards a person's approval
// (settings.approvalAuthentication); the project ships its definition as
// assets/polkit/dev.portcullis.approve.policy, which `make install` puts in
// PREFIX/share/polkit-1/actions and, where it can write, in
// PolkitActionsDir.
const PolkitAction = "dev.portcullis.approve"

// PolkitActionsDir is the directory polkitd reads its actions from.
const PolkitActionsDir = "/usr/share/polkit-1/actions"

// PolkitInstallCommand is the one step that installs the polkit action for
// this executable: `sudo install` of the copy `make install` put beside it
// (PREFIX/share/polkit-1/actions, found from PREFIX/bin) into
// PolkitActionsDir, or, when there is no such copy, `sudo make
// install-polkit` in the source tree.
func PolkitInstallCommand() string {
	if p := shippedPolicy(); p != "" {
		return "sudo install -m 0644 " + shellWord(p) + " " + PolkitActionsDir + "/"
	}
	return "sudo make install-polkit (in Portcullis's source tree: it copies assets/polkit/" + PolkitAction + ".policy into " + PolkitActionsDir + "/)"
}

// shippedPolicy is the policy file `make install` put in
// PREFIX/share/polkit-1/actions for the executable in PREFIX/bin, "" when
// there is none.
func shippedPolicy() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	p := filepath.Join(filepath.Dir(filepath.Dir(exe)), "share", "polkit-1", "actions", PolkitAction+".policy")
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return p
}

// shellWord quotes s for a POSIX shell when it holds anything but plain
// path characters.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+@%:,=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
