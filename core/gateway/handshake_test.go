package gateway

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/portcullis/portcullis/core/mcpwire"
)

func mustParse(t *testing.T, line string) *mcpwire.Message {
	t.Helper()
	m, err := mcpwire.Parse([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestHandshake(t *testing.T) {
	var h handshake
	if !h.hold([]byte("a")) || !h.hold([]byte("b")) {
		t.Fatal("a message before the handshake is not queued")
	}
	h.initialize(mustParse(t, `{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`))
	if h.era != eraLegacy || string(h.initID) != "3" || string(mcpwire.GetPath(h.initParams, "protocolVersion")) != `"2025-06-18"` {
		t.Errorf("after initialize: era %d id %s params %s", h.era, h.initID, h.initParams)
	}
	q, ok := h.complete()
	if !ok || !slices.EqualFunc(q, [][]byte{[]byte("a"), []byte("b")}, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("complete = %q %v, want the queued messages in order", q, ok)
	}
	if _, ok := h.complete(); ok {
		t.Error("complete twice")
	}
	if h.hold([]byte("c")) {
		t.Error("a message after the handshake is queued")
	}
}

func TestHandshakeListen(t *testing.T) {
	var h handshake
	h.discover(json.RawMessage(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`))
	if h.era != eraModern || h.toolsSubscribed() {
		t.Fatalf("after discover: era %d, subscribed %v", h.era, h.toolsSubscribed())
	}
	h.subscribe(mustParse(t, `{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}`))
	if !h.toolsSubscribed() || !h.isListen(json.RawMessage(`"L"`)) || h.isListen(json.RawMessage(`"M"`)) {
		t.Errorf("after listen: subscribed %v, isListen(L) %v, isListen(M) %v", h.toolsSubscribed(), h.isListen(json.RawMessage(`"L"`)), h.isListen(json.RawMessage(`"M"`)))
	}
	h.subscribe(mustParse(t, `{"jsonrpc":"2.0","id":"N","method":"subscriptions/listen","params":{"notifications":{}}}`))
	if h.toolsSubscribed() || h.isListen(json.RawMessage(`"L"`)) {
		t.Error("a new listen without tools still counts as subscribed, or the old one as open")
	}
}
