package e2e

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/internal/harness"
)

// editPolicies writes config.json once with the given tool policies of
// server echo, as an editor or a script would (not through Portcullis).
func editPolicies(t *testing.T, h *harness.Home, policies map[string]config.Policy) {
	t.Helper()
	cfg, err := config.Load(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	srv := cfg.Servers["echo"]
	if srv.Tools == nil {
		srv.Tools = map[string]config.ToolPolicy{}
	}
	for tool, p := range policies {
		srv.Tools[tool] = config.ToolPolicy{Policy: p}
	}
	cfg.Servers["echo"] = srv
	if err := config.Save(h.ConfigFile(), cfg); err != nil {
		t.Fatal(err)
	}
}

// pendingChange runs `portcullis changes --json`.
func pendingChange(t *testing.T, h *harness.Home) *daemon.PendingChange {
	t.Helper()
	r, err := h.Run(testContext(t, 30*time.Second), "changes", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var held []*daemon.PendingChange // a list, [] when nothing waits
	if err := json.Unmarshal([]byte(r.Stdout), &held); err != nil || held == nil || len(held) > 1 {
		t.Fatalf("changes --json printed %q (%v): want a list of at most one change", r.Stdout, err)
	}
	if len(held) == 0 {
		return nil
	}
	return held[0]
}

// configEvents returns the fields of the audit events whose type starts
// with config_, with their type under "type".
func configEvents(t *testing.T, h *harness.Home) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range auditEvents(t, h) {
		if strings.HasPrefix(e.Type, "config_") {
			f := auditFields(t, e)
			f["type"] = e.Type
			out = append(out, f)
		}
	}
	return out
}

func hasString(v any, s string) bool {
	l, _ := v.([]any)
	return slices.Contains(l, any(s))
}

// TestConfigEditWidensHeld: with a daemon running and an agent connected,
// an edit of config.json that allows echo and denies add has the deny in
// force at once (add refused) and the allow held (echo still waits for a
// person) until the person confirms the change with `portcullis changes
// confirm`; then echo is served without approval. A second widening edit,
// rejected, sets the file back. A `portcullis servers policy` edit that
// widens is refused from the agent's tree and in force at once from the
// person's terminal. The audit log has the change held, who confirmed it, and
// who made the CLI edit.
func TestConfigEditWidensHeld(t *testing.T) {
	h := newHome(t)
	callLog := filepath.Join(t.TempDir(), "calls.jsonl")
	if err := h.AddServer(testContext(t, 30*time.Second), "echo", []string{"--env", "ECHO_CALL_LOG=" + callLog}, echoBin); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, h)
	a := connectListChanged(t, h, "echo", "2025-06-18")
	if got := listedNames(t, a.Session); !slices.Contains(got, "add") {
		t.Fatalf("tools/list %v lacks add", got)
	}

	editPolicies(t, h, map[string]config.Policy{"echo": config.PolicyAllow, "add": config.PolicyDeny})
	rep, err := h.Status(testContext(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p := rep.PendingChange
	if p == nil || len(p.Held) != 1 || p.Held[0].Text != "echo: tool echo approve → allow" {
		t.Fatalf("status pendingChange %+v, want the allow of echo held", p)
	}
	// The narrowing part is in force at once.
	a.waitListChanged(t, 1, 20*time.Second)
	if got := listedNames(t, a.Session); slices.Contains(got, "add") {
		t.Errorf("tools/list %v still has add, denied by the edit", got)
	}
	// The widening part is not: echo waits for a person.
	pending := asyncCall(t, a.Session, "echo", map[string]any{"message": "held"})
	req := waitApproval(t, h, "echo while its allow is held", forTool("echo", ""))
	decideCLI(t, h, "deny", string(req.ID))
	if r := await(t, pending); r.err == nil {
		t.Errorf("echo was served while its allow was held: %+v", r.res)
	} else if _, ref := refusalOf(t, r.err); ref.Error != control.ApprovalDenied {
		t.Errorf("echo refused with %s, want %s", ref.Error, control.ApprovalDenied)
	}
	if n := echoCallsSoFar(t, callLog); n != 0 {
		t.Errorf("the server received %d echo calls, want 0", n)
	}
	r, err := h.Run(testContext(t, 30*time.Second), "changes")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Stdout, "echo: tool echo approve → allow") || !strings.Contains(r.Stdout, "portcullis changes confirm "+p.ID) {
		t.Errorf("portcullis changes printed %q", r.Stdout)
	}
	// The CLI cannot edit over a change that waits.
	if r, err := h.Run(testContext(t, 30*time.Second), "servers", "policy", "echo", "other", "deny"); err == nil || !strings.Contains(r.Stderr, p.ID) {
		t.Errorf("servers policy while a change waits: %v, stderr %q; want a refusal naming %s", err, r.Stderr, p.ID)
	}

	if _, err := h.RunAtTerminal(testContext(t, 30*time.Second), "changes", "confirm", p.ID); err != nil {
		t.Fatal(err)
	}
	if got := callText(t, a.Session, "echo", map[string]any{"message": "allowed"}); got != "allowed" {
		t.Errorf("echo answered %q after the confirmation", got)
	}
	if pendingChange(t, h) != nil {
		t.Error("a change still waits after the confirmation")
	}

	// Rejected: the file is set back to what is in force.
	editPolicies(t, h, map[string]config.Policy{"slow": config.PolicyAllow})
	p2 := pendingChange(t, h)
	if p2 == nil || p2.ID == p.ID {
		t.Fatalf("pending %+v, want a new change", p2)
	}
	if _, err := h.RunAtTerminal(testContext(t, 30*time.Second), "changes", "reject", p2.ID); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Servers["echo"].Policy("slow"); got != config.PolicyApprove {
		t.Errorf("after the rejection config.json says slow %s, want approve", got)
	}
	if got := cfg.Servers["echo"].Policy("echo"); got != config.PolicyAllow {
		t.Errorf("after the rejection config.json says echo %s, want the confirmed allow", got)
	}

	// The agent's own shell (this test process is the agent of the run)
	// cannot widen through the CLI: the daemon checks who asks, as for a
	// decision.
	if r, err := h.Run(testContext(t, 30*time.Second), "servers", "policy", "echo", "slow", "allow"); err == nil || !strings.Contains(r.Stderr, "refused to widen trust") || !strings.Contains(r.Stderr, "descends from the agent") {
		t.Errorf("servers policy … allow from the agent's tree: %v, stderr %q; want the daemon's refusal", err, r.Stderr)
	}
	if cfg, err := config.Load(h.ConfigFile()); err != nil || cfg.Servers["echo"].Policy("slow") != config.PolicyApprove {
		t.Errorf("after the refused edit config.json says slow %s (%v), want approve", cfg.Servers["echo"].Policy("slow"), err)
	}

	// The person's CLI widens at once.
	if out := policyCLI(t, h, "add", "allow"); !strings.Contains(out, "in force at once") {
		t.Errorf("servers policy printed %q", out)
	}
	if pendingChange(t, h) != nil {
		t.Error("the CLI's edit is held")
	}
	a.waitListChanged(t, 2, 20*time.Second)
	if got := callText(t, a.Session, "add", map[string]any{"a": 1, "b": 2}); got != "3" {
		t.Errorf("add answered %q after servers policy add allow", got)
	}

	evs := configEvents(t, h)
	var held, confirmed, rejected, byCLI bool
	for _, f := range evs {
		by, _ := f["by"].(string)
		switch f["type"] {
		case daemon.TypeConfigChangeHeld:
			held = held || (f["id"] == p.ID && hasString(f["held"], "echo: tool echo approve → allow"))
		case daemon.TypeConfigChangeConfirmed:
			confirmed = confirmed || (f["id"] == p.ID && strings.HasPrefix(by, "cli (pid "))
		case daemon.TypeConfigChangeRejected:
			rejected = rejected || (f["id"] == p2.ID && strings.HasPrefix(by, "cli (pid "))
		case "config_changed":
			byCLI = byCLI || (strings.HasPrefix(by, "cli (pid ") && hasString(f["changes"], "echo: tool add deny → allow"))
		}
	}
	if !held || !confirmed || !rejected || !byCLI {
		t.Errorf("audit: held %t, confirmed %t, rejected %t, CLI edit attributed %t; config events: %v", held, confirmed, rejected, byCLI, evs)
	}
}

// TestConfigEditWhileStopped: `portcullis servers policy … allow` run while
// no daemon runs writes the file and says the daemon will hold it; the
// daemon started next holds the allow (echo waits for a person) until the
// person confirms it, while a deny written at the same time applies.
func TestConfigEditWhileStopped(t *testing.T) {
	h := newHome(t)
	if err := h.AddServer(testContext(t, 30*time.Second), "echo", nil, echoBin); err != nil {
		t.Fatal(err)
	}
	d, err := h.StartDaemon(testContext(t, 30*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	r, err := h.Run(testContext(t, 30*time.Second), "servers", "policy", "echo", "echo", "allow")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Stderr, "no daemon is running") || !strings.Contains(r.Stderr, "echo: tool echo approve → allow") {
		t.Errorf("servers policy without a daemon printed on stderr %q, want the note that the allow will be held", r.Stderr)
	}
	policyCLI(t, h, "add", "deny")
	startDaemon(t, h)
	p := pendingChange(t, h)
	if p == nil || !p.AtStart || len(p.Held) != 1 || p.Held[0].Text != "echo: tool echo approve → allow" {
		t.Fatalf("pending at start %+v, want the allow of echo held", p)
	}
	a := connectListChanged(t, h, "echo", "")
	if got := listedNames(t, a.Session); slices.Contains(got, "add") {
		t.Errorf("tools/list %v has add, denied while the daemon was stopped", got)
	}
	pending := asyncCall(t, a.Session, "echo", map[string]any{"message": "held"})
	req := waitApproval(t, h, "echo while its allow is held", forTool("echo", ""))
	decideCLI(t, h, "deny", string(req.ID))
	await(t, pending)
	if _, err := h.RunAtTerminal(testContext(t, 30*time.Second), "changes", "confirm", p.ID); err != nil {
		t.Fatal(err)
	}
	if got := callText(t, a.Session, "echo", map[string]any{"message": "allowed"}); got != "allowed" {
		t.Errorf("echo answered %q after the confirmation", got)
	}
}
