//go:build unix

package supervisor_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/supervisor"
	"github.com/portcullis/portcullis/core/supervisor/supervisortest"
)

func TestMain(m *testing.M) {
	supervisortest.RunIfChild()
	os.Exit(m.Run())
}

// fast are short graces so that tests which need escalation stay quick.
var fast = supervisor.Options{StopGrace: 100 * time.Millisecond, KillGrace: 200 * time.Millisecond}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startFake(t *testing.T, b supervisortest.Behavior, o supervisor.Options, args ...string) *supervisor.Process {
	t.Helper()
	cmd, argv, env := supervisortest.Command(b, args...)
	return start(t, supervisor.Spec{Label: string(b), Command: cmd, Args: argv, Env: env}, o)
}

func start(t *testing.T, s supervisor.Spec, o supervisor.Options) *supervisor.Process {
	t.Helper()
	p, err := supervisor.Start(testCtx(t), s, o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("cleanup Stop: %v", err)
		}
	})
	return p
}

// readLine reads one line of the server's stdout, failing the test at EOF.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading stdout: %q, %v", line, err)
	}
	return strings.TrimSuffix(line, "\n")
}

// assertGroupEmpty checks, independently of the supervisor, that no live
// process of group pgid is left.
func assertGroupEmpty(t *testing.T, pgid int) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	pids, err := supervisortest.GroupMembers(pgid)
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 0 {
		t.Errorf("process group %d still has %v", pgid, pids)
	}
}

func groupSize(t *testing.T, pgid int) int {
	t.Helper()
	pids, err := supervisortest.GroupMembers(pgid)
	if err != nil {
		t.Skip(err)
	}
	return len(pids)
}

func TestStopWellBehaved(t *testing.T) {
	// A long StopGrace: exit status 0 proves the child left on stdin EOF
	// rather than by a signal.
	p := startFake(t, supervisortest.Echo, supervisor.Options{StopGrace: 5 * time.Second, KillGrace: time.Second})
	out := bufio.NewReader(p.Stdout())
	if _, err := io.WriteString(p.Stdin(), "hello\n"); err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, out); got != "hello" {
		t.Errorf("echo = %q, want hello", got)
	}
	select {
	case <-p.Done():
		t.Fatal("Done closed while the child runs")
	default:
	}
	if err := p.Stop(testCtx(t)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	<-p.Done()
	e := p.Exit()
	if e.Code != 0 || e.Signal != "" || e.String() != "exit status 0" || e.At.IsZero() {
		t.Errorf("Exit = %+v (%s), want exit status 0", e, e)
	}
	if _, err := out.ReadByte(); err != io.EOF {
		t.Errorf("stdout after Stop: %v, want EOF", err)
	}
	if err := p.Stdin().Close(); err != nil {
		t.Errorf("second stdin Close: %v", err)
	}
	assertGroupEmpty(t, p.Pid())
}

func TestStopIgnoresSIGTERM(t *testing.T) {
	p := startFake(t, supervisortest.Stubborn, fast)
	if got := readLine(t, bufio.NewReader(p.Stdout())); got != "ready" {
		t.Fatalf("got %q, want ready", got)
	}
	if err := p.Stop(testCtx(t)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	e := p.Exit()
	if diff := cmp.Diff(supervisor.ExitInfo{Code: -1, Signal: "SIGKILL"}, supervisor.ExitInfo{Code: e.Code, Signal: e.Signal}); diff != "" {
		t.Errorf("Exit (-want +got):\n%s", diff)
	}
	if e.String() != "killed by SIGKILL" {
		t.Errorf("String = %q", e.String())
	}
	assertGroupEmpty(t, p.Pid())
}

func TestStopKillsGrandchildHoldingStdout(t *testing.T) {
	p := start(t, supervisor.Spec{
		Label:   "sh",
		Command: "sh",
		Args:    []string{"-c", "sleep 1000 & echo started; exec sleep 1000"},
	}, fast)
	out := bufio.NewReader(p.Stdout())
	if got := readLine(t, out); got != "started" {
		t.Fatalf("got %q", got)
	}
	if n := groupSize(t, p.Pid()); n < 2 {
		t.Fatalf("group has %d processes before Stop, want 2", n)
	}
	if err := p.Stop(testCtx(t)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertGroupEmpty(t, p.Pid())
	if e := p.Exit(); e.Signal != "SIGTERM" {
		t.Errorf("Exit = %s, want killed by SIGTERM", e)
	}
	if rest, err := io.ReadAll(out); err != nil || len(rest) != 0 {
		t.Errorf("stdout after Stop: %q, %v; want EOF", rest, err)
	}
}

func TestStopKillsGrandchildIgnoringSIGTERM(t *testing.T) {
	// A long StopGrace lets the direct child leave on stdin EOF however slow
	// the machine; KillGrace then bounds the grandchild's SIGTERM wait.
	p := startFake(t, supervisortest.StubbornParent, supervisor.Options{StopGrace: 5 * time.Second, KillGrace: 200 * time.Millisecond})
	line := readLine(t, bufio.NewReader(p.Stdout()))
	gpid, err := strconv.Atoi(strings.TrimPrefix(line, "ready "))
	if err != nil {
		t.Fatalf("got %q", line)
	}
	if err := p.Stop(testCtx(t)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if e := p.Exit(); e.Code != 0 {
		t.Errorf("direct child: %s, want exit status 0 on stdin EOF", e)
	}
	assertGroupEmpty(t, p.Pid())
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(gpid) + "/stat"); err == nil && !strings.Contains(string(b), ") Z ") {
		t.Errorf("grandchild %d still running: %s", gpid, b)
	}
}

func TestStopAfterChildExitedReapsGroup(t *testing.T) {
	p := start(t, supervisor.Spec{
		Label:   "sh",
		Command: "sh",
		Args:    []string{"-c", "sleep 1000 & echo started; exit 3"},
	}, fast)
	if got := readLine(t, bufio.NewReader(p.Stdout())); got != "started" {
		t.Fatalf("got %q", got)
	}
	<-p.Done()
	if e := p.Exit(); e.Code != 3 || e.Signal != "" {
		t.Errorf("Exit = %s, want exit status 3", e)
	}
	if n := groupSize(t, p.Pid()); n != 1 {
		t.Fatalf("group has %d processes after the child exited, want the grandchild", n)
	}
	if err := p.Stop(testCtx(t)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertGroupEmpty(t, p.Pid())
}

func TestExitRecordsCodeAndStderr(t *testing.T) {
	p := startFake(t, supervisortest.Crash, fast)
	<-p.Done()
	e := p.Exit()
	want := []string{
		"Traceback (most recent call last):",
		`  File "/srv/server.py", line 3, in <module>`,
		"    main()",
		"ValueError: boom",
	}
	if diff := cmp.Diff(want, e.StderrTail); diff != "" {
		t.Errorf("Exit.StderrTail (-want +got):\n%s", diff)
	}
	if e.Code != 1 || e.String() != "exit status 1" {
		t.Errorf("Exit = %s, want exit status 1", e)
	}
	if diff := cmp.Diff(want[2:], p.StderrTail(2)); diff != "" {
		t.Errorf("StderrTail(2) (-want +got):\n%s", diff)
	}
}

func TestStderrTailBounded(t *testing.T) {
	const limit = 4096
	tests := []struct {
		name     string
		tail     int
		lastLine string
	}{
		{"short unterminated line", 1000, strings.Repeat("x", 1000)},
		{"line over the limit is cut", 100_000, strings.Repeat("x", limit-1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd, argv, env := supervisortest.Command(supervisortest.Flood, "10000", strconv.Itoa(tt.tail))
			p := start(t, supervisor.Spec{Label: "flood", Command: cmd, Args: argv, Env: env, StderrLimit: limit}, fast)
			<-p.Done()
			if e := p.Exit(); e.Code != 0 {
				t.Fatalf("Exit = %s", e)
			}
			lines := p.StderrTail(0)
			size := 0
			for _, l := range lines {
				size += len(l) + 1
			}
			if size-1 > limit {
				t.Errorf("kept %d bytes, limit %d", size-1, limit)
			}
			if got := lines[len(lines)-1]; got != tt.lastLine {
				t.Errorf("last line has %d bytes, want %d", len(got), len(tt.lastLine))
			}
			// The complete lines kept are the newest, consecutive, ending at 10000.
			for i, l := range lines[:len(lines)-1] {
				want := "line " + strconv.Itoa(10000-(len(lines)-2-i))
				if l != want {
					t.Fatalf("line %d = %q, want %q", i, l, want)
				}
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	_, err := supervisor.Start(testCtx(t), supervisor.Spec{Label: "x", Command: "portcullis-no-such-command"}, fast)
	if !errors.Is(err, identity.ErrCommandNotFound) {
		t.Errorf("missing command: %v, want ErrCommandNotFound", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := supervisor.Start(ctx, supervisor.Spec{Label: "x", Command: "sh"}, fast); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled start: %v", err)
	}
}

func TestEnvAndDir(t *testing.T) {
	cmd, argv, env := supervisortest.Command(supervisortest.PrintEnv, "PC_A", "PC_B")
	p := start(t, supervisor.Spec{Label: "env", Command: cmd, Args: argv, Env: append(env, "PC_A=1", "PC_B=x", "PC_A=2")}, fast)
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), "PC_A=2\nPC_B=x\n"; got != want {
		t.Errorf("env output %q, want %q", got, want)
	}

	dir := t.TempDir()
	script := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\npwd\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p = start(t, supervisor.Spec{Label: "dir", Command: "./run.sh", Dir: dir}, fast)
	out, err = io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dir)
	if got := strings.TrimSpace(string(out)); got != dir && got != real {
		t.Errorf("pwd = %q, want %q", got, dir)
	}
}

func TestStopConcurrentAndIdempotent(t *testing.T) {
	p := startFake(t, supervisortest.Stubborn, fast)
	if got := readLine(t, bufio.NewReader(p.Stdout())); got != "ready" {
		t.Fatalf("got %q", got)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = p.Stop(testCtx(t)) })
	}
	wg.Wait()
	if diff := cmp.Diff(make([]error, 4), errs, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("Stop errors (-want +got):\n%s", diff)
	}
	if err := p.Stop(testCtx(t)); err != nil {
		t.Errorf("Stop after stop: %v", err)
	}
	assertGroupEmpty(t, p.Pid())
}

func TestStopContextEndsSequenceContinues(t *testing.T) {
	p := startFake(t, supervisortest.Stubborn, supervisor.Options{StopGrace: 300 * time.Millisecond, KillGrace: 100 * time.Millisecond})
	if got := readLine(t, bufio.NewReader(p.Stdout())); got != "ready" {
		t.Fatalf("got %q", got)
	}
	short, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Stop(short); !errors.Is(err, context.Canceled) {
		t.Errorf("Stop with ended ctx: %v, want context.Canceled", err)
	}
	// The sequence keeps going without any caller waiting.
	select {
	case <-p.Done():
	case <-testCtx(t).Done():
		t.Fatal("child never stopped")
	}
	if err := p.Stop(testCtx(t)); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if e := p.Exit(); e.Signal != "SIGKILL" {
		t.Errorf("Exit = %s, want killed by SIGKILL", e)
	}
}

func TestExitInfoString(t *testing.T) {
	tests := []struct {
		in   supervisor.ExitInfo
		want string
	}{
		{supervisor.ExitInfo{Code: 1, StderrTail: []string{"TOKEN=secret"}}, "exit status 1"},
		{supervisor.ExitInfo{Code: 0}, "exit status 0"},
		{supervisor.ExitInfo{Code: -1, Signal: "SIGKILL"}, "killed by SIGKILL"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.in, got, tt.want)
		}
	}
}
