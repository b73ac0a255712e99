package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/fakemodel"
)

// claudeTool is Claude Code's name for a tool of the inventory server.
func claudeTool(tool string) string { return "mcp__" + invLabel + "__" + tool }

// needClaude returns the Claude Code executable of the npm test
// dependencies, skipping t when they are not installed.
func needClaude(t *testing.T) string {
	t.Helper()
	npm := needNPM(t)
	bin := filepath.Join(npm, ".bin", "claude")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("skipping: Claude Code is not installed in %s (run `make test-deps`): %v", npm, err)
	}
	return bin
}

// claudeSetup is an agentSetup whose agent is Claude Code: ~/.claude.json
// (onboarding done) names the inventory server, and `portcullis install
// claude-code` has routed it through Portcullis.
func claudeSetup(t *testing.T) (*agentSetup, string) {
	t.Helper()
	bin := needClaude(t)
	s := newAgentSetup(t)
	file := fmt.Sprintf(`{
  "hasCompletedOnboarding": true,
  "mcpServers": {
    %q: {"type": "stdio", "command": %q, "args": [], "env": {"INVENTORY_CALL_LOG": %q}}
  }
}
`, invLabel, s.bin, s.ledger)
	if err := os.WriteFile(filepath.Join(s.agentHome, ".claude.json"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	s.install(t, "claude-code")
	return s, bin
}

// claudeEnv is Claude Code's environment: offline, against the scripted
// model, with MCP_TOOL_TIMEOUT well above Portcullis's approval timeout.
func (s *agentSetup) claudeEnv() []string {
	return s.agentEnv(
		"ANTHROPIC_BASE_URL="+s.model.URL(),
		"ANTHROPIC_API_KEY=sk-test-fakemodel",
		"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		fmt.Sprintf("MCP_TOOL_TIMEOUT=%d", (4*agentApprovalTimeout).Milliseconds()),
		"MCP_TIMEOUT=60000",
	)
}

// TestAgentsClaudeCode drives the real Claude Code (npm, pinned) through
// Portcullis with a scripted model: `portcullis install claude-code`, `claude
// mcp list`, then one `claude -p` session in which the model calls a read
// tool, a write tool held for the person's approval, the write again after a
// code-only rebuild and after a schema-changing rebuild, a write the person
// denies and one nobody decides. It asserts on what the model received (the
// tool_result of each call, as Claude Code put it in the next request) and on
// the inventory server's own ledger.
func TestAgentsClaudeCode(t *testing.T) {
	s, claude := claudeSetup(t)
	allowTools(t, s.home, invLabel, "inventory_lookup")
	s.startModel(t, nil)
	env := s.claudeEnv()

	// `claude mcp list` starts each server (through `portcullis connect`)
	// and reports it connected.
	list := s.startAgent(t, time.Minute, env, claude, "mcp", "list")
	list.wait(t, time.Minute)
	mustContain(t, "claude mcp list", list.stdout.String(), invLabel+": ", "Connected")

	adjust, lookup := claudeTool("inventory_adjust"), claudeTool("inventory_lookup")
	pause := s.pause.Hook
	retryIfRefused := func(args map[string]any) fakemodel.Step {
		return fakemodel.Step{Before: pause, Decide: func(req fakemodel.Request) fakemodel.Step {
			if len(req.Result) == 1 && req.Result[0].IsError {
				return fakemodel.Step{Tool: adjust, Args: args}
			}
			return fakemodel.Step{Tool: lookup, Args: map[string]any{"sku": "WIDGET-1"}}
		}}
	}
	s.model.Append(
		// Claude Code defers MCP tools: the model loads them with ToolSearch.
		fakemodel.Step{Tool: "ToolSearch", Args: map[string]any{"query": "select:" + lookup + "," + adjust}},
		fakemodel.Step{Tool: lookup, Args: map[string]any{"sku": "WIDGET-1"}},
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 2}, Before: pause},
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 3}, Before: pause},
		retryIfRefused(map[string]any{"sku": "WIDGET-1", "delta": 3}),
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 1}, Before: pause},
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 1, "reason": "restock"}, Before: pause},
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 1, "reason": "denied"}, Before: pause},
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 1, "reason": "nobody"}, Before: pause},
		fakemodel.Step{Text: "done", Before: pause},
	)
	p := s.startAgent(t, 5*time.Minute, env, claude, "-p", "Adjust the stock of WIDGET-1.",
		"--allowedTools", "mcp__"+invLabel+",ToolSearch", "--output-format", "stream-json", "--verbose")

	// A read call (policy allow) reaches the server.
	req := s.paused(t, p, time.Minute)
	r := onlyResult(t, req, "inventory_lookup")
	if r.Name != lookup {
		t.Fatalf("the model's request carries a result of %q, want %q", r.Name, lookup)
	}
	wantStock(t, "the lookup", r, 40)
	shim, epoch1 := s.liveRun(t)
	s.pause.Resume()

	// A write call waits for the person, who approves it for this run.
	s.decideWhenAsked(t, "inventory_adjust", epoch1, "approve")
	req = s.paused(t, p, time.Minute)
	wantStock(t, "the approved write", onlyResult(t, req, "approved write"), 42)

	// A code-only rebuild mid-session: a new epoch, the grant of the old
	// one void. The model's next write costs it at most one refusal and
	// reaches the new code after one approval.
	s.build(t, invRev1Rebuilt)
	epoch2 := epochOf(t, s.home, shim, epoch1)
	s.pause.Resume()
	s.decideWhenAsked(t, "inventory_adjust", epoch2, "approve")
	req = s.paused(t, p, time.Minute)
	first := onlyResult(t, req, "write after a code-only rebuild")
	t.Logf("after a code-only rebuild the model received: %+v", first)
	s.pause.Resume()
	req = s.paused(t, p, time.Minute)
	second := onlyResult(t, req, "second write after a code-only rebuild")
	t.Logf("then: %+v", second)
	// The new process starts with the seed stock (40).
	if first.IsError {
		mustContain(t, "the refusal after a code-only rebuild", first.Text, "authorization_stale")
		wantStock(t, "the retried write after a code-only rebuild", second, 43)
	} else {
		wantStock(t, "the write after a code-only rebuild", first, 43)
	}

	// A schema-changing rebuild: inventory_adjust now requires a reason.
	s.build(t, invRev2)
	epoch3 := epochOf(t, s.home, shim, epoch2)
	s.pause.Resume()
	req = s.paused(t, p, 3*agentApprovalTimeout)
	r = onlyResult(t, req, "write without the new required argument")
	t.Logf("after a schema change the model received: %+v", r)
	if !r.IsError {
		t.Errorf("the model received %+v for a write without the argument the new schema requires, want an error", r)
	}
	// Claude Code gives the model error.message only, never error.data.
	mustContain(t, "the refusal of a write on the old schema", r.Text, "invalid_arguments", "inventory_adjust")
	s.pause.Resume()

	// The write with the new argument, approved once.
	s.decideWhenAsked(t, "inventory_adjust", epoch3, "approve", "--once")
	req = s.paused(t, p, time.Minute)
	wantStock(t, "the write on the new schema", onlyResult(t, req, "write on the new schema"), 41)
	s.pause.Resume()

	// A write the person denies.
	s.decideWhenAsked(t, "inventory_adjust", epoch3, "deny")
	req = s.paused(t, p, time.Minute)
	r = onlyResult(t, req, "denied write")
	if !r.IsError {
		t.Errorf("the model received %+v for a denied write, want an error", r)
	}
	mustContain(t, "the denial the model received", r.Text, "approval_denied")
	s.pause.Resume()

	// A write nobody decides: approval_timeout after settings.approvalTimeout.
	req = s.paused(t, p, 3*agentApprovalTimeout)
	r = onlyResult(t, req, "write nobody decided")
	if !r.IsError {
		t.Errorf("the model received %+v for a write nobody decided, want an error", r)
	}
	mustContain(t, "the timeout the model received", r.Text, "approval_timeout")
	s.pause.Resume()
	p.wait(t, time.Minute)
	if err := s.model.Err(); err != nil {
		t.Error(err)
	}
	wantLedger(t, s.ledger)
}
