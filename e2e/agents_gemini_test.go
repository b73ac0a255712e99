package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/harness"
)

// geminiTool is Gemini CLI's name for a tool of the inventory server.
func geminiTool(tool string) string { return "mcp_" + invLabel + "_" + tool }

// needGemini returns node and the Gemini CLI entry point of the npm test
// dependencies, skipping t when they are not installed.
func needGemini(t *testing.T) (node, entry string) {
	t.Helper()
	npm := needNPM(t)
	entry = filepath.Join(npm, "@google", "gemini-cli", "bundle", "gemini.js")
	if _, err := os.Stat(entry); err != nil {
		t.Skipf("skipping: Gemini CLI is not installed in %s (run `make test-deps`): %v", npm, err)
	}
	node, err := harness.Node()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	return node, entry
}

// geminiSetup is an agentSetup whose agent is Gemini CLI:
// ~/.gemini/settings.json (API-key auth, no telemetry or update checks)
// names the inventory server, the project folder is trusted, and
// `portcullis install gemini-cli` has routed the server through Portcullis.
func geminiSetup(t *testing.T) (s *agentSetup, node, entry string) {
	t.Helper()
	node, entry = needGemini(t)
	return geminiSetupOn(t, newAgentSetup(t)), node, entry
}

// geminiSetupOn is geminiSetup on the agentSetup s.
func geminiSetupOn(t *testing.T, s *agentSetup) *agentSetup {
	t.Helper()
	settings := map[string]any{
		"security":  map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}, "folderTrust": map[string]any{"enabled": true}},
		"general":   map[string]any{"disableAutoUpdate": true, "disableUpdateNag": true},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
		"mcpServers": map[string]any{invLabel: map[string]any{
			"command": s.bin, "args": []string{}, "env": map[string]string{"INVENTORY_CALL_LOG": s.ledger},
		}},
	}
	dir := filepath.Join(s.agentHome, ".gemini")
	writeJSON := func(name string, v any) {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeJSON("settings.json", settings)
	writeJSON("trustedFolders.json", map[string]string{s.work: "TRUST_FOLDER"})
	s.install(t, "gemini-cli")
	return s
}

// geminiEnv is Gemini CLI's environment: offline, against the scripted model.
func (s *agentSetup) geminiEnv() []string {
	return s.agentEnv(
		"GEMINI_API_KEY=test-fakemodel",
		"GOOGLE_GEMINI_BASE_URL="+s.model.URL(),
		"GEMINI_CLI_NO_RELAUNCH=true",
		"NO_COLOR=1",
	)
}

// TestAgentsGeminiCLI drives the real Gemini CLI (npm, pinned) through
// Portcullis with a scripted model: `portcullis install gemini-cli`, `gemini
// mcp list`, then one `gemini -p` session running inventoryScenario.
func TestAgentsGeminiCLI(t *testing.T) {
	t.Parallel()
	s, node, gemini := geminiSetup(t)
	allowTools(t, s.home, invLabel, "inventory_lookup")
	s.startModel(t, nil)
	env := s.geminiEnv()

	// `gemini mcp list` starts each server (through `portcullis connect`)
	// and reports it connected.
	list := s.startAgent(t, time.Minute, env, node, gemini, "mcp", "list")
	list.wait(t, time.Minute)
	mustContain(t, "gemini mcp list", list.stdout.String()+list.stderr.String(), invLabel+": ", "Connected")

	// --yolo: Gemini CLI runs tools without asking in the terminal; the
	// person's approval is Portcullis's to ask.
	s.inventoryScenario(t, geminiTool, nil, true, func() *agentProc {
		return s.startAgent(t, 5*time.Minute, env, node, gemini, "-p", "Adjust the stock of WIDGET-1.", "--yolo")
	})
}
