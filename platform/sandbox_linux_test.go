//go:build linux

package platform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/supervisor"
)

// fakeFS is a file system for plan.build: the paths that exist (true: a
// directory), with no symbolic links.
type fakeFS map[string]bool

func (f fakeFS) resolve(p string) (string, bool, bool) {
	dir, ok := f[p]
	return p, dir, ok
}

func (f fakeFS) glob(pattern string) []string {
	var out []string
	for p := range f {
		if ok, _ := filepath.Match(pattern, p); ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// mountsOf returns bwrap's mount options of args as "OPTION PATH" lines
// (the source of a bind left out when it is the target).
func mountsOf(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--bind", "--ro-bind":
			if args[i+1] == args[i+2] {
				out = append(out, args[i]+" "+args[i+2])
			} else {
				out = append(out, args[i]+" "+args[i+1]+" "+args[i+2])
			}
			i += 2
		case "--tmpfs", "--remount-ro", "--dev", "--proc", "--chdir":
			out = append(out, args[i]+" "+args[i+1])
			i++
		}
	}
	return out
}

// TestSandboxPlan: the person's home is read-only but for the server's
// cwd, its write paths, /tmp and its runtime's caches; Portcullis's
// directories, the session bus's socket and the display are covered; a
// start-up file or PATH directory inside what is writable is read-only
// again; the directories between a writable one and a covered one are
// mount points (no rename); the home itself never becomes writable.
func TestSandboxPlan(t *testing.T) {
	fs := fakeFS{
		"/": true, "/tmp": true, "/tmp/.X11-unix": true, "/home/p": true,
		"/home/p/.bashrc": false, "/home/p/.npm": true, "/home/p/.cache": true,
		"/home/p/.config": true, "/home/p/.config/portcullis": true, "/home/p/.config/portcullis/run": true, "/home/p/.config/fish": true,
		"/home/p/.local/state/portcullis": true, "/home/p/.local/bin": true,
		"/home/p/proj": true, "/home/p/proj/node_modules/.bin": true, "/home/p/data": true,
		"/run/user/1000": true, "/run/user/1000/portcullis": true, "/run/user/1000/bus": false,
		"/run/user/1000/wayland-0": false, "/home/p/.Xauthority": false,
	}
	pl := plan{
		level: SandboxStandard, home: "/home/p", cwd: "/home/p/proj", exe: "/usr/bin/node",
		write: []string{"/home/p/data", "/home/p/.config", "/nonexistent"},
		hide:  []string{"/home/p/.config/portcullis", "/home/p/.config/portcullis/run", "/home/p/.local/state/portcullis", "/run/user/1000/portcullis", "/run/user/1000/bus"},
		env:   []string{"PATH=/home/p/proj/node_modules/.bin:/home/p/.local/bin:/usr/bin", "XDG_RUNTIME_DIR=/run/user/1000", "DISPLAY=:0"},
	}
	args, desc, err := pl.build(fs)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--disable-userns", "--die-with-parent", "--new-session"} {
		if !slices.Contains(args, want) {
			t.Errorf("bwrap's options lack %s: %q", want, args)
		}
	}
	if slices.Contains(args, "--unshare-net") {
		t.Errorf("standard has no network namespace of its own: %q", args)
	}
	want := []string{
		"--ro-bind /", "--dev /dev", "--proc /proc",
		"--bind /home/p/.cache",
		"--bind /home/p/.config",
		"--ro-bind /home/p/.config/fish",
		"--tmpfs /home/p/.config/portcullis", "--remount-ro /home/p/.config/portcullis",
		"--bind /home/p/.npm",
		"--ro-bind /dev/null /home/p/.Xauthority",
		"--bind /home/p/data",
		"--bind /home/p/proj",
		"--bind /home/p/proj/node_modules", // a mount point: not renamed
		"--ro-bind /home/p/proj/node_modules/.bin",
		"--tmpfs /home/p/.local/state/portcullis", "--remount-ro /home/p/.local/state/portcullis",
		"--ro-bind /dev/null /run/user/1000/bus",
		"--tmpfs /run/user/1000/portcullis", "--remount-ro /run/user/1000/portcullis",
		"--ro-bind /dev/null /run/user/1000/wayland-0",
		"--bind /tmp",
		"--tmpfs /tmp/.X11-unix", "--remount-ro /tmp/.X11-unix",
		"--chdir /home/p/proj",
	}
	got := mountsOf(args)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("mounts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Mounts come after the directories they are in.
	order := mountsOf(args)
	pos := func(s string) int { return slices.Index(order, s) }
	if pos("--bind /home/p/proj") > pos("--bind /home/p/proj/node_modules") || pos("--bind /tmp") > pos("--tmpfs /tmp/.X11-unix") || pos("--bind /home/p/.config") > pos("--tmpfs /home/p/.config/portcullis") {
		t.Errorf("a mount precedes the one it is inside:\n%s", strings.Join(order, "\n"))
	}
	if !strings.HasPrefix(desc, "standard: hides /home/p/.config/portcullis, /home/p/.local/state/portcullis, /run/user/1000/portcullis, /run/user/1000/bus; writes /tmp, /home/p/proj, /home/p/data, /home/p/.config, /home/p/.npm, /home/p/.cache") {
		t.Errorf("status says %q", desc)
	}

	// The home itself is never writable; inside what is above it, it is
	// read-only again.
	pl.cwd, pl.write = "/home/p", []string{"/home"}
	fs["/home"] = true
	args, desc, err = pl.build(fs)
	if err != nil {
		t.Fatal(err)
	}
	got = mountsOf(args)
	if slices.Contains(got, "--bind /home/p") || !slices.Contains(got, "--bind /home") || !slices.Contains(got, "--ro-bind /home/p") || !slices.Contains(got, "--ro-bind /home/p/.bashrc") {
		t.Errorf("the home is writable:\n%s", strings.Join(got, "\n"))
	}
	if !strings.Contains(desc, "; read-only /home/p") {
		t.Errorf("status does not say the home stays read-only: %q", desc)
	}

	// strict: no network.
	pl.level = SandboxStrict
	if args, desc, _ = pl.build(fs); !slices.Contains(args, "--unshare-net") || !strings.HasSuffix(desc, "; no network") {
		t.Errorf("strict: %q, %q", args, desc)
	}

	// A working directory or an executable inside a hidden directory.
	pl.cwd = "/home/p/.config/portcullis"
	if _, _, err := pl.build(fs); err == nil || !strings.Contains(err.Error(), "working directory /home/p/.config/portcullis is inside /home/p/.config/portcullis, which the sandbox hides") || !strings.Contains(err.Error(), "--sandbox off") {
		t.Errorf("a hidden cwd: %v", err)
	}
	pl.cwd, pl.exe = "/home/p/proj", "/run/user/1000/portcullis/x"
	if _, _, err := pl.build(fs); err == nil || !strings.Contains(err.Error(), "executable /run/user/1000/portcullis/x is inside") {
		t.Errorf("a hidden executable: %v", err)
	}
}

// TestSandboxPlanHidesADirectoryOnce: a data directory named twice (a
// PORTCULLIS_HOME is the configuration and the state directory) is said
// once in the description that status shows.
func TestSandboxPlanHidesADirectoryOnce(t *testing.T) {
	fs := fakeFS{"/": true, "/tmp": true, "/tmp/home": true, "/tmp/home/run": true, "/home/p": true, "/home/p/proj": true}
	pl := plan{level: SandboxStandard, home: "/home/p", cwd: "/home/p/proj", exe: "/usr/bin/node",
		hide: []string{"/tmp/home", "/tmp/home", "/tmp/home/run"}}
	_, desc, err := pl.build(fs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(desc, "standard: hides /tmp/home; writes") {
		t.Errorf("status says %q, want /tmp/home hidden and said once", desc)
	}
}

// TestSandboxWithoutBwrap: without bwrap in PATH the sandbox is
// unsupported, and the reason names the command that installs it.
func TestSandboxWithoutBwrap(t *testing.T) {
	defer func(saved func() (string, error)) { lookBwrap = saved }(lookBwrap)
	lookBwrap = func() (string, error) { return "", exec.ErrNotFound }
	_, err := NewSandbox("")
	var u *supervisor.UnsupportedError
	if !errors.As(err, &u) || !errors.Is(err, ErrSandboxUnsupported) {
		t.Fatalf("NewSandbox without bwrap: %v, want an UnsupportedError", err)
	}
	if !strings.Contains(u.Reason, "bubblewrap (bwrap)") || !strings.Contains(u.Reason, "install bubblewrap") {
		t.Errorf("the reason does not say what to install: %q", u.Reason)
	}
}

// runBoxed runs sh -c script in a sandbox of level hiding hide and returns
// its stdout and stderr tail.
func runBoxed(t testing.TB, level, script string, hide ...string) (string, []string) {
	t.Helper()
	return runBoxedIn(t, level, "", nil, script, hide...)
}

func runBoxedIn(t testing.TB, level, dir string, env []string, script string, hide ...string) (string, []string) {
	t.Helper()
	sb, err := NewSandbox(level)
	if err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := supervisor.Start(ctx, supervisor.Spec{Label: "boxed", Command: "/bin/sh", Args: []string{"-c", script}, Dir: dir, Env: env, Sandbox: sb, Hide: hide},
		supervisor.Options{NoTree: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	return string(out), p.StderrTail(0)
}

// TestSandboxHides: a hidden directory is empty and cannot be written, a
// hidden file (the session bus's socket) reads empty; the server sees
// no process of the daemon's PID namespace; it holds no capability.
func TestSandboxHides(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("secret config"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "bus")
	if err := os.WriteFile(file, []byte("bus"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr := runBoxed(t, SandboxStandard, `d='`+dir+`'; echo "ls=[$(ls -A "$d")]"; cat "$d/config.json"; echo "bus=[$(cat '`+file+`')]"; touch "$d/x" 2>/dev/null && echo writable
kill -0 `+fmt.Sprint(os.Getpid())+` 2>/dev/null && echo daemon-visible; echo "procs=$(ls /proc | grep -c '^[0-9]')"; grep CapEff /proc/self/status`, dir, file)
	if strings.Contains(out, "secret config") || !strings.Contains(out, "ls=[]") || strings.Contains(out, "writable") || !strings.Contains(out, "bus=[]") {
		t.Errorf("the hidden paths as the server sees them:\n%s\nstderr %q", out, stderr)
	}
	if strings.Contains(out, "daemon-visible") || !strings.Contains(out, "procs=") || strings.Contains(out, "CapEff:\t0000003") {
		t.Errorf("the server sees the daemon's processes or holds capabilities:\n%s", out)
	}
	if n := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "procs=", 2)[1], "\n", 2)[0]); n == "" || len(n) > 1 {
		t.Errorf("the server sees %s processes: not a PID namespace of its own", n)
	}
}

// TestSandboxForAPersonWhoIsNotRoot: as root, bwrap keeps capabilities a
// person who is not root never has; this runs the sandbox as uid 65534: a
// copy of this test binary, as that uid, runs TestSandboxNonRootHelper.
func TestSandboxForAPersonWhoIsNotRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("not root: the other tests run the sandbox as a person who is not root")
	}
	if _, err := NewSandbox(SandboxStandard); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	dir, err := os.MkdirTemp("", "portcullis-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "platform.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	hidden := filepath.Join(dir, "hidden")
	if err := os.Mkdir(hidden, 0o755); err != nil {
		t.Fatal(err)
	}
	// Readable by uid 65534 where nothing hides it.
	if err := os.WriteFile(filepath.Join(hidden, "secret"), []byte("secret config"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^TestSandboxNonRootHelper$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), testHiddenEnv+"="+hidden, "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSandboxNonRootHelper") {
		t.Errorf("the sandbox as uid 65534: %v\n%s", err, out)
	}
}

const testHiddenEnv = "PORTCULLIS_TEST_SANDBOX_HIDDEN"

// TestSandboxNonRootHelper is TestSandboxForAPersonWhoIsNotRoot's run as
// another uid; it does nothing on its own.
func TestSandboxNonRootHelper(t *testing.T) {
	hidden := os.Getenv(testHiddenEnv)
	if hidden == "" {
		t.Skip("run by TestSandboxForAPersonWhoIsNotRoot")
	}
	if _, err := NewSandbox(SandboxStandard); err != nil {
		t.Fatalf("as uid %d: %v", os.Getuid(), err)
	}
	out, stderr := runBoxed(t, SandboxStandard, `echo "ls=[$(ls -A '`+hidden+`')]"; echo "uid $(id -u)"; grep CapEff /proc/self/status`, hidden)
	if !strings.Contains(out, "ls=[]") {
		t.Errorf("the hidden directory as uid %d's server sees it:\n%s\nstderr %q", os.Getuid(), out, stderr)
	}
	if want := fmt.Sprintf("uid %d\n", os.Getuid()); !strings.Contains(out, want) {
		t.Errorf("uid %d's server runs as another uid:\n%s\nstderr %q", os.Getuid(), out, stderr)
	}
	if !strings.Contains(out, "CapEff:\t0000000000000000") {
		t.Errorf("uid %d's server holds capabilities:\n%s", os.Getuid(), out)
	}
	checkFindsTheServer(t)
}

// checkFindsTheServer: below bubblewrap's monitor and init, the supervisor
// finds the server's own process (its pid, its executable, its epoch's
// mark), and Stop ends the whole sandbox.
func checkFindsTheServer(t *testing.T) {
	t.Helper()
	sb, err := NewSandbox(SandboxStandard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep here")
	}
	p, err := supervisor.Start(ctx, supervisor.Spec{Label: "boxed", Command: sleep, Args: []string{"300"}, Sandbox: sb}, supervisor.Options{NoTree: true})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(sleep)
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid()))
	if err != nil || exe != want {
		t.Errorf("uid %d: the supervisor's server process %d runs %q (%v), want %s", os.Getuid(), p.Pid(), exe, err, want)
	}
	// Right after the exec the kernel may still show the environment being
	// set up (an empty read): look again, briefly.
	var env []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		env, err = os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.Pid()))
		if (err == nil && strings.Contains(string(env), supervisor.EpochEnv+"="+string(p.Epoch()))) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || !strings.Contains(string(env), supervisor.EpochEnv+"="+string(p.Epoch())) {
		t.Errorf("uid %d: the server's environment cannot be read or lacks its epoch's mark (%v; %d bytes)", os.Getuid(), err, len(env))
	}
	pid := p.Pid()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("uid %d: the server %d outlived Stop (%v)", os.Getuid(), pid, err)
	}

	// A child that leaves the server's session and clears its
	// environment (no epoch mark), with no cgroup: the PID namespace ends
	// it with the sandbox.
	secs := fmt.Sprintf("5%06d", os.Getpid()%1000000)
	p, err = supervisor.Start(ctx, supervisor.Spec{Label: "boxed", Command: "/bin/sh",
		Args: []string{"-c", "setsid env -i " + sleep + " " + secs + " </dev/null >/dev/null 2>&1 & exec " + sleep + " 300"}, Sandbox: sb},
		supervisor.Options{NoTree: true, StopGrace: time.Millisecond, KillGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	escaped := func() []int {
		var out []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err == nil && strings.HasSuffix(string(b), "\x00"+secs+"\x00") {
				if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && !strings.Contains(string(st[strings.LastIndexByte(string(st), ')'):]), ") Z") {
					n, _ := strconv.Atoi(e.Name())
					out = append(out, n)
				}
			}
		}
		return out
	}
	// Keep what the wait saw: a second look may fall between two of the
	// child's execs (setsid, env, sleep) and find no process yet.
	var seen []int
	for deadline := time.Now().Add(10 * time.Second); len(seen) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		seen = escaped()
	}
	if len(seen) == 0 {
		t.Fatalf("uid %d: the setsid child never ran", os.Getuid())
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(escaped()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if left := escaped(); len(left) > 0 {
		t.Errorf("uid %d: the setsid child %v outlived Stop", os.Getuid(), left)
	}
}

// TestSandboxFindsTheServer is checkFindsTheServer as this test's uid.
func TestSandboxFindsTheServer(t *testing.T) {
	if _, err := NewSandbox(SandboxStandard); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	checkFindsTheServer(t)
}

func TestSandboxStrictHasNoNetwork(t *testing.T) {
	out, _ := runBoxed(t, SandboxStrict, `tail -n +3 /proc/self/net/dev | cut -d: -f1 | tr -d ' '`)
	if strings.TrimSpace(out) != "lo" {
		t.Errorf("network interfaces in a strict sandbox: %q, want only lo", out)
	}
}

// BenchmarkServerStart measures the start-up cost of the sandbox: the time
// from Start to the end of a server that exits at once (/bin/true), with
// and without it, and the CPU time of the processes it took (bwrap's, then
// /bin/true), which load on the machine inflates less than the wall time.
func BenchmarkServerStart(b *testing.B) {
	hide := []string{b.TempDir(), b.TempDir()}
	for _, level := range []string{"off", SandboxStandard, SandboxStrict} {
		b.Run("sandbox="+level, func(b *testing.B) {
			var sb supervisor.Sandbox
			if level != "off" {
				var err error
				if sb, err = NewSandbox(level); err != nil {
					b.Skipf("no sandbox here: %v", err)
				}
			}
			ctx := context.Background()
			before, self := childCPU(b), selfCPU(b)
			for b.Loop() {
				p, err := supervisor.Start(ctx, supervisor.Spec{Label: "true", Command: "/bin/true", Sandbox: sb, Hide: hide}, supervisor.Options{NoTree: true})
				if err != nil {
					b.Fatal(err)
				}
				<-p.Done()
				if err := p.Stop(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(childCPU(b)-before)/float64(time.Millisecond)/float64(b.N), "child-cpu-ms/op")
			b.ReportMetric(float64(selfCPU(b)-self)/float64(time.Millisecond)/float64(b.N), "self-cpu-ms/op")
		})
	}
}

// selfCPU returns the user and system time of this process, the daemon's
// side of a start.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childCPU returns the user and system time of the reaped descendants of
// this process: bwrap's monitor, its init and the server.
func childCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
