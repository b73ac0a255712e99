//go:build linux

package platform

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/supervisor"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestMain builds the sandbox's launcher (cmd/portcullis-sandbox) and
// points the sandbox at it, as it would be found beside the portcullis
// executable.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
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
	besideExecutable = sandboxLauncher
	sandboxLauncher = func() (string, error) { return launcher, nil }
	return m.Run()
}

// besideExecutable is the launcher's look-up of the real portcullis
// executable.
var besideExecutable func() (string, error)

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
	dir := t.TempDir()
	cwd := filepath.Join(dir, "work")
	if err := os.Mkdir(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("secret config"), 0o600); err != nil {
		t.Fatal(err)
	}
	sb, err := NewSandbox(SandboxStandard)
	if err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := supervisor.Start(ctx, supervisor.Spec{Label: "boxed", Command: "/bin/sh", Args: []string{"-c", "echo ran; cat ../secret"}, Dir: cwd, Sandbox: sb, Hide: []string{dir}},
		supervisor.Options{TreePoll: -1})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p.Stdout())
	<-p.Done()
	_ = p.Stop(ctx)
	tail := strings.Join(p.StderrTail(0), "\n")
	if len(out) != 0 || p.Exit().Code != 126 || !strings.Contains(tail, "working directory "+cwd+" is inside "+dir+", which the sandbox hides") {
		t.Errorf("a cwd inside a hidden directory: stdout %q, exit %v, stderr %q", out, p.Exit(), tail)
	}
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
		supervisor.Options{TreePoll: -1})
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

func TestSandboxHides(t *testing.T) {
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

func TestSandboxStrictHasNoNetwork(t *testing.T) {
	out, _ := runBoxed(t, SandboxStrict, `tail -n +3 /proc/self/net/dev | cut -d: -f1 | tr -d ' '`)
	if strings.TrimSpace(out) != "lo" {
		t.Errorf("network interfaces in a strict sandbox: %q, want only lo", out)
	}
}

// BenchmarkServerStart measures the start-up cost of the sandbox: the time
// from Start to the end of a server that exits at once (/bin/true), with
// and without it, and the CPU time of that process (the launcher, then
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
			before := childCPU(b)
			for b.Loop() {
				p, err := supervisor.Start(ctx, supervisor.Spec{Label: "true", Command: "/bin/true", Sandbox: sb, Hide: hide}, supervisor.Options{TreePoll: -1})
				if err != nil {
					b.Fatal(err)
				}
				<-p.Done()
				if err := p.Stop(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(childCPU(b)-before)/float64(time.Millisecond)/float64(b.N), "child-cpu-ms/op")
		})
	}
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
