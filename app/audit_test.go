package app

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/daemon"
)

func TestEventLine(t *testing.T) {
	ts := time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC)
	const run, epochA, epochB = "01JQ7R4S4S0QJ7GZP1S2RUNRUN", "01JQ7R4S4S0QJ7GZP1S2AAAAAA", "01JQ7R4S4S0QJ7GZP1S2BBBBBB"
	tests := []struct {
		typ    string
		fields any
		want   string
	}{
		{audit.TypeToolCalled, audit.ToolCalled{Call: "c", AgentRun: run, ServerLabel: "inv", Epoch: epochA, CatalogRevision: 3,
			Tool: "inventory_adjust", ArgsDigest: "sha256:x", ArgKeys: []string{"sku"}, Decision: "grant", Grant: "REQ"},
			"2026-11-30T01:02:03.456Z  #7       tool_called          server=inv run=" + run + " epoch=S2AAAAAA tool=inventory_adjust decision=grant grant=REQ catalog=3"},
		{audit.TypeServerReplaced, audit.ServerReplaced{ServerLabel: "inv", AgentRun: run, OldEpoch: epochA, NewEpoch: epochB, Reason: "build complete: dist changed"},
			"2026-11-30T01:02:03.456Z  #7       server_replaced      server=inv run=" + run + ` epoch=S2AAAAAA->S2BBBBBB reason="build complete: dist changed"`},
		{audit.TypeAuthorizationDenied, audit.AuthorizationDenied{AgentRun: run, ServerLabel: "inv", Tool: "t", Reason: "authorization_stale", ApprovedEpoch: epochA, CurrentEpoch: epochB},
			"2026-11-30T01:02:03.456Z  #7       authorization_denied server=inv run=" + run + " epoch=S2BBBBBB approvedEpoch=S2AAAAAA tool=t reason=authorization_stale"},
		{audit.TypeToolCompleted, audit.ToolCompleted{Call: "c", AgentRun: run, ServerLabel: "inv", Epoch: epochB, Tool: "t", Outcome: "rpc_error", DurationMS: 1.25, Error: "boom"},
			"2026-11-30T01:02:03.456Z  #7       tool_completed       server=inv run=" + run + " epoch=S2BBBBBB tool=t outcome=rpc_error ms=1.25 error=boom"},
		{audit.TypeServerExited, audit.ServerExited{ServerLabel: "inv", Epoch: epochA, PID: 42, ExitCode: -1, Signal: "killed"},
			"2026-11-30T01:02:03.456Z  #7       server_exited        server=inv epoch=S2AAAAAA pid=42 signal=killed"},
		{audit.TypeServerExited, audit.ServerExited{ServerLabel: "inv", Epoch: epochA, PID: 42, ExitCode: 0},
			"2026-11-30T01:02:03.456Z  #7       server_exited        server=inv epoch=S2AAAAAA pid=42 exit=0"},
		{audit.TypeBuildDetected, audit.BuildDetected{ServerLabel: "inv", Epoch: epochA, Paths: []string{"dist/server.js"}, Digests: []string{"entry"}},
			"2026-11-30T01:02:03.456Z  #7       build_detected       server=inv epoch=S2AAAAAA changed=entry paths=dist/server.js"},
		{audit.TypeCatalogRevised, audit.CatalogRevised{ServerLabel: "inv", Epoch: epochB, Revision: 2, Diff: audit.DiffSummary{Added: []string{"a"}, Changed: []string{"b", "c"}}},
			"2026-11-30T01:02:03.456Z  #7       catalog_revised      server=inv epoch=S2BBBBBB revision=2 added=a changed=b,c"},
		{audit.TypeConfigChanged, audit.ConfigChanged{File: "/c/config.json", Digest: "sha256:x", Changes: []string{"pub: tool a approve → allow", "b: server removed"}},
			"2026-11-30T01:02:03.456Z  #7       config_changed       file=/c/config.json changes=\"pub: tool a approve → allow; b: server removed\""},
		{audit.TypeConfigChanged, audit.ConfigChanged{File: "/c/config.json", Digest: "sha256:x", Changes: []string{"pub: tool a approve → allow"}, By: "cli (pid 42)"},
			"2026-11-30T01:02:03.456Z  #7       config_changed       file=/c/config.json changes=\"pub: tool a approve → allow\" by=\"cli (pid 42)\""},
		{daemon.TypeConfigChangeConfirmed, daemon.ConfigChangeEvent{ID: "chg-1", File: "/c/config.json", Digest: "sha256:x", Held: []string{"pub: tool a approve → allow", "settings: auditSigning true → false"}, By: "app"},
			"2026-11-30T01:02:03.456Z  #7       config_change_confirmed change=chg-1 held=\"pub: tool a approve → allow; settings: auditSigning true → false\" by=app"},
		{audit.TypeApprovalGranted, audit.ApprovalGranted{Request: "R", AgentRun: run, ServerLabel: "inv", Epoch: epochA, ToolScope: []string{"x", "y"}, ExpiresWhen: "agent-run-ends"},
			"2026-11-30T01:02:03.456Z  #7       approval_granted     server=inv run=" + run + " epoch=S2AAAAAA request=R tools=x,y expires=agent-run-ends"},
		{audit.TypeApprovalRequested, audit.ApprovalRequested{Request: "R", AgentRun: run, ServerLabel: "inv", Identity: "sha256:0123456789abcdef0123", CredentialScope: []string{"tok"}},
			"2026-11-30T01:02:03.456Z  #7       approval_requested   server=inv run=" + run + " identity=0123456789ab… request=R credentials=tok"},
		{audit.TypeLogRecovered, audit.LogRecovered{File: "audit-000001.jsonl", Offset: 100, Length: 9, After: 6},
			"2026-11-30T01:02:03.456Z  #7       log_recovered        file=audit-000001.jsonl offset=100 length=9 after=6"},
		{"future_event", map[string]any{"serverLabel": "inv", "novel": true},
			"2026-11-30T01:02:03.456Z  #7       future_event         server=inv"},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			b, err := json.Marshal(tt.fields)
			if err != nil {
				t.Fatal(err)
			}
			got := eventLine(audit.Event{Seq: 7, TS: ts, Type: tt.typ, Fields: b})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if strings.Contains(got, "\n") {
				t.Errorf("line break in %q", got)
			}
		})
	}
}

// TestEventLineColumnsAligned: the type column starts at the same place for
// one- and six-digit sequence numbers, and an approval request made before
// its process started shows no epoch at all.
func TestEventLineColumnsAligned(t *testing.T) {
	ts := time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)
	b, err := json.Marshal(audit.ApprovalRequested{Request: "apr_1", AgentRun: "RUN", ServerLabel: "inv", CredentialScope: []string{"tok"}})
	if err != nil {
		t.Fatal(err)
	}
	var col []int
	for _, seq := range []uint64{1, 10, 999999} {
		line := eventLine(audit.Event{Seq: seq, TS: ts, Type: audit.TypeApprovalRequested, Fields: b})
		col = append(col, strings.Index(line, audit.TypeApprovalRequested))
		if strings.Contains(line, "epoch=") {
			t.Errorf("an approval without an epoch shows one: %q", line)
		}
	}
	if col[0] != col[1] || col[1] != col[2] {
		t.Errorf("the type column starts at %v, want one place", col)
	}
}
