//go:build unix

package audit

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkAppendCPU measures the CPU time (user + system, of the whole
// process, per event: cpu-µs/event) and the syncs per event of appends of a
// grant call's tool_called, signed: "record" through AppendRecord with the
// disk's sync a no-op (the log's own work: encoding, hashing, signing, the
// swap check, the write), "authority" through Append with fdatasync, from 1
// and from 8 goroutines (concurrent authority events share syncs).
func BenchmarkAppendCPU(b *testing.B) {
	ev := ToolCalled{Call: "01JQ7R4S4S0QJ7GZP1S2CALL", AgentRun: "01JQ7R4S4S0QJ7GZP1S2RUNX", ServerLabel: "inventory-local",
		Epoch: "01JQ7R4S4S0QJ7GZP1S2XYZW", CatalogRevision: 13, Tool: "inventory_adjust",
		ArgsDigest: "sha256:9f2c1d7e8a4b3c6d5e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d", ArgKeys: []string{"count", "sku"},
		Decision: "grant", Grant: "01JQ7R4S4S0QJ7GZP1S2GRNT"}
	for _, c := range []struct {
		name      string
		record    bool
		appenders int
	}{{"record", true, 1}, {"authority/1", false, 1}, {"authority/8", false, 8}} {
		b.Run(c.name, func(b *testing.B) {
			var syncs atomic.Int64
			syncHook := func(f *os.File) error {
				syncs.Add(1)
				if c.record {
					return nil
				}
				return syncData(f)
			}
			l, err := Open(Options{Dir: filepath.Join(b.TempDir(), "audit"), Key: testKey, hooks: &hooks{sync: syncHook}})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			app := l.Append
			if c.record {
				app = l.AppendRecord
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			s0, c0 := syncs.Load(), cpuTime()
			b.ResetTimer()
			for range c.appenders {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, err := app(context.Background(), TypeToolCalled, ev); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/event")
			b.ReportMetric(float64(syncs.Load()-s0)/float64(b.N), "syncs/event")
		})
	}
}
