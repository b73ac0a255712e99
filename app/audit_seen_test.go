package app

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
)

// TestEventLineWhatTheAgentSaw: `portcullis audit tail` shows what the
// agent was shown (catalog_presented), told (list_changed_sent) and
// refused (call_refused, under the refusal's kind).
func TestEventLineWhatTheAgentSaw(t *testing.T) {
	ts := time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC)
	const run, epochA, epochB = "01JQ7R4S4S0QJ7GZP1S2RUNRUN", "01JQ7R4S4S0QJ7GZP1S2AAAAAA", "01JQ7R4S4S0QJ7GZP1S2BBBBBB"
	digest := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		typ    string
		fields any
		want   string
	}{
		{audit.TypeCatalogPresented, audit.CatalogPresented{AgentRun: run, ServerLabel: "inv", Epoch: epochB, Revision: 4, Digest: digest, Tools: 2},
			"2026-11-30T01:02:03.456Z  #7       catalog_presented    server=inv run=" + run + " epoch=S2BBBBBB revision=4 digest=0123456789ab… tools=2"},
		{audit.TypeCatalogPresented, audit.CatalogPresented{AgentRun: run, ServerLabel: "inv", Epoch: epochB, Tools: 3, PassedThrough: true},
			"2026-11-30T01:02:03.456Z  #7       catalog_presented    server=inv run=" + run + " epoch=S2BBBBBB passedThrough=true tools=3"},
		{audit.TypeListChangedSent, audit.ListChangedSent{AgentRun: run, ServerLabel: "inv", Epoch: epochB, Revision: 4, Method: "notifications/tools/list_changed", Reason: "new execution epoch", Subscription: "sub-1"},
			"2026-11-30T01:02:03.456Z  #7       list_changed_sent    server=inv run=" + run + ` epoch=S2BBBBBB revision=4 subscription=sub-1 reason="new execution epoch"`},
		{audit.TypeCallRefused, audit.CallRefused{AgentRun: run, ServerLabel: "inv", Tool: "t", Kind: "authorization_stale", Reason: "code changed", ApprovedEpoch: epochA, CurrentEpoch: epochB, Request: "apr_1"},
			"2026-11-30T01:02:03.456Z  #7       call_refused         server=inv run=" + run + ` epoch=S2BBBBBB approvedEpoch=S2AAAAAA tool=t kind=authorization_stale request=apr_1 reason="code changed"`},
		{audit.TypeCallRefused, audit.CallRefused{AgentRun: run, ServerLabel: "inv", Tool: "t", Kind: "epoch_ended", Epoch: epochA, CurrentEpoch: epochB},
			"2026-11-30T01:02:03.456Z  #7       call_refused         server=inv run=" + run + " epoch=S2AAAAAA->S2BBBBBB tool=t kind=epoch_ended"},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.fields)
		if err != nil {
			t.Fatal(err)
		}
		if got := eventLine(audit.Event{Seq: 7, TS: ts, Type: tt.typ, Fields: b}); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.typ, got, tt.want)
		}
	}
}
