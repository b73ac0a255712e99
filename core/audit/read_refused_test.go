package audit

import (
	"context"
	"testing"
)

// TestCallRefusedCountsAsRefusal: Sessions and Activity read call_refused
// (what the gateway writes now) as they read authorization_denied (older
// logs): a refusal of the run, under its kind, on the epoch the request
// was sent to when it names one.
func TestCallRefusedCountsAsRefusal(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, Options{Dir: dir})
	for _, ev := range []struct {
		typ string
		f   any
	}{
		{TypeRunStarted, RunStarted{AgentRun: "r1", ServerLabel: "inv"}},
		{TypeAuthorizationDenied, AuthorizationDenied{AgentRun: "r1", ServerLabel: "inv", Tool: "a", Reason: "catalog_stale", CurrentEpoch: "E1"}},
		{TypeCallRefused, CallRefused{AgentRun: "r1", ServerLabel: "inv", Tool: "b", Kind: "invalid_arguments", Reason: "missing property 'n'", CurrentEpoch: "E1", CatalogRevision: 2}},
		{TypeCallRefused, CallRefused{AgentRun: "r1", ServerLabel: "inv", Tool: "c", Kind: "epoch_ended", Epoch: "E1", CurrentEpoch: "E2"}},
		{TypeCatalogPresented, CatalogPresented{AgentRun: "r1", ServerLabel: "inv", Epoch: "E1", Revision: 2, Digest: "sha256:x", Tools: 3}},
	} {
		if _, err := l.Append(context.Background(), ev.typ, ev.f); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	ss, err := Sessions(dir, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 || ss[0].Denied != 3 {
		t.Fatalf("sessions %+v, want one run with 3 refusals", ss)
	}
	calls, err := Activity(dir, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range calls {
		got = append(got, c.Tool+":"+c.Decision+":"+c.Reason+":"+string(c.Epoch))
	}
	want := []string{"a:denied:catalog_stale:E1", "b:denied:invalid_arguments:E1", "c:denied:epoch_ended:E1"}
	if len(got) != len(want) {
		t.Fatalf("activity %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("activity[%d] = %s, want %s", i, got[i], want[i])
		}
	}
}
