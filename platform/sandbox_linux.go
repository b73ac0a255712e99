//go:build linux

package platform

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/supervisor"
)

// linuxSandbox runs a server in a user namespace of its own (mapping only
// the person's uid and gid onto themselves) with a mount namespace in which
// each hidden directory is covered by an empty tmpfs (holding HiddenNote)
// and each hidden file by /dev/null; strict adds a network namespace (only
// an unconfigured loopback: no network, no abstract Unix sockets of the
// host). The mounts are made by the portcullis executable itself, started
// in those namespaces as the launcher (RunSandboxIfAsked), which then execs
// the server: the server's process, and what the supervisor observes of it
// once the exec settled, is the server's own executable.
type linuxSandbox struct {
	level string
	exe   string // the portcullis executable
}

// NewSandbox returns the Sandbox of level (SandboxStandard or
// SandboxStrict) on this system, or an error saying why it has none.
func NewSandbox(level string) (supervisor.Sandbox, error) {
	if level != SandboxStandard && level != SandboxStrict {
		return nil, fmt.Errorf("unknown sandbox level %q (want %s or %s)", level, SandboxStandard, SandboxStrict)
	}
	if err := userNamespacesWork(); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the sandbox's launcher: %w", err)
	}
	return &linuxSandbox{level: level, exe: exe}, nil
}

// userNamespacesWork reports, from the kernel's settings, whether an
// unprivileged process may create a user namespace.
func userNamespacesWork() error {
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" && os.Getuid() != 0 {
		return errors.New("unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)")
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return errors.New("user namespaces are disabled (user.max_user_namespaces = 0)")
	}
	return nil
}

func (s *linuxSandbox) Prepare(cmd *exec.Cmd, hide []string) (string, error) {
	hide = coverable(hide)
	args := []string{s.exe, sandboxArg, strconv.Itoa(len(hide))}
	args = append(args, hide...)
	args = append(args, cmd.Path)
	args = append(args, cmd.Args...)
	cmd.Path, cmd.Args = s.exe, args
	attr := cmd.SysProcAttr
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Cloneflags |= syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS
	if s.level == SandboxStrict {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	uid, gid := os.Getuid(), os.Getgid()
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	attr.GidMappingsEnableSetgroups = false
	cmd.SysProcAttr = attr
	desc := s.level + ": hides " + strings.Join(hide, ", ")
	if len(hide) == 0 {
		desc = s.level + ": hides nothing"
	}
	if s.level == SandboxStrict {
		desc += "; no network"
	}
	return desc, nil
}

// coverable returns the absolute, existing paths of hide, sorted, without
// those inside another one (covered with it).
func coverable(hide []string) []string {
	var out []string
	for _, p := range hide {
		if p = filepath.Clean(p); filepath.IsAbs(p) {
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(p string) bool {
		for _, q := range out {
			if q != p && strings.HasPrefix(p, q+string(filepath.Separator)) {
				return true
			}
		}
		return false
	})
}

// sandboxExec is the launcher, in the sandbox's namespaces: args are N,
// N paths to hide, the server's executable and its argv.
func sandboxExec(args []string) error {
	if len(args) < 1 {
		return errors.New("no arguments")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 0 || len(args) < 1+n+2 {
		return fmt.Errorf("bad arguments %q", args)
	}
	hide, target, argv := args[1:1+n], args[1+n], args[2+n:]
	// Nothing mounted here reaches the host's mount namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	for _, p := range hide {
		fi, err := os.Stat(p)
		if err != nil {
			continue // gone since: nothing to hide
		}
		if !fi.IsDir() {
			if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("hiding %s: %w", p, err)
			}
			continue
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,mode=0700"); err != nil {
			return fmt.Errorf("hiding %s: %w", p, err)
		}
		_ = os.WriteFile(filepath.Join(p, HiddenNote), []byte(hiddenText(p)), 0o400)
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", p, err)
		}
	}
	return syscall.Exec(target, argv, os.Environ())
}
