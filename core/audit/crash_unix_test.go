//go:build unix

package audit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary re-executes itself as a child when AUDIT_TEST_CHILD is set.
func TestMain(m *testing.M) {
	switch os.Getenv("AUDIT_TEST_CHILD") {
	case "":
		os.Exit(m.Run())
	case "append":
		childAppend(os.Getenv("AUDIT_TEST_DIR"), false)
	case "record":
		childAppend(os.Getenv("AUDIT_TEST_DIR"), true)
	case "fsize":
		childFileSize(os.Getenv("AUDIT_TEST_DIR"))
	}
	os.Exit(3)
}

// childAppend appends from 8 goroutines forever, printing each seq once
// Append has returned (that is, once it is durable), or AppendRecord (once
// it is written) when record is set. With Append, a syncTracker sees every
// write and sync: an Append that returns before a completed sync covers its
// event is reported ("early: …") and ends the child.
func childAppend(dir string, record bool) {
	st := newSyncTracker()
	l, err := Open(Options{Dir: dir, Key: testKey, MaxFileBytes: 256 << 10, hooks: st.hooks()})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	for w := range 8 {
		go func() {
			for i := 0; ; i++ {
				typ, f := sampleFields(w + 8*i)
				app := l.Append
				if record {
					app = l.AppendRecord
				}
				ev, err := app(context.Background(), typ, f)
				if err != nil {
					fmt.Println("append:", err)
					os.Exit(2)
				}
				if !record {
					if err := st.check(ev.Hash); err != nil {
						fmt.Println("early:", err)
						os.Exit(4)
					}
				}
				mu.Lock()
				fmt.Fprintln(out, ev.Seq)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	select {}
}

// childFileSize appends under a small RLIMIT_FSIZE until the kernel refuses
// the write (EFBIG), as a full disk would refuse it, and reports the error.
func childFileSize(dir string) {
	signal.Ignore(syscall.SIGXFSZ) // get EFBIG instead of being killed
	l, err := Open(Options{Dir: dir})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	lim := syscall.Rlimit{Cur: 4096, Max: 4096}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		fmt.Println("setrlimit:", err)
		os.Exit(2)
	}
	for i := range 1000 {
		typ, f := sampleFields(i)
		if _, err = l.Append(context.Background(), typ, f); err != nil {
			break
		}
	}
	_, again := l.Append(context.Background(), "x", nil)
	fmt.Printf("unavailable=%v efbig=%v again=%v\n%v\n", errors.Is(err, ErrUnavailable), errors.Is(err, syscall.EFBIG), errors.Is(again, ErrUnavailable), err)
	os.Exit(0)
}

func child(t *testing.T, mode, dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AUDIT_TEST_CHILD="+mode, "AUDIT_TEST_DIR="+dir)
	return cmd
}

// TestSIGKILLWhileAppending kills a process in the middle of heavy appending;
// every event it was told is durable must be there, the log must verify up
// to the last whole line, and a new Open must continue the chain. With
// AppendRecord (the record tier, "record") the same holds for every event
// it was told is written: a crash of the daemon loses nothing.
func TestSIGKILLWhileAppending(t *testing.T) {
	for _, mode := range []string{"append", "record"} {
		t.Run(mode, func(t *testing.T) { testSIGKILL(t, mode) })
	}
}

func testSIGKILL(t *testing.T, mode string) {
	dir := filepath.Join(t.TempDir(), "audit")
	cmd := child(t, mode, dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var acked uint64
	deadline := time.Now().Add(10 * time.Second)
	for acked < 3000 && time.Now().Before(deadline) && sc.Scan() {
		s, err := strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil {
			t.Fatalf("child said %q", sc.Text())
		}
		acked = max(acked, s)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	for sc.Scan() {
		if s, err := strconv.ParseUint(sc.Text(), 10, 64); err == nil {
			acked = max(acked, s)
		}
	}
	cmd.Wait()
	if acked == 0 {
		t.Fatal("the child acknowledged no events")
	}

	rep, err := Verify(dir, testKey)
	if err != nil || rep.Failed() || rep.Events < acked {
		t.Fatalf("Verify after SIGKILL = %+v, %v (acknowledged through seq %d)", rep, err, acked)
	}
	t.Logf("acknowledged %d, on disk %d events in %d files, problem %q", acked, rep.Events, rep.Files, rep.Problem)

	l := openTest(t, Options{Dir: dir, Key: testKey, MaxFileBytes: 256 << 10})
	ev, err := l.Append(context.Background(), "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	wantSeq := rep.Events + 1
	if rep.Problem == ProblemTorn {
		wantSeq++ // log_recovered came first
	}
	if ev.Seq != wantSeq {
		t.Errorf("first seq after restart = %d, want %d", ev.Seq, wantSeq)
	}
	if rep2, err := Verify(dir, testKey); err != nil || rep2.Problem != "" || rep2.Events != ev.Seq {
		t.Fatalf("Verify after restart = %+v, %v", rep2, err)
	}
}

// TestFileSizeLimit: a real write failure (EFBIG under RLIMIT_FSIZE, which
// applies to root too) makes Append fail with ErrUnavailable and keep
// failing; reopening without the limit recovers the partial line.
func TestFileSizeLimit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	out, err := child(t, "fsize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "unavailable=true efbig=true again=true\n") {
		t.Fatalf("child reported:\n%s", out)
	}
	l := openTest(t, Options{Dir: dir})
	if _, err := l.Append(context.Background(), "x", nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if rep, err := Verify(dir, nil); err != nil || rep.Problem != "" {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}
