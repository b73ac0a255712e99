//go:build linux

package bench

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// The command name may hold spaces and parentheses: utime and stime are
// counted from the last ')'.
func TestParseStatCPU(t *testing.T) {
	line := []byte("4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 0 0 20 0 9 0 1234 0 0\n")
	got, err := parseStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 325 * clockTick; got != want {
		t.Fatalf("parseStatCPU = %v, want %v (250 + 75 ticks)", got, want)
	}
	for _, bad := range []string{"4242 no-name S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 0 0 0 0 0 u 75 0"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q) gave no error", bad)
		}
	}
}

func TestParseStatus(t *testing.T) {
	status := []byte("Name:\tportcullis\nVmRSS:\t   18432 kB\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n")
	if kb, err := parseStatusKB(status, "VmRSS"); err != nil || kb != 18432 {
		t.Errorf("VmRSS = %d, %v; want 18432", kb, err)
	}
	if n, err := parseStatusCount(status, "voluntary_ctxt_switches"); err != nil || n != 120 {
		t.Errorf("voluntary_ctxt_switches = %d, %v; want 120", n, err)
	}
	if n, err := parseStatusCount(status, "nonvoluntary_ctxt_switches"); err != nil || n != 7 {
		t.Errorf("nonvoluntary_ctxt_switches = %d, %v; want 7", n, err)
	}
	if _, err := parseStatusKB([]byte("VmRSS:\t12 MB\n"), "VmRSS"); err == nil {
		t.Error("a VmRSS not in kB gave no error")
	}
	if _, err := parseStatusCount([]byte("Name:\tx\n"), "voluntary_ctxt_switches"); err == nil {
		t.Error("a missing line gave no error")
	}
}

// A thread alive at both samples adds its difference; one that started in
// the window (a new id, or an id reused with a smaller count) all of its
// own; one that exited adds nothing.
func TestUsageSince(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := ProcSample{At: t0, CPU: 2 * time.Second, Switches: map[int]Switches{10: {100, 3}, 11: {50, 1}, 12: {900, 20}, 13: {5, 0}}}
	cur := ProcSample{At: t0.Add(10 * time.Second), CPU: 2*time.Second + 30*time.Millisecond, RSS: 20 << 20,
		Switches: map[int]Switches{10: {125, 8}, 11: {50, 1}, 12: {40, 0}, 14: {7, 1}}}
	u := cur.Since(prev)
	if want := (Switches{Voluntary: 25 + 0 + 40 + 7, Nonvoluntary: 5 + 0 + 0 + 1}); u.Switches != want {
		t.Errorf("Switches = %+v, want %+v", u.Switches, want)
	}
	if got := u.CPUPercent(); got < 0.299 || got > 0.301 {
		t.Errorf("CPUPercent = %v, want 0.3 (30 ms over 10 s)", got)
	}
	if got := u.WakeupsPerSec(); got != 7.8 {
		t.Errorf("WakeupsPerSec = %v, want 7.8", got)
	}
	if got := u.PreemptedPerSec(); got != 0.6 {
		t.Errorf("PreemptedPerSec = %v, want 0.6", got)
	}
	if u.RSS != 20<<20 {
		t.Errorf("RSS = %d, want the second sample's", u.RSS)
	}
}

// Sampling this test process itself: a thread that sleeps in the kernel 50
// times switches at least 50 times, and is found by its thread id; memory
// touched shows in VmRSS.
func TestSampleProcSelf(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := syscall.Gettid()
	s0, err := SampleProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		ts := syscall.Timespec{Nsec: int64(time.Millisecond)}
		if err := syscall.Nanosleep(&ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	mem := make([]byte, 64<<20)
	for i := range mem {
		mem[i] = 1
	}
	s1, err := SampleProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := s1.Switches[tid].Voluntary - s0.Switches[tid].Voluntary; d < 50 {
		t.Errorf("thread %d switched voluntarily %d times over 50 sleeps; samples %+v → %+v", tid, d, s0.Switches[tid], s1.Switches[tid])
	}
	if u := s1.Since(s0); u.Switches.Voluntary < 50 {
		t.Errorf("the process switched voluntarily %d times over 50 sleeps of one thread", u.Switches.Voluntary)
	}
	if s1.RSS < s0.RSS+32<<20 {
		t.Errorf("VmRSS %d → %d bytes after touching 64 MiB", s0.RSS, s1.RSS)
	}
	if s1.CPU < s0.CPU {
		t.Errorf("CPU went back from %v to %v", s0.CPU, s1.CPU)
	}
	runtime.KeepAlive(mem)
}
