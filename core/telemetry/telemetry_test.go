package telemetry_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/telemetry"
	"github.com/portcullis/portcullis/internal/otlpreceiver"
)

const (
	run   = "01RUN000000000000000000000"
	epoch = "01EPOCH0000000000000000000"
)

// start opens an audit log whose events are exported to endpoint.
func startExport(t *testing.T, cfg telemetry.Config) (*audit.Log, *telemetry.Exporter) {
	t.Helper()
	x, err := telemetry.New(context.Background(), cfg, telemetry.Options{MetricInterval: 200 * time.Millisecond, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = x.Shutdown(ctx)
	})
	l, err := audit.Open(audit.Options{Dir: t.TempDir(), Observer: x})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, x
}

func appendAll(t *testing.T, l *audit.Log, evs ...any) {
	t.Helper()
	for i := 0; i < len(evs); i += 2 {
		if _, err := l.Append(context.Background(), evs[i].(string), evs[i+1]); err != nil {
			t.Fatal(err)
		}
	}
}

// aCall is an approval, the call its grant let through, and a refused one,
// as the gateway and the daemon write them; the server was started with a
// secret on its command line and in its environment.
func aCall(t *testing.T, l *audit.Log) {
	rec, _ := json.Marshal(identity.Record{ServerLabel: "inv", LaunchCommand: []string{"/bin/inv", "--token=SEKRIT-ARG"},
		Environment: map[string]string{"API_KEY": "SEKRIT-ENV"}, EntryDigest: "sha256:entry", Epoch: epoch,
		ResolvedExecutable: identity.FileDigest{Path: "/bin/inv", SHA256: "sha256:exe"}})
	appendAll(t, l,
		audit.TypeServerStarted, audit.ServerStarted{ServerLabel: "inv", AgentRun: run, Epoch: epoch, PID: 42, Execution: rec},
		audit.TypeApprovalRequested, audit.ApprovalRequested{Request: "req1", AgentRun: run, ServerLabel: "inv", Epoch: epoch, CatalogRevision: 3, ToolScope: []string{"restock"}},
		audit.TypeApprovalGranted, audit.ApprovalGranted{Decider: audit.Decider{Channel: "app", PID: 4242, Executable: "/Applications/Portcullis"}, Request: "req1", Grant: "grt1", AgentRun: run, ServerLabel: "inv", Epoch: epoch, ToolScope: []string{"restock"}, ExpiresWhen: "agent-run-ends"},
		audit.TypeToolCalled, audit.ToolCalled{Call: "call1", AgentRun: run, ServerLabel: "inv", Epoch: epoch, CatalogRevision: 3, Tool: "restock",
			ArgsDigest: "sha256:args", ArgKeys: []string{"sku"}, Decision: "grant", Grant: "grt1"},
	)
}

func finish(t *testing.T, l *audit.Log) {
	appendAll(t, l,
		audit.TypeToolCompleted, audit.ToolCompleted{Call: "call1", AgentRun: run, ServerLabel: "inv", Epoch: epoch, Tool: "restock", Outcome: "ok", DurationMS: 3},
		audit.TypeCallRefused, audit.CallRefused{AgentRun: run, ServerLabel: "inv", Tool: "delete", Kind: "approval_denied", CurrentEpoch: epoch, Request: "req2"},
	)
}

func flush(t *testing.T, x *telemetry.Exporter) {
	t.Helper()
	// The queue is drained by the exporter's goroutine; give it the time
	// to, then push what the processors hold.
	deadline := time.Now().Add(10 * time.Second)
	for x.Stats().Queued > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the event being translated
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = x.ForceFlush(ctx)
}

// TestCallSpanReachesReceiver: a call's span reaches a real OTLP/HTTP
// receiver with the MCP and GenAI attributes, its epoch, catalog revision,
// decision and grant, linked to the span of the wait on the person; the
// refusal and the approval are log records in their spans; metrics
// arrive; the configured headers are sent.
func TestCallSpanReachesReceiver(t *testing.T) {
	for _, p := range []string{config.ProtocolHTTP, config.ProtocolGRPC} {
		t.Run(p, func(t *testing.T) { callSpanReachesReceiver(t, p) })
	}
}

func callSpanReachesReceiver(t *testing.T, protocol string) {
	start := otlpreceiver.Start
	if protocol == config.ProtocolGRPC {
		start = otlpreceiver.StartGRPC
	}
	r, err := start()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, x := startExport(t, telemetry.Config{Endpoint: r.URL, Protocol: protocol, Headers: map[string]string{"x-team-token": "t0k"},
		Resource: map[string]string{"team": "payments"}})
	aCall(t, l)
	finish(t, l)
	flush(t, x)
	if !r.Wait(10*time.Second, func(r *otlpreceiver.Receiver) bool { return len(r.Spans()) >= 3 && len(r.Logs()) >= 4 }) {
		t.Fatalf("received %d spans, %d log records; want 3 and 4", len(r.Spans()), len(r.Logs()))
	}
	var call, wait, refused map[string]string
	var callLinks [][]byte
	var waitID []byte
	for _, s := range r.Spans() {
		got := map[string]string{"name": s.Name}
		for _, k := range []string{telemetry.KeyMCPMethod, telemetry.KeyMCPSession, telemetry.KeyToolName, telemetry.KeyOperation, telemetry.KeyTransport,
			telemetry.KeyAgentRun, telemetry.KeyServer, telemetry.KeyEpoch, telemetry.KeyRevision, telemetry.KeyDecision, telemetry.KeyPolicy,
			telemetry.KeyGrant, telemetry.KeyOutcome, telemetry.KeyRefusal, telemetry.KeyApprovalState, telemetry.KeyArguments, telemetry.KeyDecider} {
			got[k] = otlpreceiver.Attr(s.Attributes, k)
		}
		switch {
		case s.Name == "execute_tool restock":
			call = got
			for _, l := range s.Links {
				callLinks = append(callLinks, l.SpanId)
			}
		case s.Name == "execute_tool delete":
			refused = got
		case s.Name == "portcullis.approval":
			wait, waitID = got, s.SpanId
		}
	}
	want := map[string]string{"name": "execute_tool restock", "mcp.method.name": "tools/call", "mcp.session.id": run, "gen_ai.tool.name": "restock",
		"gen_ai.operation.name": "execute_tool", "network.transport": "pipe", "portcullis.agent_run": run, "portcullis.server.label": "inv",
		"portcullis.epoch": epoch, "portcullis.catalog.revision": "3", "portcullis.decision": "grant", "portcullis.policy": "approve",
		"portcullis.grant": "grt1", "portcullis.outcome": "ok", "portcullis.refusal.kind": "", "portcullis.approval.result": "", "portcullis.arguments": ""}
	for k, v := range want {
		if call[k] != v {
			t.Errorf("call span %s = %q, want %q", k, call[k], v)
		}
	}
	if wait["portcullis.approval.result"] != "granted" || wait["portcullis.approval.decider"] != "app" {
		t.Errorf("wait span: %v", wait)
	}
	if len(callLinks) != 1 || string(callLinks[0]) != string(waitID) {
		t.Errorf("call span links %x, want the approval's span %x", callLinks, waitID)
	}
	if refused["portcullis.refusal.kind"] != "approval_denied" || refused["portcullis.epoch"] != epoch {
		t.Errorf("refused call's span: %v", refused)
	}
	var logNames []string
	all := ""
	for _, lr := range r.Logs() {
		logNames = append(logNames, lr.EventName)
		if lr.EventName == "portcullis.call_refused" && len(lr.SpanId) == 0 {
			t.Errorf("the refusal's log record is in no span")
		}
		b, _ := protojson.Marshal(lr)
		all += string(b)
		if lr.EventName == "portcullis.server_started" && otlpreceiver.Attr(lr.Attributes, telemetry.KeyEntryDigest) != "sha256:entry" {
			t.Errorf("server_started record without its entry digest: %s", b)
		}
	}
	for _, n := range []string{"portcullis.server_started", "portcullis.approval_requested", "portcullis.approval_granted", "portcullis.call_refused"} {
		if !strings.Contains(strings.Join(logNames, " "), n) {
			t.Errorf("no log record %s among %v", n, logNames)
		}
	}
	for _, s := range r.Spans() {
		b, _ := protojson.Marshal(s)
		all += string(b)
	}
	if strings.Contains(all, "SEKRIT") {
		t.Errorf("a secret of the server's command line or environment was exported")
	}
	if !r.Wait(10*time.Second, func(r *otlpreceiver.Receiver) bool {
		m := strings.Join(r.Metrics(), " ")
		return strings.Contains(m, "portcullis.calls") && strings.Contains(m, "mcp.server.operation.duration") && strings.Contains(m, "portcullis.approval.duration")
	}) {
		t.Errorf("metrics received: %v", r.Metrics())
	}
	key := "x-team-token" // canonical in HTTP's headers (Get), lower case in gRPC's metadata (the map)
	for _, h := range r.Headers() {
		if h.Get(key) != "t0k" && (len(h[key]) == 0 || h[key][0] != "t0k") {
			t.Fatalf("an export without the configured header: %v", h)
		}
	}
	if st := x.Stats(); st.Dropped != 0 || st.Exported == 0 {
		t.Errorf("stats %+v, want nothing dropped", st)
	}
}

// TestArgumentValuesOnlyWhenTurnedOn: a call's argument values reach the
// collector only for a server listed in settings.telemetry.arguments.
func TestArgumentValuesOnlyWhenTurnedOn(t *testing.T) {
	for _, on := range []bool{false, true} {
		r, err := otlpreceiver.Start()
		if err != nil {
			t.Fatal(err)
		}
		cfg := telemetry.Config{Endpoint: r.URL, Protocol: config.ProtocolHTTP}
		if on {
			cfg.Arguments = []string{"inv"}
		}
		l, x := startExport(t, cfg)
		if x.ExportsArguments("inv") != on || x.ExportsArguments("other") {
			t.Errorf("ExportsArguments(inv) = %v with arguments %v", x.ExportsArguments("inv"), cfg.Arguments)
		}
		aCall(t, l)
		x.Arguments("call1", json.RawMessage(`{"sku":"A-1"}`))
		finish(t, l)
		flush(t, x)
		r.Wait(10*time.Second, func(r *otlpreceiver.Receiver) bool { return len(r.Spans()) >= 3 })
		var got string
		for _, s := range r.Spans() {
			if s.Name == "execute_tool restock" {
				got = otlpreceiver.Attr(s.Attributes, telemetry.KeyArguments)
			}
		}
		if want := map[bool]string{false: "", true: `{"sku":"A-1"}`}[on]; got != want {
			t.Errorf("arguments turned on %v: span has %q, want %q", on, got, want)
		}
		r.Close()
	}
}

// TestCollectorDownDropsAndCounts: with nothing listening at the endpoint,
// appends to the audit log still return and the events are counted as
// dropped.
func TestCollectorDownDropsAndCounts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	l, x := startExport(t, telemetry.Config{Endpoint: down, Protocol: config.ProtocolHTTP})
	aCall(t, l)
	finish(t, l)
	flush(t, x)
	st := x.Stats()
	if st.Dropped == 0 || st.Exported != 0 || st.LastError == "" {
		t.Errorf("stats %+v, want drops counted and the error kept", st)
	}
}

// TestQueueFullDrops: more events than the queue holds, shown at once,
// are counted as dropped rather than waited for.
func TestQueueFullDrops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	x, err := telemetry.New(context.Background(), telemetry.Config{Endpoint: down, Protocol: config.ProtocolHTTP}, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Shutdown(context.Background())
	f, _ := json.Marshal(audit.CallRefused{AgentRun: run, ServerLabel: "inv", Kind: "unknown_tool"})
	n := 4 * telemetry.QueueSize
	for i := range n {
		x.Observe(audit.Event{Seq: uint64(i + 1), TS: time.Now(), Type: audit.TypeCatalogPresented, Fields: f})
	}
	if x.Stats().Dropped == 0 {
		t.Errorf("%d events shown at once, none dropped: is the queue bounded?", n)
	}
}

func TestConfigured(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	block := &config.Telemetry{Endpoint: "http://127.0.0.1:4318", Arguments: []string{"inv"}}
	c, on, err := telemetry.Configured(block, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://elsewhere:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))
	if err != nil || !on || c.FromEnv || c.Endpoint != block.Endpoint || c.Protocol != config.ProtocolHTTP {
		t.Errorf("the block with variables set: %+v %v %v; want the block alone", c, on, err)
	}
	if _, on, _ := telemetry.Configured(nil, env(nil)); on {
		t.Errorf("on with neither block nor variables")
	}
	c, on, err = telemetry.Configured(nil, env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))
	if err != nil || !on || !c.FromEnv || c.Protocol != "grpc" {
		t.Errorf("variables: %+v %v %v", c, on, err)
	}
	if _, on, _ := telemetry.Configured(nil, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"})); on {
		t.Errorf("on with OTEL_SDK_DISABLED=true")
	}
	if _, _, err := telemetry.Configured(nil, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})); err == nil || !strings.Contains(err.Error(), "http/json") {
		t.Errorf("http/json: %v", err)
	}
}

// TestObserveRacesShutdown: the daemon replaces an export while the audit
// log may still show the old one an event; that never panics nor blocks.
func TestObserveRacesShutdown(t *testing.T) {
	for range 20 {
		x, err := telemetry.New(context.Background(), telemetry.Config{Endpoint: "http://127.0.0.1:1", Protocol: config.ProtocolHTTP}, telemetry.Options{})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					x.Observe(audit.Event{Type: audit.TypeRunStarted, Fields: []byte(`{}`)})
				}
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := x.Shutdown(ctx); err != nil && ctx.Err() != nil {
			t.Errorf("Shutdown: %v", err)
		}
		cancel()
		close(stop)
	}
}
