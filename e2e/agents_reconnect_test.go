package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/internal/fakemodel"
	"github.com/portcullis/portcullis/internal/harness"
)

// stopDaemonsOf stops, when the test ends, every `portcullis daemon` of h
// (those the shims started): SIGTERM, then SIGKILL after 30 s. Register it
// before the agent, so that it runs after the agent was stopped.
func stopDaemonsOf(t *testing.T, h *harness.Home) {
	t.Cleanup(func() {
		for _, pid := range daemonPIDsOf(h) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			deadline := time.Now().Add(30 * time.Second)
			for syscall.Kill(pid, 0) == nil && !zombie(pid) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// freezeShim stops the shim pid (SIGSTOP) so that it does not connect to a
// new daemon when the test kills the daemon: for tests of what a killed
// daemon leaves behind. The test's end kills it.
func freezeShim(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL); _ = syscall.Kill(pid, syscall.SIGCONT) })
}

// daemonPIDsOf lists the live `portcullis daemon` processes of h.
func daemonPIDsOf(h *harness.Home) []int {
	procs, err := harness.Processes()
	if err != nil {
		return nil
	}
	home := []byte("PORTCULLIS_HOME=" + h.Dir + "\x00")
	var out []int
	for _, p := range procs {
		dir := "/proc/" + strconv.Itoa(p.PID)
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		env, _ := os.ReadFile(dir + "/environ")
		if p.State != "Z" && bytes.HasSuffix(cmdline, []byte("\x00daemon\x00")) && bytes.Contains(env, home) {
			out = append(out, p.PID)
		}
	}
	return out
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// daemonPID is the pid of the daemon answering on h's socket, failing t
// when none answers within 30 s.
func daemonPID(t *testing.T, h *harness.Home) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rep, err := h.Status(testContext(t, 30*time.Second))
		if err == nil && rep.PID != 0 {
			return rep.PID
		}
		if time.Now().After(deadline) {
			t.Fatalf("no daemon answers within 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killDaemon kills the daemon pid with SIGKILL and waits until it is gone.
func killDaemon(t *testing.T, pid int) time.Time {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitFor(t, fmt.Sprintf("daemon %d to die", pid), func() bool { return syscall.Kill(pid, 0) != nil || zombie(pid) })
	return killed
}

// continuedRuns returns the run_started events of h's log that record a
// run continued, with what they say of it.
func continuedRuns(t *testing.T, h *harness.Home) []audit.RunStarted {
	t.Helper()
	var out []audit.RunStarted
	for _, e := range auditEvents(t, h) {
		if e.Type != audit.TypeRunStarted {
			continue
		}
		var rs audit.RunStarted
		if err := e.DecodeFields(&rs); err != nil {
			t.Fatal(err)
		}
		if rs.Continues != nil {
			out = append(out, rs)
		}
	}
	return out
}

// buildNewVersion builds portcullis-app with another version string into
// a directory of its own (a new build, as `make install` makes one).
func buildNewVersion(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	goBin := "go"
	if r := os.Getenv("GOROOT"); r != "" {
		goBin = filepath.Join(r, "bin", "go")
	}
	cmd := exec.CommandContext(testContext(t, 5*time.Minute), goBin, "build", "-tags", "ci",
		"-ldflags", "-X github.com/portcullis/portcullis/app.Version="+version, "-o", filepath.Join(dir, "portcullis-app"), "./cmd/portcullis-app")
	cmd.Dir, cmd.Env = repoRoot, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the new version: %v\n%s", err, out)
	}
	return filepath.Join(dir, "portcullis-app")
}

// copyExecutable copies the executable src to dst.
func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestAgentsClaudeCodeDaemonRestart: one Claude Code session (the real
// agent, a scripted model) outlives its daemon three times, with no restart
// of Claude Code. The daemon is killed with SIGKILL between two calls: the
// next call is answered by a daemon the shim started. It is killed again
// while a write waits for the person: the model is told the call was never
// sent and to call again, and its next call is approved on the new daemon
// and runs. Then a new build is installed over the running one as `make
// install` does (install -m 0755 into PREFIX/bin, then
// scripts/install-takeover.sh, which stops the old daemon at the person's
// terminal): the next call is answered by the new build. Each new daemon's
// audit log records the run it continues.
func TestAgentsClaudeCodeDaemonRestart(t *testing.T) {
	t.Parallel()
	claude := needClaude(t)
	s := newAgentSetupNoDaemon(t)
	// PREFIX/bin of an installation of our own, which the agent's file
	// names and which the new build replaces.
	prefix := t.TempDir()
	bin := filepath.Join(prefix, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	copyExecutable(t, s.home.Bin, filepath.Join(bin, "portcullis"))
	copyExecutable(t, filepath.Join(filepath.Dir(s.home.Bin), "portcullis-app"), filepath.Join(bin, "portcullis-app"))
	s.home.Bin = filepath.Join(bin, "portcullis")
	stopDaemonsOf(t, s.home)
	d1, err := s.home.StartDaemon(testContext(t, 30*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d1.Stop(5 * time.Second) // killed by the test
		if t.Failed() {
			t.Logf("first daemon's output:\n%s", d1.Output())
			if b, err := os.ReadFile(filepath.Join(s.home.Dir, "daemon.log")); err == nil {
				t.Logf("daemon.log of the daemons the shim started:\n%s", b)
			}
		}
	})
	file := fmt.Sprintf(`{"hasCompletedOnboarding": true, "mcpServers": {%q: {"type": "stdio", "command": %q, "args": [], "env": {"INVENTORY_CALL_LOG": %q}}}}`, invLabel, s.bin, s.ledger)
	if err := os.WriteFile(filepath.Join(s.agentHome, ".claude.json"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	s.install(t, "claude-code")
	allowTools(t, s.home, invLabel, "inventory_lookup")

	lookup, adjust := claudeTool("inventory_lookup"), claudeTool("inventory_adjust")
	sku := map[string]any{"sku": "WIDGET-1"}
	write := map[string]any{"sku": "WIDGET-1", "delta": 2}
	pause := s.pause.Hook
	s.startModel(t, fakemodel.Script{
		{Tool: "ToolSearch", Args: map[string]any{"query": "select:" + lookup + "," + adjust}},
		{Tool: lookup, Args: sku},
		{Tool: lookup, Args: sku, Before: pause},   // A: after the first lookup
		{Tool: adjust, Args: write, Before: pause}, // B: after the lookup on the second daemon
		{Tool: adjust, Args: write, Before: pause}, // C: after the held write's refusal
		{Tool: lookup, Args: sku, Before: pause},   // D: after the approved write
		{Text: "done", Before: pause},              // E: after the lookup on the new build
	})
	p := s.startAgent(t, 5*time.Minute, s.claudeEnv(), claude, "-p", "Check the stock of WIDGET-1.",
		"--allowedTools", "mcp__"+invLabel+",ToolSearch", "--output-format", "stream-json", "--verbose")

	// A: the first lookup, on the daemon the test started.
	wantStock(t, "the first lookup", onlyResult(t, s.paused(t, p, 2*time.Minute), "first lookup"), 40)
	_, epoch1 := s.liveRun(t)
	killed := killDaemon(t, d1.PID())
	s.pause.Resume()

	// B: the next call is answered by a new daemon, started by the shim.
	req := s.paused(t, p, 2*time.Minute)
	t.Logf("from SIGKILL to the model's next request with the call's result: %s", time.Since(killed))
	wantStock(t, "the lookup after SIGKILL", onlyResult(t, req, "lookup after SIGKILL"), 40)
	pid2 := daemonPID(t, s.home)
	if pid2 == d1.PID() {
		t.Fatalf("the daemon answering is still pid %d", pid2)
	}
	_, epoch2 := s.liveRun(t)
	if epoch2 == epoch1 {
		t.Errorf("the new daemon serves epoch %s, the killed one's", epoch2)
	}
	s.pause.Resume()

	// C: a write held for the person when the daemon dies is refused: it
	// was never sent, and the model is told to call again.
	held := waitApproval(t, s.home, "inventory_adjust", forTool("inventory_adjust", epoch2))
	killDaemon(t, pid2)
	req = s.paused(t, p, 2*time.Minute)
	r := onlyResult(t, req, "held write when the daemon died")
	t.Logf("a write held (request %s) when the daemon died reached the model as: %+v", held.ID, r)
	if !r.IsError {
		t.Errorf("the model received %+v for a held write whose daemon died, want an error", r)
	}
	mustContain(t, "the refusal of the held write", r.Text, "epoch_ended", "waited for the person's approval", "never sent", "call the tool again")
	s.pause.Resume()

	// D: called again, approved by the person on the third daemon.
	pid3 := 0
	waitFor(t, "a third daemon", func() bool {
		if rep, err := s.home.Status(testContext(t, 30*time.Second)); err == nil && rep.PID != 0 && rep.PID != pid2 {
			pid3 = rep.PID
			return true
		}
		return false
	})
	s.decideWhenAsked(t, "inventory_adjust", "", "approve")
	wantStock(t, "the write approved on the third daemon", onlyResult(t, s.paused(t, p, 2*time.Minute), "approved write"), 42)

	// A new build installed over the running one, as `make install` does.
	newApp := buildNewVersion(t, "9.9.9-reconnect")
	if out, err := exec.Command("install", "-m", "0755", newApp, filepath.Join(bin, "portcullis-app")).CombinedOutput(); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	script := *s.home
	script.Bin = filepath.Join(repoRoot, "scripts", "install-takeover.sh")
	res, err := script.RunAtTerminal(testContext(t, time.Minute), prefix)
	if err != nil || !strings.Contains(res.Stdout, "stopped the daemon of the previous version") {
		t.Fatalf("install-takeover.sh: %v\n%s", err, res.Stdout)
	}
	waitFor(t, "the old daemon to stop", func() bool { return syscall.Kill(pid3, 0) != nil || zombie(pid3) })
	s.pause.Resume()

	// E: the next call starts the new build and is answered there.
	wantStock(t, "the lookup on the new build", onlyResult(t, s.paused(t, p, 2*time.Minute), "lookup on the new build"), 40)
	pid4 := daemonPID(t, s.home)
	if v, err := s.home.Run(testContext(t, 30*time.Second), "version"); err != nil || !strings.Contains(v.Stdout, "9.9.9-reconnect") {
		t.Errorf("portcullis version after the install: %q, %v", v.Stdout, err)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid4))
	if err != nil || exe != filepath.Join(bin, "portcullis-app") {
		t.Errorf("the daemon answering now (pid %d) runs %q (%v), want the new build", pid4, exe, err)
	}
	want, _ := harness.FileSHA256(newApp)
	if got, _ := harness.FileSHA256(fmt.Sprintf("/proc/%d/exe", pid4)); got != want {
		t.Errorf("the daemon answering now runs a file of digest %s, want the new build's %s", got, want)
	}
	s.pause.Resume()
	p.wait(t, time.Minute)
	if err := s.model.Err(); err != nil {
		t.Error(err)
	}

	// Every call the model made reached a server but the held write.
	calls := readInventoryCalls(t, s.ledger)
	var tools []string
	for _, c := range calls {
		tools = append(tools, c.Tool)
	}
	if strings.Join(tools, ",") != "inventory_lookup,inventory_lookup,inventory_adjust,inventory_lookup" {
		t.Errorf("the inventory ledger is %s; want lookup, lookup, the approved write, lookup", describe(calls))
	}
	// Each daemon after the first recorded the run it continues.
	cont := continuedRuns(t, s.home)
	if len(cont) != 3 {
		t.Fatalf("%d run_started events record a continued run, want 3: %+v", len(cont), cont)
	}
	for i, c := range cont {
		b, _ := json.Marshal(c.Continues)
		t.Logf("continued run %d: %s", i+1, b)
		if c.Continues.AgentRun == "" || c.Continues.PreviousLogHead == nil || c.Continues.Why == "" {
			t.Errorf("run_started %d records %s, want the previous run, its daemon's log head and why", i+1, b)
		}
		if i > 0 && c.Continues.AgentRun != cont[i-1].AgentRun {
			t.Errorf("run_started %d continues %s, want the run before it, %s", i+1, c.Continues.AgentRun, cont[i-1].AgentRun)
		}
	}
	if cont[0].Continues.DaemonPID != d1.PID() || !strings.Contains(cont[0].Continues.Why, "was lost") {
		t.Errorf("the first continuation names daemon %d (%q), want %d, lost", cont[0].Continues.DaemonPID, cont[0].Continues.Why, d1.PID())
	}
	if !strings.Contains(cont[2].Continues.Why, "stopped") {
		t.Errorf("the continuation after the install says %q, want the daemon stopped", cont[2].Continues.Why)
	}
}

// daemonKilledMidSession runs one session of an agent connected through
// Portcullis to a daemon the test started on s: the model calls the lookup,
// the test kills the daemon with SIGKILL, and the model calls the lookup
// again, which a daemon the shim started answers; the agent is never
// restarted.
func (s *agentSetup) daemonKilledMidSession(t *testing.T, tool func(string) string, preamble []fakemodel.Step, start func() *agentProc) fakemodel.ToolResult {
	t.Helper()
	lookup, sku := tool("inventory_lookup"), map[string]any{"sku": "WIDGET-1"}
	s.model.Append(preamble...)
	s.model.Append(
		fakemodel.Step{Tool: lookup, Args: sku},
		fakemodel.Step{Tool: lookup, Args: sku, Before: s.pause.Hook},
		fakemodel.Step{Text: "done", Before: s.pause.Hook},
	)
	p := start()
	wantStock(t, "the first lookup", codexOutput(onlyResult(t, s.paused(t, p, 2*time.Minute), "first lookup")), 40)
	pid := daemonPID(t, s.home)
	killDaemon(t, pid)
	s.pause.Resume()
	r := codexOutput(onlyResult(t, s.paused(t, p, 2*time.Minute), "lookup after SIGKILL"))
	if now := daemonPID(t, s.home); now == pid {
		t.Errorf("still daemon %d", now)
	}
	s.pause.Resume()
	p.wait(t, time.Minute)
	return r
}

// newAgentSetupKillable is newAgentSetup with a daemon the test may kill.
func newAgentSetupKillable(t *testing.T, env ...string) *agentSetup {
	t.Helper()
	s := newAgentSetupNoDaemon(t)
	s.home.Env = append(s.home.Env, env...)
	stopDaemonsOf(t, s.home)
	d, err := s.home.StartDaemon(testContext(t, 30*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(5 * time.Second) })
	s.daemon = d
	return s
}

// TestAgentsGeminiDaemonKilled: Gemini CLI, which never starts a stdio
// server again (TestAgentsOutputEndsGemini), keeps its tools through
// Portcullis when the daemon is killed mid-session.
func TestAgentsGeminiDaemonKilled(t *testing.T) {
	t.Parallel()
	node, gemini := needGemini(t)
	s := geminiSetupOn(t, newAgentSetupKillable(t))
	allowTools(t, s.home, invLabel, "inventory_lookup")
	s.startModel(t, nil)
	r := s.daemonKilledMidSession(t, geminiTool, nil, func() *agentProc {
		return s.startAgent(t, 5*time.Minute, s.geminiEnv(), node, gemini, "-p", "Check the stock of WIDGET-1.", "--yolo")
	})
	t.Logf("after SIGKILL of the daemon, Gemini CLI's next lookup reached the model as %+v", r)
	wantStock(t, "the lookup after SIGKILL", r, 40)
}

// TestAgentsCodexDaemonKilled: the same for Codex, which never starts a
// stdio server again either (TestAgentsOutputEndsCodex).
func TestAgentsCodexDaemonKilled(t *testing.T) {
	t.Parallel()
	node, codex := needCodex(t)
	// Codex gives a stdio server only a few variables of its environment,
	// never the session bus: a daemon its shim starts finds the person's
	// bus at /run/user/UID/bus, which a test's private bus is not. So the
	// first daemon runs without a bus too (an unsigned log, as for a person
	// without a keyring), and the next one can open what it left.
	s := codexSetupOn(t, newAgentSetupKillable(t, "DBUS_SESSION_BUS_ADDRESS="))
	allowTools(t, s.home, invLabel, "inventory_lookup")
	s.startModel(t, nil)
	r := s.daemonKilledMidSession(t, codexTool, nil, func() *agentProc {
		return s.startAgent(t, 5*time.Minute, s.codexEnv(), node, s.codexExec(codex, "Check the stock of WIDGET-1.")...)
	})
	t.Logf("after SIGKILL of the daemon, Codex's next lookup reached the model as %+v", r)
	wantStock(t, "the lookup after SIGKILL", r, 40)
}
