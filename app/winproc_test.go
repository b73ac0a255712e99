package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/app/ui"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/paths"
)

// windowHelperEnv makes the test binary a window process (TestMain):
// "deny" denies each request in its approval window (a tap on Deny, as the
// person does), "check" only checks its link and exits.
const windowHelperEnv = "PORTCULLIS_TEST_WINDOW_PROCESS"

func TestMain(m *testing.M) {
	if mode := os.Getenv(windowHelperEnv); mode != "" {
		os.Exit(windowHelper(mode))
	}
	os.Exit(m.Run())
}

// windowHelper is the window process of the tests, with Fyne's test app.
func windowHelper(mode string) int {
	conn, err := linkConn()
	if err != nil {
		fmt.Fprintln(os.Stderr, "portcullis:", err)
		return 3
	}
	if mode == "check" {
		return 0
	}
	windowLinger = 0
	dirs, err := paths.Resolve()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	a := &App{Dirs: dirs, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	fa := test.NewApp()
	done := make(chan struct{})
	trays := make(chan *ui.Tray, 1)
	// As app.Main: a signal ends the process.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	a.windowProcess(ctx, fa, ui.NewRemote(conn), func() { close(done) }, func(t *ui.Tray) { trays <- t })
	tr := <-trays
	for {
		select {
		case <-done:
			return 0
		case <-time.After(20 * time.Millisecond):
		}
		var deny *widget.Button
		fyne.DoAndWait(func() { deny = tr.Approval.Button("Deny") })
		if deny != nil {
			test.Tap(deny)
		}
	}
}

// winDaemon is the daemon side the link serves in these tests: no runs.
type winDaemon struct{ ch chan struct{} }

func (d *winDaemon) Status() daemon.StatusReport        { return daemon.StatusReport{} }
func (d *winDaemon) Changes() (<-chan struct{}, func()) { return d.ch, func() {} }
func (d *winDaemon) Restart(string, string) int         { return 0 }

// helperCommand starts the test binary as a window process in mode.
func helperCommand(t *testing.T, mode string, stderr *syncBuffer) func() *exec.Cmd {
	return func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), windowHelperEnv+"="+mode, "PORTCULLIS_HOME="+t.TempDir())
		cmd.Stderr = stderr
		return cmd
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// eventually waits up to 20 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deviceApprovals is an authority whose window approvals all count as the
// person's presses (the input rule is the daemon's, tested there).
type deviceApprovals struct{ *authz.Authority }

func (a deviceApprovals) DecideInput(id ids.RequestID, d authz.Decision, _ daemon.WindowInput) error {
	return a.Decide(id, d)
}

// winDeps is what the app serves on the link in these tests.
func winDeps(auth *authz.Authority) ui.LinkDeps {
	return ui.LinkDeps{
		Daemon:      &winDaemon{ch: make(chan struct{})},
		Approvals:   deviceApprovals{auth},
		AuditStatus: func() daemon.AuditStatus { return daemon.AuditStatus{} },
		ConfigState: func() daemon.ConfigState { return daemon.ConfigState{} },
		EditFrom: func(string, []byte, daemon.WindowInput) (*config.Config, error) {
			return nil, errors.New("no edits in this test")
		},
		Quit: func() {},
	}
}

// runWindows runs w until the test ends.
func runWindows(t *testing.T, w *windows) {
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-ran
	})
}

// The app starts its window process ahead of the first request, and it
// stands by; a request raised wakes it, and its window decides it (the
// decision arrives through the link, as the app's window); once nothing
// waits it stands by again, and the next request is shown by the same
// process. A signal ends it in standby too; ended after running a while,
// it is started again ahead of time.
func TestWindowProcessStandsByAheadOfRequests(t *testing.T) {
	auth := authz.New(authz.Options{Timeout: time.Minute})
	events, stop := auth.Subscribe()
	defer stop()
	stderr := &syncBuffer{}
	w := newWindows(winDeps(auth), helperCommand(t, "deny", stderr), slog.New(slog.NewTextHandler(stderr, nil)))
	w.again, w.restartDelay = 0, 10*time.Millisecond
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the window processes' stderr:\n%s", stderr.String())
		}
	})
	standbys := func() int { return strings.Count(stderr.String(), `msg="window process in standby"`) }
	runWindows(t, w)

	eventually(t, "the window process to stand by before any request", func() bool { return standbys() == 1 })
	if running, starts := w.Running(); !running || starts != 1 {
		t.Fatalf("before any request: running %v, %d window processes started; want one, standing by", running, starts)
	}
	for round := 1; round <= 2; round++ {
		id := auth.Raise(authz.Card{AgentRun: "run1", ServerLabel: "pub", Tool: "publish", CurrentEpoch: "ep1"})
		var ev authz.Event
		for ev.Kind != authz.EventResolved {
			select {
			case ev = <-events:
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: request %s not decided by the window process; its stderr:\n%s", round, id, stderr.String())
			}
		}
		if ev.Request.ID != id || ev.Decision == nil || ev.Decision.Choice != authz.Deny || ev.Decision.By != "app" {
			t.Fatalf("round %d: resolved %+v decision %+v, want %s denied by the app's window", round, ev.Request.ID, ev.Decision, id)
		}
		eventually(t, "the window process to stand by again once nothing waits", func() bool { return standbys() == round+1 })
		if running, starts := w.Running(); !running || starts != 1 {
			t.Fatalf("round %d: running %v, %d window processes started; want the first one still", round, running, starts)
		}
	}
	if n := strings.Count(stderr.String(), `msg="window process awake"`); n != 2 {
		t.Errorf("the window process woke %d times, want once per request (2)", n)
	}

	w.mu.Lock()
	s := w.cur
	w.mu.Unlock()
	if err := s.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the window process in standby did not end on SIGTERM")
	}
	eventually(t, "another window process, standing by", func() bool {
		_, starts := w.Running()
		return starts == 2 && standbys() == 4
	})
}

// A window process that ends at once (it cannot show windows here) is not
// started again ahead of time, which would start one after another: the
// next request starts it.
func TestWindowProcessFailingAtOnceWaitsForARequest(t *testing.T) {
	auth := authz.New(authz.Options{Timeout: time.Minute})
	stderr := &syncBuffer{}
	w := newWindows(winDeps(auth), helperCommand(t, "check", stderr), slog.New(slog.NewTextHandler(stderr, nil)))
	w.restartDelay = 10 * time.Millisecond
	runWindows(t, w)
	eventually(t, "the window process started ahead of time to end", func() bool {
		running, starts := w.Running()
		return !running && starts == 1
	})
	time.Sleep(300 * time.Millisecond)
	if _, starts := w.Running(); starts != 1 {
		t.Fatalf("%d window processes started after one ended at once, want 1", starts)
	}
	auth.Raise(authz.Card{AgentRun: "run1", ServerLabel: "pub", Tool: "publish", CurrentEpoch: "ep1"})
	eventually(t, "a request to start another", func() bool {
		_, starts := w.Running()
		return starts == 2
	})
}

// A window process runs only on the link its parent, the app, made: not
// without one, and not on a socket pair made by another process (an agent
// running the hidden command with a socket of its own cannot pose as the
// app, and the app's daemon is reachable only through the link it made).
func TestWindowProcessNeedsTheAppsLink(t *testing.T) {
	run := func(cmd *exec.Cmd, extra *os.File) (int, string) {
		t.Helper()
		var stderr bytes.Buffer
		cmd.Env = append(os.Environ(), windowHelperEnv+"=check")
		cmd.Stderr = &stderr
		if extra != nil {
			cmd.ExtraFiles = []*os.File{extra}
		}
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), stderr.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, stderr.String()
	}
	pair := func() (*os.File, *os.File) {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, b := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}

	code, msg := run(exec.Command(os.Args[0], "-test.run=^$"), nil)
	if code != 3 || !strings.Contains(msg, "which starts it itself") {
		t.Errorf("without a link: exit %d, %q; want 3 and the refusal", code, msg)
	}
	_, theirs := pair()
	code, msg = run(exec.Command(os.Args[0], "-test.run=^$"), theirs)
	if code != 0 {
		t.Errorf("on its parent's socket pair: exit %d, %q; want 0", code, msg)
	}
	// Made by this process, handed on by a shell: the window process's
	// parent (the shell) did not make it.
	_, theirs = pair()
	code, msg = run(exec.Command("sh", "-c", `"$0" -test.run='^$'; exit $?`, os.Args[0]), theirs)
	if code != 3 || !strings.Contains(msg, "not by this process's parent") {
		t.Errorf("on a socket pair its parent did not make: exit %d, %q; want 3 and the refusal", code, msg)
	}
	// Not a socket at all.
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code, msg = run(exec.Command(os.Args[0], "-test.run=^$"), f)
	if code != 3 || !strings.Contains(msg, "which starts it itself") {
		t.Errorf("on /dev/null: exit %d, %q; want 3 and the refusal", code, msg)
	}
}
