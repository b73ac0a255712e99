package audit

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkAppendSealing compares the cost of one record-tier append with
// and without sealing keys (issue 16: sealing adds no measurable cost per
// call, because seals are written on their own schedule, not per event).
// The disk's sync is a no-op here so that only the work of the log is
// measured; BenchmarkSeal gives the cost of one seal.
func BenchmarkAppendSealing(b *testing.B) {
	for _, sealed := range []bool{false, true} {
		name := "seals=off"
		if sealed {
			name = "seals=on"
		}
		b.Run(name, func(b *testing.B) {
			l := benchLog(b, sealed)
			ev := ToolCalled{Call: "c", AgentRun: "01JQ7R4S4S0QJ7GZP1S2RUNX", ServerLabel: "inventory-local",
				Epoch: "01JQ7R4S4S0QJ7GZP1S2XYZW", CatalogRevision: 13, Tool: "inventory_adjust", Decision: "allow"}
			for b.Loop() {
				if _, err := l.AppendRecord(context.Background(), TypeToolCalled, ev); err != nil {
					b.Fatal(err)
				}
			}
			if _, ok := l.Sealing(); ok != sealed {
				b.Fatalf("Sealing() = %v, want %v", ok, sealed)
			}
		})
	}
}

// BenchmarkSeal measures one scheduled seal (a log_sealed event signed with
// the current epoch's key, the next key derived, stored and the old one
// erased), after one event so that the seal is not skipped as empty.
func BenchmarkSeal(b *testing.B) {
	l := benchLog(b, true)
	for b.Loop() {
		if _, err := l.AppendRecord(context.Background(), TypeLogResumed, nil); err != nil {
			b.Fatal(err)
		}
		if err := l.Seal(context.Background(), SealSchedule); err != nil {
			b.Fatal(err)
		}
	}
}

func benchLog(b *testing.B, sealed bool) *Log {
	b.Helper()
	base := b.TempDir()
	opts := Options{Dir: filepath.Join(base, "audit"), Key: testKey,
		hooks: &hooks{sync: func(*os.File) error { return nil }}}
	if sealed {
		opts.SealKeys = SealKeyFile{Path: filepath.Join(base, "seal.key")}
		opts.AnchorPath = filepath.Join(base, "anchor.json")
	}
	l, err := newLog(opts)
	if err != nil {
		b.Fatal(err)
	}
	go l.run()
	b.Cleanup(func() { l.Close() })
	if sealed {
		if _, err := l.SetupSeals(context.Background(), false); err != nil {
			b.Fatal(err)
		}
	}
	return l
}
