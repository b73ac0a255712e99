//go:build unix

package supervisor

import "os/exec"

// Sandbox confines a server process (docs/DESIGN.md, "Processes": the
// sandbox). Package platform implements it: on Linux a user and mount
// namespace with the daemon's directories hidden under empty tmpfs mounts;
// on macOS a sandbox-exec profile.
type Sandbox interface {
	// Prepare changes cmd, not yet started (its Path resolved, Args[0]
	// as configured), so that the process it starts runs confined with
	// the paths of hide (directories, or files such as the session bus's
	// socket) hidden from it. It returns what `portcullis status` says of
	// the confinement ("standard: hides /a, /b"), or an error when this
	// system cannot confine it as asked.
	Prepare(cmd *exec.Cmd, hide []string) (string, error)
}
