//go:build linux

package platform

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/supervisor"
)

// The main goroutine stays on the process's main thread, so that a test can
// start a server from that thread (onMainThread), as any goroutine of the
// daemon may happen to.
func init() { runtime.LockOSThread() }

// mainThread runs the functions sent to it on the main thread (TestMain).
var mainThread = make(chan func())

func TestMain(m *testing.M) {
	code := make(chan int, 1)
	go func() { code <- m.Run() }()
	for {
		select {
		case f := <-mainThread:
			f()
		case c := <-code:
			os.Exit(c)
		}
	}
}

// onMainThread runs f on the process's main thread and waits for it.
func onMainThread(f func()) {
	done := make(chan struct{})
	mainThread <- func() { defer close(done); f() }
	<-done
}

// TestSandboxedEpochRecordsOnlyTheServer: what a sandboxed server's epoch
// records as running is the server's tree, never bubblewrap's monitor and
// init above it, whichever thread of the supervisor started it: on Linux a
// child started from the main thread is listed among that thread's
// children, where the tree scan looks for orphans, and both bwrap
// processes carry the epoch's mark. Two runs of one server would otherwise
// record different processes for the same code, and a rebuild would show
// bwrap as new code on one run's card and not on the other's. The server
// then answers once and is armed: the processes of the epoch looked for
// outside its tree are its own (none here), not the sandbox's, so a later
// epoch observed in the running tree records the server's processes only
// too.
func TestSandboxedEpochRecordsOnlyTheServer(t *testing.T) {
	sb, err := NewSandbox(SandboxStandard)
	if err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("no bwrap here")
	}
	bwrap, _ = filepath.EvalSymlinks(bwrap)
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	// A server of the person's code: a copy of sh that answers a line,
	// then at the next one execs another copy (a new epoch), which answers.
	dir := t.TempDir()
	shell, err := os.ReadFile(sh)
	if err != nil {
		t.Fatal(err)
	}
	first, second := filepath.Join(dir, "server"), filepath.Join(dir, "server2")
	for i, p := range []string{first, second} {
		// Two files with different digests: the second has a byte more.
		if err := os.WriteFile(p, append(shell, make([]byte, i)...), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// check: obs is the server's tree, every process of it running want
	// (the file the server runs at that point), and nothing else.
	check := func(what, want string, obs []identity.Observed) {
		t.Helper()
		if len(obs) == 0 {
			t.Errorf("%s: no process recorded", what)
		}
		for _, o := range obs {
			switch o.Exe {
			case want:
			case bwrap:
				t.Errorf("%s: the epoch records bubblewrap's process %d (%s) as running the server's code; recorded: %+v", what, o.PID, o.Exe, obs)
			default:
				t.Errorf("%s: the epoch records process %d running %s, want only %s; recorded: %+v", what, o.PID, o.Exe, want, obs)
			}
		}
	}
	// On a kernel without Landlock scopes (before 6.12) bwrap is started
	// from the calling thread; with them, from one thread kept for that.
	abi := landlockABI
	defer func() { landlockABI = abi }()
	for i := range 8 {
		if i >= 4 {
			landlockABI = func() int { return 0 }
		}
		var p *supervisor.Process
		var err error
		launch := func() {
			p, err = supervisor.Start(ctx, supervisor.Spec{Label: "boxed", Command: first,
				Args: []string{"-c", `read l; echo answered; read l; exec ` + second + ` -c 'echo again; read l'`}, Dir: dir, Sandbox: sb},
				supervisor.Options{})
		}
		from := "a goroutine"
		if i%2 == 0 {
			from = "the main thread"
			onMainThread(launch)
		} else {
			launch()
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop(context.Background()) })
		what := fmt.Sprintf("start %d, from %s, Landlock ABI %d", i, from, landlockABI())
		settled, err := p.Settled(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(what+", settled", first, settled)
		if _, err := p.Stdin().Write([]byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if n, err := p.Stdout().Read(buf); err != nil || string(buf[:n]) != "answered\n" {
			t.Fatalf("%s: the server answered %q, %v", what, buf[:n], err)
		}
		p.Arm()
		ident, err := p.Identity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(what+", identified", first, ident)
		if _, err := p.Stdin().Write([]byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		// The stdout reader names the writer of the answer and delivers
		// the new epoch (buffered) before returning it.
		if n, err := p.Stdout().Read(buf); err != nil || string(buf[:n]) != "again\n" {
			t.Fatalf("%s: the new code answered %q, %v", what, buf[:n], err)
		}
		var ch supervisor.TreeChange
		select {
		case ch = <-p.Changes():
			ch.Ack()
		case <-ctx.Done():
			t.Fatalf("%s: the exec of new code was never observed", what)
		}
		check(what+", the epoch observed after the exec", second, ch.New)
		if err := p.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
