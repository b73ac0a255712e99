package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSplitTrustTelemetry: an edit (an agent's, say) that sends telemetry
// to an endpoint the configuration in force does not name, or exports a
// server's argument values it did not, waits for the person; turning it
// off, or changing only headers or resource attributes, applies at once.
func TestSplitTrustTelemetry(t *testing.T) {
	collector := &Telemetry{Endpoint: "http://127.0.0.1:4318", Headers: map[string]string{"x-team": "a"}}
	for _, tt := range []struct {
		name            string
		applied, edited *Telemetry
		held            string // the held Widening's text, "" for none
		inForce         *Telemetry
	}{
		{name: "turned on", edited: &Telemetry{Endpoint: "https://collector.example:4318"},
			held: "settings: telemetry export to https://collector.example:4318 (http/protobuf)", inForce: nil},
		{name: "sent elsewhere", applied: collector, edited: &Telemetry{Endpoint: "http://attacker.example:4318", Headers: collector.Headers},
			held: "settings: telemetry export to http://attacker.example:4318 (http/protobuf)", inForce: collector},
		{name: "protocol changed", applied: collector, edited: &Telemetry{Endpoint: collector.Endpoint, Protocol: ProtocolGRPC, Headers: collector.Headers},
			held: "settings: telemetry export to http://127.0.0.1:4318 (grpc)", inForce: collector},
		{name: "argument values of a server", applied: collector, edited: &Telemetry{Endpoint: collector.Endpoint, Headers: collector.Headers, Arguments: []string{"cred"}},
			held: "settings: telemetry argument values of cred", inForce: collector},
		{name: "turned off", applied: collector, edited: nil, inForce: nil},
		{name: "protocol spelled out", applied: collector, edited: &Telemetry{Endpoint: collector.Endpoint, Protocol: ProtocolHTTP, Headers: collector.Headers},
			inForce: &Telemetry{Endpoint: collector.Endpoint, Protocol: ProtocolHTTP, Headers: collector.Headers}},
		{name: "headers and resource changed", applied: collector,
			edited:  &Telemetry{Endpoint: collector.Endpoint, ResourceAttributes: map[string]string{"team": "b"}},
			inForce: &Telemetry{Endpoint: collector.Endpoint, ResourceAttributes: map[string]string{"team": "b"}}},
		{name: "argument values no longer exported",
			applied: &Telemetry{Endpoint: collector.Endpoint, Arguments: []string{"cred", "plain"}},
			edited:  &Telemetry{Endpoint: collector.Endpoint, Arguments: []string{"plain"}},
			inForce: &Telemetry{Endpoint: collector.Endpoint, Arguments: []string{"plain"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			applied, edited := trustBase(), trustBase()
			applied.Settings.Telemetry, edited.Settings.Telemetry = tt.applied.Clone(), tt.edited.Clone()
			in, held := SplitTrust(applied, edited)
			var want []Widening
			if tt.held != "" {
				want = []Widening{{Kind: WidenTelemetry, Text: tt.held}}
			}
			if diff := cmp.Diff(want, held); diff != "" {
				t.Errorf("held (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.inForce, in.Settings.Telemetry); diff != "" {
				t.Errorf("telemetry in force (-want +got):\n%s", diff)
			}
			if _, again := SplitTrust(applied, in); len(again) != 0 {
				t.Errorf("in force still widens: %v", again)
			}
		})
	}
}

// TestValidateTelemetry: a settings.telemetry block that could not export
// is refused with the path and what to write instead.
func TestValidateTelemetry(t *testing.T) {
	for _, tt := range []struct {
		t    Telemetry
		path string
	}{
		{Telemetry{}, "settings.telemetry.endpoint"},
		{Telemetry{Endpoint: "127.0.0.1:4318"}, "settings.telemetry.endpoint"},
		{Telemetry{Endpoint: "file:///tmp/x"}, "settings.telemetry.endpoint"},
		{Telemetry{Endpoint: "http://127.0.0.1:4318", Protocol: "http/json"}, "settings.telemetry.protocol"},
		{Telemetry{Endpoint: "http://127.0.0.1:4318", Headers: map[string]string{"a b": "c"}}, "settings.telemetry.headers"},
		{Telemetry{Endpoint: "http://127.0.0.1:4318", Arguments: []string{"no/label"}}, "settings.telemetry.arguments[0]"},
	} {
		c := trustBase()
		c.Settings.Telemetry = &tt.t
		err := c.Validate()
		ve, ok := err.(*ValidationError)
		if !ok || len(ve.Problems) != 1 || ve.Problems[0].Path != tt.path {
			t.Errorf("%+v: got %v, want one problem at %s", tt.t, err, tt.path)
		}
	}
	c := trustBase()
	c.Settings.Telemetry = &Telemetry{Endpoint: "https://otel.example.com:4317", Protocol: ProtocolGRPC, Arguments: []string{"plain"}}
	if err := c.Validate(); err != nil {
		t.Errorf("a good block: %v", err)
	}
}
