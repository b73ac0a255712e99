package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/ids"
)

// Bounds of the pipeline. QueueSize events wait for the translating
// goroutine; past that, Observe drops them. The span and log processors
// each hold batchQueue items for the exporters; the span processor, when
// full, holds the translating goroutine (which is how the drops of a slow
// collector come to be counted at the queue), the log processor drops its
// oldest.
const (
	QueueSize     = 4096
	batchQueue    = 2048
	exportTimeout = 5 * time.Second
	// batchDelay is how long spans and log records wait to be sent in a
	// batch.
	batchDelay = time.Second
	// translateWindow is how long the translating goroutine lets events
	// gather once woken: one wake-up per window, not one per event, so
	// that a call's append wakes no goroutine most of the time.
	translateWindow = 20 * time.Millisecond
)

// Options tunes an Exporter; the zero value is production's.
type Options struct {
	// MetricInterval is how often metrics are exported (default 30 s).
	MetricInterval time.Duration
	// Version is Portcullis's version, the resource's service.version.
	Version string
}

// Stats counts what the export did since it started.
type Stats struct {
	// Queued is the number of events waiting to be translated.
	Queued int `json:"queued"`
	// Dropped counts events that were not exported: the queue was full,
	// or the export that carried them failed (a collector down, slow or
	// refusing).
	Dropped uint64 `json:"dropped"`
	// Exported counts spans and log records a collector accepted.
	Exported uint64 `json:"exported"`
	// LastError is the last export error ("" when none).
	LastError string `json:"lastError,omitempty"`
}

// Exporter is the telemetry pipeline of a daemon: an audit.Observer.
type Exporter struct {
	cfg   Config
	where string
	q     chan item
	stop  chan struct{} // closed by Shutdown; q is never closed (Observe may race it)
	kick  chan struct{} // wakes the translating goroutine (buffered 1)
	done  chan struct{}

	dropped  atomic.Uint64
	exported atomic.Uint64
	lastErr  atomic.Pointer[string]
	closed   atomic.Bool

	tp *sdktrace.TracerProvider
	lp *sdklog.LoggerProvider
	mp *sdkmetric.MeterProvider
	tr translator
}

// item is one entry of the queue: an audit event, or the argument values
// of a call of a server that exports them.
type item struct {
	ev   audit.Event
	call ids.CallID      // with args
	args json.RawMessage // argument values of call
}

// quietErrors keeps the SDK's export errors out of the daemon's standard
// error (one line per failed batch while a collector is down): each is
// counted, and the last one shown in status (Stats.LastError).
var quietErrors sync.Once

// New starts the export that cfg describes. The exporters do not connect
// until they have something to send: a collector that is down is no error
// here; its drops are counted.
func New(ctx context.Context, cfg Config, o Options) (*Exporter, error) {
	quietErrors.Do(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })
	x := &Exporter{cfg: cfg, where: cfg.Where(), q: make(chan item, QueueSize), stop: make(chan struct{}), kick: make(chan struct{}, 1), done: make(chan struct{})}
	res, err := x.resource(ctx, o.Version)
	if err != nil {
		return nil, err
	}
	spans, logs, metrics, err := x.exporters(ctx)
	if err != nil {
		return nil, err
	}
	x.tp = sdktrace.NewTracerProvider(sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(sdktrace.NewBatchSpanProcessor(&countSpans{SpanExporter: spans, x: x},
			sdktrace.WithBlocking(), sdktrace.WithMaxQueueSize(batchQueue), sdktrace.WithBatchTimeout(batchDelay),
			sdktrace.WithExportTimeout(exportTimeout))))
	x.lp = sdklog.NewLoggerProvider(sdklog.WithResource(res),
		sdklog.WithProcessor(sdklog.NewBatchProcessor(&countLogs{Exporter: logs, x: x},
			sdklog.WithMaxQueueSize(batchQueue), sdklog.WithExportInterval(batchDelay), sdklog.WithExportTimeout(exportTimeout))))
	interval := o.MetricInterval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	x.mp = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(&countMetrics{Exporter: metrics, x: x},
			sdkmetric.WithInterval(interval), sdkmetric.WithTimeout(exportTimeout))))
	const scope = "github.com/portcullis/portcullis"
	if err := x.tr.init(x.tp.Tracer(scope), x.lp.Logger(scope), x.mp.Meter(scope), cfg.Arguments); err != nil {
		return nil, err
	}
	if _, err := x.tr.meter.Int64ObservableCounter("portcullis.telemetry.dropped", metric.WithUnit("{event}"),
		metric.WithDescription("Audit events not exported: the queue was full or their export failed"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(x.dropped.Load()))
			return nil
		})); err != nil {
		return nil, err
	}
	go x.run()
	return x, nil
}

func (x *Exporter) resource(ctx context.Context, version string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", "portcullis")}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	for k, v := range x.cfg.Resource {
		attrs = append(attrs, attribute.String(k, v))
	}
	opts := []resource.Option{resource.WithAttributes(attrs...), resource.WithHost()}
	if x.cfg.FromEnv {
		opts = append(opts, resource.WithFromEnv()) // after ours: the variables win
	}
	res, err := resource.New(ctx, opts...)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: the resource: %w", err)
	}
	return res, nil
}

// exporters makes the three OTLP exporters of cfg's protocol. Retries are
// off: an export that fails is dropped and counted, and the next batch
// tries again.
func (x *Exporter) exporters(ctx context.Context) (sdktrace.SpanExporter, sdklog.Exporter, sdkmetric.Exporter, error) {
	c := x.cfg
	var base, host string
	insecure := false
	if !c.FromEnv {
		u, err := url.Parse(c.Endpoint)
		if err != nil || u.Host == "" {
			return nil, nil, nil, fmt.Errorf("telemetry: the endpoint %q is not a URL with a host", c.Endpoint)
		}
		base, host, insecure = strings.TrimSuffix(c.Endpoint, "/"), u.Host, u.Scheme == "http"
	}
	if c.Protocol == config.ProtocolGRPC {
		var to []otlptracegrpc.Option
		var lo []otlploggrpc.Option
		var mo []otlpmetricgrpc.Option
		to = append(to, otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}), otlptracegrpc.WithTimeout(exportTimeout))
		lo = append(lo, otlploggrpc.WithRetry(otlploggrpc.RetryConfig{Enabled: false}), otlploggrpc.WithTimeout(exportTimeout))
		mo = append(mo, otlpmetricgrpc.WithRetry(otlpmetricgrpc.RetryConfig{Enabled: false}), otlpmetricgrpc.WithTimeout(exportTimeout))
		if !c.FromEnv {
			to = append(to, otlptracegrpc.WithEndpoint(host), otlptracegrpc.WithHeaders(c.Headers))
			lo = append(lo, otlploggrpc.WithEndpoint(host), otlploggrpc.WithHeaders(c.Headers))
			mo = append(mo, otlpmetricgrpc.WithEndpoint(host), otlpmetricgrpc.WithHeaders(c.Headers))
			if insecure {
				to, lo, mo = append(to, otlptracegrpc.WithInsecure()), append(lo, otlploggrpc.WithInsecure()), append(mo, otlpmetricgrpc.WithInsecure())
			}
		}
		te, err := otlptracegrpc.New(ctx, to...)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("telemetry: the trace exporter: %w", err)
		}
		le, err := otlploggrpc.New(ctx, lo...)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("telemetry: the log exporter: %w", err)
		}
		me, err := otlpmetricgrpc.New(ctx, mo...)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("telemetry: the metric exporter: %w", err)
		}
		return te, le, me, nil
	}
	to := []otlptracehttp.Option{otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}), otlptracehttp.WithTimeout(exportTimeout)}
	lo := []otlploghttp.Option{otlploghttp.WithRetry(otlploghttp.RetryConfig{Enabled: false}), otlploghttp.WithTimeout(exportTimeout)}
	mo := []otlpmetrichttp.Option{otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: false}), otlpmetrichttp.WithTimeout(exportTimeout)}
	if !c.FromEnv {
		to = append(to, otlptracehttp.WithEndpointURL(base+"/v1/traces"), otlptracehttp.WithHeaders(c.Headers))
		lo = append(lo, otlploghttp.WithEndpointURL(base+"/v1/logs"), otlploghttp.WithHeaders(c.Headers))
		mo = append(mo, otlpmetrichttp.WithEndpointURL(base+"/v1/metrics"), otlpmetrichttp.WithHeaders(c.Headers))
	}
	te, err := otlptracehttp.New(ctx, to...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("telemetry: the trace exporter: %w", err)
	}
	le, err := otlploghttp.New(ctx, lo...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("telemetry: the log exporter: %w", err)
	}
	me, err := otlpmetrichttp.New(ctx, mo...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("telemetry: the metric exporter: %w", err)
	}
	return te, le, me, nil
}

// Observe queues ev for export; when the queue is full it is dropped and
// counted. It never waits (audit.Options.Observer).
func (x *Exporter) Observe(ev audit.Event) {
	x.enqueue(item{ev: ev})
}

// Arguments queues the argument values of call, a call whose tool_called
// event was observed, for its span; they are kept only for servers listed
// in settings.telemetry.arguments (ExportsArguments).
func (x *Exporter) Arguments(call ids.CallID, args json.RawMessage) {
	x.enqueue(item{call: call, args: args})
}

// ExportsArguments reports whether the argument values of label's calls
// are exported.
func (x *Exporter) ExportsArguments(label string) bool {
	return x != nil && x.tr.args[label]
}

func (x *Exporter) enqueue(it item) {
	if x.closed.Load() {
		return
	}
	select {
	case x.q <- it:
	default:
		x.dropped.Add(1)
		return
	}
	select {
	case x.kick <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// Where names the destination (Config.Where).
func (x *Exporter) Where() string { return x.where }

// Stats reports the counts of the export so far.
func (x *Exporter) Stats() Stats {
	s := Stats{Queued: len(x.q), Dropped: x.dropped.Load(), Exported: x.exported.Load()}
	if e := x.lastErr.Load(); e != nil {
		s.LastError = *e
	}
	return s
}

// run translates the queued events: woken by the first event after it
// drained the queue, it lets events gather for translateWindow, then
// translates all it finds. Idle, it sleeps: no timer ticks.
func (x *Exporter) run() {
	defer close(x.done)
	window := time.NewTimer(translateWindow)
	window.Stop()
	for {
		select {
		case <-x.kick:
		case <-x.stop:
			x.drain() // what was queued before Shutdown
			return
		}
		window.Reset(translateWindow)
		select {
		case <-window.C:
		case <-x.stop:
			window.Stop()
			x.drain()
			return
		}
		x.drain()
	}
}

// drain translates what the queue holds now.
func (x *Exporter) drain() {
	for {
		select {
		case it := <-x.q:
			x.translate(it)
		default:
			return
		}
	}
}

func (x *Exporter) translate(it item) {
	if it.call != "" {
		x.tr.arguments(it.call, it.args)
		return
	}
	x.tr.event(it.ev)
}

// Shutdown stops taking events, translates those queued, and sends what
// is left within ctx; spans of calls still open are ended as they are.
func (x *Exporter) Shutdown(ctx context.Context) error {
	if x.closed.Swap(true) {
		return nil
	}
	close(x.stop)
	select {
	case <-x.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	x.tr.endOpen()
	return errors.Join(x.tp.Shutdown(ctx), x.lp.Shutdown(ctx), x.mp.Shutdown(ctx))
}

// ForceFlush sends what waits in the processors now (tests).
func (x *Exporter) ForceFlush(ctx context.Context) error {
	return errors.Join(x.tp.ForceFlush(ctx), x.lp.ForceFlush(ctx), x.mp.ForceFlush(ctx))
}

func (x *Exporter) failed(n int, err error) {
	x.dropped.Add(uint64(n))
	s := err.Error()
	x.lastErr.Store(&s)
}

// countSpans counts the spans a collector took, and those of failed
// exports as dropped.
type countSpans struct {
	sdktrace.SpanExporter
	x *Exporter
}

func (c *countSpans) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		c.x.failed(len(spans), err)
	} else {
		c.x.exported.Add(uint64(len(spans)))
	}
	return err
}

type countLogs struct {
	sdklog.Exporter
	x *Exporter
}

func (c *countLogs) Export(ctx context.Context, rs []sdklog.Record) error {
	err := c.Exporter.Export(ctx, rs)
	if err != nil {
		c.x.failed(len(rs), err)
	} else {
		c.x.exported.Add(uint64(len(rs)))
	}
	return err
}

type countMetrics struct {
	sdkmetric.Exporter
	x *Exporter
}

func (c *countMetrics) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	err := c.Exporter.Export(ctx, rm)
	if err != nil {
		s := err.Error()
		c.x.lastErr.Store(&s)
	}
	return err
}
