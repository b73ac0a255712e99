package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	t.Parallel()
	s, claude := claudeSetup(t)
	allowTools(t, s.home, invLabel, "inventory_lookup")
	s.startModel(t, nil)
	env := s.claudeEnv()

	// `claude mcp list` starts each server (through `portcullis connect`)
	// and reports it connected.
	list := s.startAgent(t, time.Minute, env, claude, "mcp", "list")
	list.wait(t, time.Minute)
	mustContain(t, "claude mcp list", list.stdout.String(), invLabel+": ", "Connected")

	// Claude Code defers MCP tools: the model loads them with ToolSearch.
	load := fakemodel.Step{Tool: "ToolSearch", Args: map[string]any{"query": "select:" + claudeTool("inventory_lookup") + "," + claudeTool("inventory_adjust")}}
	s.inventoryScenario(t, claudeTool, []fakemodel.Step{load}, false, func() *agentProc {
		return s.startAgent(t, 5*time.Minute, env, claude, "-p", "Adjust the stock of WIDGET-1.",
			"--allowedTools", "mcp__"+invLabel+",ToolSearch", "--output-format", "stream-json", "--verbose")
	})
}

// TestAgentsClaudeCodeToolTimeout measures what happens when Claude Code's
// MCP_TOOL_TIMEOUT is shorter than Portcullis's approval timeout: Claude
// Code gives up on the held call by itself, the model receives Claude
// Code's error rather than a refusal of Portcullis, and the call never
// reaches the server.
func TestAgentsClaudeCodeToolTimeout(t *testing.T) {
	t.Parallel()
	s, claude := claudeSetup(t)
	s.startModel(t, fakemodel.Script{
		{Tool: "ToolSearch", Args: map[string]any{"query": "select:" + claudeTool("inventory_adjust")}},
		{Tool: claudeTool("inventory_adjust"), Args: map[string]any{"sku": "WIDGET-1", "delta": 1}},
		{Text: "done", Before: s.pause.Hook},
	})
	env := append(s.claudeEnv(), "MCP_TOOL_TIMEOUT=2000") // later entries win
	p := s.startAgent(t, 2*time.Minute, env, claude, "-p", "Adjust the stock of WIDGET-1.",
		"--allowedTools", "mcp__"+invLabel+",ToolSearch", "--output-format", "stream-json", "--verbose")
	waitApproval(t, s.home, "inventory_adjust", forTool("inventory_adjust", ""))
	req := s.paused(t, p, agentApprovalTimeout) // before Portcullis's own timeout
	r := onlyResult(t, req, "a held call past MCP_TOOL_TIMEOUT")
	t.Logf("with MCP_TOOL_TIMEOUT=2000 and approvalTimeout %s the model received: %+v", agentApprovalTimeout, r)
	if !r.IsError || strings.Contains(r.Text, "approval_timeout") {
		t.Errorf("the model received %+v, want Claude Code's own timeout error", r)
	}
	s.pause.Resume()
	p.wait(t, time.Minute)
	if calls := readInventoryCalls(t, s.ledger); len(calls) != 0 {
		t.Errorf("the server received %s, want nothing", describe(calls))
	}
}
