package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
)

// TestGrantCoversTheContractShown: the real daemon and the publish server.
// The person approves publish_preview for the run; within the same epoch
// the server rewrites it in place (its revise tool) and sends list_changed;
// the agent lists the tools again. A spelling slip in the description
// keeps the grant: the next call goes at once. A new "target" argument
// whose default is production is an authority change: the next call waits
// on a new card showing that change, never reaching the server before the
// person approves; approved, the omitted target publishes to production
// under the new grant. The audit log's approval_granted events bind
// publish_preview to the contract each card showed, and the epoch never
// changes.
func TestGrantCoversTheContractShown(t *testing.T) {
	s := newScopeSetup(t)
	if err := s.home.SetToolPolicy(pubLabel, config.PolicyAllow, "revise"); err != nil {
		t.Fatal(err)
	}
	a := connectListChanged(t, s.home, pubLabel, "")
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	start := waitRun(t, s.home, a.PID(), 10*time.Second, "ready", readyOn(""))

	first := asyncCall(t, a.Session, "publish_preview", map[string]any{"branch": "main"})
	req := waitApproval(t, s.home, "publish_preview", forTool("publish_preview", string(start.Epoch)))
	shown := req.Card.ToolContracts["publish_preview"]
	if !strings.HasPrefix(shown, "sha256:") {
		t.Errorf("the card records no contract for publish_preview: %+v", req.Card.ToolContracts)
	}
	decideCLI(t, s.home, "approve", string(req.ID))
	if got := okText(t, await(t, first)); got != "revision A published branch main to preview" {
		t.Fatalf("first call: %q", got)
	}

	// revise lands within the epoch, and the agent lists the tools again.
	revise := func(change string, n int) gateway.Status {
		t.Helper()
		before := waitRun(t, s.home, a.PID(), 10*time.Second, "ready", readyOn(""))
		if got := callText(t, a.Session, "revise", map[string]any{"change": change}); got != "revised publish_preview: "+change {
			t.Fatalf("revise %s: %q", change, got)
		}
		a.waitListChanged(t, n, 10*time.Second)
		after := waitRun(t, s.home, a.PID(), 10*time.Second, "a new catalog revision", func(r gateway.Status) bool {
			return r.CatalogRevision > before.CatalogRevision
		})
		if after.Epoch != start.Epoch || after.Epochs != 1 {
			t.Fatalf("revise changed the epoch: %s → %s (%d epochs)", start.Epoch, after.Epoch, after.Epochs)
		}
		if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
			t.Fatal(err)
		}
		return after
	}

	revise("typo", 1)
	typo := asyncCall(t, a.Session, "publish_preview", map[string]any{"branch": "typo"})
	if got := okText(t, await(t, typo)); got != "revision A published branch typo to preview" {
		t.Errorf("after a spelling slip: %q", got)
	}
	if p := approvals(t, s.home); len(p) != 0 {
		t.Errorf("a spelling slip in the description raised a card: %+v", p[0].Card)
	}

	revise("target", 2)
	calls := callsOf(t, s, "publish_preview")
	prod := asyncCall(t, a.Session, "publish_preview", map[string]any{"branch": "prod"})
	req2 := waitApproval(t, s.home, "publish_preview rewritten", forTool("publish_preview", string(start.Epoch)))
	if got := callsOf(t, s, "publish_preview"); got != calls {
		t.Fatalf("the call of the rewritten tool reached the server under the old grant (%d calls, was %d)", got, calls)
	}
	c := req2.Card
	if !strings.Contains(c.Reason, "publish_preview changed since you approved it") || !strings.Contains(c.Reason, `"target"`) || !c.Rewritten {
		t.Errorf("card reason %q does not name the change", c.Reason)
	}
	found := false
	for _, ch := range c.CatalogChanges {
		found = found || (ch.Tool == "publish_preview" && ch.Kind == catalog.KindPropertyAdded && ch.Severity == catalog.Authority)
	}
	if !found {
		t.Errorf("the card's changes lack the new target argument: %+v", c.CatalogChanges)
	}
	if d, ok := c.Defaults["target"]; !ok || d != "production" {
		t.Errorf("the card's defaults %v do not show that the omitted target is production", c.Defaults)
	}
	decideCLI(t, s.home, "approve", string(req2.ID))
	if got := okText(t, await(t, prod)); got != "revision A published branch prod to production" {
		t.Errorf("after approving the rewritten tool: %q", got)
	}

	var granted []audit.ApprovalGranted
	for _, e := range auditEvents(t, s.home) {
		if e.Type != audit.TypeApprovalGranted {
			continue
		}
		var g audit.ApprovalGranted
		if err := e.DecodeFields(&g); err != nil {
			t.Fatal(err)
		}
		granted = append(granted, g)
	}
	if len(granted) != 2 || granted[0].ToolContracts["publish_preview"] != shown ||
		granted[1].ToolContracts["publish_preview"] != c.ToolContracts["publish_preview"] || shown == c.ToolContracts["publish_preview"] {
		t.Errorf("approval_granted events %+v, want publish_preview bound to %s then to %s", granted, shown, c.ToolContracts["publish_preview"])
	}
}

// TestToldContractWithoutRefetch: an agent that never lists the tools
// again (as Codex does) across a rebuild that adds publish_preview's
// optional target (default preview). Its old-shaped call is catalog_stale,
// and the message states the current arguments; the same call again still
// is — it omits target, whose new default it never named (the seed's
// case) — and says to set target; the call formed from the contract it was
// told (target set) goes to the new code without any tools/list.
func TestToldContractWithoutRefetch(t *testing.T) {
	s := newPublishSetup(t)
	a := connectListChanged(t, s.home, pubLabel, "")
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	before := waitRun(t, s.home, a.PID(), 10*time.Second, "ready", readyOn(""))
	s.rebuild(t, publishRevB)
	waitRun(t, s.home, a.PID(), buildWait, "ready on a new epoch with a new catalog", func(r gateway.Status) bool {
		return readyOn(string(before.Epoch))(r) && r.CatalogRevision != before.CatalogRevision
	})

	stale := func(args map[string]any, says ...string) {
		t.Helper()
		_, err := a.Session.CallTool(testContext(t, 30*time.Second), &mcp.CallToolParams{Name: "publish_preview", Arguments: args})
		if err == nil {
			t.Fatalf("call %v went, want catalog_stale", args)
		}
		if _, r := refusalOf(t, err); r.Error != control.CatalogStale {
			t.Fatalf("call %v: %+v, want catalog_stale", args, r)
		}
		for _, part := range says {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("call %v: the message lacks %q: %v", args, part, err)
			}
		}
	}
	stale(map[string]any{"branch": "main"}, `current arguments of "publish_preview": branch (string, required), target (string, one of "preview"|"production", default "preview")`)
	stale(map[string]any{"branch": "main"}, `omits "target", whose default changed`, `"target" set explicitly`)
	if got := callText(t, a.Session, "publish_preview", map[string]any{"branch": "main", "target": "production"}); got != "revision B published branch main to production" {
		t.Errorf("the call formed from the told contract: %q", got)
	}
	for _, c := range readCalls(t, s.callLog) {
		if c.Tool == "publish_preview" && c.Revision == "B" && !strings.Contains(string(c.Args), "production") {
			t.Errorf("a refused call reached the server: %+v", c)
		}
	}
}
