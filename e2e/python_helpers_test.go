package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/harness"
)

// The fixtures of the tests whose server is a script in a tree the test
// writes and then edits (a Python worker, or nodemon's JavaScript one):
// the tree, the server added for it, and an agent that listed its tools.

// loopWorker is a stdio MCP server (legacy handshake) in Python: "write"
// appends "PID TEXT" to the ledger file named by its first argument;
// "restart" answers, then exits, so that the shell loop around it starts a
// new worker behind the same pipe.
const loopWorker = `import json, os, sys
ledger = sys.argv[1]
tools = [
    {"name": "write", "description": "writes to the ledger", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "restart", "description": "the worker exits after answering", "inputSchema": {"type": "object"}},
]
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    meth, i = m.get("method"), m["id"]
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "loop-worker", "version": "1"}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": tools}})
    elif meth == "tools/call":
        name = m["params"]["name"]
        if name == "write":
            with open(ledger, "a") as f:
                f.write("%d %s\n" % (os.getpid(), m["params"]["arguments"]["text"]))
            send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "pid=%d" % os.getpid()}]}})
        else:
            send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "pid=%d" % os.getpid()}]}})
            sys.exit(0)
    elif meth == "ping":
        send({"jsonrpc": "2.0", "id": i, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "method not found"}})
`

// realPython is the Python interpreter itself (not a version manager's
// shim), or the test is skipped.
func realPython(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	out, err := exec.Command(py, "-c", "import os, sys; print(os.path.realpath(sys.executable))").Output()
	if err != nil {
		t.Skipf("python3: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// readLedger returns the ledger's lines as (pid, text).
func readLedger(t *testing.T, path string) [][2]string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][2]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pid, text, _ := strings.Cut(sc.Text(), " ")
		out = append(out, [2]string{pid, text})
	}
	return out
}

// writeTree writes files into a fresh temporary directory and returns the
// directory with its symlinks resolved, since the daemon measures and
// names resolved paths and the tests compare with them. A key is a path
// relative to the directory (its parents are made); a key ending in "/"
// is an empty directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if strings.HasSuffix(rel, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// addPython adds label to h as `python3 WORKER LEDGER`, loopWorker's
// command line, with the flags of `servers add` (--watch, --cwd) before
// it. The interpreter is realPython's, so the test is skipped without
// python3.
func addPython(t *testing.T, h *harness.Home, label string, flags []string, worker, ledger string) {
	t.Helper()
	if err := h.AddServer(testContext(t, 30*time.Second), label, flags, realPython(t), worker, ledger); err != nil {
		t.Fatal(err)
	}
}

// listedAgent connects an agent to label (protocol version 2025-06-18, so
// it hears tools/list_changed) and has it list the tools once, as an
// agent does before its first call; the daemon must be running.
func listedAgent(t *testing.T, h *harness.Home, label string) *listChangedAgent {
	t.Helper()
	a := connectListChanged(t, h, label, "2025-06-18")
	if _, err := a.Session.ListTools(testContext(t, 3*time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	return a
}
