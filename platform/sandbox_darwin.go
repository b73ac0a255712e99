//go:build darwin

package platform

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/portcullis/portcullis/core/supervisor"
)

// darwinSandbox runs a server under sandbox-exec(1) with a Seatbelt
// profile (seatbelt.go). NOT YET RUN: written and type-checked without a
// Mac, its profile text unit-tested; sandbox-exec is deprecated by Apple
// but still shipped, and the sandbox runtime of Claude Code's tools uses
// it.
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

func (s *darwinSandbox) Prepare(cmd *exec.Cmd, c supervisor.Confinement) (string, error) {
	const tool = "/usr/bin/sandbox-exec"
	resolve := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				out = append(out, r)
			}
		}
		return out
	}
	cwd := cmd.Dir
	if cwd == "" {
		cwd, _ = os.Getwd()
	}
	home, _ := os.UserHomeDir()
	write := []string{cwd, "/tmp", "/private/var/folders", os.TempDir()}
	write = append(write, c.Write...)
	var ro []string
	if home != "" {
		for _, c := range caches {
			write = append(write, filepath.Join(home, c))
		}
		for _, f := range startupFiles {
			ro = append(ro, filepath.Join(home, f))
		}
	}
	for _, kv := range cmd.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			ro = append(ro, filepath.SplitList(v)...)
		}
	}
	sb := seatbelt{level: s.level, hide: resolve(c.Hide), write: resolve(write), readOnly: resolve(ro)}
	args := append([]string{tool, "-p", sb.profile(), cmd.Path}, cmd.Args[1:]...)
	cmd.Path, cmd.Args = tool, args
	return s.level + " (sandbox-exec, not yet run on a Mac): hides " + strings.Join(sb.hide, ", "), nil
}
