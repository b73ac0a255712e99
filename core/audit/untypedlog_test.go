package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/portcullis/portcullis/core/ids"
)

// untypedLog is a log written before the identifiers of the event fields
// had types of their own (they were plain strings): one event of every
// type that holds an agent run, epoch, call, approval request or grant.
const untypedLog = "testdata/untyped-ids"

// copyLog copies the log files of src into a new directory.
func copyLog(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"audit-000001.jsonl", headName} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestUntypedLogReadsBack: a log written before the identifiers were typed
// still verifies, every event decodes into its fields struct, and encoding
// that struct again gives the very bytes that were hashed; the readers
// give the identifiers it holds.
func TestUntypedLogReadsBack(t *testing.T) {
	dir := copyLog(t, untypedLog)
	rep, err := Verify(dir, nil)
	if err != nil || rep.Failed() {
		t.Fatalf("Verify: %+v, %v", rep, err)
	}
	structs := map[string]func() any{
		TypeRunStarted: func() any { return new(RunStarted) }, TypeRunEnded: func() any { return new(RunEnded) },
		TypeServerStarted: func() any { return new(ServerStarted) }, TypeServerExited: func() any { return new(ServerExited) },
		TypeServerReplaced: func() any { return new(ServerReplaced) }, TypeBuildDetected: func() any { return new(BuildDetected) },
		TypeCatalogRevised: func() any { return new(CatalogRevised) }, TypeCatalogPresented: func() any { return new(CatalogPresented) },
		TypeListChangedSent: func() any { return new(ListChangedSent) }, TypeToolCalled: func() any { return new(ToolCalled) },
		TypeToolCompleted: func() any { return new(ToolCompleted) }, TypeCallRefused: func() any { return new(CallRefused) },
		TypeAuthorizationDenied: func() any { return new(AuthorizationDenied) }, TypeApprovalRequested: func() any { return new(ApprovalRequested) },
		TypeApprovalGranted: func() any { return new(ApprovalGranted) }, TypeApprovalDenied: func() any { return new(ApprovalDenied) },
		TypeApprovalWithdrawn: func() any { return new(ApprovalWithdrawn) }, TypeDecisionRefused: func() any { return new(DecisionRefused) },
		TypeUnrequestedAnswer: func() any { return new(UnrequestedAnswer) }, TypeReservedMetaRemoved: func() any { return new(ReservedMetaRemoved) },
		TypeServerRequest: func() any { return new(ServerRequest) },
	}
	seen := map[string]bool{}
	var granted ApprovalGranted
	err = forEachEvent(dir, func(e Event) error {
		mk, ok := structs[e.Type]
		if !ok {
			t.Errorf("event %d: type %s has no fields struct in this test", e.Seq, e.Type)
			return nil
		}
		seen[e.Type] = true
		v := mk()
		if err := e.DecodeFields(v); err != nil {
			t.Error(err)
			return nil
		}
		got, err := canonicalFields(reflect.ValueOf(v).Elem().Interface())
		if err != nil {
			t.Errorf("event %d (%s): encoding again: %v", e.Seq, e.Type, err)
		} else if !bytes.Equal(got, e.Fields) {
			t.Errorf("event %d (%s) encodes differently now:\n got %s\nwant %s", e.Seq, e.Type, got, e.Fields)
		}
		if g, ok := v.(*ApprovalGranted); ok {
			granted = *g
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for typ := range structs {
		if !seen[typ] {
			t.Errorf("the log holds no %s event", typ)
		}
	}
	const run ids.RunID = "01JQ7R4S4S0QJ7GZP1S2RUN001"
	if granted.Request != "apr_01JQ7R4S4S0QJ7GZP1S2REQ001" || granted.Grant != "grt_01JQ7R4S4S0QJ7GZP1S2GRANT1" || granted.AgentRun != run || granted.Epoch != "01JQ7R4S4S0QJ7GZP1S2EPOCHA" {
		t.Errorf("approval_granted decoded as %+v", granted)
	}

	sessions, err := Sessions(dir, Filter{Run: run})
	if err != nil || len(sessions) != 1 {
		t.Fatalf("Sessions: %+v, %v", sessions, err)
	}
	if s := sessions[0]; s.AgentRun != run || s.Calls != 2 || s.Denied != 3 || len(s.Grants) != 1 || s.Grants[0].Epoch != "01JQ7R4S4S0QJ7GZP1S2EPOCHA" {
		t.Errorf("session %+v", s)
	}
	calls, err := Activity(dir, Filter{Run: run})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		call  ids.CallID
		epoch ids.EpochID
		grant ids.GrantID
		done  bool
	}{
		{"01JQ7R4S4S0QJ7GZP1S2CALL01", "01JQ7R4S4S0QJ7GZP1S2EPOCHA", "", true},
		{"01JQ7R4S4S0QJ7GZP1S2CALL02", "01JQ7R4S4S0QJ7GZP1S2EPOCHA", "grt_01JQ7R4S4S0QJ7GZP1S2GRANT1", true},
		{"01JQ7R4S4S0QJ7GZP1S2CALL03", "01JQ7R4S4S0QJ7GZP1S2EPOCHB", "", false},
		{"", "01JQ7R4S4S0QJ7GZP1S2EPOCHA", "", false},
		{"01JQ7R4S4S0QJ7GZP1S2CALL03", "01JQ7R4S4S0QJ7GZP1S2EPOCHB", "", false},
	}
	if len(calls) != len(want) {
		t.Fatalf("Activity: %d calls, want %d: %+v", len(calls), len(want), calls)
	}
	for i, w := range want {
		c := calls[i]
		if c.Call != w.call || c.AgentRun != run || c.Epoch != w.epoch || c.Grant != w.grant || c.Completed != w.done {
			t.Errorf("call %d: %+v, want %+v", i, c, w)
		}
	}
	if other, err := Activity(dir, Filter{Run: "01JQ7R4S4S0QJ7GZP1S2RUN002"}); err != nil || len(other) != 0 {
		t.Errorf("Activity of a run with no calls: %+v, %v", other, err)
	}
}
