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

func TestAgentsClaudeCode(t *testing.T) {
	s, claude := claudeSetup(t)
	s.startModel(t, fakemodel.Script{
		{Tool: "ToolSearch", Args: map[string]any{"query": "select:" + claudeTool("inventory_lookup") + "," + claudeTool("inventory_adjust")}},
		{Tool: claudeTool("inventory_lookup"), Args: map[string]any{"sku": "WIDGET-1"}},
		{Text: "done", Before: s.pause.Hook},
	})
	p := s.startAgent(t, 3*time.Minute, s.claudeEnv(), claude, "-p", "Check the stock of WIDGET-1.",
		"--allowedTools", "mcp__"+invLabel+",ToolSearch", "--output-format", "stream-json", "--verbose")
	req := s.paused(t, p, time.Minute)
	t.Logf("paused at %+v", req.Result)
	s.pause.Resume()
	p.wait(t, time.Minute)
	for _, r := range s.model.Requests() {
		t.Logf("req %d %s turn=%v tools=%v results=%+v\n%s", r.Seq, r.Path, r.Turn, r.Tools, r.Result, trunc(string(r.Body), 3000))
	}
	t.Log(describe(readInventoryCalls(t, s.ledger)))
	t.Log(p.stdout.String())
	_ = strings.Contains
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
