package otlpreceiver

import (
	"context"
	"net"
	"net/http"

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

// headers are the metadata of a gRPC request, kept as its headers (keys in
// lower case, as gRPC has them).
func headers(ctx context.Context) http.Header {
	md, _ := metadata.FromIncomingContext(ctx)
	return http.Header(md.Copy())
}

type grpcTraces struct {
	r *Receiver
	coltrace.UnimplementedTraceServiceServer
}

func (g grpcTraces) Export(ctx context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	g.r.update(headers(ctx), func() { g.r.keepSpans(req) })
	return &coltrace.ExportTraceServiceResponse{}, nil
}

type grpcLogs struct {
	r *Receiver
	collogs.UnimplementedLogsServiceServer
}

func (g grpcLogs) Export(ctx context.Context, req *collogs.ExportLogsServiceRequest) (*collogs.ExportLogsServiceResponse, error) {
	g.r.update(headers(ctx), func() { g.r.keepLogs(req) })
	return &collogs.ExportLogsServiceResponse{}, nil
}

type grpcMetrics struct {
	r *Receiver
	colmetrics.UnimplementedMetricsServiceServer
}

func (g grpcMetrics) Export(ctx context.Context, req *colmetrics.ExportMetricsServiceRequest) (*colmetrics.ExportMetricsServiceResponse, error) {
	g.r.update(headers(ctx), func() { g.r.keepMetrics(req) })
	return &colmetrics.ExportMetricsServiceResponse{}, nil
}
