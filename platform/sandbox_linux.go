//go:build linux

package platform

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/supervisor"
	"github.com/portcullis/portcullis/internal/sandboxlaunch"
)

// linuxSandbox runs a server in a user namespace of its own (mapping only
// the person's uid and gid onto themselves) with a mount namespace in which
// each hidden directory is covered by an empty tmpfs (holding HiddenNote)
// and each hidden file by /dev/null; strict adds a network namespace (only
// an unconfigured loopback: no network, no abstract Unix sockets of the
// host). The mounts are made by the launcher, the small portcullis-sandbox
// executable beside the portcullis executable (package
// internal/sandboxlaunch), which then execs the server: the server's
// process, and what the supervisor observes of it once the exec settled,
// is the server's own executable. The launcher makes the namespaces
// itself, from its entry point, where it was built with one
// (sandboxlaunch.EntrySymbol, linux/amd64): the daemon then starts it with
// vfork like any program instead of forking its whole self; otherwise the
// daemon clones it into them.
type linuxSandbox struct {
	level    string
	launcher string // the portcullis-sandbox executable
	unshares bool   // the launcher makes its own namespaces
}

// NewSandbox returns the Sandbox of level (SandboxStandard or
// SandboxStrict; "" is the default, standard) on this system. Its error is a
// *supervisor.UnsupportedError (ErrSandboxUnsupported) when user namespaces do not work here (checked once:
// the sysctls, then the launcher's probe in a user namespace); it says
// how to fix it when the launcher is missing.
func NewSandbox(level string) (supervisor.Sandbox, error) {
	if level == "" {
		level = SandboxStandard // the default
	}
	if level != SandboxStandard && level != SandboxStrict {
		return nil, fmt.Errorf("unknown sandbox level %q (want %s or %s)", level, SandboxStandard, SandboxStrict)
	}
	launcher, err := sandboxLauncher()
	if err != nil {
		return nil, err
	}
	unshares, err := userNamespacesWork(launcher)
	if err != nil {
		return nil, err
	}
	return &linuxSandbox{level: level, launcher: launcher, unshares: unshares}, nil
}

// sandboxLauncher returns the launcher's path: sandboxlaunch.Name beside
// the running executable. Tests replace it.
var sandboxLauncher = func() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the sandbox launcher: %w", err)
	}
	p := filepath.Join(filepath.Dir(exe), sandboxlaunch.Name)
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("sandbox launcher %s not found beside %s; reinstall Portcullis (make install puts both there), or set the server's sandbox to off (portcullis servers edit LABEL --sandbox off)", sandboxlaunch.Name, exe)
	}
	return p, nil
}

// probes holds, per launcher path, the result of userNamespacesWork.
var probes sync.Map // string → *probe

type probe struct {
	once     sync.Once
	unshares bool
	err      error
}

// userNamespacesWork reports whether an unprivileged process may create a
// user namespace and mount in it here, once per launcher: the kernel's
// settings first (a clear reason), then the launcher's probe, which fails
// where AppArmor or seccomp restricts them. The probe asks the launcher to
// make its own namespaces; when that fails (a launcher built without the
// entry point that does, sandboxlaunch.ExitNoEntry, or a kernel that
// refuses unshare but lets a clone make them) it runs again in namespaces
// the daemon's clone made, and unshares is false if that one works. Its
// error is a *supervisor.UnsupportedError: the clone's refusal for a
// launcher without the entry point, else the launcher's own.
func userNamespacesWork(launcher string) (unshares bool, err error) {
	v, _ := probes.LoadOrStore(launcher, &probe{})
	pr := v.(*probe)
	pr.once.Do(func() { pr.unshares, pr.err = probeUserNamespaces(launcher) })
	return pr.unshares, pr.err
}

func probeUserNamespaces(launcher string) (unshares bool, err error) {
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" && os.Getuid() != 0 {
		return false, &supervisor.UnsupportedError{Reason: "user namespaces are not available here (kernel.unprivileged_userns_clone=0)"}
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return false, &supervisor.UnsupportedError{Reason: "user namespaces are not available here (user.max_user_namespaces=0)"}
	}
	out, err := exec.Command(launcher, sandboxlaunch.UnshareArg, sandboxlaunch.ProbeArg).CombinedOutput()
	if err == nil {
		return true, nil
	}
	// Without its entry point, or where the kernel lets a clone make the
	// namespaces but not unshare (a seccomp filter can tell them apart),
	// the daemon clones the launcher into them.
	cmd := exec.Command(launcher, sandboxlaunch.ProbeArg)
	cmd.SysProcAttr = namespaces(SandboxStandard)
	cloned, cerr := cmd.CombinedOutput()
	if cerr == nil {
		return false, nil
	}
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == sandboxlaunch.ExitNoEntry {
		out, err = cloned, cerr // the clone's refusal is the one to report
	}
	why := strings.TrimPrefix(strings.TrimSpace(string(out)), "portcullis sandbox: ")
	if why == "" {
		why = err.Error()
	}
	restricted := ""
	if b, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && strings.TrimSpace(string(b)) == "1" {
		restricted = " (AppArmor restricts them: kernel.apparmor_restrict_unprivileged_userns=1)"
	}
	return false, &supervisor.UnsupportedError{Reason: fmt.Sprintf("user namespaces are not available here%s: %s", restricted, why)}
}

// namespaces returns the process attributes of a launch in the sandbox of
// level: new user and mount namespaces (and network for strict), the
// person's uid and gid mapped onto themselves, and CAP_SYS_ADMIN of the new
// user namespace as an ambient capability, so that the launcher keeps it
// through its execve when the person's uid is not 0 (it drops it again
// before the server's).
func namespaces(level string) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS}
	if level == SandboxStrict {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	uid, gid := os.Getuid(), os.Getgid()
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	attr.GidMappingsEnableSetgroups = false
	attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	return attr
}

func (s *linuxSandbox) Prepare(cmd *exec.Cmd, hide []string) (string, error) {
	hide = coverable(hide)
	args := []string{s.launcher}
	if s.unshares {
		args = append(args, sandboxlaunch.UnshareArg)
		if s.level == SandboxStrict {
			args[1] = sandboxlaunch.UnshareNetArg
		}
	}
	args = append(args, strconv.Itoa(len(hide)))
	args = append(args, hide...)
	args = append(args, cmd.Path)
	args = append(args, cmd.Args...)
	cmd.Path, cmd.Args = s.launcher, args
	if !s.unshares {
		ns := namespaces(s.level)
		attr := cmd.SysProcAttr
		if attr == nil {
			attr = &syscall.SysProcAttr{}
		}
		attr.Cloneflags |= ns.Cloneflags
		attr.UidMappings, attr.GidMappings = ns.UidMappings, ns.GidMappings
		attr.GidMappingsEnableSetgroups = false
		attr.AmbientCaps = ns.AmbientCaps
		cmd.SysProcAttr = attr
	}
	desc := s.level + ": hides " + strings.Join(hide, ", ")
	if len(hide) == 0 {
		desc = s.level + ": hides nothing"
	}
	if s.level == SandboxStrict {
		desc += "; no network"
	}
	return desc, nil
}

// SignalExec hands the launcher w as its first extra descriptor, named by
// sandboxlaunch.ExecFdArg (supervisor.ExecSignaler), after the argument
// that makes it unshare if there is one: the launcher marks it
// close-on-exec, so its exec of the server ends the daemon's read end.
func (s *linuxSandbox) SignalExec(cmd *exec.Cmd, w *os.File) {
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	fd := 2 + len(cmd.ExtraFiles)
	at := 1
	if s.unshares {
		at = 2
	}
	cmd.Args = slices.Insert(cmd.Args, at, sandboxlaunch.ExecFdArg+strconv.Itoa(fd))
}

// coverable returns the absolute, existing paths of hide, with their
// symbolic links resolved, sorted, without those inside another one
// (covered with it). Resolved, because the launcher compares them with
// the working directory the kernel reports, which has none: a working
// directory reached through a link into a hidden directory is refused too.
func coverable(hide []string) []string {
	var out []string
	for _, p := range hide {
		if p = filepath.Clean(p); filepath.IsAbs(p) {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				out = append(out, r)
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
