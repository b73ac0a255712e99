//go:build linux

package supervisor_test

import (
	"bufio"
	"context"
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
// seen by the watcher without anyone asking.
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
	if !strings.Contains(strings.Join(ch.What, "\n"), "pid "+strconv.Itoa(second)+" started") {
		t.Errorf("What = %q, want it to name pid %d", ch.What, second)
	}
	if p.CurrentEpoch() != ch.Epoch {
		t.Errorf("CurrentEpoch %s, want %s", p.CurrentEpoch(), ch.Epoch)
	}
	if got, ok := find(p.Observed(), second); !ok || got.PID != second {
		t.Errorf("Observed after the change lacks the second worker: %+v", p.Observed())
	}
}

// CheckTree, run before a call that carries authority, sees a swap that the
// poll has not seen yet.
func TestCheckTreeSeesSwapBeforePoll(t *testing.T) {
	py := realPython(t)
	script := writeWorker(t)
	o := fast
	o.TreePoll = time.Hour // the watcher never polls within the test
	p := start(t, supervisor.Spec{Label: "loop", Command: "/bin/sh",
		Args: []string{"-c", "while :; do " + py + " " + script + "; done"}}, o)
	r := bufio.NewReader(p.Stdout())
	readyPID(t, r)
	if _, err := p.Settled(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	arm(t, p)
	if _, err := p.Stdin().Write([]byte("restart\n")); err != nil {
		t.Fatal(err)
	}
	second := readyPID(t, r)
	ch, err := p.CheckTree(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if ch == nil {
		t.Fatal("CheckTree after a swap = nil, want a new epoch")
	}
	if _, ok := find(ch.New, second); !ok {
		t.Errorf("new identity lacks worker %d: %+v", second, ch.New)
	}
	select {
	case got := <-p.Changes():
		if got.Epoch != ch.Epoch {
			t.Errorf("Changes delivered %s, CheckTree returned %s", got.Epoch, ch.Epoch)
		}
	default:
		t.Error("the change CheckTree found was not delivered on Changes")
	}
	if again, err := p.CheckTree(testCtx(t)); err != nil || again != nil {
		t.Errorf("second CheckTree = %+v, %v; want nil", again, err)
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
	var ch supervisor.TreeChange
	select {
	case ch = <-p.Changes():
	case <-testCtx(t).Done():
		t.Fatal("no change observed after the exec")
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
// epoch. One that holds the server's stdio is a new epoch each time.
func TestHelpers(t *testing.T) {
	for _, tc := range []struct {
		name, helper string
		want         []bool // a change after each round
	}{
		{"own pipes", "sleep 600 </dev/null >/dev/null 2>&1 &", []bool{false, false, false}},
		{"server's stdio", "sleep 600 &", []bool{true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := filepath.Join(t.TempDir(), "s.sh")
			if err := os.WriteFile(script, []byte("while read x; do "+tc.helper+" echo done; done\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			o := fast
			o.TreePoll = time.Hour
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
	o.TreePoll = time.Hour
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
	o.TreePoll = time.Hour
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
	if ch, err := p.CheckTree(testCtx(t)); err != nil || ch == nil {
		t.Fatalf("CheckTree after Arm = %+v, %v; want a new epoch", ch, err)
	}
}

// With the daemon a child subreaper, a descendant whose parent exited is
// reparented to the daemon, out of the server's tree; the watcher still
// finds it by the epoch's mark, and one that holds the server's stdio is a
// new epoch.
func TestOrphanUnderSubreaperIsSeen(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	o := fast
	p := start(t, supervisor.Spec{Label: "orphan", Command: "/bin/sh",
		Args: []string{"-c", `read x; (sleep 601 &); echo forked; read y`}}, o)
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
	var ch supervisor.TreeChange
	select {
	case ch = <-p.Changes():
	case <-testCtx(t).Done():
		t.Fatal("the orphan holding the server's stdio was not seen")
	}
	found := false
	for _, o := range ch.New {
		if o.Exe == "/usr/bin/sleep" && o.PPID == os.Getpid() {
			found = true
		}
	}
	if !found {
		t.Errorf("new identity %+v lacks the orphan sleep reparented to this process (%d)", ch.New, os.Getpid())
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
			o.TreePoll = time.Hour // only Arm's read reads the tree after the launch
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
				o.TreePoll = time.Hour // only the check reads the tree after the answer
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
