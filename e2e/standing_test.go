package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/internal/harness"
)

// standingList runs `portcullis approvals --standing --json`.
func standingList(t *testing.T, h *harness.Home) []authz.StandingApproval {
	t.Helper()
	r, err := h.Run(testContext(t, 30*time.Second), "approvals", "--standing", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var list []authz.StandingApproval
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil || list == nil {
		t.Fatalf("approvals --standing --json printed %q (%v): want a list", r.Stdout, err)
	}
	return list
}

// TestStandingApprovalKeptAndRevoked: approve --code is kept across a
// restart of the daemon; a copy of its file with the approval widened is
// refused whole at the next start (none in force, status says why);
// `portcullis revoke`, run without a terminal, ends one.
func TestStandingApprovalKeptAndRevoked(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "echo", echoBin)
	d := startDaemon(t, h)
	a := connectListChanged(t, h, "echo", "2025-06-18")
	epoch := epochOf(t, h, a.PID(), "")
	pending := asyncCall(t, a.Session, "echo", map[string]any{"message": "hi"})
	req := waitApproval(t, h, "the first echo", forTool("echo", epoch))
	decideCLI(t, h, "approve", string(req.ID), "--code")
	if r := await(t, pending); r.err != nil {
		t.Fatalf("the approved call: %v", r.err)
	}
	if list := standingList(t, h); len(list) != 1 || list[0].ID != req.ID || list[0].ServerLabel != "echo" {
		t.Fatalf("standing approvals %+v, want the one of %s", list, req.ID)
	}
	_ = a.Session.Close()
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	// Kept across the restart.
	d = startDaemon(t, h)
	if list := standingList(t, h); len(list) != 1 || list[0].ID != req.ID {
		t.Fatalf("after a restart: standing approvals %+v", list)
	}
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	// The agent widens the file: refused whole.
	path := daemon.StandingPath(paths.Dirs{State: h.Dir}) // PORTCULLIS_HOME is the state directory
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := json.Unmarshal(good, &file); err != nil {
		t.Fatal(err)
	}
	approval := file["approvals"].([]any)[0].(map[string]any)["approval"].(map[string]any)
	approval["tools"] = append(approval["tools"].([]any), "add") // a tool the person never approved
	widened, _ := json.Marshal(file)
	if err := os.WriteFile(path, widened, 0o600); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, h)
	if list := standingList(t, h); len(list) != 0 {
		t.Errorf("a widened file put %+v in force", list)
	}
	r, err := h.Run(testContext(t, 30*time.Second), "status")
	if err != nil || !strings.Contains(r.Stdout, "Standing approvals: none in force: their file was refused") || !strings.Contains(r.Stdout, "rewritten") {
		t.Errorf("status (%v):\n%s", err, r.Stdout)
	}
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	// The daemon's own file again; revoke from a pipe.
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, h)
	r, err = h.Run(testContext(t, 30*time.Second), "revoke", string(req.ID))
	if err != nil || !strings.Contains(r.Stdout, "Revoked "+string(req.ID)) {
		t.Fatalf("revoke: %v, %q %q", err, r.Stdout, r.Stderr)
	}
	if list := standingList(t, h); len(list) != 0 {
		t.Errorf("after revoke: %+v", list)
	}
}
