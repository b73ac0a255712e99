//go:build !linux

package bench

import (
	"runtime"
	"testing"
)

// BenchmarkIdle measures the daemon's idle CPU, wakeups and memory from
// /proc (idle_linux_test.go): Linux only.
func BenchmarkIdle(b *testing.B) {
	b.Skipf("the idle-cost benchmark reads the daemon's CPU and context switches from /proc, which %s does not have", runtime.GOOS)
}

// BenchmarkLoad measures calls from 30 and 100 agent runs at once
// (idle_linux_test.go): Linux only, as BenchmarkIdle.
func BenchmarkLoad(b *testing.B) {
	b.Skipf("the load benchmark shares the idle benchmark's Linux-only measuring code (/proc), which %s does not have", runtime.GOOS)
}
