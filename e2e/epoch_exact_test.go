//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

// The epoch is exact (docs/DESIGN.md "Execution identity"): a server's own
// helpers, running the system's code or the epoch's own, are no new epoch
// whatever pipes they hold, and new code that answers is recorded as what
// answered. Each test here failed on the tree watcher that counted every
// process holding the server's stdio as a new epoch.

// pyHelperServer is a stdio MCP server (legacy handshake) in Python whose
// "write" tool runs HELPER (Python statements) before it appends "PID TEXT"
// to the ledger file named by its first argument.
const pyHelperServer = `import json, os, subprocess, sys
ledger = sys.argv[1]
tools = [{"name": "write", "description": "writes to the ledger", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    meth, i = m.get("method"), m["id"]
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "helper-server", "version": "1"}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": tools}})
    elif meth == "tools/call":
        HELPER
        with open(ledger, "a") as f:
            f.write("%d %s\n" % (os.getpid(), m["params"]["arguments"]["text"]))
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "pid=%d" % os.getpid()}]}})
    elif meth == "ping":
        send({"jsonrpc": "2.0", "id": i, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "method not found"}})
`

// nodeHelperServer is the same server in Node.js; its "write" runs sleep
// with stdio: 'inherit' (the helper holds the server's stdin and stdout).
const nodeHelperServer = `const fs = require('fs');
const { spawnSync } = require('child_process');
const readline = require('readline');
const ledger = process.argv[2];
const tools = [{name: 'write', description: 'writes to the ledger', inputSchema: {type: 'object', properties: {text: {type: 'string'}}, required: ['text']}}];
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
readline.createInterface({input: process.stdin}).on('line', (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  if (m.method === 'initialize') {
    send({jsonrpc: '2.0', id: m.id, result: {protocolVersion: m.params.protocolVersion, capabilities: {tools: {}}, serverInfo: {name: 'node-helper', version: '1'}}});
  } else if (m.method === 'tools/list') {
    send({jsonrpc: '2.0', id: m.id, result: {tools}});
  } else if (m.method === 'tools/call') {
    spawnSync('sleep', ['0.5'], {stdio: 'inherit'});
    fs.appendFileSync(ledger, process.pid + ' ' + m.params.arguments.text + '\n');
    send({jsonrpc: '2.0', id: m.id, result: {content: [{type: 'text', text: 'pid=' + process.pid}]}});
  } else if (m.method === 'ping') {
    send({jsonrpc: '2.0', id: m.id, result: {}});
  } else {
    send({jsonrpc: '2.0', id: m.id, error: {code: -32601, message: 'method not found'}});
  }
});
`

// tenWritesOneEpoch connects an agent to label, has the person approve the
// first write for the run, then makes nine more: all ten are answered by
// the same process under that one grant, on one epoch, and the agent is
// never told the tools changed.
func tenWritesOneEpoch(t *testing.T, label, ledger string, add func(h *harness.Home)) {
	t.Helper()
	h := newHome(t)
	add(h)
	startDaemon(t, h)
	a := connectListChanged(t, h, label, "2025-06-18")
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	epoch := epochOf(t, h, a.PID(), "")
	pending := asyncCall(t, a.Session, "write", map[string]any{"text": "w0"})
	req := waitApproval(t, h, "the first write", forTool("write", epoch))
	decideCLI(t, h, "approve", string(req.ID))
	pid := strings.TrimPrefix(okText(t, await(t, pending)), "pid=")
	for i := 1; i < 10; i++ {
		if got := callText(t, a.Session, "write", map[string]any{"text": fmt.Sprintf("w%d", i)}); got != "pid="+pid {
			t.Fatalf("write %d answered %q, want pid=%s", i, got, pid)
		}
	}
	lines := readLedger(t, ledger)
	if len(lines) != 10 {
		t.Fatalf("ledger holds %d writes, want 10: %v", len(lines), lines)
	}
	for i, l := range lines {
		if l != [2]string{pid, fmt.Sprintf("w%d", i)} {
			t.Fatalf("ledger line %d = %v, want [%s w%d]", i, l, pid, i)
		}
	}
	st := waitRun(t, h, a.PID(), 10*time.Second, "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	if string(st.Epoch) != epoch {
		t.Errorf("epoch %s after ten writes, want the first one %s", st.Epoch, epoch)
	}
	if n := a.listChanged(); n != 0 {
		t.Errorf("the agent was told %d times that the tools changed; nothing changed", n)
	}
	granted, replaced := 0, 0
	for _, ev := range auditEvents(t, h) {
		switch ev.Type {
		case audit.TypeApprovalGranted:
			granted++
		case audit.TypeServerReplaced:
			replaced++
		}
	}
	if granted != 1 || replaced != 0 {
		t.Errorf("audit: %d approvals granted, %d servers replaced; want 1 and 0", granted, replaced)
	}
}

// TestSubprocessHelperKeepsEpoch: a Python server whose approved tool runs
// git and a half-second sleep the ordinary way (subprocess.run: stdin
// inherited, output captured) answers ten of ten writes under one grant.
func TestSubprocessHelperKeepsEpoch(t *testing.T) {
	py := realPython(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	src := strings.Replace(pyHelperServer, "HELPER", `subprocess.run(["git", "--version"], capture_output=True)
        subprocess.run(["sleep", "0.5"], capture_output=True)`, 1)
	server := filepath.Join(dir, "server.py")
	if err := os.WriteFile(server, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(dir, "ledger")
	tenWritesOneEpoch(t, "helpers", ledger, func(h *harness.Home) {
		addServer(t, h, "helpers", py, server, ledger)
	})
}

// TestInheritingHelperKeepsEpoch: a Node.js server whose tool runs sleep
// with stdio: 'inherit' (the helper holds the server's stdin and stdout
// while it runs).
func TestInheritingHelperKeepsEpoch(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node")
	}
	dir := t.TempDir()
	server := filepath.Join(dir, "server.js")
	if err := os.WriteFile(server, []byte(nodeHelperServer), 0o644); err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(dir, "ledger")
	tenWritesOneEpoch(t, "inherit", ledger, func(h *harness.Home) {
		addServer(t, h, "inherit", node, server, ledger)
	})
}

// TestPollingWatchLoopKeepsEpoch is the seed's hand-written watcher: a
// shell owns the stdio, starts the worker on it, and polls the source
// every 0.2 s with stat, its children inheriting the pipe. While nothing
// changes, the epoch stays.
func TestPollingWatchLoopKeepsEpoch(t *testing.T) {
	py := realPython(t)
	dir := t.TempDir()
	server := filepath.Join(dir, "server.py")
	if err := os.WriteFile(server, []byte(strings.Replace(pyHelperServer, "HELPER", "pass", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(dir, "ledger")
	loop := "exec 3<&0; " + py + " " + server + " " + ledger + " <&3 & while sleep 0.2; do stat -c %Y " + server + " >/dev/null; done"
	tenWritesOneEpoch(t, "poll", ledger, func(h *harness.Home) {
		addServer(t, h, "poll", "/bin/sh", "-c", loop)
	})
}

// swapWorker is a worker whose "write" reads the call and then execs the
// next worker in its place (a loop that swaps its program after reading
// a line), handing it the call: the new code runs the write and answers.
const swapWorker = `import json, os, sys
ledger, nxt = sys.argv[1], sys.argv[2]
tools = [{"name": "write", "description": "writes to the ledger", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
def handle(m):
    meth, i = m.get("method"), m["id"]
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "swap", "version": "1"}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": tools}})
    elif meth == "tools/call":
        if nxt != "-":
            os.execv(sys.executable, [sys.executable, nxt, ledger, "-", json.dumps(m)])
        with open(ledger, "a") as f:
            f.write("%d %s\n" % (os.getpid(), m["params"]["arguments"]["text"]))
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "pid=%d NEW" % os.getpid()}]}})
    else:
        send({"jsonrpc": "2.0", "id": i, "result": {}})
if len(sys.argv) > 3:
    handle(json.loads(sys.argv[3]))
for line in sys.stdin:
    m = json.loads(line)
    if "id" in m:
        handle(m)
`

// TestExecdWorkerAnswerIsRecorded: the worker reads an approved write and
// execs other code, which runs it and answers. The answer is not passed on
// as the old epoch's: the agent is told epoch_ended, the audit records the
// late answer with the code that gave it (its epoch, pid and script), and
// the run moves to a new epoch whose writes ask the person again.
func TestExecdWorkerAnswerIsRecorded(t *testing.T) {
	py := realPython(t)
	dir := t.TempDir()
	// v2 lies outside v1's package (its directory): code the launch did
	// not measure.
	v1, v2 := filepath.Join(dir, "v1.py"), filepath.Join(t.TempDir(), "v2.py")
	for _, f := range []string{v1, v2} {
		if err := os.WriteFile(f, []byte(swapWorker), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// v2 differs from v1 by a comment: other code, the same behaviour.
	if err := os.WriteFile(v2, []byte("# v2\n"+swapWorker), 0o644); err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(dir, "ledger")
	h := newHome(t)
	addServer(t, h, "swap", py, v1, ledger, v2)
	startDaemon(t, h)
	a := connectListChanged(t, h, "swap", "2025-06-18")
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	epochA := epochOf(t, h, a.PID(), "")
	pending := asyncCall(t, a.Session, "write", map[string]any{"text": "swapped"})
	req := waitApproval(t, h, "the write", forTool("write", epochA))
	decideCLI(t, h, "approve", string(req.ID))
	r := await(t, pending)
	if r.err == nil {
		t.Fatalf("the write answered by the new code reached the agent as the old epoch's: %q", resultText(r.res))
	}
	if _, ref := refusalOf(t, r.err); ref.Error != "epoch_ended" || !strings.Contains(ref.Reason, "v2.py") || !strings.Contains(ref.Reason, "its answer was not passed on") {
		t.Fatalf("refusal %+v, want epoch_ended naming v2.py as what answered", ref)
	}
	// The new code did run the write: the record must say so.
	if l := readLedger(t, ledger); len(l) != 1 || l[0][1] != "swapped" {
		t.Fatalf("ledger %v, want the write done by the new code", l)
	}
	st := waitRun(t, h, a.PID(), 30*time.Second, "ready on a new epoch", readyOn(epochA))
	var late *audit.ToolCompleted
	for deadline := time.Now().Add(10 * time.Second); late == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, ev := range auditEvents(t, h) {
			if ev.Type != audit.TypeToolCompleted {
				continue
			}
			var tc audit.ToolCompleted
			if err := ev.DecodeFields(&tc); err != nil {
				t.Fatal(err)
			}
			if tc.LateAnswer && tc.Tool == "write" {
				late = &tc
			}
		}
	}
	if late == nil {
		t.Fatal("no tool_completed with lateAnswer for the write the new code answered")
	}
	if string(late.Epoch) != epochA || late.Outcome != "ok" || late.AnsweredBy == nil {
		t.Fatalf("late answer %+v, want epoch %s, outcome ok, and who answered", late, epochA)
	}
	if by := late.AnsweredBy; by.Script != v2 || by.Epoch != st.Epoch || by.PID == 0 || by.ScriptSHA256 == "" {
		t.Errorf("answeredBy %+v, want %s under the new epoch %s with its digest", by, v2, st.Epoch)
	}
	// The next write asks the person for the new code.
	pending = asyncCall(t, a.Session, "write", map[string]any{"text": "after"})
	waitApproval(t, h, "the write on the new code", forTool("write", string(st.Epoch)))
	if l := readLedger(t, ledger); len(l) != 1 {
		t.Fatalf("a write ran on the old grant after the swap: %v", l)
	}
	_ = pending
}

// TestNodemonWritesAcrossEditNeverOnOldGrant: nodemon with no --watch runs
// server.js, and approved writes go out every 10 ms from three writers
// while server.js is edited. Portcullis watches the script nodemon runs
// (the gate closes at the edit), and a call that carries a grant is not
// sent to a launcher that relays its stdin while the watched source has
// changed without settling: nodemon cannot hand it to the new worker. No
// write is run by the new code before the person approved it (each ledger
// line says when it ran), and after that the new code acts.
func TestNodemonWritesAcrossEditNeverOnOldGrant(t *testing.T) {
	npm := needNPM(t)
	nodemon := filepath.Join(npm, ".bin", "nodemon")
	if _, err := os.Stat(nodemon); err != nil {
		t.Skipf("nodemon is not installed in %s (bash scripts/test-deps.sh)", npm)
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	server := filepath.Join(dir, "server.js")
	// Each ledger line is "PID VERSION@MILLISECONDS TEXT": which code ran
	// the write, and when.
	version := func(v string) []byte {
		return []byte(strings.Replace(nodeWorker, `process.pid + " " + m.params.arguments.text`, `process.pid + " `+v+`@" + Date.now() + " " + m.params.arguments.text`, 1))
	}
	if err := os.WriteFile(server, version("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(dir, "ledger.txt")
	h := newHome(t)
	const label = "nodemon"
	if err := h.AddServer(testContext(t, 30*time.Second), label, []string{"--cwd", dir},
		nodemon, "-q", "--ignore", "ledger.txt", "server.js", ledger); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, h)
	a := connectListChanged(t, h, label, "2025-06-18")
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	epochA := epochOf(t, h, a.PID(), "")
	pending := asyncCall(t, a.Session, "write", map[string]any{"text": "w0"})
	decideCLI(t, h, "approve", string(waitApproval(t, h, "write on v1", forTool("write", epochA)).ID))
	v1pid := okText(t, await(t, pending))

	// Three writers, each writing every 10 ms until its write waits for
	// the person, so that a write is on its way at any moment of the
	// edit. What the agent is answered before the person approved is
	// kept: no answer of another worker than v1's may reach it.
	const writers = 3
	stop := make(chan struct{})
	done := make(chan int, writers)
	var approved atomic.Bool
	var leakMu sync.Mutex
	var leaked []string
	for w := range writers {
		go func() {
			n := 0
			defer func() { done <- n }()
			for i := 1; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				ctx := testContext(t, 3*time.Minute)
				res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"text": fmt.Sprintf("w%d-%d", w, i)}})
				if err == nil && !res.IsError && resultText(res) != v1pid && !approved.Load() {
					leakMu.Lock()
					leaked = append(leaked, resultText(res))
					leakMu.Unlock()
				}
				n++
			}
		}()
	}
	// Some writes on v1 first (w0 and two of the writers').
	for deadline := time.Now().Add(time.Minute); len(readLedgerFields(t, ledger)) < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the writes on v1 did not run: %v", readLedgerFields(t, ledger))
		}
	}
	if err := os.WriteFile(server, version("v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The new worker may be observed first (its card raised), then the
	// build watcher's settled measurement replaces the server (that card
	// is withdrawn, the next one raised): approve the card that holds.
	var approvedAt time.Time
	for attempt := 0; ; attempt++ {
		req := waitApproval(t, h, "write on the new code", func(c authz.Card) bool {
			return c.Tool == "write" && c.CurrentEpoch != "" && string(c.CurrentEpoch) != epochA
		})
		v1 := 0
		for _, l := range readLedgerFields(t, ledger) {
			if code, _ := ledgerCode(t, l); code != "v1" {
				t.Fatalf("the new code ran a write before the person approved it: %v", l)
			}
			v1++
		}
		if v1 < 2 {
			t.Errorf("only %d writes on v1 before the edit; the test did not write across it", v1)
		}
		at := time.Now()
		r, err := h.RunAtTerminal(testContext(t, 30*time.Second), "approve", string(req.ID))
		if err == nil {
			approved.Store(true)
			approvedAt = at
			break
		}
		if !strings.Contains(r.Stdout+r.Stderr, "withdrawn") || attempt == 3 {
			t.Fatalf("approve %s: %v\n%s%s", req.ID, err, r.Stdout, r.Stderr)
		}
		waitApprovalGone(t, h, string(req.ID))
	}
	close(stop)
	// The writes in flight may wait on other cards of the new code (each
	// call held raised its own): the person approves those too, rather
	// than the writes waiting out the approval timeout.
	for left := writers; left > 0; {
		select {
		case <-done:
			left--
		case <-time.After(200 * time.Millisecond):
			for _, req := range approvals(t, h) {
				if c := req.Card; c.Tool == "write" && c.CurrentEpoch != "" && string(c.CurrentEpoch) != epochA {
					_, _ = h.RunAtTerminal(testContext(t, 30*time.Second), "approve", string(req.ID)) // it may be withdrawn meanwhile
				}
			}
		}
	}
	leakMu.Lock()
	if len(leaked) > 0 {
		t.Errorf("the agent was answered by the new code before the person approved it: %q", leaked)
	}
	leakMu.Unlock()
	// The build watcher may still replace the server once after the card
	// approved (its settled measurement): the write then asks once more.
	for attempt := 0; ; attempt++ {
		waitRun(t, h, a.PID(), 30*time.Second, "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
		res, err := a.Session.CallTool(testContext(t, time.Minute), &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"text": "after"}})
		if err == nil && !res.IsError {
			break
		}
		if attempt == 3 {
			t.Fatalf("the write after approval: %v %v", err, res)
		}
		req := waitApproval(t, h, "write on the settled code", func(c authz.Card) bool {
			return c.Tool == "write" && c.CurrentEpoch != "" && string(c.CurrentEpoch) != epochA
		})
		decideCLI(t, h, "approve", string(req.ID))
	}
	// The new code's writes all ran after the person began to approve it.
	lines := readLedgerFields(t, ledger)
	for _, l := range lines {
		if code, ran := ledgerCode(t, l); code != "v1" && ran.Before(approvedAt.Truncate(time.Millisecond)) {
			t.Errorf("the new code ran write %v at %s, before the person approved it at %s", l, ran.Format("15:04:05.000"), approvedAt.Format("15:04:05.000"))
		}
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last[1], "v2@") || last[2] != "after" {
		t.Fatalf("last ledger line %v, want the new code's write", last)
	}
}

// ledgerCode reads the second field of a ledger line written as
// "VERSION@MILLISECONDS": which code ran the write, and when.
func ledgerCode(t *testing.T, line []string) (string, time.Time) {
	t.Helper()
	code, ms, ok := strings.Cut(line[1], "@")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil {
		t.Fatalf("ledger line %v: want VERSION@MILLISECONDS in its second field", line)
	}
	return code, time.UnixMilli(n)
}

// readLedgerFields returns the ledger's lines as their space-separated
// fields.
func readLedgerFields(t *testing.T, path string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			out = append(out, f)
		} else {
			t.Fatalf("ledger line %q", l)
		}
	}
	return out
}

// approveAndWrite writes text and has the person approve it on whatever
// epoch follows epochA, then returns the answer. Behind a watcher that
// Portcullis also watches (nodemon with --watch, or the script it runs),
// the observed worker swap and the build watcher's settled measurement can
// each make an epoch: a card raised on the first is withdrawn when the
// second replaces it, a write refused authorization_stale asks again, and
// one refused epoch_ended before it was sent is sent again; each is taken
// as it comes, a few times at most.
func approveAndWrite(t *testing.T, h *harness.Home, a *listChangedAgent, epochA, text string) string {
	t.Helper()
	approved := map[string]bool{}
	for attempt := 0; attempt < 6; attempt++ {
		pending := asyncCall(t, a.Session, "write", map[string]any{"text": text})
	wait:
		for {
			select {
			case r := <-pending:
				if r.err == nil && !r.res.IsError {
					return resultText(r.res)
				}
				if r.err == nil {
					t.Fatalf("write %q answered an error: %s", text, resultText(r.res))
				}
				_, ref := refusalOf(t, r.err)
				if ref.Error == "epoch_ended" && strings.Contains(ref.Reason, "it was not sent") || ref.Error == "authorization_stale" {
					break wait // sent again
				}
				t.Fatalf("write %q refused %+v", text, ref)
			case <-time.After(100 * time.Millisecond):
				for _, req := range approvals(t, h) {
					c := req.Card
					if approved[string(req.ID)] || c.Tool != "write" || c.CurrentEpoch == "" || string(c.CurrentEpoch) == epochA {
						continue
					}
					approved[string(req.ID)] = true
					if r, err := h.RunAtTerminal(testContext(t, 30*time.Second), "approve", string(req.ID)); err != nil && !strings.Contains(r.Stdout+r.Stderr, "withdrawn") {
						t.Fatalf("approve %s: %v\n%s%s", req.ID, err, r.Stdout, r.Stderr)
					}
				}
			}
		}
	}
	t.Fatalf("write %q did not go through after six attempts", text)
	return ""
}
