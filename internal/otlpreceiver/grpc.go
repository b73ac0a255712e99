package otlpreceiver

import (
	"context"
	"net"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// StartGRPC is Start for OTLP over gRPC (without TLS): URL is
// http://127.0.0.1:PORT, as settings.telemetry.endpoint names it with
// protocol grpc.
func StartGRPC() (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{URL: "http://" + ln.Addr().String(), ln: ln, changed: make(chan struct{})}
	s := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(s, grpcTraces{r: r})
	collogs.RegisterLogsServiceServer(s, grpcLogs{r: r})
	colmetrics.RegisterMetricsServiceServer(s, grpcMetrics{r: r})
	r.grpc = s
	go s.Serve(ln)
	return r, nil
}

// record is update for a gRPC request: its metadata are kept as headers.
func (r *Receiver) record(ctx context.Context, f func()) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	r.count++
	f()
	h := map[string][]string{}
	for k, v := range md {
		h[k] = v
	}
	r.headers = append(r.headers, h)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

type grpcTraces struct {
	r *Receiver
	coltrace.UnimplementedTraceServiceServer
}

func (g grpcTraces) Export(ctx context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	g.r.record(ctx, func() {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				g.r.spans = append(g.r.spans, ss.Spans...)
			}
		}
	})
	return &coltrace.ExportTraceServiceResponse{}, nil
}

type grpcLogs struct {
	r *Receiver
	collogs.UnimplementedLogsServiceServer
}

func (g grpcLogs) Export(ctx context.Context, req *collogs.ExportLogsServiceRequest) (*collogs.ExportLogsServiceResponse, error) {
	g.r.record(ctx, func() {
		for _, rl := range req.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				g.r.logs = append(g.r.logs, sl.LogRecords...)
			}
		}
	})
	return &collogs.ExportLogsServiceResponse{}, nil
}

type grpcMetrics struct {
	r *Receiver
	colmetrics.UnimplementedMetricsServiceServer
}

func (g grpcMetrics) Export(ctx context.Context, req *colmetrics.ExportMetricsServiceRequest) (*colmetrics.ExportMetricsServiceResponse, error) {
	g.r.record(ctx, func() {
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					g.r.metrics = append(g.r.metrics, m.Name)
				}
			}
		}
	})
	return &colmetrics.ExportMetricsServiceResponse{}, nil
}
