package bench

import (
	"errors"
	"time"
)

// ErrNoProcStat is returned by SampleProc on systems without the Linux
// /proc file system, where the idle-cost benchmarks skip.
var ErrNoProcStat = errors.New("measuring a process's CPU, context switches and memory needs the Linux /proc file system")

// ProcSample is what one process had used at one moment (SampleProc).
type ProcSample struct {
	At  time.Time
	CPU time.Duration // utime + stime, all threads, exited ones included
	RSS int64         // resident set size, bytes
	// Switches holds the context switches of each live thread, by thread
	// id.
	Switches map[int]Switches
}

// Switches counts a thread's context switches (proc(5)): voluntary, when it
// blocked (slept, waited) and was later woken; nonvoluntary, when the
// kernel preempted it, which on a machine busy with other work happens
// without the process doing anything more.
type Switches struct {
	Voluntary, Nonvoluntary uint64
}

// Usage is what a process used between two samples.
type Usage struct {
	Window time.Duration
	CPU    time.Duration
	// Switches counts the context switches of the window: a thread alive
	// at both samples adds its difference, one started in the window all of
	// its own; the switches of a thread that exited in the window before
	// the second sample are not seen (the kernel keeps no total for them).
	Switches Switches
	RSS      int64 // at the second sample, bytes
}

// Since returns what the process used from the earlier sample prev to s.
func (s ProcSample) Since(prev ProcSample) Usage {
	u := Usage{Window: s.At.Sub(prev.At), CPU: s.CPU - prev.CPU, RSS: s.RSS}
	for tid, n := range s.Switches {
		p, ok := prev.Switches[tid]
		if !ok || p.Voluntary > n.Voluntary || p.Nonvoluntary > n.Nonvoluntary {
			p = Switches{} // started in the window (counts that fell: its id was reused)
		}
		u.Switches.Voluntary += n.Voluntary - p.Voluntary
		u.Switches.Nonvoluntary += n.Nonvoluntary - p.Nonvoluntary
	}
	return u
}

// CPUPercent is the CPU used as a percentage of one core over the window.
func (u Usage) CPUPercent() float64 {
	if u.Window <= 0 {
		return 0
	}
	return 100 * u.CPU.Seconds() / u.Window.Seconds()
}

// WakeupsPerSec is the context switches per second of the window,
// voluntary and nonvoluntary: each time a thread of the process went to
// sleep and was woken, or was preempted.
func (u Usage) WakeupsPerSec() float64 {
	return u.perSec(u.Switches.Voluntary + u.Switches.Nonvoluntary)
}

// PreemptedPerSec is the nonvoluntary context switches per second of the
// window, the part of WakeupsPerSec that other work on the machine adds.
func (u Usage) PreemptedPerSec() float64 {
	return u.perSec(u.Switches.Nonvoluntary)
}

func (u Usage) perSec(n uint64) float64 {
	if u.Window <= 0 {
		return 0
	}
	return float64(n) / u.Window.Seconds()
}
