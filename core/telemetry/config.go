// Package telemetry exports what the audit log records to an OpenTelemetry
// collector over OTLP (docs/DESIGN.md, "Telemetry"): a span per tool call,
// a span for each wait on the person, log records for the events a team
// watches, and metrics. It observes the audit log (audit.Observer) and
// never holds it: events go onto a bounded queue, and what does not fit,
// or what a collector that is down or slow does not take, is dropped and
// counted (Stats).
package telemetry

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/portcullis/portcullis/core/config"
)

// Config says where and what to export.
type Config struct {
	// Endpoint is the collector's base URL; "" with FromEnv.
	Endpoint string
	// Protocol is config.ProtocolHTTP or config.ProtocolGRPC.
	Protocol string
	// Headers are sent with every export.
	Headers map[string]string
	// Resource are attributes added to the resource.
	Resource map[string]string
	// Arguments are the server labels whose argument values are exported.
	Arguments []string
	// FromEnv: the exporters take their endpoint, headers and the rest
	// from the OTEL_EXPORTER_OTLP_* variables, the resource from
	// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME.
	FromEnv bool
}

// Configured returns the telemetry configuration in force and whether
// telemetry is on. settings.telemetry, when present, is the whole of it
// (OTEL_EXPORTER_OTLP_ENDPOINT, _PROTOCOL, _HEADERS and
// OTEL_RESOURCE_ATTRIBUTES are then ignored); otherwise the standard
// variables of the daemon's own environment (getenv) turn it on when
// OTEL_EXPORTER_OTLP_ENDPOINT or a signal's own endpoint variable is set,
// and OTEL_SDK_DISABLED=true turns them off.
func Configured(t *config.Telemetry, getenv func(string) string) (Config, bool, error) {
	if t != nil {
		return Config{
			Endpoint: t.Endpoint, Protocol: cmp.Or(t.Protocol, config.ProtocolHTTP),
			Headers: t.Headers, Resource: t.ResourceAttributes, Arguments: slices.Clone(t.Arguments),
		}, true, nil
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Config{}, false, nil
	}
	set := false
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		if getenv(v) != "" {
			set = true
		}
	}
	if !set {
		return Config{}, false, nil
	}
	p := cmp.Or(strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL")), config.ProtocolHTTP)
	switch p {
	case config.ProtocolHTTP, config.ProtocolGRPC:
	default:
		return Config{}, false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL is %q: Portcullis exports with %q or %q; set one of them (or settings.telemetry in the configuration)", p, config.ProtocolHTTP, config.ProtocolGRPC)
	}
	return Config{Protocol: p, FromEnv: true}, true, nil
}

// Where names the destination for the status and the daemon's log: the
// endpoint's scheme, host and port, never its path, query or user
// information (which may hold a token).
func (c Config) Where() string {
	if c.FromEnv {
		return "OTEL_EXPORTER_OTLP_* (" + c.Protocol + ")"
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		return "(an endpoint that does not parse)"
	}
	return u.Scheme + "://" + u.Host + " (" + c.Protocol + ")"
}
