//go:build linux

package sandboxlaunch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Main is the launcher, started by the daemon in the sandbox's namespaces
// (platform's linuxSandbox), or told to make them with UnshareArg or
// UnshareNetArg first, which its entry point did before Main runs
// (entry_linux.go): then args are N, N absolute paths to hide, the
// server's executable and its argv, optionally after ExecFdArg; or
// ProbeArg alone. It makes every mount
// private (nothing it mounts reaches the host), covers each hidden
// directory with an empty read-only tmpfs holding HiddenNote and each
// hidden file with /dev/null, and execs the server, so that on success it
// never returns. Its error says what was refused and the one step the
// person can take.
//
// A launcher that made its own namespaces holds every capability of its
// new user namespace. One the daemon cloned into them gets CAP_SYS_ADMIN
// as an ambient capability of that namespace: a process whose uid is not
// 0 loses every capability at execve, ambient ones aside, so without it
// the launcher of a person who is not root could not mount anything. Before the server's exec it drops
// every capability it can hand on (dropCapabilities), so that the server
// cannot unmount a cover. Capabilities are a thread's, and the thread that
// drops them must be the one that execs: Main keeps its OS thread.
func Main(args []string) error {
	runtime.LockOSThread() // never unlocked: this thread execs the server
	if len(args) > 0 && (args[0] == UnshareArg || args[0] == UnshareNetArg) {
		if err := entered(); err != nil {
			return err
		}
		args = args[1:]
	}
	if len(args) == 1 && args[0] == ProbeArg {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("the kernel refused to make the mounts private in a user namespace (%w)", err)
		}
		if err := unix.Mount("tmpfs", os.TempDir(), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k"); err != nil {
			return fmt.Errorf("the kernel refused to mount a tmpfs in a user namespace (%w)", err)
		}
		return nil
	}
	if len(args) > 0 && strings.HasPrefix(args[0], ExecFdArg) {
		fd, err := strconv.Atoi(strings.TrimPrefix(args[0], ExecFdArg))
		if err != nil || fd < 3 {
			return fmt.Errorf("bad arguments %q (it is started by Portcullis, not by hand)", args)
		}
		if err := unix.SetNonblock(fd, false); err != nil { // fcntl: the descriptor is there
			return fmt.Errorf("bad arguments: descriptor %d: %w", fd, err)
		}
		unix.CloseOnExec(fd)
		args = args[1:]
	}
	if len(args) < 1 {
		return errors.New("no arguments (it is started by Portcullis, not by hand)")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 0 || n > len(args) || len(args) < 1+n+2 {
		return fmt.Errorf("bad arguments %q (it is started by Portcullis, not by hand)", args)
	}
	hide, target, argv := args[1:1+n], args[1+n], args[2+n:]
	if fastExecErrno != 0 {
		// The entry point's fast path covered everything and dropped the
		// capabilities; only the server's execve failed.
		return fmt.Errorf("starting the server %s: %w", target, syscall.Errno(fastExecErrno))
	}
	// The kernel's own answer: os.Getwd would take $PWD, which the
	// server's environment sets, when it names the same directory through
	// a symbolic link, and the comparison below would miss it.
	cwd, err := unix.Getwd()
	if err != nil {
		return fmt.Errorf("the sandbox could not read its working directory (%v); the server was not started: give it a working directory (portcullis servers edit LABEL --cwd DIR) or set its sandbox to off (portcullis servers edit LABEL --sandbox off)", err)
	}
	for _, p := range hide {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("bad arguments: %q to hide is not an absolute path", p)
		}
		// The process's working directory would still lead into the
		// covered directory (".." from it walks the directory underneath),
		// and the server's own executable would be gone.
		if within(cwd, p) {
			return fmt.Errorf("the server's working directory %s is inside %s, which the sandbox hides (Portcullis's own files); give the server a working directory outside it (portcullis servers edit LABEL --cwd DIR) or set its sandbox to off (--sandbox off)", cwd, p)
		}
		if within(target, p) {
			return fmt.Errorf("the server's executable %s is inside %s, which the sandbox hides (Portcullis's own files); move it out, or set the server's sandbox to off (portcullis servers edit LABEL --sandbox off)", target, p)
		}
	}
	if err := private(); err != nil {
		return err
	}
	for _, p := range hide {
		if err := cover(p); err != nil {
			return err
		}
	}
	if err := dropCapabilities(); err != nil {
		return err
	}
	err = syscall.Exec(target, argv, os.Environ())
	return fmt.Errorf("starting the server %s: %w", target, err)
}

// private makes every mount of the new mount namespace private.
func private() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return refused("make its mounts private", err)
	}
	return nil
}

// cover hides p: a directory under an empty read-only tmpfs holding
// HiddenNote, a file under /dev/null; a path gone since is nothing to hide.
func cover(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return nil
	}
	if !fi.IsDir() {
		if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			return refused("hide "+p, err)
		}
		return nil
	}
	if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,mode=0700"); err != nil {
		return refused("hide "+p, err)
	}
	_ = os.WriteFile(filepath.Join(p, HiddenNote), []byte(HiddenText(p)), 0o400)
	if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return refused("make "+p+" read-only", err)
	}
	return nil
}

// dropCapabilities leaves the calling thread nothing that survives its
// execve into the server: no_new_privs, so that no program the server runs
// gains a capability from its file (capabilities that root set on a host
// file count inside the sandbox's user namespace: a copy of umount with
// cap_sys_admin unmounted a cover) or a set-user-ID bit; no ambient and no
// inheritable capability; and, when it runs as uid 0 of its namespace (a
// person who is root, whose capabilities execve keeps), an empty bounding
// set. A server with CAP_SYS_ADMIN in the sandbox's user namespace could
// unmount the tmpfs that covers a hidden directory and read what lies
// beneath.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return refused("set no_new_privs", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return refused("drop its ambient capabilities", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return refused("read its capabilities", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return refused("drop its inheritable capabilities", err)
	}
	if os.Geteuid() != 0 {
		return nil // execve of a uid other than 0 keeps no other capability
	}
	for c := 0; ; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			return nil // past the kernel's last capability
		}
		if err != nil {
			return refused(fmt.Sprintf("drop capability %d from its bounding set", c), err)
		}
	}
}

// refused is the error of a mount the kernel refused: a permission error
// in a user namespace of one's own means the system restricts them.
func refused(what string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("the kernel refused to %s (%v) although the launcher runs in a user namespace of its own: this system restricts unprivileged user namespaces (AppArmor's kernel.apparmor_restrict_unprivileged_userns, or a seccomp filter); the server was not started: set its sandbox to off (portcullis servers edit LABEL --sandbox off)", what, err)
	}
	return fmt.Errorf("the sandbox could not %s (%v); the server was not started: set its sandbox to off (portcullis servers edit LABEL --sandbox off)", what, err)
}

// within reports whether path p is dir or inside it.
func within(p, dir string) bool {
	p, dir = filepath.Clean(p), filepath.Clean(dir)
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) || dir == "/"
}
