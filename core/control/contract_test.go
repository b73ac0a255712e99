package control

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestConnectReplyDrainTimeout: the drain timeout survives the wire in
// milliseconds, and a reply without one (an older daemon) means the
// default.
func TestConnectReplyDrainTimeout(t *testing.T) {
	b, err := json.Marshal(ConnectReply("01RUN", 2500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"ok":true,"run":"01RUN","drainTimeoutMs":2500}`; string(b) != want {
		t.Errorf("ConnectReply encodes as %s, want %s", b, want)
	}
	var r Reply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if got := r.DrainTimeout(); got != 2500*time.Millisecond {
		t.Errorf("DrainTimeout() = %s after a round trip, want 2.5s", got)
	}
	var old Reply
	if err := json.Unmarshal([]byte(`{"ok":true,"run":"01RUN"}`), &old); err != nil {
		t.Fatal(err)
	}
	if got := old.DrainTimeout(); got != DefaultDrainTimeout {
		t.Errorf("DrainTimeout() of a reply without one = %s, want %s", got, DefaultDrainTimeout)
	}
}

func TestReserved(t *testing.T) {
	for _, tt := range []struct {
		line string
		want bool
	}{
		{EndOfInput, true},
		{"\x00anything", true},
		{`{"jsonrpc":"2.0"}`, false},
		{"", false},
		{" \x00", false},
	} {
		if got := Reserved([]byte(tt.line)); got != tt.want {
			t.Errorf("Reserved(%q) = %v, want %v", tt.line, got, tt.want)
		}
	}
}

// TestRefusalResponse: the JSON-RPC error carries the refusal's own code,
// a message that says what happened and what to do, and the refusal as data.
func TestRefusalResponse(t *testing.T) {
	r := &Refusal{Error: ServerUnavailable, Server: "notes", Reason: "no daemon", Retry: "start Portcullis"}
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code    int     `json:"code"`
			Message string  `json:"message"`
			Data    Refusal `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Response(json.RawMessage(`7`)), &m); err != nil {
		t.Fatal(err)
	}
	if string(m.ID) != "7" || m.Error.Code != -31031 || m.Error.Message != "server_unavailable: no daemon; start Portcullis" {
		t.Errorf("response %+v", m)
	}
	if m.Error.Data.Error != ServerUnavailable || m.Error.Data.Server != "notes" || !strings.Contains(m.Error.Data.Retry, "start") {
		t.Errorf("data %+v", m.Error.Data)
	}
	codes := map[int]Reason{}
	for _, reason := range []Reason{CatalogStale, InvalidArguments, AuthorizationStale, ApprovalDenied, ApprovalTimeout, CredentialUnavailable, EpochEnded, ServerUnavailable, MessageTooLarge, InvalidResponse, AuditUnavailable, HoldTimeout, UnknownTool} {
		c := reason.Code()
		if prev, dup := codes[c]; dup {
			t.Errorf("%s and %s share code %d", prev, reason, c)
		}
		codes[c] = reason
		if reason != UnknownTool && c >= -32768 && c <= -32000 {
			t.Errorf("%s has code %d, inside JSON-RPC's reserved range", reason, c)
		}
	}
}
