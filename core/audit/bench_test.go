package audit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkAppendParallel measures durable (fsynced) tool_called intents per
// second with 8 concurrent appenders sharing group commits. Target: ≥ 2,000
// events/s.
func BenchmarkAppendParallel(b *testing.B) {
	l, err := Open(Options{Dir: filepath.Join(b.TempDir(), "audit"), Key: testKey})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	digest, keys := ArgsSummary([]byte(`{"sku":"A-1","count":2,"warehouse":"east"}`))
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range 8 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				_, err := l.Append(context.Background(), TypeToolCalled, ToolCalled{
					Call: fmt.Sprintf("%d-%d", w, i), AgentRun: "01JQ7R4S4S0QJ7GZP1S2RUNX", ServerLabel: "inventory-local",
					Epoch: "01JQ7R4S4S0QJ7GZP1S2XYZW", CatalogRevision: 13, Tool: "inventory_adjust",
					ArgsDigest: digest, ArgKeys: keys, Decision: "grant", Grant: "01JQ7R4S4S0QJ7GZP1S2GRNT"})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkVerify measures Verify over a signed log of 1,000,000 events
// (about 400 MB in 64 MiB files). Target: ≥ 200,000 events/s.
func BenchmarkVerify(b *testing.B) {
	const n = 1_000_000
	dir := filepath.Join(b.TempDir(), "audit")
	generate(b, dir, n)
	var size int64
	files, _ := listFiles(dir)
	for _, f := range files {
		st, _ := os.Stat(f.path)
		size += st.Size()
	}
	b.SetBytes(size)
	for b.Loop() {
		rep, err := Verify(dir, testKey)
		if err != nil || rep.Events != n {
			b.Fatalf("Verify = %+v, %v", rep, err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// generate writes n signed events through the Log's own commit path in
// batches of 1,000, without fsync, to build a large log quickly.
func generate(b *testing.B, dir string, n int) {
	b.Helper()
	l, err := newLog(Options{Dir: dir, Key: testKey, Clock: newStepClock().Now,
		hooks: &hooks{sync: func(*os.File) error { return nil }}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { l.w.f.Close(); l.lock.Close() }()
	var templates []item
	for i := range 64 {
		typ, f := sampleFields(i)
		canon, err := canonicalFields(f)
		if err != nil {
			b.Fatal(err)
		}
		templates = append(templates, item{typ: typ, fields: canon})
	}
	batch := make([]item, 0, 1000)
	for i := 0; i < n; {
		batch = batch[:0]
		for ; len(batch) < cap(batch) && i < n; i++ {
			batch = append(batch, templates[i%len(templates)])
		}
		if _, err := l.commitLocked(batch); err != nil {
			b.Fatal(err)
		}
	}
}
