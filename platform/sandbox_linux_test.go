//go:build linux

package platform

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/supervisor"
)

// TestMain lets this test binary be a sandbox's launcher, as the
// portcullis executable is (main calls RunSandboxIfAsked).
func TestMain(m *testing.M) {
	RunSandboxIfAsked()
	os.Exit(m.Run())
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
// and without it.
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
		})
	}
}
