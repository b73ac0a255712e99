// Package otlpreceiver is an OTLP receiver for tests: it decodes the
// protobuf requests an OpenTelemetry SDK sends to /v1/traces, /v1/logs and
// /v1/metrics (or over gRPC, StartGRPC) and keeps them, so that a test can look for what Portcullis
// exported. It listens on loopback only.
package otlpreceiver

import (
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Receiver is a running OTLP/HTTP endpoint.
type Receiver struct {
	URL  string // http://127.0.0.1:PORT, the base URL for settings.telemetry.endpoint
	srv  *http.Server
	grpc *grpc.Server // for StartGRPC, in place of srv
	ln   net.Listener

	mu      sync.Mutex
	spans   []*tracepb.Span
	logs    []*logspb.LogRecord
	metrics []string // names of the metrics received
	headers []http.Header
	changed chan struct{}
	// discard: count what arrives, keep nothing (benchmarks).
	discard bool
	count   int
}

// Start listens on a loopback port.
func Start() (*Receiver, error) { return start(false) }

// StartDiscarding is Start for a receiver that decodes what it receives
// and counts the requests (Count), keeping nothing: a collector that costs
// what decoding costs, for benchmarks.
func StartDiscarding() (*Receiver, error) { return start(true) }

func start(discard bool) (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{URL: "http://" + ln.Addr().String(), ln: ln, changed: make(chan struct{}), discard: discard}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, q *http.Request) {
		var req coltrace.ExportTraceServiceRequest
		if r.decode(w, q, &req) {
			r.update(q.Header.Clone(), func() { r.keepSpans(&req) })
			r.reply(w, &coltrace.ExportTraceServiceResponse{})
		}
	})
	mux.HandleFunc("POST /v1/logs", func(w http.ResponseWriter, q *http.Request) {
		var req collogs.ExportLogsServiceRequest
		if r.decode(w, q, &req) {
			r.update(q.Header.Clone(), func() { r.keepLogs(&req) })
			r.reply(w, &collogs.ExportLogsServiceResponse{})
		}
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, q *http.Request) {
		var req colmetrics.ExportMetricsServiceRequest
		if r.decode(w, q, &req) {
			r.update(q.Header.Clone(), func() { r.keepMetrics(&req) })
			r.reply(w, &colmetrics.ExportMetricsServiceResponse{})
		}
	})
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

func (r *Receiver) decode(w http.ResponseWriter, q *http.Request, m proto.Message) bool {
	var body io.Reader = q.Body
	if q.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(q.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return false
		}
		body = z
	}
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err == nil && q.Header.Get("Content-Type") != "application/x-protobuf" {
		err = fmt.Errorf("content type %q, want application/x-protobuf", q.Header.Get("Content-Type"))
	}
	if err == nil {
		err = proto.Unmarshal(b, m)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// update counts a request and, unless the receiver discards, runs keep
// (which adds what the request carries) and keeps its headers, under mu;
// Wait's callers are woken.
func (r *Receiver) update(h http.Header, keep func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count++
	if r.discard {
		return
	}
	keep()
	r.headers = append(r.headers, h)
	close(r.changed)
	r.changed = make(chan struct{})
}

// keepSpans, keepLogs and keepMetrics add what an export request of
// their signal carries, over HTTP or gRPC; r.mu is held (update).
func (r *Receiver) keepSpans(req *coltrace.ExportTraceServiceRequest) {
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
}

func (r *Receiver) keepLogs(req *collogs.ExportLogsServiceRequest) {
	for _, rl := range req.ResourceLogs {
		for _, sl := range rl.ScopeLogs {
			r.logs = append(r.logs, sl.LogRecords...)
		}
	}
}

func (r *Receiver) keepMetrics(req *colmetrics.ExportMetricsServiceRequest) {
	for _, rm := range req.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				r.metrics = append(r.metrics, m.Name)
			}
		}
	}
}

func (r *Receiver) reply(w http.ResponseWriter, m proto.Message) {
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

// Count is the number of requests decoded.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Close stops the receiver.
func (r *Receiver) Close() error {
	if r.grpc != nil {
		r.grpc.Stop()
		return nil
	}
	return r.srv.Close()
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// Logs returns the log records received so far.
func (r *Receiver) Logs() []*logspb.LogRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*logspb.LogRecord(nil), r.logs...)
}

// Metrics returns the names of the metrics received so far, once per
// export.
func (r *Receiver) Metrics() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.metrics...)
}

// Headers returns the headers of each request received.
func (r *Receiver) Headers() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.headers...)
}

// Wait returns once ok holds of the receiver, or false after d.
func (r *Receiver) Wait(d time.Duration, ok func(*Receiver) bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		if ok(r) {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return ok(r)
		}
	}
}

// Attr returns the attribute key of attrs as a string ("" when absent):
// strings as they are, integers in decimal, arrays joined with commas.
func Attr(attrs []*commonpb.KeyValue, key string) string {
	for _, a := range attrs {
		if a.Key == key {
			return value(a.Value)
		}
	}
	return ""
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		s := ""
		for i, e := range x.ArrayValue.Values {
			if i > 0 {
				s += ","
			}
			s += value(e)
		}
		return s
	}
	return ""
}
