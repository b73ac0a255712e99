//go:build !unix

package audit

import "time"

// cpuTime is not measured on this system: benchmarks report wall-clock
// throughput only.
func cpuTime() time.Duration { return 0 }
