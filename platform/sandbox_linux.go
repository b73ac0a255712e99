//go:build linux

package platform

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/portcullis/portcullis/core/supervisor"
)

// linuxSandbox runs a server under bubblewrap (bwrap, the sandbox of
// Flatpak and of Claude Code's tools): new user, mount, PID, IPC and UTS
// namespaces (and network for strict), every capability dropped, no new
// user namespaces inside, a new session (no TIOCSTI into the person's
// terminal) and SIGKILL when the daemon dies. The whole file system is
// mounted read-only; /tmp, the server's working directory, its write paths
// and its runtime's caches are writable again, and within those the
// person's start-up files and PATH directories read-only. Portcullis's
// directories, the session bus's socket and the display's sockets and
// cookies are covered (an empty read-only tmpfs, /dev/null over a file),
// and DISPLAY, WAYLAND_DISPLAY and XAUTHORITY are not in its environment.
// bwrap stays as the server's parent (its monitor, then its init as pid 1
// of the namespace): supervisor.Nested.
type linuxSandbox struct {
	level string
	bwrap string // the bwrap executable
}

// NewSandbox returns the Sandbox of level (SandboxStandard or
// SandboxStrict; "" is the default, standard) on this system. Its error is
// a *supervisor.UnsupportedError (ErrSandboxUnsupported) when bwrap is not
// installed (the reason names the command that installs it) or cannot
// make its namespaces here (checked once per bwrap: the reason says why,
// and on a system whose AppArmor restricts user namespaces, what admits
// bwrap).
func NewSandbox(level string) (supervisor.Sandbox, error) {
	if level == "" {
		level = SandboxStandard // the default
	}
	if level != SandboxStandard && level != SandboxStrict {
		return nil, fmt.Errorf("unknown sandbox level %q (want %s or %s)", level, SandboxStandard, SandboxStrict)
	}
	bwrap, err := lookBwrap()
	if err != nil {
		return nil, &supervisor.UnsupportedError{Reason: "bubblewrap (bwrap), which the sandbox runs servers in, is not installed here (not in PATH); install it: " + installCommand()}
	}
	if err := probeBwrap(bwrap); err != nil {
		return nil, err
	}
	return &linuxSandbox{level: level, bwrap: bwrap}, nil
}

// lookBwrap finds bwrap in the daemon's PATH. Tests replace it.
var lookBwrap = func() (string, error) { return exec.LookPath("bwrap") }

// installCommand is the one command that installs bubblewrap on this
// distribution (/etc/os-release's ID and ID_LIKE).
func installCommand() string {
	b, _ := os.ReadFile("/etc/os-release")
	var ids []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok && (k == "ID" || k == "ID_LIKE") {
			ids = append(ids, strings.Fields(strings.Trim(v, `"'`))...)
		}
	}
	for _, id := range ids {
		switch id {
		case "debian", "ubuntu":
			return "sudo apt install bubblewrap"
		case "fedora", "rhel", "centos":
			return "sudo dnf install bubblewrap"
		case "arch":
			return "sudo pacman -S bubblewrap"
		case "suse", "opensuse":
			return "sudo zypper install bubblewrap"
		case "alpine":
			return "sudo apk add bubblewrap"
		}
	}
	return "sudo apt install bubblewrap (Fedora: sudo dnf install bubblewrap)"
}

// probes holds, per bwrap path, the result of probeBwrap.
var probes sync.Map // string → *probe

type probe struct {
	once sync.Once
	err  error
}

// probeBwrap runs bwrap once with the sandbox's namespaces (bwrap
// --version inside) and returns, as a *supervisor.UnsupportedError, why it
// could not.
func probeBwrap(bwrap string) error {
	v, _ := probes.LoadOrStore(bwrap, &probe{})
	pr := v.(*probe)
	pr.once.Do(func() {
		args := append(namespaceArgs(SandboxStrict), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", bwrap, "--version")
		out, err := exec.Command(bwrap, args...).CombinedOutput()
		if err == nil {
			return
		}
		why := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "bwrap: "))
		if why == "" {
			why = err.Error()
		}
		reason := "bubblewrap (" + bwrap + ") cannot make the sandbox's namespaces here: " + why
		if b, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && strings.TrimSpace(string(b)) == "1" {
			reason += "; AppArmor lets only programs whose profile allows it create user namespaces (kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu 24.04 and later): give bwrap such a profile, " + apparmorCommand(bwrap)
		}
		pr.err = &supervisor.UnsupportedError{Reason: reason}
	})
	return pr.err
}

// apparmorCommand is the command that gives bwrap an AppArmor profile
// allowing user namespaces (the form Ubuntu ships for the programs it
// admits; the profile confines nothing else of bwrap, and the servers it
// runs do not inherit it).
func apparmorCommand(bwrap string) string {
	return fmt.Sprintf(`printf 'abi <abi/4.0>,\ninclude <tunables/global>\nprofile bwrap %s flags=(unconfined) {\n  userns,\n}\n' | sudo tee /etc/apparmor.d/bwrap && sudo apparmor_parser -r /etc/apparmor.d/bwrap`, bwrap)
}

// namespaceArgs are bwrap's options for the namespaces and the process of
// level.
func namespaceArgs(level string) []string {
	args := []string{"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"}
	if level == SandboxStrict {
		args = append(args, "--unshare-net")
	}
	return append(args, "--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL")
}

// Start starts the command Prepare made (supervisor.Starter) in a
// Landlock domain that keeps it from every abstract Unix socket made
// outside it (the X server's among them: hiding /tmp/.X11-unix leaves
// @/tmp/.X11-unix/XN in the network namespace the standard level shares),
// where the kernel has Landlock scopes (Linux 6.12); elsewhere it is
// cmd.Start, and Prepare's description says what stays reachable.
func (s *linuxSandbox) Start(cmd *exec.Cmd) error {
	if landlockABI() >= landlockScopeABI {
		return startScoped(cmd)
	}
	return cmd.Start()
}

// abstractNote is what the sandbox's description adds when abstract
// sockets stay reachable ("" when they do not).
func abstractNote(level string) string {
	if level == SandboxStrict || landlockABI() >= landlockScopeABI {
		return "" // strict has a network namespace of its own
	}
	return "; abstract sockets reachable (the display's among them: this kernel has no Landlock scopes, Linux 6.12)"
}

// Launcher is bwrap, which stays as the server's parent
// (supervisor.Nested).
func (s *linuxSandbox) Launcher() string { return s.bwrap }

func (s *linuxSandbox) Prepare(cmd *exec.Cmd, c supervisor.Confinement) (string, error) {
	cwd := cmd.Dir
	if cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("the sandbox could not read the working directory (%v); give the server one (portcullis servers edit LABEL --cwd DIR)", err)
		}
		cwd = wd
	}
	home, _ := os.UserHomeDir()
	pl := plan{
		level: s.level, home: home, cwd: cwd, exe: cmd.Path,
		write: c.Write, hide: c.Hide, env: cmd.Env,
	}
	if self, err := os.Executable(); err == nil {
		pl.self = filepath.Dir(self)
	}
	args, desc, err := pl.build(osFS{})
	if err != nil {
		return "", err
	}
	desc += abstractNote(s.level)
	args = append(append([]string{s.bwrap}, args...), "--", cmd.Path)
	cmd.Args = append(args, cmd.Args[1:]...)
	cmd.Path = s.bwrap
	cmd.Env = slices.DeleteFunc(slices.Clone(cmd.Env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(displayEnv, name)
	})
	return desc, nil
}

// displayEnv are the variables that lead to the person's display.
var displayEnv = []string{"DISPLAY", "WAYLAND_DISPLAY", "WAYLAND_SOCKET", "XAUTHORITY"}

// fsys is what the plan reads of the file system (tests give a fake).
type fsys interface {
	// resolve returns p with its symbolic links resolved, and whether it
	// exists and is a directory.
	resolve(p string) (real string, dir bool, ok bool)
	// glob lists the paths matching pattern.
	glob(pattern string) []string
}

type osFS struct{}

func (osFS) resolve(p string) (string, bool, bool) {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", false, false
	}
	fi, err := os.Stat(r)
	if err != nil {
		return "", false, false
	}
	return r, fi.IsDir(), true
}

func (osFS) glob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}

// plan is one server's sandbox: what build turns into bwrap's options.
type plan struct {
	level string
	home  string   // the person's home ("" unknown)
	cwd   string   // the server's working directory
	exe   string   // the server's executable
	write []string // the configuration's write paths
	hide  []string // Portcullis's directories, the session bus's socket
	env   []string // the server's environment (PATH, XDG_RUNTIME_DIR, …)
	self  string   // the directory of Portcullis's executable ("" unknown)
}

// Kinds of mount, in the order of precedence for the same path.
const (
	mountRW   = 1 + iota // writable (bind on itself)
	mountRO              // read-only again inside a writable one
	mountHide            // covered: tmpfs (directory) or /dev/null (file)
)

type mount struct {
	kind int
	dir  bool
}

// build returns bwrap's options for the plan (before "--" and the
// command) and what status says of it. Its error refuses a working
// directory or an executable inside a hidden directory (the working
// directory would still lead into it, the executable would be gone).
func (pl plan) build(fs fsys) ([]string, string, error) {
	getenv := func(name string) string {
		for i := len(pl.env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(pl.env[i], name+"="); ok {
				return v
			}
		}
		return ""
	}
	ms := map[string]mount{}
	add := func(p string, kind int) (string, bool) {
		if p == "" || !filepath.IsAbs(p) {
			return "", false
		}
		r, dir, ok := fs.resolve(filepath.Clean(p))
		if !ok {
			return "", false
		}
		if m, ok := ms[r]; !ok || m.kind < kind {
			ms[r] = mount{kind: kind, dir: dir}
		}
		return r, true
	}

	if r, _, ok := fs.resolve(filepath.Clean(pl.cwd)); ok {
		pl.cwd = r // the kernel's name for it, as the hidden paths are
	}
	// What is hidden.
	var hidden []string
	for _, p := range pl.hide {
		// One directory named twice (PORTCULLIS_HOME is both the
		// configuration and the state directory) is hidden, and said, once.
		if r, ok := add(p, mountHide); ok && !slices.Contains(hidden, r) {
			hidden = append(hidden, r)
		}
	}
	add("/tmp/.X11-unix", mountHide)
	if x := getenv("XAUTHORITY"); x != "" {
		add(x, mountHide)
	}
	if pl.home != "" {
		add(filepath.Join(pl.home, ".Xauthority"), mountHide)
	}
	if rt := getenv("XDG_RUNTIME_DIR"); rt != "" && filepath.IsAbs(rt) {
		for _, w := range fs.glob(filepath.Join(rt, "wayland-*")) {
			add(w, mountHide)
		}
	}
	for _, h := range hidden {
		if within(pl.cwd, h) {
			return nil, "", fmt.Errorf("the server's working directory %s is inside %s, which the sandbox hides (Portcullis's own files); give the server a working directory outside it (portcullis servers edit LABEL --cwd DIR) or set its sandbox to off (--sandbox off)", pl.cwd, h)
		}
		if within(pl.exe, h) {
			return nil, "", fmt.Errorf("the server's executable %s is inside %s, which the sandbox hides (Portcullis's own files); move it out, or set the server's sandbox to off (portcullis servers edit LABEL --sandbox off)", pl.exe, h)
		}
	}

	// What is writable: never the root, /dev, /proc, /sys or the home
	// itself (a directory above the home is, with the home read-only in
	// it).
	var writes, readOnly []string
	writable := func(p string) {
		r, _, ok := fs.resolve(filepath.Clean(p))
		if !ok || !filepath.IsAbs(p) {
			return
		}
		for _, top := range []string{"/dev", "/proc", "/sys"} {
			if within(r, top) {
				readOnly = append(readOnly, r)
				return
			}
		}
		if r == "/" || r == pl.home {
			readOnly = append(readOnly, r)
			return
		}
		if _, ok := add(r, mountRW); ok && !slices.Contains(writes, r) {
			writes = append(writes, r)
		}
	}
	writable("/tmp")
	writable(pl.cwd)
	for _, w := range pl.write {
		writable(w)
	}
	if pl.home != "" {
		for _, c := range caches {
			writable(filepath.Join(pl.home, c))
		}
	}
	var roots []string
	for p, m := range ms {
		if m.kind == mountRW {
			roots = append(roots, p)
		}
	}
	if pl.home != "" {
		for _, w := range roots {
			if within(pl.home, w) {
				// A writable directory above the home (a home in /tmp):
				// the home is read-only again inside it.
				add(pl.home, mountRO)
				break
			}
		}
	}
	inWritable := func(p string) (string, bool) {
		for _, w := range roots {
			if p != w && within(p, w) {
				return w, true
			}
		}
		return "", false
	}

	// Inside what is writable: the start-up files and the PATH
	// directories (Portcullis's own among them) read-only.
	var ro []string
	if pl.home != "" {
		for _, f := range startupFiles {
			ro = append(ro, filepath.Join(pl.home, f))
		}
	}
	ro = append(ro, filepath.SplitList(getenv("PATH"))...)
	if pl.self != "" {
		ro = append(ro, pl.self)
	}
	for _, p := range ro {
		if !filepath.IsAbs(p) {
			continue
		}
		if r, _, ok := fs.resolve(filepath.Clean(p)); ok {
			if _, in := inWritable(r); in || slices.Contains(roots, r) {
				add(r, mountRO)
			}
		}
	}

	// Every directory between a writable one and what is covered or
	// read-only inside it becomes a mount point (bound on itself,
	// writable still): a mount point cannot be renamed, so the server
	// cannot move Portcullis's directories, or a start-up file's, away
	// and put its own in their place.
	for p, m := range ms {
		if m.kind == mountRW {
			continue
		}
		w, in := inWritable(p)
		if !in {
			continue
		}
		for a := filepath.Dir(p); a != w && within(a, w); a = filepath.Dir(a) {
			if _, ok := ms[a]; !ok {
				ms[a] = mount{kind: mountRW, dir: true}
			}
		}
	}

	// Nothing is mounted inside a covered directory (its tmpfs is
	// read-only, and what is inside is hidden with it).
	for p := range ms {
		for q, m := range ms {
			if q != p && m.kind == mountHide && m.dir && within(p, q) {
				delete(ms, p)
				break
			}
		}
	}
	hidden = slices.DeleteFunc(hidden, func(h string) bool { _, ok := ms[h]; return !ok })

	args := namespaceArgs(pl.level)
	args = append(args, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc")
	paths := make([]string, 0, len(ms))
	for p := range ms {
		paths = append(paths, p)
	}
	slices.Sort(paths) // a directory before what is inside it
	for _, p := range paths {
		m := ms[p]
		if within(p, "/dev") || within(p, "/proc") {
			continue
		}
		switch {
		case m.kind == mountRW:
			args = append(args, "--bind", p, p)
		case m.kind == mountRO:
			args = append(args, "--ro-bind", p, p)
		case m.dir:
			args = append(args, "--tmpfs", p, "--remount-ro", p)
		default:
			args = append(args, "--ro-bind", "/dev/null", p)
		}
	}
	args = append(args, "--chdir", pl.cwd)

	desc := pl.level + ": hides " + strings.Join(hidden, ", ")
	if len(hidden) == 0 {
		desc = pl.level + ": hides nothing"
	}
	desc += "; writes " + strings.Join(writes, ", ")
	if len(readOnly) > 0 {
		desc += "; read-only " + strings.Join(readOnly, ", ")
	}
	if pl.level == SandboxStrict {
		desc += "; no network"
	}
	return args, desc, nil
}

// within reports whether path p is dir or inside it.
func within(p, dir string) bool {
	p, dir = filepath.Clean(p), filepath.Clean(dir)
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+string(filepath.Separator))
}
