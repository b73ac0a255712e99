//go:build linux

package platform

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/supervisor"
	"github.com/portcullis/portcullis/internal/harness"
	"github.com/portcullis/portcullis/internal/sandboxlaunch"
)

// TestMain builds the sandbox's launcher (cmd/portcullis-sandbox) and
// points the sandbox at it, as it would be found beside the portcullis
// executable; and the launcher without its entry point (noEntryLauncher),
// which the daemon clones into the namespaces instead.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if l := os.Getenv(testLauncherEnv); l != "" {
		// TestSandboxForAPersonWhoIsNotRoot's helper run: the launcher is built.
		besideExecutable = sandboxLauncher
		sandboxLauncher = func() (string, error) { return l, nil }
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "portcullis-platform-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := harness.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	launcher, err := harness.BuildSandboxLauncher(ctx, root, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if noEntryLauncher, err = harness.BuildSandboxLauncherWithoutEntry(ctx, root, filepath.Join(dir, "noentry")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	besideExecutable = sandboxLauncher
	sandboxLauncher = func() (string, error) { return launcher, nil }
	return m.Run()
}

// testLauncherEnv names the built launcher for a helper run of this test
// binary (TestSandboxForAPersonWhoIsNotRoot), which then builds none;
// testHiddenEnv the directory that run hides.
const (
	testLauncherEnv = "PORTCULLIS_TEST_SANDBOX_LAUNCHER"
	testHiddenEnv   = "PORTCULLIS_TEST_SANDBOX_HIDDEN"
	testCapEnv      = "PORTCULLIS_TEST_SANDBOX_CAPCAT"
)

// setFileCapability gives the file at path capability c, permitted and
// effective, as setcap does (the security.capability attribute, revision 2).
func setFileCapability(path string, c uint) error {
	var v [20]byte
	binary.LittleEndian.PutUint32(v[0:], 0x02000000|0x1) // VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE
	binary.LittleEndian.PutUint32(v[4:], 1<<c)           // permitted, capabilities 0–31
	return syscall.Setxattr(path, "security.capability", v[:], 0)
}

// besideExecutable is the launcher's look-up of the real portcullis
// executable.
var besideExecutable func() (string, error)

// noEntryLauncher is the launcher as a plain go build links it, without
// the entry point that makes its own namespaces.
var noEntryLauncher string

// bothLaunchers runs f as a subtest with the launcher built as make builds
// it ("entry") and with the one built without its entry point
// ("no-entry"), each as the launcher found beside the executable.
func bothLaunchers(t *testing.T, f func(t *testing.T)) {
	built, err := sandboxLauncher()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, launcher string }{{"entry", built}, {"no-entry", noEntryLauncher}} {
		t.Run(c.name, func(t *testing.T) {
			if c.launcher == "" {
				t.Skip("no such launcher in this run")
			}
			defer func(saved func() (string, error)) { sandboxLauncher = saved }(sandboxLauncher)
			sandboxLauncher = func() (string, error) { return c.launcher, nil }
			f(t)
		})
	}
}

// TestSandboxLauncherUnshares: the launcher that make builds makes its own
// namespaces where its entry point exists (linux/amd64), so the daemon
// starts it with vfork; one built without the entry point still confines,
// cloned into the namespaces by the daemon.
func TestSandboxLauncherUnshares(t *testing.T) {
	sb, err := NewSandbox(SandboxStandard)
	if err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	if got, want := sb.(*linuxSandbox).unshares, runtime.GOARCH == "amd64"; got != want {
		t.Errorf("the launcher built with its entry point on %s makes its own namespaces: %v, want %v", runtime.GOARCH, got, want)
	}
	bothLaunchers(t, func(t *testing.T) {
		sb, err := NewSandbox(SandboxStandard)
		if err != nil {
			t.Fatal(err)
		}
		if l, _ := sandboxLauncher(); l == noEntryLauncher && sb.(*linuxSandbox).unshares {
			t.Error("a launcher without its entry point was trusted to make its own namespaces")
		}
		// The person's own ids, mapped onto themselves: files keep their
		// owners and the server its uid.
		out, stderr := runBoxed(t, SandboxStandard, `cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups; id -u; id -g`)
		uid, gid := strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getgid())
		if f := strings.Fields(out); len(f) != 9 || f[0] != uid || f[1] != uid || f[2] != "1" || f[3] != gid || f[4] != gid || f[5] != "1" || f[6] != "deny" || f[7] != uid || f[8] != gid {
			t.Errorf("the sandbox's id maps, setgroups, id -u and id -g: %q, want uid %s and gid %s each mapped onto itself, setgroups denied\nstderr %q", out, uid, gid, stderr)
		}
	})
}

// TestSandboxLauncherMissing: without portcullis-sandbox beside the
// executable (this test binary's directory has none), the error names it,
// where it was looked for, and the two ways out.
func TestSandboxLauncherMissing(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, err = besideExecutable()
	want := "sandbox launcher portcullis-sandbox not found beside " + exe + "; reinstall Portcullis"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--sandbox off") {
		t.Errorf("the launcher's look-up: %v, want an error saying %q and --sandbox off", err, want)
	}
}

// TestSandboxRefusesACwdItHides: a server whose working directory lies in
// a hidden directory would still reach it through its cwd; the launcher
// refuses, saying what to change, and the server does not run.
func TestSandboxRefusesACwdItHides(t *testing.T) {
	bothLaunchers(t, testSandboxRefusesACwdItHides)
}

func testSandboxRefusesACwdItHides(t *testing.T) {
	dir := t.TempDir()
	cwd := filepath.Join(dir, "work")
	if err := os.Mkdir(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("secret config"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, tail, exit := runSpec(t, supervisor.Spec{Command: "/bin/sh", Args: []string{"-c", "echo ran; cat ../secret"}, Dir: cwd, Hide: []string{dir}})
	if len(out) != 0 || exit.Code != 126 || !strings.Contains(tail, "working directory "+cwd+" is inside "+dir+", which the sandbox hides") {
		t.Errorf("a cwd inside a hidden directory: stdout %q, exit %v, stderr %q", out, exit, tail)
	}
}

// TestSandboxRefusesACwdBehindALink: a hidden directory named through a
// symbolic link (a linked ~/.local, say) is the directory it leads to; a
// working directory inside that one, as the kernel reports it, is inside
// the hidden directory and refused.
func TestSandboxRefusesACwdBehindALink(t *testing.T) {
	bothLaunchers(t, func(t *testing.T) {
		root := t.TempDir()
		real := filepath.Join(root, "real")
		cwd := filepath.Join(real, "work")
		if err := os.MkdirAll(cwd, 0o700); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(root, "link")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		// $PWD names the working directory through the link, as the
		// server's environment may: the launcher asks the kernel instead.
		linked := filepath.Join(link, "work")
		out, tail, exit := runSpec(t, supervisor.Spec{Command: "/bin/sh", Args: []string{"-c", "echo ran"}, Dir: linked, Env: []string{"PWD=" + linked}, Hide: []string{link}})
		if len(out) != 0 || exit.Code != 126 || !strings.Contains(tail, "working directory "+cwd+" is inside "+real+", which the sandbox hides") {
			t.Errorf("a cwd inside a hidden directory named through a link: stdout %q, exit %v, stderr %q", out, exit, tail)
		}
	})
}

// TestSandboxLauncherRefusesUncleanPaths: the daemon passes hidden paths
// clean, but the launcher does not rely on it. Its entry point compares
// paths byte by byte, so it gives way on a path in any other form, and the
// Go code, which cleans them, refuses a working directory inside one.
func TestSandboxLauncherRefusesUncleanPaths(t *testing.T) {
	if _, err := NewSandbox(SandboxStandard); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	launcher, err := sandboxLauncher()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cwd := filepath.Join(dir, "sec", "sub")
	if err := os.MkdirAll(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, hidden := range []string{dir + "/sec/", dir + "//sec", dir + "/./sec", dir + "/x/../sec"} {
		cmd := exec.Command(launcher, sandboxlaunch.UnshareArg, "1", hidden, "/bin/sh", "sh", "-c", "echo ran")
		cmd.Dir = cwd
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != sandboxlaunch.ExitRefused || !strings.Contains(string(out), "working directory "+cwd+" is inside") {
			t.Errorf("hiding %q with the working directory inside it: %v\n%s", hidden, err, out)
		}
	}
}

// TestSandboxRefusesAnExecutableItHides: a server whose executable lies
// inside a hidden directory is refused before anything is covered (the
// entry point's fast path gives way to the Go code, which says why).
func TestSandboxRefusesAnExecutableItHides(t *testing.T) {
	bothLaunchers(t, func(t *testing.T) {
		dir := t.TempDir()
		exe := filepath.Join(dir, "server")
		if err := os.WriteFile(exe, []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		out, tail, exit := runExe(t, exe, dir)
		if len(out) != 0 || exit.Code != 126 || !strings.Contains(tail, "executable "+exe+" is inside "+dir+", which the sandbox hides") {
			t.Errorf("an executable inside a hidden directory: stdout %q, exit %v, stderr %q", out, exit, tail)
		}
	})
}

// TestSandboxReportsAFailedExec: once everything is covered and the
// capabilities are dropped, the server's own execve may still fail (here a
// file marked executable that is no program); the launcher says so with
// the kernel's error, and nothing ran.
func TestSandboxReportsAFailedExec(t *testing.T) {
	bothLaunchers(t, func(t *testing.T) {
		exe := filepath.Join(t.TempDir(), "server")
		if err := os.WriteFile(exe, []byte{0, 1, 2, 3, 'n', 'o', 't', ' ', 'a', ' ', 'p', 'r', 'o', 'g', 'r', 'a', 'm'}, 0o755); err != nil {
			t.Fatal(err)
		}
		out, tail, exit := runExe(t, exe, t.TempDir())
		if len(out) != 0 || exit.Code != 126 || !strings.Contains(tail, "starting the server "+exe+": exec format error") {
			t.Errorf("a server that is no program: stdout %q, exit %v, stderr %q", out, exit, tail)
		}
	})
}

// runExe starts exe in the standard sandbox hiding hide and returns its
// stdout, its stderr tail and how it ended.
func runExe(t *testing.T, exe string, hide ...string) ([]byte, string, supervisor.ExitInfo) {
	t.Helper()
	return runSpec(t, supervisor.Spec{Command: exe, Dir: t.TempDir(), Hide: hide})
}

// runSpec starts spec in the standard sandbox and returns its stdout, its
// stderr tail and how it ended.
func runSpec(t *testing.T, spec supervisor.Spec) ([]byte, string, supervisor.ExitInfo) {
	t.Helper()
	sb, err := NewSandbox(SandboxStandard)
	if err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	spec.Label, spec.Sandbox = "boxed", sb
	p, err := supervisor.Start(ctx, spec, supervisor.Options{NoTree: true})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p.Stdout())
	<-p.Done()
	_ = p.Stop(ctx)
	return out, strings.Join(p.StderrTail(0), "\n"), p.Exit()
}

// runBoxed runs sh -c script in a sandbox of level hiding hide and returns
// its stdout and stderr tail.
func runBoxed(t testing.TB, level, script string, hide ...string) (string, []string) {
	t.Helper()
	sb, err := NewSandbox(level)
	if err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := supervisor.Start(ctx, supervisor.Spec{Label: "boxed", Command: "/bin/sh", Args: []string{"-c", script}, Sandbox: sb, Hide: hide},
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

func TestSandboxHides(t *testing.T) { bothLaunchers(t, testSandboxHides) }

func testSandboxHides(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("secret config"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "bus")
	if err := os.WriteFile(file, []byte("bus"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr := runBoxed(t, SandboxStandard, `d='`+dir+`'; ls -A "$d"; cat "$d/config.json"; cat "$d/`+HiddenNote+`"; echo "bus=[$(cat '`+file+`')]"; touch "$d/x" 2>/dev/null && echo writable`, dir, file)
	if strings.Contains(out, "secret config") || !strings.Contains(out, HiddenNote+"\n") || !strings.Contains(out, dir+" is hidden from this MCP server") {
		t.Errorf("the hidden directory, as the server sees it:\n%s\nstderr %q", out, stderr)
	}
	if !strings.Contains(out, "bus=[]") || strings.Contains(out, "writable") {
		t.Errorf("a hidden file reads %q; the hidden directory writable: %v", out, strings.Contains(out, "writable"))
	}
	// The host's view is untouched.
	if b, err := os.ReadFile(filepath.Join(dir, "config.json")); err != nil || string(b) != "secret config" {
		t.Errorf("the directory outside the sandbox: %q, %v", b, err)
	}
}

// uncoverScript tries what a server could do to read a hidden directory d
// anyway: unmount its cover (and the cover's cover), then read d/secret;
// it prints the server's effective capabilities.
func uncoverScript(d string) string {
	return `d='` + d + `'; umount "$d" 2>/dev/null; umount -l "$d" 2>/dev/null; cat "$d/secret" 2>/dev/null; grep CapEff /proc/self/status`
}

// checkCovered fails unless out (of uncoverScript) shows no secret and no
// capability left to the server.
func checkCovered(t *testing.T, out string, stderr []string) {
	t.Helper()
	if strings.Contains(out, "secret config") {
		t.Errorf("the server unmounted the cover and read the hidden directory:\n%s\nstderr %q", out, stderr)
	}
	if !strings.Contains(out, "CapEff:\t0000000000000000") {
		t.Errorf("the server kept capabilities in its user namespace (it may unmount what hides):\n%s\nstderr %q", out, stderr)
	}
}

// TestSandboxServerCannotUncover: the launcher needs CAP_SYS_ADMIN of the
// sandbox's user namespace to mount; the server it execs has none left, so
// it cannot unmount the tmpfs over a hidden directory (as the person who
// runs this test, root here: execve keeps uid 0's capabilities unless the
// bounding set is emptied).
func TestSandboxServerCannotUncover(t *testing.T) {
	bothLaunchers(t, testSandboxServerCannotUncover)
}

func testSandboxServerCannotUncover(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("secret config"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr := runBoxed(t, SandboxStandard, uncoverScript(dir), dir)
	checkCovered(t, out, stderr)
}

// TestSandboxForAPersonWhoIsNotRoot: run as root, the tests above do not
// see that execve drops the capabilities of any other uid, the launcher's
// mounts with them (the sandbox was then unavailable to every person but
// root). This runs the sandbox as uid 65534: a copy of this test binary,
// as that uid, runs TestSandboxNonRootHelper.
func TestSandboxForAPersonWhoIsNotRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("not root: the other tests run the sandbox as a person who is not root")
	}
	bothLaunchers(t, testSandboxForAPersonWhoIsNotRoot)
}

func testSandboxForAPersonWhoIsNotRoot(t *testing.T) {
	if _, err := NewSandbox(SandboxStandard); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	launcher, err := sandboxLauncher()
	if err != nil {
		t.Fatal(err)
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
	bin, boxer := filepath.Join(dir, "platform.test"), filepath.Join(dir, "portcullis-sandbox")
	for src, dst := range map[string]string{self: bin, launcher: boxer} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
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
	// A program that root gave a file capability (setcap cap_sys_admin+ep):
	// run by the server, it must gain nothing inside the sandbox.
	capcat := filepath.Join(dir, "capcat")
	if b, err := os.ReadFile("/bin/cat"); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(capcat, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := setFileCapability(capcat, 21); err != nil { // CAP_SYS_ADMIN
		t.Skipf("cannot give a file a capability here: %v", err)
	}
	cmd.Env = append(os.Environ(), testLauncherEnv+"="+boxer, testHiddenEnv+"="+hidden, testCapEnv+"="+capcat, "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSandboxNonRootHelper") {
		t.Errorf("the sandbox as uid 65534: %v\n%s", err, out)
	}
}

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
	capcat := os.Getenv(testCapEnv)
	out, stderr := runBoxed(t, SandboxStandard, `ls -A '`+hidden+`'; `+uncoverScript(hidden)+`; echo "uid $(id -u)"; '`+capcat+`' /proc/self/status | sed -n 's/^CapEff:/file-capability CapEff:/p'`, hidden)
	if !strings.Contains(out, "file-capability CapEff:\t0000000000000000") {
		t.Errorf("a program with a file capability, run by uid %d's server, gained it:\n%s\nstderr %q", os.Getuid(), out, stderr)
	}
	if !strings.Contains(out, HiddenNote) {
		t.Errorf("the hidden directory as uid %d's server sees it:\n%s\nstderr %q", os.Getuid(), out, stderr)
	}
	if want := fmt.Sprintf("uid %d\n", os.Getuid()); !strings.Contains(out, want) {
		t.Errorf("uid %d's server runs as another uid:\n%s\nstderr %q", os.Getuid(), out, stderr)
	}
	checkCovered(t, out, stderr)
}

// TestSandboxExecPipeNotInherited: the pipe whose end tells the daemon
// that the launcher exec'd the server (supervisor.ExecSignaler) is the
// launcher's alone: the server holds no descriptor but its stdio.
func TestSandboxExecPipeNotInherited(t *testing.T) {
	bothLaunchers(t, testSandboxExecPipeNotInherited)
}

func testSandboxExecPipeNotInherited(t *testing.T) {
	out, stderr := runBoxed(t, SandboxStandard, `for fd in 3 4 5 6; do [ -e /proc/$$/fd/$fd ] && echo "fd $fd open: $(readlink /proc/$$/fd/$fd)"; done; echo checked`)
	if strings.TrimSpace(out) != "checked" {
		t.Errorf("the server inherited descriptors beyond its stdio:\n%s\nstderr %q", out, stderr)
	}
}

func TestSandboxStrictHasNoNetwork(t *testing.T) {
	bothLaunchers(t, testSandboxStrictHasNoNetwork)
}

func testSandboxStrictHasNoNetwork(t *testing.T) {
	out, _ := runBoxed(t, SandboxStrict, `tail -n +3 /proc/self/net/dev | cut -d: -f1 | tr -d ' '`)
	if strings.TrimSpace(out) != "lo" {
		t.Errorf("network interfaces in a strict sandbox: %q, want only lo", out)
	}
}

// BenchmarkServerStart measures the start-up cost of the sandbox: the time
// from Start to the end of a server that exits at once (/bin/true), with
// and without it, and the CPU time of that process (the launcher, then
// /bin/true), which load on the machine inflates less than the wall time.
// "standard-cloned" is standard with the launcher built without its entry
// point, which the daemon clones into the namespaces (a full fork).
func BenchmarkServerStart(b *testing.B) {
	hide := []string{b.TempDir(), b.TempDir()}
	built, err := sandboxLauncher()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, level, launcher string }{
		{"off", "off", ""},
		{SandboxStandard, SandboxStandard, built},
		{SandboxStrict, SandboxStrict, built},
		{"standard-cloned", SandboxStandard, noEntryLauncher},
	} {
		b.Run("sandbox="+c.name, func(b *testing.B) {
			var sb supervisor.Sandbox
			if c.level != "off" {
				defer func(saved func() (string, error)) { sandboxLauncher = saved }(sandboxLauncher)
				sandboxLauncher = func() (string, error) { return c.launcher, nil }
				var err error
				if sb, err = NewSandbox(c.level); err != nil {
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
// side of a start: the clone (a full fork when it clones the launcher into
// a user namespace, and then the uid and gid maps), the wait for the
// launcher's exec.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childCPU returns the user and system time of the reaped children of this
// process: the launcher and the server it became are one process.
func childCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
