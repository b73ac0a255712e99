package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
)

// TestWatchLoopSwapIsObserved is the seed's harder case: a shell loop owns
// the stdio pipe and swaps its Python worker behind it. The supervisor
// observes the new worker: a new epoch appears, the old grant never reaches
// the new worker (the ledger it writes proves it), the next write waits for
// a new approval, and after it the new worker acts. The audit log records
// server_replaced with cause observed and both identities.
func TestWatchLoopSwapIsObserved(t *testing.T) {
	dir := writeTree(t, map[string]string{"worker.py": loopWorker})
	worker, ledger := filepath.Join(dir, "worker.py"), filepath.Join(dir, "ledger")
	h := newHome(t)
	const label = "loop"
	addServer(t, h, label, "/bin/sh", "-c", "while :; do "+realPython(t)+" "+worker+" "+ledger+"; done")
	allowTools(t, h, label, "restart")
	startDaemon(t, h)
	a := listedAgent(t, h, label)
	ctx := testContext(t, 3*time.Minute)
	epochA := epochOf(t, h, a.PID(), "")

	// The first write is approved for the run and reaches worker A.
	pending := asyncCall(t, a.Session, "write", map[string]any{"text": "first"})
	req := waitApproval(t, h, "write on A", forTool("write", epochA))
	decideCLI(t, h, "approve", string(req.ID))
	pidA := strings.TrimPrefix(okText(t, await(t, pending)), "pid=")
	if got := readLedger(t, ledger); len(got) != 1 || got[0] != [2]string{pidA, "first"} {
		t.Fatalf("ledger after the first write: %v, want [%s first]", got, pidA)
	}
	// Under the grant, a second write goes through without asking.
	if got := callText(t, a.Session, "write", map[string]any{"text": "second"}); got != "pid="+pidA {
		t.Fatalf("second write answered %q, want pid=%s", got, pidA)
	}

	// The worker exits; the loop starts worker B behind the same pipe.
	// Its answer races the supervisor's sight of worker B: worker A writes
	// it and exits, and when the tree change is seen before the answer
	// is read, the call is refused epoch_ended (the answer is then a late
	// one, recorded, never forwarded). Conservative, not wrong about
	// trust; either way nothing of B's is passed on as A's.
	rres, rerr := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "restart", Arguments: map[string]any{}})
	switch {
	case rerr == nil && !rres.IsError && resultText(rres) == "pid="+pidA:
	case rerr != nil:
		if code, ref := refusalOf(t, rerr); code != int64(control.EpochEnded.Code()) || !strings.Contains(ref.Reason, "in place of pid "+pidA) {
			t.Fatalf("restart refused %d %+v; want pid=%s, or epoch_ended naming worker A's replacement", code, ref, pidA)
		}
		t.Logf("restart's answer came after worker B was seen: %v", rerr)
	default:
		t.Fatalf("restart answered %+v", rres)
	}
	st := waitRun(t, h, a.PID(), 30*time.Second, "a new epoch observed", readyOn(epochA))
	if st.PID == 0 {
		t.Fatalf("status of the new epoch: %+v", st)
	}
	epochB := st.Epoch
	// What the new epoch records is the loop and its worker: never the
	// sandbox's launcher above them (bubblewrap's monitor and init carry
	// the epoch's mark too).
	if st.Record == nil || len(st.Record.Observed) == 0 {
		t.Fatalf("the new epoch %s has no observed processes: %+v", epochB, st.Record)
	}
	for _, o := range st.Record.Observed {
		if filepath.Base(o.Exe) == "bwrap" {
			t.Errorf("the new epoch %s records the sandbox's process %d (%s) as the server's: %+v", epochB, o.PID, o.Exe, st.Record.Observed)
		}
	}

	// The grant of A does not reach B: the write is refused as
	// authorization_stale, naming both epochs, and an approval request for
	// B is raised at the same time.
	res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"text": "third"}})
	if err == nil {
		t.Fatalf("the write after the swap was answered %q, want authorization_stale", resultText(res))
	}
	if _, r := refusalOf(t, err); r.Error != control.AuthorizationStale || string(r.ApprovedEpoch) != epochA || r.CurrentEpoch != epochB {
		t.Fatalf("refusal %+v, want authorization_stale from %s to %s", r, epochA, epochB)
	}
	req = waitApproval(t, h, "write on B", forTool("write", string(epochB)))
	for _, ch := range req.Card.IdentityChanges {
		if filepath.Base(ch.Path) == "bwrap" {
			t.Errorf("the card of the new worker shows the sandbox's launcher as changed code: %+v", req.Card.IdentityChanges)
		}
	}
	for _, l := range readLedger(t, ledger) {
		if l[1] == "third" || l[0] != pidA {
			t.Fatalf("the old grant reached a worker after the swap: %v", readLedger(t, ledger))
		}
	}
	decideCLI(t, h, "approve", string(req.ID))
	got := callText(t, a.Session, "write", map[string]any{"text": "fourth"})
	pidB := strings.TrimPrefix(got, "pid=")
	if pidB == pidA || pidB == "" {
		t.Fatalf("the write after approval was answered %q by the old worker %s", got, pidA)
	}
	if l := readLedger(t, ledger); len(l) != 3 || l[2] != [2]string{pidB, "fourth"} {
		t.Fatalf("ledger: %v, want the fourth write from %s", l, pidB)
	}

	// The audit log: server_replaced, cause observed, both identities.
	evs := auditEvents(t, h)
	found := false
	for _, ev := range evs {
		if ev.Type != audit.TypeServerReplaced {
			continue
		}
		var r audit.ServerReplaced
		if err := ev.DecodeFields(&r); err != nil {
			t.Fatal(err)
		}
		if r.Cause == "observed" && string(r.OldEpoch) == epochA && r.NewEpoch == epochB {
			found = true
			if !strings.Contains(string(r.OldIdentity), pidA) || !strings.Contains(string(r.NewIdentity), pidB) {
				t.Errorf("identities: old %s new %s, want pids %s and %s", r.OldIdentity, r.NewIdentity, pidA, pidB)
			}
		}
	}
	if !found {
		t.Errorf("no server_replaced with cause observed from %s to %s", epochA, epochB)
	}
}

// TestImportedCodeEditIsNewEpoch: without --watch, the entry's package is
// measured and watched, so an edit of a module the entry imports (a
// sibling Python module, a file in node_modules) gives a new epoch; the
// card of the next call under the old grant names the file.
func TestImportedCodeEditIsNewEpoch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string // written before the launch
		command func(t *testing.T, dir, ledger string) []string
		edit    string // the file edited, relative to the package
	}{
		{
			name:  "sibling module",
			files: map[string]string{"worker.py": "import helper\n" + loopWorker, "helper.py": "VERSION = 1\n"},
			command: func(t *testing.T, dir, ledger string) []string {
				return []string{realPython(t), filepath.Join(dir, "worker.py"), ledger}
			},
			edit: "helper.py",
		},
		{
			name: "node_modules",
			files: map[string]string{
				"package.json":                `{"name":"srv","private":true}`,
				"worker.js":                   "require(\"mylib\");\n" + nodeWorker,
				"node_modules/mylib/index.js": "module.exports = 1;\n",
			},
			command: func(t *testing.T, dir, ledger string) []string {
				node, err := exec.LookPath("node")
				if err != nil {
					t.Skip("no node")
				}
				return []string{node, filepath.Join(dir, "worker.js"), ledger}
			},
			edit: "node_modules/mylib/index.js",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTree(t, tc.files)
			ledger := filepath.Join(dir, "ledger")
			h := newHome(t)
			const label = "imported"
			addServer(t, h, label, tc.command(t, dir, ledger)...)
			startDaemon(t, h)
			a := listedAgent(t, h, label)
			ctx := testContext(t, 3*time.Minute)
			epochA := epochOf(t, h, a.PID(), "")
			pending := asyncCall(t, a.Session, "write", map[string]any{"text": "first"})
			decideCLI(t, h, "approve", string(waitApproval(t, h, "write on A", forTool("write", epochA)).ID))
			okText(t, await(t, pending))

			// A blank line more: valid in either language, other bytes.
			if err := os.WriteFile(filepath.Join(dir, tc.edit), []byte(tc.files[tc.edit]+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			epochB := waitRun(t, h, a.PID(), 30*time.Second, "a new epoch after the edit", readyOn(epochA)).Epoch
			if _, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"text": "second"}}); err == nil {
				t.Fatal("the write under the old grant was answered after the edit")
			}
			req := waitApproval(t, h, "write on B", forTool("write", string(epochB)))
			named := false
			for _, c := range req.Card.IdentityChanges {
				if c.Field == "package" && slices.Contains(c.Files, tc.edit) {
					named = true
				}
			}
			if !named {
				t.Errorf("the card does not name %s: %+v", tc.edit, req.Card.IdentityChanges)
			}
			for _, l := range readLedger(t, ledger) {
				if l[1] == "second" {
					t.Errorf("the write reached the new code before approval")
				}
			}
		})
	}
}

// nodeWorker is loopWorker in JavaScript, for nodemon: "write" appends
// "PID TEXT" to the ledger named by its first argument.
const nodeWorker = `const fs = require("fs");
const ledger = process.argv[2];
const tools = [
  {name: "write", description: "writes to the ledger", inputSchema: {type: "object", properties: {text: {type: "string"}}, required: ["text"]}},
];
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
require("readline").createInterface({input: process.stdin}).on("line", (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id === undefined) return;
  if (m.method === "initialize") {
    send({jsonrpc: "2.0", id: m.id, result: {protocolVersion: m.params.protocolVersion, capabilities: {tools: {}}, serverInfo: {name: "nodemon-worker", version: "1"}}});
  } else if (m.method === "tools/list") {
    send({jsonrpc: "2.0", id: m.id, result: {tools}});
  } else if (m.method === "tools/call") {
    fs.appendFileSync(ledger, process.pid + " " + m.params.arguments.text + "\n");
    send({jsonrpc: "2.0", id: m.id, result: {content: [{type: "text", text: "pid=" + process.pid}]}});
  } else if (m.method === "ping") {
    send({jsonrpc: "2.0", id: m.id, result: {}});
  } else {
    send({jsonrpc: "2.0", id: m.id, error: {code: -32601, message: "method not found"}});
  }
});
`

// TestNodemonSwapIsObserved: nodemon (pinned in testdata/npm) owns the
// pipe and restarts its worker when the worker's file changes. The
// supervisor observes the new worker: a new epoch, the old grant never
// reaches it (the ledger), the next write is refused and asks again, and
// after approval the new worker acts.
func TestNodemonSwapIsObserved(t *testing.T) {
	npm := needNPM(t)
	nodemon := filepath.Join(npm, "nodemon", "bin", "nodemon.js")
	if _, err := os.Stat(nodemon); err != nil {
		t.Skipf("nodemon is not installed in %s (bash scripts/test-deps.sh)", npm)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node")
	}
	dir := writeTree(t, map[string]string{"worker.js": nodeWorker})
	worker, ledger := filepath.Join(dir, "worker.js"), filepath.Join(dir, "ledger")
	h := newHome(t)
	const label = "nodemon"
	if err := h.AddServer(testContext(t, 30*time.Second), label, []string{"--cwd", dir, "--sandbox", "off"}, // the ledger tells workers apart by their own pid: no PID namespace
		node, nodemon, "-q", "--watch", worker, worker, ledger); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, h)
	a := listedAgent(t, h, label)
	runA := waitRun(t, h, a.PID(), buildWait, "ready", readyOn(""))
	epochA := runA.Epoch
	pending := asyncCall(t, a.Session, "write", map[string]any{"text": "first"})
	decideCLI(t, h, "approve", string(waitApproval(t, h, "write on A", forTool("write", string(epochA))).ID))
	pidA := strings.TrimPrefix(okText(t, await(t, pending)), "pid=")
	hostA := hostPIDOf(t, pidA, runA.PID) // the worker, in the daemon's numbering

	// The worker's file changes: nodemon restarts it behind the pipe.
	if err := os.WriteFile(worker, []byte(nodeWorker+"// edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitRun(t, h, a.PID(), 30*time.Second, "a new epoch observed", readyOn(string(epochA)))
	// The write on the old grant: refused authorization_stale, or held for
	// the person's approval of the new code (when the agent had listed the
	// tools again); either way it never reaches a worker unapproved.
	second := asyncCall(t, a.Session, "write", map[string]any{"text": "second"})
	select {
	case r := <-second:
		if r.err == nil {
			t.Fatalf("the write after the swap was answered %q, want a refusal or a wait", resultText(r.res))
		}
		if _, ref := refusalOf(t, r.err); ref.Error != control.AuthorizationStale || ref.CurrentEpoch == epochA {
			t.Fatalf("refusal %+v, want authorization_stale naming an epoch after %s", ref, epochA)
		}
	case <-time.After(2 * time.Second):
		waitApproval(t, h, "the held write on the new code", func(c authz.Card) bool {
			return c.Tool == "write" && c.CurrentEpoch != "" && c.CurrentEpoch != epochA
		})
	}
	for _, l := range readLedger(t, ledger) {
		if l[1] == "second" || l[0] != pidA {
			t.Fatalf("the old grant reached a worker after the swap: %v", readLedger(t, ledger))
		}
	}
	pidB := strings.TrimPrefix(approveAndWrite(t, h, a, string(epochA), "third"), "pid=")
	runB := waitRun(t, h, a.PID(), buildWait, "ready", readyOn(string(epochA)))
	if pidB == "" || hostPIDOf(t, pidB, runB.PID) == hostA {
		t.Fatalf("the write after approval was answered by %q, want a new worker (old %s)", pidB, pidA)
	}
	// "second", when it was held rather than refused, ran after the
	// person approved the new code: on a new worker too.
	l := readLedger(t, ledger)
	if len(l) < 2 || l[0] != [2]string{pidA, "first"} || l[len(l)-1] != [2]string{pidB, "third"} {
		t.Fatalf("ledger: %v, want first from %s, third from %s last", l, pidA, pidB)
	}
	for _, x := range l[1:] {
		if x[0] == pidA {
			t.Fatalf("ledger: %v: the old worker %s wrote after the swap", l, pidA)
		}
	}
}

// TestCallRightAfterEditWaits: the gate closes at the first file-system
// event on a watched path, not after the settle time, so a call sent 10 ms
// after an edit is held and answered by the new epoch's process, never by
// the old one.
func TestCallRightAfterEditWaits(t *testing.T) {
	dir := writeTree(t, map[string]string{"worker.py": "import helper\n" + loopWorker, "helper.py": "VERSION = 1\n"})
	helper, ledger := filepath.Join(dir, "helper.py"), filepath.Join(dir, "ledger")
	h := newHome(t)
	const label = "edited"
	addPython(t, h, label, []string{"--watch", helper}, filepath.Join(dir, "worker.py"), ledger)
	allowTools(t, h, label, "write")
	startDaemon(t, h)
	a := listedAgent(t, h, label)
	runA := waitRun(t, h, a.PID(), buildWait, "ready", readyOn(""))
	epochA := runA.Epoch
	pidA := strings.TrimPrefix(callText(t, a.Session, "write", map[string]any{"text": "before"}), "pid=")
	hostA := hostPIDOf(t, pidA, runA.PID) // in the daemon's numbering

	if err := os.WriteFile(helper, []byte("VERSION = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // the scenario: a call 10 ms after the edit
	got := callText(t, a.Session, "write", map[string]any{"text": "after"})
	st := waitRun(t, h, a.PID(), 30*time.Second, "the new epoch", readyOn(string(epochA)))
	if got == "pid="+pidA && hostPIDOf(t, pidA, st.PID) == hostA {
		t.Fatalf("the call sent 10 ms after the edit reached the old process %s", pidA)
	}
	if got != "pid="+strconv.Itoa(ownPID(t, st.PID)) {
		t.Errorf("the call was answered %q, want the new epoch's process %d", got, st.PID)
	}
	for _, l := range readLedger(t, ledger) {
		if l[1] == "after" && "pid="+l[0] != got {
			t.Errorf("another process than the new epoch's wrote after the edit: %v", readLedger(t, ledger))
		}
	}
}
