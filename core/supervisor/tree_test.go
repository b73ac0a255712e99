//go:build linux

package supervisor_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/supervisor"
)

// realPython returns the path of the Python interpreter itself (not a
// version manager's shim), symlinks resolved, or skips.
func realPython(t testing.TB) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	out, err := exec.Command(py, "-c", "import os, sys; print(os.path.realpath(sys.executable))").Output()
	if err != nil {
		t.Skipf("python3: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// worker is a Python worker that prints "ready PID", then reads commands
// from stdin: "restart" exits (a watcher loop starts the next one), "exec"
// execs sleep in place.
const worker = `import os, sys
print("ready", os.getpid(), flush=True)
for line in sys.stdin:
    if line.strip() == "restart":
        sys.exit(0)
    if line.strip() == "exec":
        os.execv("/bin/sleep", ["sleep", "600"])
    if line.startswith("reexec "):
        os.execv(sys.executable, [sys.executable, line.split()[1]])
`

func writeFile(p, content string) error { return os.WriteFile(p, []byte(content), 0o644) }

func writeWorker(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "worker.py")
	if err := writeFile(p, worker); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

func readyPID(t *testing.T, r *bufio.Reader) int {
	t.Helper()
	f := strings.Fields(readLine(t, r))
	if len(f) != 2 || f[0] != "ready" {
		t.Fatalf("worker said %q, want ready PID", f)
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// arm tells p that it answered and waits for the read of its tree after
// that answer, which ends the launch: from then on a change is a new epoch.
func arm(t *testing.T, p *supervisor.Process) {
	t.Helper()
	p.Arm()
	if _, err := p.Identity(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func find(obs []identity.Observed, pid int) (identity.Observed, bool) {
	for _, o := range obs {
		if o.PID == pid {
			return o, true
		}
	}
	return identity.Observed{}, false
}

// A launcher that execs is observed as its final program: env, "sh -c
// 'exec …'", and a shell that execs env that execs Python.
func TestSettledAfterLauncherExec(t *testing.T) {
	py := realPython(t)
	script := writeWorker(t)
	wantSum, err := identity.NewMeasurer(nil).DigestFile(script)
	if err != nil {
		t.Fatal(err)
	}
	pySum, err := identity.NewMeasurer(nil).DigestFile(py)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		command string
		args    []string
	}{
		{"env", "/usr/bin/env", []string{py, script}},
		{"sh -c exec", "/bin/sh", []string{"-c", "exec " + py + " " + script}},
		{"sh -c exec env", "/bin/sh", []string{"-c", "exec /usr/bin/env " + py + " " + script}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, supervisor.Spec{Label: "exec", Command: tc.command, Args: tc.args}, fast)
			r := bufio.NewReader(p.Stdout())
			if pid := readyPID(t, r); pid != p.Pid() {
				t.Fatalf("worker pid %d, want the launched pid %d (an exec)", pid, p.Pid())
			}
			obs, err := p.Settled(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(obs) != 1 {
				t.Fatalf("observed %d processes, want 1: %+v", len(obs), obs)
			}
			o := obs[0]
			if o.PID != p.Pid() || o.Exe != py || o.SHA256 != pySum || o.Script != script || o.ScriptSHA256 != wantSum {
				t.Errorf("observed %+v, want pid %d running %s (%s) with script %s (%s)", o, p.Pid(), py, pySum, script, wantSum)
			}
			if o.StartTime == 0 {
				t.Error("no start time")
			}
			if ch, err := p.CheckTree(testCtx(t)); err != nil || ch != nil {
				t.Errorf("CheckTree on a settled tree = %+v, %v; want nil", ch, err)
			}
			if p.CurrentEpoch() != p.Epoch() {
				t.Errorf("CurrentEpoch %s, want the launch epoch %s", p.CurrentEpoch(), p.Epoch())
			}
		})
	}
}

// A shell loop that swaps its worker behind the same pipe is a new epoch,
// seen without anyone asking: when the worker that answered exits, or at
// the latest when the new one writes.
func TestWatcherSeesSwappedWorker(t *testing.T) {
	py := realPython(t)
	script := writeWorker(t)
	p := start(t, supervisor.Spec{Label: "loop", Command: "/bin/sh",
		Args: []string{"-c", "while :; do " + py + " " + script + "; done"}}, fast)
	r := bufio.NewReader(p.Stdout())
	first := readyPID(t, r)
	obs, err := p.Settled(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	arm(t, p)
	if _, ok := find(obs, first); !ok {
		t.Fatalf("the first worker %d is not observed: %+v", first, obs)
	}
	if _, err := p.Stdin().Write([]byte("restart\n")); err != nil {
		t.Fatal(err)
	}
	second := readyPID(t, r)
	var ch supervisor.TreeChange
	select {
	case ch = <-p.Changes():
	case <-testCtx(t).Done():
		t.Fatal("no change observed after the worker was swapped")
	}
	if ch.Previous != p.Epoch() || ch.Epoch == "" || ch.Epoch == ch.Previous {
		t.Errorf("change epochs %s -> %s, want %s -> a new one", ch.Previous, ch.Epoch, p.Epoch())
	}
	if _, ok := find(ch.Old, first); !ok {
		t.Errorf("old identity lacks the first worker %d: %+v", first, ch.Old)
	}
	o, ok := find(ch.New, second)
	if !ok || o.Script != script || o.Exe != py {
		t.Errorf("new identity lacks the second worker %d running %s: %+v", second, script, ch.New)
	}
	if what := strings.Join(ch.What, "\n"); !strings.Contains(what, "pid "+strconv.Itoa(second)) || !strings.Contains(what, "in place of pid "+strconv.Itoa(first)) {
		t.Errorf("What = %q, want it to name pid %d in place of pid %d", ch.What, second, first)
	}
	if p.CurrentEpoch() != ch.Epoch {
		t.Errorf("CurrentEpoch %s, want %s", p.CurrentEpoch(), ch.Epoch)
	}
	if got, ok := find(p.Observed(), second); !ok || got.PID != second {
		t.Errorf("Observed after the change lacks the second worker: %+v", p.Observed())
	}
}

// CheckTree, run before a call that carries authority, sees a swap before
// the new worker wrote anything; until the new worker is there it refuses
// with NoAnswerError, so that no call waits in the pipe for whatever reads
// it next.
func TestCheckTreeSeesSwapBeforeOutput(t *testing.T) {
	py := realPython(t)
	script := writeWorker(t)
	// The next worker starts after a pause and says nothing.
	silent := filepath.Join(t.TempDir(), "silent.py")
	if err := writeFile(silent, "import sys\nsys.stdin.read()\n"); err != nil {
		t.Fatal(err)
	}
	loop := "while :; do " + py + " " + script + "; sleep 0.3; " + py + " " + silent + "; done"
	p := start(t, supervisor.Spec{Label: "loop", Command: "/bin/sh", Args: []string{"-c", loop}}, fast)
	r := bufio.NewReader(p.Stdout())
	first := readyPID(t, r)
	if _, err := p.Settled(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	arm(t, p)
	if _, err := p.Stdin().Write([]byte("restart\n")); err != nil {
		t.Fatal(err)
	}
	waitGone(t, first)
	sawGap := false
	var ch *supervisor.TreeChange
	for ch == nil {
		c, err := p.CheckTree(testCtx(t))
		var gone *supervisor.NoAnswerError
		switch {
		case errors.As(err, &gone):
			sawGap = true
			if len(gone.Gone) != 1 || gone.Gone[0] != first {
				t.Fatalf("NoAnswerError names %v, want [%d]", gone.Gone, first)
			}
			waitABit(t)
		case err != nil:
			t.Fatal(err)
		default:
			ch = c
			if ch == nil {
				// The watcher took it first, when the worker exited
				// (it can, if the next one was already there).
				select {
				case got := <-p.Changes():
					ch = &got
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}
	if !sawGap {
		t.Error("CheckTree never refused while no worker ran (the next one starts 0.3 s later)")
	}
	if !ch.Restarted {
		t.Errorf("change %+v: want Restarted (a new program reads the requests)", ch)
	}
	if !strings.Contains(strings.Join(ch.What, "\n"), silent) {
		t.Errorf("What = %q, want the new worker running %s", ch.What, silent)
	}
}

// waitABit waits 10 ms, failing the test once its time is up.
func waitABit(t *testing.T) {
	t.Helper()
	select {
	case <-testCtx(t).Done():
		t.Fatal("the test's time is up")
	case <-time.After(10 * time.Millisecond):
	}
}

// waitGone waits until pid has exited.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for {
		if err := unix.Kill(pid, 0); err != nil {
			return
		}
		select {
		case <-testCtx(t).Done():
			t.Fatalf("pid %d did not exit", pid)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// An exec in place that changes what a process runs is a new epoch.
func TestWatcherSeesExecInPlace(t *testing.T) {
	py := realPython(t)
	script := writeWorker(t)
	p := start(t, supervisor.Spec{Label: "exec", Command: py, Args: []string{script}}, fast)
	r := bufio.NewReader(p.Stdout())
	readyPID(t, r)
	if _, err := p.Settled(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	arm(t, p)
	if _, err := p.Stdin().Write([]byte("exec\n")); err != nil {
		t.Fatal(err)
	}
	// Nothing is polled: the check before a call sees the exec.
	var ch *supervisor.TreeChange
	for ch == nil {
		c, err := p.CheckTree(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		ch = c
		if ch == nil {
			waitABit(t) // the exec has not happened yet
		}
	}
	if !ch.Restarted {
		t.Errorf("an exec of the process that answered: Restarted false")
	}
	o, ok := find(ch.New, p.Pid())
	if !ok || o.Exe != "/usr/bin/sleep" {
		t.Errorf("new identity %+v, want pid %d running /usr/bin/sleep", ch.New, p.Pid())
	}
	if !strings.Contains(strings.Join(ch.What, "\n"), "exec'd") {
		t.Errorf("What = %q, want an exec", ch.What)
	}
}

// A helper that does not hold the server's stdio cannot answer: no new
// epoch. One that holds it is no new epoch either when it runs the
// system's code (sleep, git); one running a script of the person's that
// the epoch did not measure is a new epoch, which then stands for it.
func TestHelpers(t *testing.T) {
	dir := t.TempDir()
	helper := filepath.Join(dir, "helper.sh")
	if err := os.WriteFile(helper, []byte("sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, helper string
		want         []bool // a change after each round
	}{
		{"own pipes", "sleep 600 </dev/null >/dev/null 2>&1 &", []bool{false, false, false}},
		{"system helper on the server's stdio", "sleep 600 <&3 &", []bool{false, false, false}},
		// Once an epoch recorded it, the same script is that epoch's code.
		{"the person's unmeasured script on the server's stdio", "/bin/sh " + helper + " <&3 &", []bool{true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := filepath.Join(t.TempDir(), "s.sh")
			if err := os.WriteFile(script, []byte("exec 3<&0; while read x; do "+tc.helper+" echo done; done\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			o := fast
			p := start(t, supervisor.Spec{Label: "helper", Command: "/bin/sh", Args: []string{script}}, o)
			if _, err := p.Settled(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			arm(t, p)
			r := bufio.NewReader(p.Stdout())
			for i, want := range tc.want {
				if _, err := p.Stdin().Write([]byte("go\n")); err != nil {
					t.Fatal(err)
				}
				readLine(t, r)
				ch, err := p.CheckTree(testCtx(t))
				if err != nil {
					t.Fatal(err)
				}
				if got := ch != nil; got != want {
					t.Fatalf("round %d: change = %v (%+v), want %v", i, got, ch, want)
				}
				if ch != nil {
					<-p.Changes()
				}
			}
		})
	}
}

// Settled is bounded for a launcher that never execs, and the tree is
// recorded as it is then.
func TestSettledBoundedForStuckLauncher(t *testing.T) {
	o := fast
	o.SettleMax = 200 * time.Millisecond
	p := start(t, supervisor.Spec{Label: "stuck", Command: "/bin/sh", Args: []string{"-c", "read x"}}, o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	obs, err := p.Settled(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs) != 1 || filepath.Base(obs[0].Exe) != "dash" && filepath.Base(obs[0].Exe) != "bash" && filepath.Base(obs[0].Exe) != "sh" {
		t.Errorf("observed %+v, want the shell", obs)
	}
}

// Replacing the running executable on disk (a rebuild) is no exec: the
// process still runs the file it started with.
func TestRebuiltExecutableIsNoExec(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "sleep")
	src, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Skip(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	o := fast
	p := start(t, supervisor.Spec{Label: "rebuilt", Command: bin, Args: []string{"600"}}, o)
	if _, err := p.Settled(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// A build writes a new file and renames it over the old one.
	tmp := bin + ".new"
	if err := os.WriteFile(tmp, append(src, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	if ch, err := p.CheckTree(testCtx(t)); err != nil || ch != nil {
		t.Fatalf("CheckTree after the file was replaced = %+v, %v; want nil", ch, err)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if ch, err := p.CheckTree(testCtx(t)); err != nil || ch != nil {
		t.Fatalf("CheckTree after the file was removed = %+v, %v; want nil", ch, err)
	}
}

// Before the process first answered (Arm), a change is the launch settling
// late: the tree is read again, the launch epoch stays.
func TestChangeBeforeArmIsReread(t *testing.T) {
	py := realPython(t)
	script := writeWorker(t)
	o := fast
	p := start(t, supervisor.Spec{Label: "late", Command: "/bin/sh",
		Args: []string{"-c", "while :; do " + py + " " + script + "; done"}}, o)
	r := bufio.NewReader(p.Stdout())
	readyPID(t, r)
	if _, err := p.Settled(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stdin().Write([]byte("restart\n")); err != nil {
		t.Fatal(err)
	}
	second := readyPID(t, r)
	if ch, err := p.CheckTree(testCtx(t)); err != nil || ch != nil {
		t.Fatalf("CheckTree before Arm = %+v, %v; want nil (a re-read)", ch, err)
	}
	if _, ok := find(p.Observed(), second); !ok || p.CurrentEpoch() != p.Epoch() {
		t.Errorf("after the re-read: observed %+v, epoch %s; want worker %d under the launch epoch %s", p.Observed(), p.CurrentEpoch(), second, p.Epoch())
	}
	arm(t, p)
	if _, err := p.Stdin().Write([]byte("restart\n")); err != nil {
		t.Fatal(err)
	}
	readyPID(t, r)
	select {
	case <-p.Changes():
	case <-testCtx(t).Done():
		t.Fatal("a worker swapped after Arm: no new epoch")
	}
}

// With the daemon a child subreaper, a descendant whose parent exited is
// reparented to the daemon, out of the server's tree; the check still
// finds it by the epoch's mark, and one that can read the server's
// requests running the person's unmeasured code is a new epoch.
func TestOrphanUnderSubreaperIsSeen(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	helper := filepath.Join(t.TempDir(), "orphan.sh")
	if err := os.WriteFile(helper, []byte("sleep 601\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := fast
	p := start(t, supervisor.Spec{Label: "orphan", Command: "/bin/sh",
		Args: []string{"-c", `exec 3<&0; read x; (/bin/sh ` + helper + ` <&3 &); echo forked; read y`}}, o)
	if _, err := p.Settled(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	arm(t, p)
	if _, err := p.Stdin().Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, bufio.NewReader(p.Stdout())); got != "forked" {
		t.Fatalf("server said %q", got)
	}
	var ch *supervisor.TreeChange
	for ch == nil {
		c, err := p.CheckTree(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		ch = c
		if ch == nil {
			waitABit(t) // the subshell has not exited yet
		}
	}
	<-p.Changes()
	found := false
	for _, o := range ch.New {
		if o.Script == helper && o.PPID == os.Getpid() {
			found = true
		}
	}
	if !found {
		t.Errorf("new identity %+v lacks the orphan %s reparented to this process (%d)", ch.New, helper, os.Getpid())
	}
	// The check before a call reads the orphans too: it stays recorded.
	if again, err := p.CheckTree(testCtx(t)); err != nil || again != nil {
		t.Errorf("CheckTree after the orphan was recorded = %+v, %v; want nil", again, err)
	}
}

// An exec between the first answer and the read that fixes the launch
// epoch's identity (begun after that answer, Arm) is the launch's own, not
// a new epoch, but ChangedWhenArmed says so: what gave the first answers
// (the catalog among them) is not what runs now, and the gateway fetches
// them again. Without such an exec it is false.
func TestChangedWhenArmed(t *testing.T) {
	py := realPython(t)
	script, other := writeWorker(t), writeWorker(t)
	for _, exec := range []bool{true, false} {
		t.Run(fmt.Sprintf("exec=%v", exec), func(t *testing.T) {
			o := fast
			p := start(t, supervisor.Spec{Label: "reexec", Command: py, Args: []string{script}}, o)
			r := bufio.NewReader(p.Stdout())
			readyPID(t, r) // the first answer
			if _, err := p.Settled(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			want := script
			if exec {
				if _, err := p.Stdin().Write([]byte("reexec " + other + "\n")); err != nil {
					t.Fatal(err)
				}
				readyPID(t, r) // the program after the exec runs
				want = other
			}
			arm(t, p)
			if got := p.ChangedWhenArmed(); got != exec {
				t.Errorf("ChangedWhenArmed = %v after an exec %v before the arming read", got, exec)
			}
			if w, ok := find(p.Observed(), p.Pid()); !ok || w.Script != want {
				t.Errorf("observed %+v, want pid %d running %s", p.Observed(), p.Pid(), want)
			}
			if p.CurrentEpoch() != p.Epoch() {
				t.Errorf("CurrentEpoch %s, want the launch epoch %s", p.CurrentEpoch(), p.Epoch())
			}
		})
	}
}

// A launcher that execs its program after the launch looked settled
// (`sh -c 'sleep 0.05; exec …'`: the shell waits for its sleep child, so
// no launcher seems about to exec) is recorded as its final program once
// the program answered: by Identity, which the gateway waits for before a
// call that needs the epoch's identity, and by the check before a call
// carrying authority even when that check is the first read after the
// answer. Neither is a new epoch.
func TestLateExecObservedBeforeAuthority(t *testing.T) {
	py := realPython(t)
	script := writeWorker(t)
	for _, tc := range []struct {
		name  string
		first func(*supervisor.Process) ([]identity.Observed, error)
	}{
		{"Identity", func(p *supervisor.Process) ([]identity.Observed, error) { return p.Identity(testCtx(t)) }},
		{"CheckTree", func(p *supervisor.Process) ([]identity.Observed, error) {
			ch, err := p.CheckTree(testCtx(t))
			if ch != nil {
				t.Errorf("CheckTree = new epoch %+v, want the launch's own re-read", ch)
			}
			return p.Observed(), err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := fast
			if tc.name == "CheckTree" {
			}
			p := start(t, supervisor.Spec{Label: "late-exec", Command: "/bin/sh",
				Args: []string{"-c", "sleep 0.05; exec " + py + " " + script}}, o)
			r := bufio.NewReader(p.Stdout())
			if pid := readyPID(t, r); pid != p.Pid() {
				t.Fatalf("worker pid %d, want the launched pid %d (an exec)", pid, p.Pid())
			}
			p.Arm() // the program answered
			obs, err := tc.first(p)
			if err != nil {
				t.Fatal(err)
			}
			w, ok := find(obs, p.Pid())
			if !ok || w.Exe != py || w.Script != script {
				t.Fatalf("observed %+v, want pid %d running %s %s", obs, p.Pid(), py, script)
			}
			for _, o := range obs {
				if filepath.Base(o.Exe) == "sleep" {
					t.Errorf("observed the launcher's sleep, which has exited: %+v", obs)
				}
			}
			if p.CurrentEpoch() != p.Epoch() {
				t.Errorf("CurrentEpoch %s, want the launch epoch %s", p.CurrentEpoch(), p.Epoch())
			}
			if ch, err := p.CheckTree(testCtx(t)); err != nil || ch != nil {
				t.Errorf("CheckTree after the identity = %+v, %v; want nil", ch, err)
			}
			// From now on an exec is a new epoch, seen by a check or by
			// the watcher (Arm woke it for one read, which may come late).
			if _, err := p.Stdin().Write([]byte("exec\n")); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				ch, err := p.CheckTree(testCtx(t))
				if err != nil {
					t.Fatal(err)
				}
				if ch != nil {
					break
				}
				select {
				case <-p.Changes():
				default:
					if time.Now().After(deadline) {
						t.Fatal("the exec after the identity was never a new epoch")
					}
					continue
				}
				break
			}
			if p.CurrentEpoch() == p.Epoch() {
				t.Error("the exec after the identity left the launch epoch current")
			}
		})
	}
}

// A server whose answers are printed by short helpers (a shell loop running
// a printf or jq per request) keeps answering for its epoch: when the
// helper that wrote the first answer is gone, what reads the requests
// answers, and the check before a call does not refuse for ever.
func TestShortHelperAnswers(t *testing.T) {
	p := start(t, supervisor.Spec{Label: "short", Command: "/bin/sh",
		Args: []string{"-c", `while read x; do /bin/sh -c 'echo answered'; done`}}, fast)
	if _, err := p.Settled(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(p.Stdout())
	if _, err := p.Stdin().Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, r); got != "answered" {
		t.Fatalf("server said %q", got)
	}
	arm(t, p)
	for i := 0; i < 3; i++ {
		if _, err := p.Stdin().Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		if got := readLine(t, r); got != "answered" {
			t.Fatalf("server said %q", got)
		}
	}
	for {
		ch, err := p.CheckTree(testCtx(t))
		var gone *supervisor.NoAnswerError
		if errors.As(err, &gone) {
			waitABit(t) // the helper that answered first just exited
			continue
		}
		if err != nil || ch != nil {
			t.Fatalf("CheckTree = %+v, %v; want no change: helpers of the system printed the answers", ch, err)
		}
		break
	}
	if p.CurrentEpoch() != p.Epoch() {
		t.Errorf("epoch %s, want the launch's %s", p.CurrentEpoch(), p.Epoch())
	}
}
