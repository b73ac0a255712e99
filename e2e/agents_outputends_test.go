package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/fakemodel"
)

// outputEnds is what an agent did when the output of its stdio server
// ended mid-session (the server process was killed): how many times it
// started the server before and after, and the results the model received
// for its next two calls.
type outputEnds struct {
	// starts of the server: before its output ended, a second after it
	// ended (before the next call), and after the two calls.
	startsBefore, startsIdle, startsAfter int
	results                               []fakemodel.ToolResult
}

// serverOutputEnds runs one session of an agent whose inventory server is
// its own again (`portcullis uninstall AGENT` after the setup routed it
// through Portcullis), behind a wrapper that counts its starts: the model
// calls the lookup, the test kills the server (its output ends), and the
// model calls the lookup twice more.
func (s *agentSetup) serverOutputEnds(t *testing.T, agent string, tool func(string) string, preamble []fakemodel.Step, start func() *agentProc) outputEnds {
	t.Helper()
	if r, err := s.home.Run(testContext(t, time.Minute), "uninstall", agent); err != nil {
		t.Fatalf("uninstall %s: %v\n%s", agent, err, r.Stdout)
	}
	starts := s.bin + ".starts"
	if err := os.Rename(s.bin, s.bin+".real"); err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\necho $$ >> '" + starts + "'\nexec '" + s.bin + ".real' \"$@\"\n"
	if err := os.WriteFile(s.bin, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	count := func() int { b, _ := os.ReadFile(starts); return strings.Count(string(b), "\n") }
	lookup := tool("inventory_lookup")
	sku := map[string]any{"sku": "WIDGET-1"}
	s.model.Append(preamble...)
	s.model.Append(
		fakemodel.Step{Tool: lookup, Args: sku},
		fakemodel.Step{Tool: lookup, Args: sku, Before: s.pause.Hook},
		fakemodel.Step{Tool: lookup, Args: sku, Before: s.pause.Hook},
		fakemodel.Step{Text: "done", Before: s.pause.Hook},
	)
	p := start()
	// codexOutput takes off the header Codex puts before a result (a no-op
	// for the others).
	wantStock(t, "the first lookup", codexOutput(onlyResult(t, s.paused(t, p, 2*time.Minute), "first lookup")), 40)
	var out outputEnds
	out.startsBefore = count()
	calls := readInventoryCalls(t, s.ledger)
	if len(calls) != 1 {
		t.Fatalf("the ledger holds %s, want the first lookup", describe(calls))
	}
	if err := syscall.Kill(calls[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the agent sees its server's output end
	out.startsIdle = count()
	for range 2 {
		s.pause.Resume()
		out.results = append(out.results, codexOutput(onlyResult(t, s.paused(t, p, 2*time.Minute), "lookup after the server's end")))
	}
	out.startsAfter = count()
	s.pause.Resume()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("the agent did not end")
	}
	t.Logf("%s: server started %d time(s) before its output ended, %d a second after, %d after two more calls; these reached the model as %+v", agent, out.startsBefore, out.startsIdle, out.startsAfter, out.results)
	return out
}

// TestAgentsOutputEndsClaude: Claude Code starts a stdio server again at
// the next call of its tools once the server's output ended, in the same
// session; the call then goes to the new process, with a new handshake.
func TestAgentsOutputEndsClaude(t *testing.T) {
	t.Parallel()
	s, claude := claudeSetup(t)
	s.startModel(t, nil)
	lookup := claudeTool("inventory_lookup")
	out := s.serverOutputEnds(t, "claude-code", claudeTool, []fakemodel.Step{{Tool: "ToolSearch", Args: map[string]any{"query": "select:" + lookup}}}, func() *agentProc {
		return s.startAgent(t, 5*time.Minute, s.claudeEnv(), claude, "-p", "Check the stock of WIDGET-1.",
			"--allowedTools", "mcp__"+invLabel+",ToolSearch", "--output-format", "stream-json", "--verbose")
	})
	if out.startsIdle != out.startsBefore || out.startsAfter != out.startsBefore+1 {
		t.Errorf("the server was started %d, %d, %d times (before, idle after its end, after two calls); want it started once more, at the next call", out.startsBefore, out.startsIdle, out.startsAfter)
	}
	for _, r := range out.results {
		wantStock(t, "a call after the server's end", r, 40)
	}
}

// TestAgentsOutputEndsGemini: Gemini CLI does not start a stdio server
// again once its output ended: every later call fails ("Not connected").
func TestAgentsOutputEndsGemini(t *testing.T) {
	t.Parallel()
	s, node, gemini := geminiSetup(t)
	s.startModel(t, nil)
	out := s.serverOutputEnds(t, "gemini-cli", geminiTool, nil, func() *agentProc {
		return s.startAgent(t, 5*time.Minute, s.geminiEnv(), node, gemini, "-p", "Check the stock of WIDGET-1.", "--yolo")
	})
	wantNoRestart(t, out)
	for _, r := range out.results {
		mustContain(t, "a call after the server's end", r.Text, "Not connected")
	}
}

// TestAgentsOutputEndsCodex: Codex does not start a stdio server again
// once its output ended: every later call fails ("tool call failed").
func TestAgentsOutputEndsCodex(t *testing.T) {
	t.Parallel()
	s, node, codex := codexSetup(t)
	s.startModel(t, nil)
	out := s.serverOutputEnds(t, "codex", codexTool, nil, func() *agentProc {
		return s.startAgent(t, 5*time.Minute, s.codexEnv(), node, s.codexExec(codex, "Check the stock of WIDGET-1.")...)
	})
	wantNoRestart(t, out)
	for _, r := range out.results {
		mustContain(t, "a call after the server's end", r.Text, "tool call failed")
	}
}

// wantNoRestart fails t unless the agent neither started its server again
// nor got a result from it after its output ended.
func wantNoRestart(t *testing.T, out outputEnds) {
	t.Helper()
	if out.startsAfter != out.startsBefore || out.startsIdle != out.startsBefore {
		t.Errorf("the agent started its server again (%d starts, %d before)", out.startsAfter, out.startsBefore)
	}
	for _, r := range out.results {
		if strings.Contains(r.Text, "on hand") {
			t.Errorf("a call after the server's end was answered %q", r.Text)
		}
	}
}
