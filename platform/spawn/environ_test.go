package spawn

import (
	"slices"
	"testing"
)

// TestDaemonEnvironDropsOTEL: an agent that sets OTEL_EXPORTER_OTLP_ENDPOINT
// in the environment of its `portcullis connect` does not choose where the
// daemon that connect starts sends telemetry.
func TestDaemonEnvironDropsOTEL(t *testing.T) {
	in := []string{"PATH=/bin", "OTEL_EXPORTER_OTLP_ENDPOINT=http://agent.example:4318", "HOME=/h", "OTEL_RESOURCE_ATTRIBUTES=a=b", "MY_OTEL_X=1"}
	got := DaemonEnviron(in)
	if want := []string{"PATH=/bin", "HOME=/h", "MY_OTEL_X=1"}; !slices.Equal(got, want) {
		t.Errorf("DaemonEnviron = %v, want %v", got, want)
	}
}
