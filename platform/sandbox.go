package platform

import (
	"github.com/portcullis/portcullis/core/supervisor"
	"github.com/portcullis/portcullis/internal/sandboxlaunch"
)

// Sandbox levels (config.Server.Sandbox).
const (
	SandboxStandard = "standard" // the daemon's directories and the session bus's socket hidden
	SandboxStrict   = "strict"   // standard, and no network (Linux: a network namespace of its own)
)

// HiddenNote is the file each hidden directory holds, so that a server
// that looks there is told why it is empty.
const HiddenNote = sandboxlaunch.HiddenNote

// ErrSandboxUnsupported is what NewSandbox's error is (errors.Is; a
// *supervisor.UnsupportedError with the reason) when this system cannot confine servers at all: no user
// namespaces on Linux, no sandbox on this OS. A server whose sandbox is
// unset then runs unconfined, and status says why; one that asks for a
// level explicitly is not launched. Other errors of NewSandbox (the
// launcher missing) fail every confined launch.
var ErrSandboxUnsupported = supervisor.ErrSandboxUnsupported
