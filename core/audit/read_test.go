package audit

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// scenario writes two agent runs on two servers and returns the events.
func scenario(t *testing.T, dir string) []Event {
	t.Helper()
	l := openTest(t, Options{Dir: dir, MaxFileBytes: 1200})
	var evs []Event
	add := func(typ string, f any) {
		ev, err := l.Append(context.Background(), typ, f)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	add(TypeRunStarted, RunStarted{AgentRun: "r1", ServerLabel: "inv", Agent: Agent{Name: "claude-code", Executable: "/usr/bin/claude", PID: 10}}) // 1
	add(TypeRunStarted, RunStarted{AgentRun: "r2", ServerLabel: "fs", Agent: Agent{Name: "cursor", PID: 20}})                                      // 2
	add(TypeApprovalGranted, ApprovalGranted{Request: "q1", AgentRun: "r1", ServerLabel: "inv", Epoch: "E1", ToolScope: []string{"adjust"}, ExpiresWhen: "agent-run-ends"})
	add(TypeToolCalled, ToolCalled{Call: "1", AgentRun: "r1", ServerLabel: "inv", Epoch: "E1", CatalogRevision: 12, Tool: "adjust", ArgsDigest: "sha256:a", ArgKeys: []string{"sku"}, Decision: "grant", Grant: "q1"}) // 4
	add(TypeToolCalled, ToolCalled{Call: "1", AgentRun: "r2", ServerLabel: "fs", Epoch: "F1", CatalogRevision: 3, Tool: "read", ArgsDigest: "sha256:b", Decision: "allow"})                                            // 5
	add(TypeToolCompleted, ToolCompleted{Call: "1", AgentRun: "r1", ServerLabel: "inv", Epoch: "E1", Tool: "adjust", Outcome: "ok", DurationMS: 12.5})                                                                 // 6
	add(TypeServerReplaced, ServerReplaced{ServerLabel: "inv", AgentRun: "r1", OldEpoch: "E1", NewEpoch: "E2"})
	add(TypeAuthorizationDenied, AuthorizationDenied{Call: "2", AgentRun: "r1", ServerLabel: "inv", Tool: "adjust", Reason: "authorization_stale", ApprovedEpoch: "E1", CurrentEpoch: "E2", CatalogRevision: 12}) // 8
	add(TypeToolCompleted, ToolCompleted{Call: "1", AgentRun: "r2", ServerLabel: "fs", Epoch: "F1", Tool: "read", Outcome: "epoch_ended", DurationMS: 3, Error: "server exited"})                                 // 9
	add(TypeRunEnded, RunEnded{AgentRun: "r2", ServerLabel: "fs", Reason: "agent disconnected"})                                                                                                                  // 10
	l.Close()
	if files, _ := listFiles(dir); len(files) < 2 {
		t.Fatalf("scenario should span files, has %d", len(files))
	}
	return evs
}

func TestSessions(t *testing.T) {
	dir := t.TempDir()
	evs := scenario(t, dir)
	r1 := Session{AgentRun: "r1", ServerLabel: "inv", Agent: Agent{Name: "claude-code", Executable: "/usr/bin/claude", PID: 10},
		Started: evs[0].TS, StartSeq: 1, Calls: 1, Denied: 1,
		Grants: []Grant{{Seq: 3, TS: evs[2].TS, Request: "q1", Epoch: "E1", ToolScope: []string{"adjust"}, ExpiresWhen: "agent-run-ends"}}}
	r2 := Session{AgentRun: "r2", ServerLabel: "fs", Agent: Agent{Name: "cursor", PID: 20}, Started: evs[1].TS, StartSeq: 2,
		Ended: evs[9].TS, EndReason: "agent disconnected", EndSeq: 10, Calls: 1}
	for _, tc := range []struct {
		name string
		f    Filter
		want []Session
	}{
		{"all", Filter{}, []Session{r1, r2}},
		{"server", Filter{Server: "fs"}, []Session{r2}},
		{"run", Filter{Run: "r1"}, []Session{r1}},
		{"none", Filter{Server: "inv", Run: "r2"}, []Session{}},
		{"limit", Filter{Limit: 1}, []Session{r2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Sessions(dir, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Sessions(%+v) (-want +got):\n%s", tc.f, diff)
			}
		})
	}
}

func TestActivity(t *testing.T) {
	dir := t.TempDir()
	evs := scenario(t, dir)
	c1 := Call{Seq: 4, TS: evs[3].TS, Call: "1", AgentRun: "r1", ServerLabel: "inv", Tool: "adjust", Epoch: "E1", CatalogRevision: 12,
		Decision: "grant", Grant: "q1", ArgsDigest: "sha256:a", ArgKeys: []string{"sku"}, Completed: true, CompletedSeq: 6, Outcome: "ok", Duration: 12500 * time.Microsecond}
	c2 := Call{Seq: 5, TS: evs[4].TS, Call: "1", AgentRun: "r2", ServerLabel: "fs", Tool: "read", Epoch: "F1", CatalogRevision: 3,
		Decision: "allow", ArgsDigest: "sha256:b", Completed: true, CompletedSeq: 9, Outcome: "epoch_ended", Duration: 3 * time.Millisecond, Error: "server exited"}
	c3 := Call{Seq: 8, TS: evs[7].TS, Call: "2", AgentRun: "r1", ServerLabel: "inv", Tool: "adjust", Epoch: "E2", CatalogRevision: 12,
		Decision: "denied", Reason: "authorization_stale"}
	for _, tc := range []struct {
		name string
		f    Filter
		want []Call
	}{
		{"all", Filter{}, []Call{c1, c2, c3}},
		{"server", Filter{Server: "inv"}, []Call{c1, c3}},
		{"run", Filter{Run: "r2"}, []Call{c2}},
		{"limit", Filter{Limit: 2}, []Call{c2, c3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Activity(dir, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Activity(%+v) (-want +got):\n%s", tc.f, diff)
			}
		})
	}
}

func TestFollow(t *testing.T) {
	defer func(d time.Duration) { followInterval = d }(followInterval)
	followInterval = 5 * time.Millisecond
	dir := filepath.Join(t.TempDir(), "audit")
	l := openTest(t, Options{Dir: dir, MaxFileBytes: 1500})
	appendN(t, l, 10)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make(chan Event)
	errc := make(chan error, 1)
	go func() { errc <- Follow(ctx, dir, 8, out) }()

	// Events 8–10 already exist; 11–40 are appended while following and
	// cross several rotations.
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		for range 30 {
			if _, err := l.Append(context.Background(), "x", map[string]string{"pad": "0123456789012345678901234567890123456789"}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for want := uint64(8); want <= 40; want++ {
		select {
		case ev := <-out:
			if ev.Seq != want {
				t.Fatalf("Follow sent seq %d, want %d", ev.Seq, want)
			}
		case <-ctx.Done():
			t.Fatalf("Follow stopped before seq %d", want)
		}
	}
	<-appended
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("Follow returned %v", err)
	}
}
