//go:build darwin

package platform

import (
	"fmt"
	"os/exec"
	"strings"

	"github.com/portcullis/portcullis/core/supervisor"
)

// darwinSandbox runs a server under sandbox-exec(1) with a profile that
// allows everything but reading and writing the hidden paths (and, for
// strict, the network). NOT YET RUN: written and type-checked without a
// Mac; sandbox-exec is deprecated by Apple but still shipped.
type darwinSandbox struct{ level string }

// NewSandbox returns the Sandbox of level on macOS. The default (level
// "") is none: the profile has not yet run on a Mac, so it is used only
// where the person asked for it.
func NewSandbox(level string) (supervisor.Sandbox, error) {
	if level == "" {
		return nil, &supervisor.UnsupportedError{Reason: "the macOS sandbox (sandbox-exec) has not yet run on a Mac, so it is not on by default; --sandbox standard turns it on"}
	}
	if level != SandboxStandard && level != SandboxStrict {
		return nil, fmt.Errorf("unknown sandbox level %q (want %s or %s)", level, SandboxStandard, SandboxStrict)
	}
	return &darwinSandbox{level: level}, nil
}

// sandboxProfile is the SBPL profile hiding paths.
func sandboxProfile(level string, hide []string) string {
	var b strings.Builder
	b.WriteString("(version 1)\n(allow default)\n")
	for _, p := range hide {
		fmt.Fprintf(&b, "(deny file-read* file-write* (subpath %q))\n", p)
	}
	if level == SandboxStrict {
		b.WriteString("(deny network*)\n")
	}
	return b.String()
}

func (s *darwinSandbox) Prepare(cmd *exec.Cmd, hide []string) (string, error) {
	const tool = "/usr/bin/sandbox-exec"
	args := append([]string{tool, "-p", sandboxProfile(s.level, hide), cmd.Path}, cmd.Args[1:]...)
	cmd.Path, cmd.Args = tool, args
	return s.level + " (sandbox-exec, not yet run on a Mac): hides " + strings.Join(hide, ", "), nil
}
