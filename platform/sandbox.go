package platform

import (
	"github.com/portcullis/portcullis/core/supervisor"
)

// Sandbox levels (config.Server.Sandbox).
const (
	SandboxStandard = "standard" // Portcullis's directories, the session bus and the display hidden; the home read-only
	SandboxStrict   = "strict"   // standard, and no network (Linux: a network namespace of its own)
)

// ErrSandboxUnsupported is what NewSandbox's error is (errors.Is; a
// *supervisor.UnsupportedError with the reason) when this system cannot
// confine servers: bubblewrap missing or refused on Linux, no sandbox on
// this OS. A server whose sandbox is unset then runs unconfined, and
// status says why; one that asks for a level explicitly is not launched.
var ErrSandboxUnsupported = supervisor.ErrSandboxUnsupported

// startupFiles are the files and directories of the person's home that
// run code when the person logs in, opens a terminal or a session, or
// connects: a server never writes them, even where it may write their
// directory.
var startupFiles = []string{
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
	".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".kshrc", ".mkshrc",
	".config/fish", ".config/autostart", ".config/systemd", ".config/environment.d",
	".config/git", ".gitconfig", ".ssh", ".pam_environment", ".xprofile",
	".xinitrc", ".xsession", ".xsessionrc", ".local/bin", "bin",
}

// caches are the directories of the person's home that runtimes write
// as they run (npm's cache, the XDG cache: uv, pip, node-gyp, …).
var caches = []string{".npm", ".cache"}
