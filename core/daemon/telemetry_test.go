package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/config"
)

// TestTelemetrySwitchFollowsSettings: settings.telemetry put in force
// starts the export, a new endpoint replaces it, removing the block falls
// back to the daemon's own OTEL_* variables, and with neither nothing is
// exported; before Serve starts it, nothing is.
func TestTelemetrySwitchFollowsSettings(t *testing.T) {
	env := map[string]string{}
	s := &telemetrySwitch{getv: func(k string) string { return env[k] }}
	defer s.stop()
	quiet := func(string, ...any) {}
	block := func(endpoint string) func() *config.Telemetry {
		return func() *config.Telemetry { return &config.Telemetry{Endpoint: endpoint} }
	}
	s.follow(context.Background(), block("http://127.0.0.1:1"), quiet)
	if st := s.status(); st != nil {
		t.Fatalf("exporting before Serve started: %+v", st)
	}
	s.started.Store(true)
	s.follow(context.Background(), block("http://127.0.0.1:1"), quiet)
	if st := s.status(); st == nil || st.Destination != "http://127.0.0.1:1 (http/protobuf)" {
		t.Fatalf("status %+v, want the block's endpoint", st)
	}
	first := s.cur.Load()
	s.follow(context.Background(), block("http://127.0.0.1:1"), quiet)
	if s.cur.Load() != first {
		t.Errorf("the same block replaced the export")
	}
	s.follow(context.Background(), block("https://127.0.0.2:4318/base?token=x"), quiet)
	if st := s.status(); st == nil || st.Destination != "https://127.0.0.2:4318 (http/protobuf)" || strings.Contains(st.Destination, "token") {
		t.Fatalf("status %+v, want the new endpoint without its path or query", st)
	}
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:2"
	s.follow(context.Background(), func() *config.Telemetry { return nil }, quiet)
	if st := s.status(); st == nil || !strings.Contains(st.Destination, "OTEL_EXPORTER_OTLP") {
		t.Fatalf("status %+v, want the variables", st)
	}
	delete(env, "OTEL_EXPORTER_OTLP_ENDPOINT")
	env["OTEL_SDK_DISABLED"] = "true" // a change the switch sees only with the block's
	s.follow(context.Background(), block("http://127.0.0.1:1"), quiet)
	s.follow(context.Background(), func() *config.Telemetry { return nil }, quiet)
	if st := s.status(); st != nil {
		t.Fatalf("status %+v, want nothing exported", st)
	}
	env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/json"
	delete(env, "OTEL_SDK_DISABLED")
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:2"
	s.follow(context.Background(), block("http://127.0.0.1:1"), quiet)
	s.follow(context.Background(), func() *config.Telemetry { return nil }, quiet)
	if st := s.status(); st == nil || !strings.Contains(st.Error, "http/json") {
		t.Fatalf("status %+v, want the protocol's error", st)
	}
}
