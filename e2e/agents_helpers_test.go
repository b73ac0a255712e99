package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/fakemodel"
	"github.com/portcullis/portcullis/internal/harness"
)

// invLabel is the label the agent tests give the inventory server in the
// agent's own configuration, and so in Portcullis's after `install`.
const invLabel = "inv"

// Builds of the inventory server (testdata/servers/inventory): the first
// build, a code-only rebuild (same catalog, another binary) and a rebuild
// whose inventory_adjust requires a "reason".
const (
	invRev1        = ""
	invRev1Rebuilt = "-X main.buildLabel=rebuilt"
	invRev2        = "-X main.schemaRevision=2 -X main.buildLabel=rev2"
)

// agentApprovalTimeout is settings.approvalTimeout in the agent tests: long
// enough for a loaded machine to decide in time, short enough that the
// timeout scenario stays quick.
const agentApprovalTimeout = 8 * time.Second

// inventoryCall is one line of the inventory server's INVENTORY_CALL_LOG.
type inventoryCall struct {
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	Revision string          `json:"revision"`
	Build    string          `json:"build"`
	PID      int             `json:"pid"`
	Process  string          `json:"process"` // unique per process (PID repeats across sandboxes)
}

// readInventoryCalls returns the ledger of the inventory servers, oldest first.
func readInventoryCalls(t *testing.T, path string) []inventoryCall {
	t.Helper()
	return readJSONLines[inventoryCall](t, path)
}

// agentSetup is a throwaway HOME for an agent, a PORTCULLIS_HOME with a
// daemon, the inventory server built into its own directory, and a scripted
// model endpoint.
type agentSetup struct {
	home      *harness.Home
	daemon    *harness.Daemon
	agentHome string // HOME of the agent
	work      string // the agent's working directory (a project folder)
	binDir    string // holds the inventory binary
	bin       string // the inventory executable the agent's file names
	ledger    string // INVENTORY_CALL_LOG
	model     *fakemodel.Server
	pause     *fakemodel.Pauser
}

// newAgentSetup builds the inventory server, makes a HOME for the agent, a
// PORTCULLIS_HOME with settings.approvalTimeout = agentApprovalTimeout and
// starts a daemon there. The agent's file is written by the caller.
func newAgentSetup(t *testing.T) *agentSetup {
	t.Helper()
	s := newAgentSetupNoDaemon(t)
	s.daemon = startDaemon(t, s.home)
	return s
}

// newAgentSetupNoDaemon is newAgentSetup without the daemon.
func newAgentSetupNoDaemon(t *testing.T) *agentSetup {
	t.Helper()
	s := &agentSetup{home: newHome(t), binDir: t.TempDir(), pause: fakemodel.NewPauser()}
	root := t.TempDir()
	s.agentHome = filepath.Join(root, "home")
	s.work = filepath.Join(root, "project")
	for _, d := range []string{s.agentHome, s.work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s.ledger = filepath.Join(root, "inventory-calls.jsonl")
	s.bin = s.build(t, invRev1)
	// The agent's files are found from HOME; the machine's own agent
	// configuration must not leak in.
	s.home.Env = append(s.home.Env, "HOME="+s.agentHome, "XDG_CONFIG_HOME=", "CLAUDE_CONFIG_DIR=")
	cfg := config.Config{Servers: map[string]config.Server{}}
	cfg.Settings.ApprovalTimeout = config.Duration(agentApprovalTimeout)
	if err := config.Save(s.home.ConfigFile(), &cfg); err != nil {
		t.Fatal(err)
	}
	return s
}

// build runs `go build` of the inventory server with ldflags over
// binDir/inventory (a rebuild, as a developer does it).
func (s *agentSetup) build(t *testing.T, ldflags string) string {
	t.Helper()
	p, err := harness.BuildServer(testContext(t, 3*time.Minute), repoRoot, s.binDir, "inventory", ldflags)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startModel starts the scripted model endpoint and closes it with the test.
func (s *agentSetup) startModel(t *testing.T, script fakemodel.Script) {
	t.Helper()
	m, err := fakemodel.Start(script)
	if err != nil {
		t.Fatal(err)
	}
	s.model = m
	t.Cleanup(func() {
		_ = m.Close()
		if t.Failed() {
			for _, r := range m.Requests() {
				body := string(r.Body)
				if len(body) > 1500 {
					body = "…" + body[len(body)-1500:]
				}
				t.Logf("model request %d %s turn=%v step=%d tools=%d results=%+v\n%s", r.Seq, r.Path, r.Turn, r.Step, len(r.Tools), r.Result, body)
			}
		}
	})
}

// install runs `portcullis install AGENT` and fails t unless the inventory
// entry was routed through Portcullis.
func (s *agentSetup) install(t *testing.T, agent string, args ...string) string {
	t.Helper()
	res, err := s.home.Run(testContext(t, time.Minute), append([]string{"install", agent}, args...)...)
	if err != nil {
		t.Fatalf("install %s: %v\nstdout: %s", agent, err, res.Stdout)
	}
	// The entry is mcpServers.inv in the JSON files, mcp_servers.inv in Codex's TOML.
	if !strings.Contains(res.Stdout, "."+invLabel+": installed") {
		t.Fatalf("install %s did not route %s through Portcullis:\n%s", agent, invLabel, res.Stdout)
	}
	return res.Stdout
}

// agentEnv is the environment of an agent process: the test's environment
// without what would reach a real model or the machine's own agent files,
// with HOME the throwaway one and extra on top.
func (s *agentSetup) agentEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "HOME", k == "PORTCULLIS_HOME", k == "XDG_CONFIG_HOME",
			strings.HasPrefix(k, "ANTHROPIC_"), strings.HasPrefix(k, "CLAUDE"),
			strings.HasPrefix(k, "GEMINI_"), strings.HasPrefix(k, "GOOGLE_"),
			strings.HasPrefix(k, "CODEX_"), strings.HasPrefix(k, "OPENAI_"):
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "HOME="+s.agentHome), extra...)
}

// agentProc is a running agent process.
type agentProc struct {
	cmd    *exec.Cmd
	stdout *harness.SyncBuffer
	stderr *harness.SyncBuffer
	done   chan struct{} // closed when it exited
	err    error         // its exit; read after done
}

// startAgent starts bin ARGS… in s.work with env, bounded by d.
func (s *agentSetup) startAgent(t *testing.T, d time.Duration, env []string, bin string, args ...string) *agentProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = s.work, env
	cmd.WaitDelay = 5 * time.Second
	p := &agentProc{cmd: cmd, stdout: &harness.SyncBuffer{}, stderr: &harness.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		cancel()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
		if t.Failed() {
			t.Logf("%s stdout:\n%s\nstderr:\n%s", filepath.Base(bin), p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// wait waits for the agent to exit and fails t unless it exited 0 in time.
func (p *agentProc) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("the agent did not exit within %s", d)
	}
	if p.err != nil {
		t.Fatalf("the agent exited: %v", p.err)
	}
}

// paused waits (at most d) for the model to reach the next paused step and
// returns the request that reached it; the agent exiting first fails t.
func (s *agentSetup) paused(t *testing.T, p *agentProc, d time.Duration) fakemodel.Request {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	req, err := s.pause.Wait(ctx, p.done)
	if err != nil {
		t.Fatalf("%v (model errors: %v)", err, s.model.Err())
	}
	return req
}

// onlyResult returns the single tool result of req, failing t otherwise.
func onlyResult(t *testing.T, req fakemodel.Request, what string) fakemodel.ToolResult {
	t.Helper()
	if len(req.Result) != 1 {
		t.Fatalf("%s: the model's request %d carries %d tool results, want 1: %+v", what, req.Seq, len(req.Result), req.Result)
	}
	return req.Result[0]
}

// decideWhenAsked waits for an approval request for tool whose card says
// the current epoch is epoch ("" = any) and decides it at the person's
// terminal with args (e.g. "approve", "--once" or "deny"). It returns the
// request.
func (s *agentSetup) decideWhenAsked(t *testing.T, tool, epoch string, args ...string) authz.Request {
	t.Helper()
	req := waitApproval(t, s.home, tool, forTool(tool, epoch))
	decideCLI(t, s.home, append(args[:1:1], append([]string{string(req.ID)}, args[1:]...)...)...)
	return req
}

// liveRun waits for a live agent run of invLabel with an epoch and returns
// its shim's pid and its epoch.
func (s *agentSetup) liveRun(t *testing.T) (shimPID int, epoch string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rep, err := s.home.Status(testContext(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Runs {
			if r.Label == invLabel && r.Epoch != "" {
				return r.Agent.ShimPID, string(r.Epoch)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no live agent run of %s within 30 s", invLabel)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mustContain fails t unless s contains every one of want.
func mustContain(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s = %q, want it to contain %q", what, s, w)
		}
	}
}

// describe is a short form of a ledger for failure messages.
func describe(calls []inventoryCall) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "%s %s rev=%s build=%q pid=%d process=%s; ", c.Tool, c.Args, c.Revision, c.Build, c.PID, c.Process)
	}
	return b.String()
}

// wantStock fails t unless r is a successful result of the inventory server
// saying that q units are on hand: its text ("SKU: N on hand", "SKU adjusted
// by +D: N on hand") or its structured content ({"sku", "quantity"}), which
// is what some agents give the model instead of the text.
func wantStock(t *testing.T, what string, r fakemodel.ToolResult, q int64) {
	t.Helper()
	if r.IsError {
		t.Fatalf("%s: the model received an error: %q", what, r.Text)
	}
	if strings.Contains(r.Text, fmt.Sprintf(": %d on hand", q)) {
		return
	}
	var structured struct {
		Quantity *int64 `json:"quantity"`
	}
	if json.Unmarshal([]byte(r.Text), &structured) == nil && structured.Quantity != nil && *structured.Quantity == q {
		return
	}
	t.Fatalf("%s: the model received %q, want %d on hand", what, r.Text, q)
}

// wantLedger checks the inventory ledger after an agent session: the read,
// the approved write on the first process, one write on the process of the
// code-only rebuild (and a lookup there, when lookupAgain: the model's
// step when that write was not refused), and, when newSchemaWrite, one on
// the process of the schema change; nothing else: a refused, denied or timed-out call never
// reaches a server.
func wantLedger(t *testing.T, path string, lookupAgain, newSchemaWrite bool) {
	t.Helper()
	calls := readInventoryCalls(t, path)
	want := []struct{ tool, args, rev, build string }{
		{"inventory_lookup", `{"sku":"WIDGET-1"}`, "1", ""},
		{"inventory_adjust", `{"delta":2,"sku":"WIDGET-1"}`, "1", ""},
		{"inventory_adjust", `{"delta":3,"sku":"WIDGET-1"}`, "1", "rebuilt"},
	}
	if lookupAgain {
		want = append(want, struct{ tool, args, rev, build string }{"inventory_lookup", `{"sku":"WIDGET-1"}`, "1", "rebuilt"})
	}
	if newSchemaWrite {
		want = append(want, struct{ tool, args, rev, build string }{"inventory_adjust", `{"delta":1,"reason":"restock","sku":"WIDGET-1"}`, "2", "rev2"})
	}
	ok := len(calls) == len(want)
	for i := 0; ok && i < len(want); i++ {
		c, w := calls[i], want[i]
		ok = c.Tool == w.tool && canonical(t, string(c.Args)) == w.args && c.Revision == w.rev && c.Build == w.build
	}
	// One process per epoch: the first two calls on one, the others each on its own.
	for i := 2; ok && i < len(calls); i++ {
		ok = calls[0].Process == calls[1].Process && (calls[i].Build == calls[i-1].Build && calls[i].Process == calls[i-1].Process ||
			!slices.ContainsFunc(calls[:i], func(c inventoryCall) bool { return c.Process == calls[i].Process }))
	}
	if !ok {
		t.Errorf("the inventory ledger is %s; want exactly %+v, the first two on one process and each later one on the process of its rebuild", describe(calls), want)
	}
}

// inventoryScenario is the session every agent test drives, with tool the
// agent's name for an inventory tool, preamble the steps the model takes
// first (loading deferred tools) and start the command that starts the
// agent's session once the script is in place. The model calls a read tool;
// a write the person denies; one nobody decides; a write held for the
// person's approval (for this run); the write after a code-only rebuild
// (retried once if refused); and after a schema-changing rebuild, first
// without, then with the new required argument. It asserts on the tool
// result of each call, as the agent put it in the model's next request, and
// on the inventory server's ledger.

// asyncSchema is for an agent that replaces its tools asynchronously after
// a refetch (Gemini CLI 0.61.0): the write with the new argument may still
// be checked against the old schema by the agent itself and never reach
// Portcullis; either outcome is accepted and the ledger checked for it.
func (s *agentSetup) inventoryScenario(t *testing.T, tool func(string) string, preamble []fakemodel.Step, asyncSchema bool, start func() *agentProc) {
	t.Helper()
	adjust, lookup := tool("inventory_adjust"), tool("inventory_lookup")
	pause := s.pause.Hook
	retryIfRefused := func(args map[string]any) fakemodel.Step {
		return fakemodel.Step{Before: pause, Decide: func(req fakemodel.Request) fakemodel.Step {
			if len(req.Result) == 1 && req.Result[0].IsError {
				return fakemodel.Step{Tool: adjust, Args: args}
			}
			return fakemodel.Step{Tool: lookup, Args: map[string]any{"sku": "WIDGET-1"}}
		}}
	}
	s.model.Append(preamble...)
	s.model.Append(
		fakemodel.Step{Tool: lookup, Args: map[string]any{"sku": "WIDGET-1"}},
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 5}, Before: pause},
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 6}, Before: pause},
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 2}, Before: pause},
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 3}, Before: pause},
		retryIfRefused(map[string]any{"sku": "WIDGET-1", "delta": 3}),
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 1}, Before: pause},
		fakemodel.Step{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 1, "reason": "restock"}, Before: pause},
		fakemodel.Step{Text: "done", Before: pause},
	)
	p := start()

	// A read call (policy allow) reaches the server.
	req := s.paused(t, p, time.Minute)
	r := onlyResult(t, req, "inventory_lookup")
	if r.Name != lookup {
		t.Fatalf("the model's request carries a result of %q, want %q", r.Name, lookup)
	}
	wantStock(t, "the lookup", r, 40)
	shim, epoch1 := s.liveRun(t)
	s.pause.Resume()

	// A write the person denies.
	s.decideWhenAsked(t, "inventory_adjust", epoch1, "deny")
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

	// A write call waits for the person, who approves it for this run.
	s.decideWhenAsked(t, "inventory_adjust", epoch1, "approve")
	req = s.paused(t, p, time.Minute)
	wantStock(t, "the approved write", onlyResult(t, req, "approved write"), 42)

	// A code-only rebuild mid-session: a new epoch, the grant of the old
	// one void. The model's next write costs it at most one refusal and
	// reaches the new code after one approval (for this run).
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
	// The new process starts with the seed stock (40).
	if first.IsError {
		t.Logf("then: %+v", second)
		mustContain(t, "the refusal after a code-only rebuild", first.Text, "authorization_stale")
		wantStock(t, "the retried write after a code-only rebuild", second, 43)
	} else {
		wantStock(t, "the write after a code-only rebuild", first, 43)
	}

	// A schema-changing rebuild: inventory_adjust now requires a reason.
	// The write without it is refused before anyone is asked.
	s.build(t, invRev2)
	epoch3 := epochOf(t, s.home, shim, epoch2)
	s.pause.Resume()
	req = s.paused(t, p, time.Minute)
	r = onlyResult(t, req, "write without the new required argument")
	t.Logf("after a schema change the model received: %+v", r)
	if !r.IsError {
		t.Errorf("the model received %+v for a write without the argument the new schema requires, want an error", r)
	}
	// The model learns the new contract from the refusal's message: agents
	// pass on error.message (Claude Code nothing else), and Claude Code keeps
	// showing it the old schema.
	mustContain(t, "the refusal of a write on the old schema", r.Text, "invalid_arguments", "inventory_adjust", "missing property 'reason'")
	// The new epoch was announced (list_changed) and the agent listed the
	// new revision. Gemini CLI validates arguments against the tools it
	// listed, and replaces them asynchronously after that list: the model
	// goes on once the agent has fetched it.
	waitRun(t, s.home, shim, 30*time.Second, "the agent listing the new revision", func(r gateway.Status) bool {
		return string(r.Epoch) == epoch3 && r.CatalogRevision != 0 && r.AgentRevision == r.CatalogRevision
	})
	s.pause.Resume()

	// The write with the new argument.
	reached := true
	if asyncSchema {
		// The write is either held for the person (the agent checked it
		// against the new schema) or refused by the agent itself.
		req, reached = s.approveOrPaused(t, p, epoch3)
	} else {
		s.decideWhenAsked(t, "inventory_adjust", epoch3, "approve")
		req = s.paused(t, p, time.Minute)
	}
	if reached {
		wantStock(t, "the write on the new schema", onlyResult(t, req, "write on the new schema"), 41)
	} else {
		r = onlyResult(t, req, "write with the new argument")
		t.Logf("the agent refused the write with the new argument itself: %+v", r)
		if !r.IsError || strings.Contains(r.Text, "MCP error") {
			t.Errorf("the model received %+v, want a result of the server or the agent's own refusal", r)
		}
	}
	s.pause.Resume()
	p.wait(t, time.Minute)
	if err := s.model.Err(); err != nil {
		t.Error(err)
	}
	wantLedger(t, s.ledger, !first.IsError, reached)
}

// approveOrPaused approves the first approval request for inventory_adjust
// on epoch, unless the model reaches its next paused step first; it returns
// that step's request and whether a request was approved.
func (s *agentSetup) approveOrPaused(t *testing.T, p *agentProc, epoch string) (fakemodel.Request, bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, r := range approvals(t, s.home) {
			if forTool("inventory_adjust", epoch)(r.Card) {
				decideCLI(t, s.home, "approve", string(r.ID))
				return s.paused(t, p, time.Minute), true
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		req, err := s.pause.Wait(ctx, p.done)
		cancel()
		if err == nil {
			return req, false
		}
	}
	t.Fatal("neither an approval request nor the model's next step within a minute")
	return fakemodel.Request{}, false
}
