package bench

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/harness"
)

// BenchmarkEchoCall calls the echo tool of the Go echo server b.N times per
// path (direct, socat, supergateway, portcullis) with 1 and 8 concurrent
// callers, reporting p50 and p99 latency (µs) and calls/s. The relaybench
// command runs the same measurement in alternating rounds for
// docs/BENCHMARKS.md.
func BenchmarkEchoCall(b *testing.B) {
	ctx := b.Context()
	root, err := harness.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	e := Env{Work: b.TempDir()}
	if e.Portcullis, err = harness.BuildPortcullis(ctx, root, e.Work); err != nil {
		b.Fatal(err)
	}
	if e.Echo, err = harness.BuildServer(ctx, root, e.Work, "echo", ""); err != nil {
		b.Fatal(err)
	}
	if e.NPM, err = harness.NPM(root); errors.Is(err, harness.ErrNoNPM) {
		b.Logf("skipping supergateway: %v", err)
		e.NPM = ""
	} else if err != nil {
		b.Fatal(err)
	}
	type opener struct {
		name string
		open func() (*Path, error)
	}
	for _, o := range []opener{
		{"direct", func() (*Path, error) { return Direct(ctx, e) }},
		{"socat", func() (*Path, error) { return Socat(ctx, e) }},
		{"supergateway", func() (*Path, error) { return Supergateway(ctx, e) }},
		{"portcullis", func() (*Path, error) { return Portcullis(ctx, e) }},
	} {
		if o.name == "supergateway" && e.NPM == "" {
			continue
		}
		p, err := o.open()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Calls(ctx, p.Session, 100, 8); err != nil { // warm up
			p.Close()
			b.Fatal(err)
		}
		for _, callers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/callers=%d", o.name, callers), func(b *testing.B) {
				b.ResetTimer()
				batch, err := Calls(ctx, p.Session, b.N, callers)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				s := Summarize([]Batch{batch})
				b.ReportMetric(float64(s.P50)/float64(time.Microsecond), "p50-µs")
				b.ReportMetric(float64(s.P99)/float64(time.Microsecond), "p99-µs")
				b.ReportMetric(s.CallsPerSec, "calls/s")
			})
		}
		p.Close()
	}
}

// Without a Secret Service the credentialed path measures nothing and
// says why, so that relaybench prints the reason instead of a figure.
func TestPortcullisCredNeedsSecretService(t *testing.T) {
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	p, err := PortcullisCred(t.Context(), Env{Work: t.TempDir()})
	if !errors.Is(err, ErrNoSecretService) || p != nil {
		t.Fatalf("PortcullisCred without a session bus = %v, %v; want ErrNoSecretService", p, err)
	}
}
