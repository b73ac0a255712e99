//go:build !unix

package identity

import "time"

// processCPU reports 0: no CPU clock is read here.
func processCPU() time.Duration { return 0 }
