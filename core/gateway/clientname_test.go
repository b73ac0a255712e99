package gateway

import (
	"encoding/json"
	"testing"
)

func TestHandshakeClientName(t *testing.T) {
	tests := []struct {
		name       string
		initParams string
		meta       string
		want       string
	}{
		{"initialize name", `{"protocolVersion":"2025-11-25","clientInfo":{"name":"claude-code","version":"2.1.328"}}`, "", "claude-code"},
		{"initialize title wins", `{"clientInfo":{"name":"cc","title":"Claude Code"}}`, "", "Claude Code"},
		{"modern _meta", "", `{"io.modelcontextprotocol/clientInfo":{"name":"gemini-cli"}}`, "gemini-cli"},
		{"none sent", `{"protocolVersion":"2025-11-25"}`, "", ""},
		{"not an object", `{"clientInfo":"x"}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := handshake{initParams: json.RawMessage(tt.initParams), discoverMeta: json.RawMessage(tt.meta)}
			if got := h.clientName(); got != tt.want {
				t.Errorf("clientName = %q, want %q", got, tt.want)
			}
		})
	}
}
