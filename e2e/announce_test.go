package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
)

// TestCodeOnlyRebuildAnnouncedAndHeld: publish_preview needs the person's
// approval. A rebuild that leaves tools/list byte-identical is announced to
// the agent (one tools/list_changed, on the listen stream in the 2026-07-28
// era); the agent refetches, as Claude Code does, and its next call is held
// for the approval of the new code, not refused; once approved it reaches
// the new process. The audit log holds what the agent was shown
// (catalog_presented for both epochs) and told (list_changed_sent), and no
// refusal.
func TestCodeOnlyRebuildAnnouncedAndHeld(t *testing.T) {
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			s := &publishSetup{home: newHome(t), binDir: t.TempDir()}
			s.callLog = filepath.Join(t.TempDir(), "calls.jsonl")
			s.bin, _ = buildPublish(t, s.binDir, publishRevA)
			if err := s.home.AddServer(testContext(t, 30*time.Second), pubLabel, []string{"--cwd", s.binDir, "--env", "PUBLISH_CALL_LOG=" + s.callLog}, s.bin); err != nil {
				t.Fatal(err)
			}
			if err := s.home.SetToolPolicy(pubLabel, config.PolicyAllow, "status"); err != nil {
				t.Fatal(err)
			}
			s.daemon = startDaemon(t, s.home)

			a := connectListChanged(t, s.home, pubLabel, era.version)
			if _, err := a.Session.ListTools(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			epochA := epochOf(t, s.home, a.PID(), "")
			pending := asyncCall(t, a.Session, "publish_preview", map[string]any{"branch": "one"})
			decideCLI(t, s.home, "approve", string(waitApproval(t, s.home, "publish_preview on A", forTool("publish_preview", epochA)).ID))
			if got := okText(t, await(t, pending)); got != "revision A published branch one to preview" {
				t.Fatalf("before the rebuild: %q", got)
			}

			s.rebuild(t, publishRevALabel)
			after := waitRun(t, s.home, a.PID(), buildWait, "ready on a new epoch", readyOn(epochA))
			a.waitListChanged(t, 1, 20*time.Second)

			// The refetch, then the call: held for the person, not refused.
			if _, err := a.Session.ListTools(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			pending = asyncCall(t, a.Session, "publish_preview", map[string]any{"branch": "two"})
			req := waitApproval(t, s.home, "publish_preview on B", forTool("publish_preview", string(after.Epoch)))
			if string(req.Card.PreviousEpoch) != epochA {
				t.Errorf("card of B: previous epoch %q, want %s", req.Card.PreviousEpoch, epochA)
			}
			select {
			case r := <-pending:
				t.Fatalf("the call after the refetch was answered before approval: %+v %v", r.res, r.err)
			default:
			}
			decideCLI(t, s.home, "approve", string(req.ID))
			if got := okText(t, await(t, pending)); got != "revision A published branch two to preview" {
				t.Errorf("after the rebuild: %q", got)
			}
			calls := readCalls(t, s.callLog)
			if last := calls[len(calls)-1]; last.PID != ownPID(t, after.PID) {
				t.Errorf("the approved call reached pid %d, want the new process %d", last.PID, after.PID)
			}
			if n := a.listChanged(); n != 1 {
				t.Errorf("%d tools/list_changed, want 1 for the one epoch change", n)
			}

			evs := auditEvents(t, s.home)
			presented := map[string]int{}
			for _, e := range evs {
				f := auditFields(t, e)
				switch e.Type {
				case audit.TypeCatalogPresented:
					presented[fmt.Sprint(f["epoch"])]++
				case audit.TypeCallRefused, audit.TypeAuthorizationDenied:
					t.Errorf("refusal recorded: %s %v", e.Type, f)
				}
			}
			if presented[epochA] != 1 || presented[string(after.Epoch)] != 1 {
				t.Errorf("catalog_presented per epoch %v, want one for %s and one for %s", presented, epochA, after.Epoch)
			}
			auditFindInOrder(t, evs, []auditStep{
				{"A replaced by B", audit.TypeServerReplaced, func(f map[string]any) bool { return f["newEpoch"] == string(after.Epoch) }},
				{"the agent told", audit.TypeListChangedSent, func(f map[string]any) bool {
					return f["epoch"] == string(after.Epoch) && f["method"] == "notifications/tools/list_changed"
				}},
				{"the agent refetched", audit.TypeCatalogPresented, func(f map[string]any) bool { return f["epoch"] == string(after.Epoch) }},
				{"the call on B", audit.TypeToolCalled, func(f map[string]any) bool { return f["epoch"] == string(after.Epoch) && f["decision"] == "grant" }},
			})
		})
	}
}
