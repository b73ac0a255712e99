package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/identity"
)

// stateWorker is loopWorker that also logs each write to server.log beside
// its ledger: a server that keeps its state where its code is.
var stateWorker = strings.Replace(loopWorker, `            with open(ledger, "a") as f:`,
	`            with open(os.path.join(os.path.dirname(ledger), "server.log"), "a") as f:
                f.write("write\n")
            with open(ledger, "a") as f:`, 1)

// TestServerStateInWatchedTreeKeepsEpoch: a Python server keeps its ledger
// (named in the tree's .gitignore) and its log (*.log, an ignore every
// watcher has) in its watched source directory. Its writes are data, not
// code: ten writes under one grant, one epoch, no build, all answered by
// the same process. A .gitignore written to hide the code is a change
// itself, and hides nothing.
func TestServerStateInWatchedTreeKeepsEpoch(t *testing.T) {
	if !strings.Contains(stateWorker, "server.log") {
		t.Fatal("stateWorker was not derived from loopWorker")
	}
	dir := writeTree(t, map[string]string{"worker.py": stateWorker, ".gitignore": "ledger.jsonl\n"})
	ledger := filepath.Join(dir, "ledger.jsonl")
	h := newHome(t)
	const label = "ledger"
	addPython(t, h, label, []string{"--cwd", dir, "--watch", dir}, filepath.Join(dir, "worker.py"), ledger)
	startDaemon(t, h)
	a := listedAgent(t, h, label)
	epochA := epochOf(t, h, a.PID(), "")
	pending := asyncCall(t, a.Session, "write", map[string]any{"text": "0"})
	decideCLI(t, h, "approve", string(waitApproval(t, h, "the first write", forTool("write", epochA)).ID))
	pidA := strings.TrimPrefix(okText(t, await(t, pending)), "pid=")

	// Ten writes, spread over more than the build watcher's settle time,
	// so that a write counted as a build would have ended the epoch.
	for i := 1; i <= 10; i++ {
		res, err := a.Session.CallTool(testContext(t, 20*time.Second), &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"text": string(rune('0' + i))}})
		if err != nil {
			t.Fatalf("write %d of 10 under the grant: %v", i, err)
		}
		if got := resultText(res); got != "pid="+pidA {
			t.Fatalf("write %d answered %q, want pid=%s", i, got, pidA)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // a settle time and more for a build that should not come
	st := waitRun(t, h, a.PID(), 10*time.Second, "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	if string(st.Epoch) != epochA {
		t.Errorf("the epoch changed from %s to %s while the server wrote its state", epochA, st.Epoch)
	}
	if l := readLedger(t, ledger); len(l) != 11 {
		t.Errorf("ledger has %d lines, want 11: %v", len(l), l)
	}
	for _, ev := range auditEvents(t, h) {
		if ev.Type == audit.TypeBuildDetected {
			t.Errorf("a build was detected: %s", ev.Fields)
		}
	}
	if reqs := approvals(t, h); len(reqs) != 0 {
		t.Errorf("approval requests pending after the writes: %+v", reqs)
	}

	// The server (or the agent) tries to hide its code: a .gitignore that
	// names the worker is itself a change of the watched tree, a new
	// epoch; and the worker edited under it is code all the same.
	if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("ledger.jsonl\nworker.py\n*.py\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	epochB := waitRun(t, h, a.PID(), 30*time.Second, "a new epoch after .gitignore changed", readyOn(epochA)).Epoch
	if err := os.WriteFile(filepath.Join(dir, "worker.py"), []byte(stateWorker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitRun(t, h, a.PID(), 30*time.Second, "a new epoch after the edit of the code it names", readyOn(string(epochB)))
}

// TestEnvironmentEditOnCard: a hand edit of config.json adds PYTHONPATH to
// a server's environment, and the server is restarted. No file changed, but
// the code that runs may have: the card of the next call names the
// variable, never "no measured file changed".
func TestEnvironmentEditOnCard(t *testing.T) {
	dir := writeTree(t, map[string]string{"worker.py": loopWorker, "inject/": ""})
	inject := filepath.Join(dir, "inject")
	h := newHome(t)
	const label = "envpy"
	addPython(t, h, label, nil, filepath.Join(dir, "worker.py"), filepath.Join(dir, "ledger"))
	startDaemon(t, h)
	a := listedAgent(t, h, label)
	ctx := testContext(t, 3*time.Minute)
	epochA := epochOf(t, h, a.PID(), "")
	pending := asyncCall(t, a.Session, "write", map[string]any{"text": "first"})
	decideCLI(t, h, "approve", string(waitApproval(t, h, "write on A", forTool("write", epochA)).ID))
	okText(t, await(t, pending))

	// The hand edit, as any program running as the person could make it.
	cfg, err := config.Load(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	srv := cfg.Servers[label]
	srv.Env = map[string]string{"PYTHONPATH": inject}
	cfg.Servers[label] = srv
	if err := config.Save(h.ConfigFile(), cfg); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(auditEvents(t, h), func(ev audit.Event) bool {
		return ev.Type == audit.TypeConfigChanged && strings.Contains(string(ev.Fields), "PYTHONPATH")
	}) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not take the edit within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r, err := h.Run(testContext(t, 30*time.Second), "restart", label); err != nil {
		t.Fatalf("restart: %v %+v", err, r)
	}
	epochB := waitRun(t, h, a.PID(), 30*time.Second, "the restarted epoch", readyOn(epochA)).Epoch
	go func() {
		_, _ = a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"text": "second"}})
	}()
	req := waitApproval(t, h, "write on B", forTool("write", string(epochB)))
	want := identity.Change{Field: "environment", Path: "PYTHONPATH", New: inject}
	if !slices.ContainsFunc(req.Card.IdentityChanges, func(c identity.Change) bool {
		return c.Field == want.Field && c.Path == want.Path && c.Old == want.Old && c.New == want.New
	}) {
		t.Errorf("the card's identity changes %+v lack %+v", req.Card.IdentityChanges, want)
	}
	text := strings.Join(req.Card.Lines(), "\n")
	if !strings.Contains(text, "changed environment: the variable PYTHONPATH (unset → "+inject+")") {
		t.Errorf("the card does not name the variable:\n%s", text)
	}
	if strings.Contains(text, "no measured file changed") {
		t.Errorf("the card claims no change:\n%s", text)
	}
	shown := decideCLI(t, h, "approvals")
	if !strings.Contains(shown, "PYTHONPATH") {
		t.Errorf("portcullis approvals does not show the variable:\n%s", shown)
	}
}

// TestNodemonEditClosesGate: nodemon server.js with no --watch. Portcullis
// measures and watches the script nodemon runs as the entry (with its
// package), so an edit of it is a build seen at the first file event —
// the gate closes before nodemon swaps its worker — and the build names
// the entry.
func TestNodemonEditClosesGate(t *testing.T) {
	npm := needNPM(t)
	nodemon := filepath.Join(npm, ".bin", "nodemon")
	if _, err := os.Stat(nodemon); err != nil {
		t.Skipf("nodemon is not installed in %s (bash scripts/test-deps.sh)", npm)
	}
	dir := writeTree(t, map[string]string{"server.js": nodeWorker})
	server, ledger := filepath.Join(dir, "server.js"), filepath.Join(dir, "ledger.txt")
	h := newHome(t)
	const label = "nodemon"
	if err := h.AddServer(testContext(t, 30*time.Second), label, []string{"--cwd", dir},
		nodemon, "-q", "--ignore", "ledger.txt", "server.js", ledger); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, h)
	a := listedAgent(t, h, label)
	epochA := epochOf(t, h, a.PID(), "")
	pending := asyncCall(t, a.Session, "write", map[string]any{"text": "first"})
	decideCLI(t, h, "approve", string(waitApproval(t, h, "write on A", forTool("write", epochA)).ID))
	okText(t, await(t, pending))

	if err := os.WriteFile(server, []byte(nodeWorker+"// edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitRun(t, h, a.PID(), 30*time.Second, "a new epoch after the edit", readyOn(epochA))
	// The build watcher saw the edit of the entry: build_detected naming
	// the entry (or its package) as what changed. (The epoch it names may
	// be the one nodemon's new worker started, observed during the
	// settle.)
	found := false
	for _, ev := range auditEvents(t, h) {
		if ev.Type != audit.TypeBuildDetected {
			continue
		}
		var b audit.BuildDetected
		if err := ev.DecodeFields(&b); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(b.Digests, "entry") || slices.Contains(b.Digests, "package") {
			found = true
		}
	}
	// The gate closed at the edit, before the supervisor saw nodemon's new
	// worker: the daemon's log has the hold first. The settled measurement
	// then names the entry, unless the observed worker (new code) had
	// made the new epoch already, which ends the build's own verdict.
	log := d.Output()
	held := strings.Index(log, `msg="build in progress: calls held"`)
	swapped := strings.Index(log, `msg="new epoch observed"`)
	if held < 0 || (swapped >= 0 && swapped < held) {
		t.Errorf("calls were not held at the edit, before nodemon's new worker was observed (hold at %d, swap at %d)", held, swapped)
	}
	if !found && swapped < 0 {
		t.Errorf("no build_detected naming the entry and no observed worker: the edit of %s behind nodemon was not seen", server)
	}
}
