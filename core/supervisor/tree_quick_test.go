//go:build linux

package supervisor_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/supervisor"
)

// The quick check of the tree (a check that finds the kernel's fork
// counter where the last full read left it re-reads only the processes it
// knows) must still see what can change without a fork: an exec, and an
// exec of a process reparented after its parent exited. These tests hold
// the counter still, as on a machine where nothing else forks, and move it
// when the tree forks, as the kernel does; each first proves that the
// quick check answered.

// heldCounter is a fork counter a test moves by hand.
type heldCounter struct{ n atomic.Uint64 }

func (c *heldCounter) read() (uint64, bool) { return c.n.Load(), true }
func (c *heldCounter) fork()                { c.n.Add(1) }

func holdForks(p *supervisor.Process) *heldCounter {
	c := &heldCounter{}
	c.n.Store(1000)
	supervisor.SetForkCounter(p, c.read)
	return c
}

// quietCheck runs CheckTree on an unchanged tree twice and fails unless
// both saw no change and the second was answered by the quick check.
func quietCheck(t *testing.T, p *supervisor.Process) {
	t.Helper()
	for i := range 2 {
		if ch, err := p.CheckTree(testCtx(t)); err != nil || ch != nil {
			t.Fatalf("CheckTree %d on an unchanged tree = %+v, %v; want nil", i, ch, err)
		}
	}
	before := supervisor.QuickChecks(p)
	if ch, err := p.CheckTree(testCtx(t)); err != nil || ch != nil {
		t.Fatalf("CheckTree on an unchanged tree = %+v, %v; want nil", ch, err)
	}
	if supervisor.QuickChecks(p) <= before { // (the tree watcher may check too)
		t.Fatalf("the check of an unchanged tree with the fork counter held was not answered by the quick check (%d → %d)", before, supervisor.QuickChecks(p))
	}
}

// checkChange runs CheckTree and returns the new epoch it found, or the
// one the tree watcher found first (the watcher may read the tree once
// when the process answers); nil when there was none. Either way the
// change delivered on Changes is taken.
func checkChange(t *testing.T, p *supervisor.Process) *supervisor.TreeChange {
	t.Helper()
	ch, err := p.CheckTree(testCtx(t))
	if err != nil {
		t.Fatalf("CheckTree: %v", err)
	}
	// Take every change delivered; the last is the newest (the reader may
	// have seen one when output came from new code).
	for {
		select {
		case c := <-p.Changes():
			if ch == nil || c.At.After(ch.At) {
				ch = &c
			}
			continue
		default:
		}
		return ch
	}
}

// The kernel's counter moves when a process is created.
func TestForkCountMovesOnFork(t *testing.T) {
	n0, ok := supervisor.ForkCount()
	if !ok {
		t.Fatal("no fork counter in /proc/stat")
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Fatal(err)
	}
	n1, ok := supervisor.ForkCount()
	if !ok || n1 <= n0 {
		t.Fatalf("fork counter %d → %d (%v) across a fork; want it to move", n0, n1, ok)
	}
}

// An exec in place creates no process: the quick check must see it by
// re-reading the process.
func TestQuickCheckSeesExec(t *testing.T) {
	py := realPython(t)
	script := filepath.Join(t.TempDir(), "exec.py")
	if err := writeFile(script, `import os, sys
print("ready", flush=True)
sys.stdin.readline()
os.execv(sys.executable, [sys.executable, "-c", "import sys; print('execd', flush=True); sys.stdin.read()"])
`); err != nil {
		t.Fatal(err)
	}
	o := fast
	p := start(t, supervisor.Spec{Label: "exec", Command: py, Args: []string{script}}, o)
	r := bufio.NewReader(p.Stdout())
	if got := readLine(t, r); got != "ready" {
		t.Fatalf("server said %q", got)
	}
	if _, err := p.Settled(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	arm(t, p)
	holdForks(p)
	quietCheck(t, p)
	if _, err := p.Stdin().Write([]byte("exec\n")); err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, r); got != "execd" {
		t.Fatalf("server said %q", got)
	}
	ch := checkChange(t, p)
	if ch == nil {
		t.Fatal("CheckTree after an exec with no fork = nil; want a new epoch")
	}
	if !strings.Contains(strings.Join(ch.What, "\n"), "pid "+strconv.Itoa(p.Pid())+", which answered, exec'd") {
		t.Errorf("What = %q, want pid %d, which answered, exec'd", ch.What, p.Pid())
	}
}

// A fork moves the counter: the next check reads the whole tree and sees
// the new process that can read the server's requests, running a script
// of the person's that the epoch did not measure.
func TestQuickCheckYieldsToFork(t *testing.T) {
	dir := t.TempDir()
	script, helper := filepath.Join(dir, "s.sh"), filepath.Join(dir, "helper.sh")
	if err := writeFile(helper, "sleep 600\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(script, "exec 3<&0; while read x; do /bin/sh "+helper+" <&3 & echo done; done\n"); err != nil {
		t.Fatal(err)
	}
	o := fast
	p := start(t, supervisor.Spec{Label: "fork", Command: "/bin/sh", Args: []string{script}}, o)
	if _, err := p.Settled(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	arm(t, p)
	forks := holdForks(p)
	quietCheck(t, p)
	if _, err := p.Stdin().Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	readLine(t, bufio.NewReader(p.Stdout()))
	forks.fork() // what the kernel's counter did
	ch := checkChange(t, p)
	if ch == nil {
		t.Fatal("CheckTree after a fork = nil; want a new epoch")
	}
	if !strings.Contains(strings.Join(ch.What, "\n"), "able to read the server's requests") || !strings.Contains(strings.Join(ch.What, "\n"), helper) {
		t.Errorf("What = %q, want a new process running %s that can read the requests", ch.What, helper)
	}
}

// A process of the epoch whose parent exits is reparented to the daemon
// (a child subreaper); it carries no mark (env -i), so only its being in
// the last read keeps it in the tree. Its exec afterwards is a new epoch,
// both when the quick check answers (counter held) and when every check
// reads the whole tree (the kernel's counter, which this busy machine
// moves between most checks; a quiet one may not).
func TestReparentedOrphanExecIsSeen(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	py := realPython(t)
	for _, held := range []bool{true, false} {
		t.Run(map[bool]string{true: "quick", false: "full"}[held], func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"f1", "f2"} {
				if err := unix.Mkfifo(filepath.Join(dir, f), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			files := map[string]string{
				"server.sh": "read x\n/bin/sh \"$1/parent.sh\" \"$1\" &\nread z\n",
				"parent.sh": "env -i /bin/sh \"$1/child.sh\" \"$1\" &\necho started $$ $!\nread w < \"$1/f1\"\n",
				"child.sh":  "echo child\nread y < \"$1/f2\"\nexec " + py + " \"$1/other.py\"\n",
				"other.py":  "import sys, signal\nprint('execd', flush=True)\nsignal.pause()\n",
			}
			for name, text := range files {
				if err := writeFile(filepath.Join(dir, name), text); err != nil {
					t.Fatal(err)
				}
			}
			o := fast
			p := start(t, supervisor.Spec{Label: "orphan", Command: "/bin/sh", Args: []string{filepath.Join(dir, "server.sh"), dir}}, o)
			if _, err := p.Settled(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			arm(t, p)
			var forks *heldCounter
			if held {
				forks = holdForks(p)
			}
			if _, err := p.Stdin().Write([]byte("go\n")); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(p.Stdout())
			// The parent's "started" and the child's "child" race: take
			// them in either order.
			var parent, child int
			sawChild := false
			for range 2 {
				switch f := strings.Fields(readLine(t, r)); {
				case len(f) == 3 && f[0] == "started":
					parent, _ = strconv.Atoi(f[1])
					child, _ = strconv.Atoi(f[2])
				case len(f) == 1 && f[0] == "child":
					sawChild = true
				default:
					t.Fatalf("server said %q", f)
				}
			}
			if parent == 0 || !sawChild {
				t.Fatalf("want both the parent's started line and the child's line (parent %d, child seen %v)", parent, sawChild)
			}
			if held {
				forks.fork()
			}
			if ch := checkChange(t, p); ch == nil {
				t.Fatal("CheckTree after the parent and child started = nil; want a new epoch")
			}
			if o, ok := find(p.Observed(), child); !ok || filepath.Base(o.Exe) == "env" {
				t.Fatalf("the child %d is not recorded as the shell it exec'd: %+v", child, p.Observed())
			}
			if held {
				quietCheck(t, p)
			}
			// The parent exits; the child goes to this process.
			pidfd, err := unix.PidfdOpen(parent, 0)
			if err != nil {
				t.Skipf("pidfd_open: %v", err)
			}
			defer unix.Close(pidfd)
			w, err := os.OpenFile(filepath.Join(dir, "f1"), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
			if n, err := unix.Poll(fds, 10_000); err != nil || n != 1 {
				t.Fatalf("the parent did not exit: %d, %v", n, err)
			}
			st, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
			if err != nil {
				t.Fatal(err)
			}
			if fs := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); fs[1] != strconv.Itoa(os.Getpid()) {
				t.Fatalf("the child's parent is %s, want this process %d (a subreaper)", fs[1], os.Getpid())
			}
			if ch, err := p.CheckTree(testCtx(t)); err != nil || ch != nil {
				t.Fatalf("CheckTree after the parent exited = %+v, %v; want nil (an exit is no new code)", ch, err)
			}
			if _, ok := find(p.Observed(), child); !ok {
				t.Errorf("the reparented child %d left the record: %+v", child, p.Observed())
			}
			// The child execs other code, without a fork.
			w, err = os.OpenFile(filepath.Join(dir, "f2"), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			if got := readLine(t, r); got != "execd" {
				t.Fatalf("child said %q", got)
			}
			ch := checkChange(t, p)
			if ch == nil {
				t.Fatal("CheckTree after the reparented child exec'd = nil; want a new epoch")
			}
			if what := strings.Join(ch.What, "\n"); !strings.Contains(what, "pid "+strconv.Itoa(child)) || !strings.Contains(what, "other.py") {
				t.Errorf("What = %q, want pid %d running other.py", ch.What, child)
			}
		})
	}
}

// A thread's children file is generated a page at a time: past about 600
// children, a new one holding the server's stdio is still seen.
func TestManyChildrenAllRead(t *testing.T) {
	script := filepath.Join(t.TempDir(), "s.sh")
	if err := writeFile(script+".helper", "sleep 601\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(script, `exec 3<&0
read x
i=0
while [ $i -lt 900 ]; do sleep 600 </dev/null >/dev/null 2>&1 & i=$((i+1)); done
echo many
read y
/bin/sh "$0.helper" <&3 &
echo last
read z
`); err != nil {
		t.Fatal(err)
	}
	o := fast
	p := start(t, supervisor.Spec{Label: "many", Command: "/bin/sh", Args: []string{script}}, o)
	if _, err := p.Settled(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	arm(t, p)
	r := bufio.NewReader(p.Stdout())
	if _, err := p.Stdin().Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, r); got != "many" {
		t.Fatalf("server said %q", got)
	}
	if ch, err := p.CheckTree(testCtx(t)); err != nil || ch != nil {
		t.Fatalf("CheckTree after 900 helpers without stdio = %+v, %v; want nil", ch, err)
	}
	if _, err := p.Stdin().Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, r); got != "last" {
		t.Fatalf("server said %q", got)
	}
	ch := checkChange(t, p)
	if ch == nil {
		t.Fatal("CheckTree after the 901st child, holding the stdio = nil; want a new epoch")
	}
	if !strings.Contains(strings.Join(ch.What, "\n"), script+".helper") {
		t.Errorf("What = %q, want the helper script that holds the stdio", ch.What)
	}
}
