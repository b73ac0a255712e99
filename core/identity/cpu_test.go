package identity

import (
	"testing"
	"time"
)

// cpuClock reads the process's CPU time (user + system), so that a
// benchmark on a loaded machine also reports what it costs, not only how
// long it waited for a core.
type cpuClock struct{ start time.Duration }

func startCPU() cpuClock { return cpuClock{processCPU()} }

// report adds cpu-ms/op: CPU time over the loop per iteration.
func (c cpuClock) report(b *testing.B) {
	if now := processCPU(); b.N > 0 && now > 0 {
		b.ReportMetric(float64(now-c.start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	}
}
