package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/portcullis/portcullis/core/ids"
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
					Call: ids.CallID(fmt.Sprintf("%d-%d", w, i)), AgentRun: "01JQ7R4S4S0QJ7GZP1S2RUNX", ServerLabel: "inventory-local",
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

// BenchmarkVerifySealed is BenchmarkVerify on a log sealed every 10,000
// events, verified with the HMAC key, the verification key and the anchor.
func BenchmarkVerifySealed(b *testing.B) {
	const n, every = 1_000_000, 10_000
	base := b.TempDir()
	dir := filepath.Join(base, "audit")
	keys := SealKeyFile{Path: filepath.Join(base, "seal.key")}
	anchorPath := filepath.Join(base, "anchor.json")
	l, err := newLog(Options{Dir: dir, Key: testKey, Clock: newStepClock().Now, SealKeys: keys, AnchorPath: anchorPath,
		hooks: &hooks{sync: func(*os.File) error { return nil }}})
	if err != nil {
		b.Fatal(err)
	}
	canon, _ := canonicalFields(ToolCalled{Call: "c", AgentRun: "01JQ7R4S4S0QJ7GZP1S2RUNX", ServerLabel: "inventory-local", Tool: "inventory_adjust", Decision: "allow"})
	vk, err := l.setupLocked(false)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]item, 1000)
	for i := range batch {
		batch[i] = item{typ: TypeToolCalled, fields: canon}
	}
	for i := 0; i < n; i += len(batch) {
		if _, err := l.commitLocked(batch); err != nil {
			b.Fatal(err)
		}
		if (i+len(batch))%every == 0 {
			if err := l.sealNowLocked(SealSchedule); err != nil {
				b.Fatal(err)
			}
		}
	}
	l.w.f.Close()
	l.lock.Close()
	a, _, err := ReadAnchor(anchorPath)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var rep Report
	cpu0 := cpuTime()
	for b.Loop() {
		rep, err = VerifyWith(dir, VerifyOptions{Key: testKey, Seal: &vk, Anchor: &a})
		if err != nil || rep.Seals.Proven != n/every+1 {
			b.Fatalf("VerifyWith = %+v %+v, %v", rep, rep.Seals, err)
		}
	}
	b.ReportMetric(float64(rep.Events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if cpu := cpuTime() - cpu0; cpu > 0 {
		// The verifier is one goroutine; GC runs beside it.
		b.ReportMetric(float64(rep.Events)*float64(b.N)/cpu.Seconds(), "events/cpu-s")
	}
}

// BenchmarkSwapCheck measures what noticing a swapped file adds to every
// commit (not to every event: a commit holds all events queued meanwhile):
// two stats compared with the open files.
func BenchmarkSwapCheck(b *testing.B) {
	l, err := Open(Options{Dir: filepath.Join(b.TempDir(), "audit")})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(context.Background(), TypeLogResumed, nil); err != nil {
		b.Fatal(err) // opens head.json
	}
	// The writer is idle: its state is read here only.
	for b.Loop() {
		if files := l.swappedLocked(true); len(files) != 0 {
			b.Fatal(files)
		}
	}
}

// BenchmarkArgsSummary: the digest and member names of a tool call's
// arguments, as an agent usually sends them (canonical already: one pass,
// no transform) and with members out of order (canonicalised).
func BenchmarkArgsSummary(b *testing.B) {
	for _, bc := range []struct{ name, args string }{
		{"canonical", `{"count":2,"message":"ping","sku":"A-1"}`},
		{"unsorted", `{"sku":"A-1","message":"ping","count":2}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			args := json.RawMessage(bc.args)
			b.ReportAllocs()
			for b.Loop() {
				ArgsSummary(args)
			}
		})
	}
}
