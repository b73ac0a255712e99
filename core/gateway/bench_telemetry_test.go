package gateway

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/telemetry"
	"github.com/portcullis/portcullis/internal/otlpreceiver"
)

// BenchmarkToolCallTelemetry is BenchmarkToolCallAllow (a real audit log,
// record tier) with the telemetry export off, on to an OTLP/HTTP receiver
// on loopback (in this process: it decodes the protobuf and keeps
// nothing), and on to a collector that is down, in the same run, with
// calls back to back (b2b: the export's work competes with the calls for
// the CPUs) and paced 2 ms apart (paced: the latency of a call as an agent
// makes them) (docs/BENCHMARKS.md, "Telemetry").
func BenchmarkToolCallTelemetry(b *testing.B) {
	r, err := otlpreceiver.StartDiscarding()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	allow := func(string) config.Policy { return config.PolicyAllow }
	type run struct {
		name, endpoint string
		pace           time.Duration
	}
	var runs []run
	for _, p := range []struct {
		name string
		pace time.Duration
	}{{"b2b", 0}, {"paced", 2 * time.Millisecond}} {
		for _, e := range []struct{ name, endpoint string }{{"off", ""}, {"on", r.URL}, {"down", down}} {
			runs = append(runs, run{p.name + "/" + e.name, e.endpoint, p.pace})
		}
	}
	for _, c := range runs {
		b.Run(c.name, func(b *testing.B) {
			var x *telemetry.Exporter
			o := audit.Options{}
			if c.endpoint != "" {
				x, err = telemetry.New(context.Background(), telemetry.Config{Endpoint: c.endpoint, Protocol: config.ProtocolHTTP}, telemetry.Options{})
				if err != nil {
					b.Fatal(err)
				}
				o.Observer = x
			}
			dir, err := os.MkdirTemp("", "gateway-bench-audit-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			o.Dir = dir
			l, err := audit.Open(o)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			benchToolCallPaced(b, l, allow, c.pace)
			if x != nil {
				b.StopTimer()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = x.Shutdown(ctx)
				st := x.Stats()
				b.ReportMetric(float64(st.Dropped), "dropped")
				b.ReportMetric(float64(st.Exported), "exported")
			}
		})
	}
}
