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
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/front"
	"github.com/portcullis/portcullis/internal/harness"
)

// selfApproveBin is testdata/servers/selfapprove, built once.
var selfApproveBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "portcullis-e2e-selfapprove-")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return harness.BuildServer(ctx, repoRoot, dir, "selfapprove", "")
})

// selfApproveSetup is a daemon with the selfapprove server configured as
// "self", its tool attack allowed, write waiting for approval.
type selfApproveSetup struct {
	home   *harness.Home
	daemon *harness.Daemon
	log    string // SELFAPPROVE_LOG: what write wrote
	agent  *agent
}

func newSelfApprove(t *testing.T) *selfApproveSetup {
	t.Helper()
	bin, err := selfApproveBin()
	if err != nil {
		t.Fatal(err)
	}
	h := newHome(t)
	d := startDaemon(t, h)
	rep, err := h.Status(testContext(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s := &selfApproveSetup{home: h, daemon: d, log: filepath.Join(t.TempDir(), "writes.log")}
	// The daemon no longer hands its PORTCULLIS_HOME to servers: the
	// configuration names it, for the attacks that run the CLI.
	// Sandbox off: the attacks need the data directory and the control
	// socket, which the default sandbox hides; what is tested here is the
	// refusal a server gets where the sandbox is off or not available.
	flags := []string{"--sandbox", "off", "--env", "PORTCULLIS_BIN=" + portcullis, "--env", "PORTCULLIS_HOME=" + h.Dir, "--env", "PORTCULLIS_SOCKET=" + rep.Socket, "--env", "SELFAPPROVE_LOG=" + s.log}
	if err := h.AddServer(testContext(t, 30*time.Second), "self", flags, bin); err != nil {
		t.Fatal(err)
	}
	if err := h.SetToolPolicy("self", "allow", "attack"); err != nil {
		t.Fatal(err)
	}
	s.agent = connectCmd(t, h.ConnectCommand("self"), "")
	return s
}

// writes returns what the server's write tool wrote so far.
func (s *selfApproveSetup) writes(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(s.log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// refusals returns the decision_refused events of the audit log.
func refusals(t *testing.T, h *harness.Home) []audit.DecisionRefused {
	t.Helper()
	var out []audit.DecisionRefused
	for _, e := range auditEvents(t, h) {
		if e.Type != audit.TypeDecisionRefused {
			continue
		}
		var f audit.DecisionRefused
		if err := e.DecodeFields(&f); err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// TestServerCannotApproveItself: the selfapprove server, whose write call
// waits for the person, tries to approve that call from its allowed attack
// tool in three ways: `portcullis approve` at a pseudo-terminal from its own
// tree, the same after setsid -f + env -i (a new session, no epoch mark, a
// double fork that leaves its tree), and a decide request written to the
// control socket. Each is refused with the reason, the call does not run,
// and each refusal is in the audit log. The person's approve at a terminal
// of their own then lets the call run.
func TestServerCannotApproveItself(t *testing.T) {
	s := newSelfApprove(t)
	pending := asyncCall(t, s.agent.Session, "write", map[string]any{"text": "self-approved"})
	req := waitApproval(t, s.home, "write", forTool("write", ""))

	type attempt struct {
		Request, Mode, Output, Exit string
	}
	for _, tc := range []struct {
		mode string
		want []string // in the answer the attempt got
	}{
		{"group", []string{string("refused to approve approval request " + req.ID), "descends from the Portcullis daemon", `the process tree of server "self"`, "approve or deny it from a terminal of your own"}},
		{"setsid", []string{string("refused to approve approval request " + req.ID), "descends from the Portcullis daemon", "left a supervised server's process tree", "approve or deny it from a terminal of your own"}},
		{"socket", []string{string("refused to approve approval request " + req.ID), "descends from the Portcullis daemon", `the process tree of server "self"`}},
	} {
		text := callText(t, s.agent.Session, "attack", map[string]any{"mode": tc.mode})
		var got []attempt
		for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
			var a attempt
			if err := json.Unmarshal([]byte(line), &a); err != nil {
				t.Fatalf("%s: attack answered %q: %v", tc.mode, text, err)
			}
			got = append(got, a)
		}
		if len(got) != 1 || got[0].Request != string(req.ID) {
			t.Fatalf("%s: attempts %+v, want one on %s", tc.mode, got, req.ID)
		}
		answer := got[0].Output
		if tc.mode == "socket" {
			var r struct {
				OK          bool
				Error, Code string
			}
			if err := json.Unmarshal([]byte(answer), &r); err != nil || r.OK || r.Code != "not_a_person" {
				t.Errorf("socket: the daemon answered %q (%v), want a refusal with code not_a_person", answer, err)
			}
			answer = r.Error
		}
		for _, w := range tc.want {
			if !strings.Contains(answer, w) {
				t.Errorf("%s: the attempt was answered %q, which lacks %q", tc.mode, answer, w)
			}
		}
		if tc.mode != "socket" && got[0].Exit != "1" {
			t.Errorf("%s: portcullis approve exited %q, want 1", tc.mode, got[0].Exit)
		}
	}
	if w := s.writes(t); w != "" {
		t.Fatalf("the call ran although only the server approved it: %q", w)
	}
	if !slices.ContainsFunc(approvals(t, s.home), func(r authz.Request) bool { return r.ID == req.ID }) {
		t.Fatalf("request %s is no longer pending after the refused attempts", req.ID)
	}

	refused := refusals(t, s.home)
	if len(refused) != 3 {
		t.Fatalf("audit log has %d decision_refused events, want 3: %+v", len(refused), refused)
	}
	for i, f := range refused {
		if f.Request != req.ID || f.Refusal != "supervised" || f.PID == 0 || f.Executable == "" || !strings.Contains(f.Reason, "descends from the Portcullis daemon") || len(f.Ancestry) < 2 {
			t.Errorf("refusal %d: %+v", i, f)
		}
	}
	// The CLI attempts were made by portcullis itself (the full program the
	// front execs); the raw one by the server.
	if app := front.AppPath(portcullis); refused[0].Executable != app || refused[1].Executable != app {
		t.Errorf("refused executables %q, %q, want %s", refused[0].Executable, refused[1].Executable, app)
	}
	if refused[0].ServerLabel != "self" || refused[2].ServerLabel != "self" {
		t.Errorf("refusals name servers %q and %q, want self", refused[0].ServerLabel, refused[2].ServerLabel)
	}
	// The setsid attempt was adopted by the daemon (a child subreaper):
	// the process right below the daemon in its ancestry is no server,
	// and once it exits the daemon reaps it (no zombie is left).
	chain := refused[1].Ancestry
	at := slices.Index(chain, s.daemon.PID())
	if at < 1 {
		t.Fatalf("the setsid attempt's ancestry %v does not reach the daemon %d", chain, s.daemon.PID())
	}
	adopted := chain[at-1]
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", adopted)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d, adopted by the daemon, was not reaped within 10 s", adopted)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The person, at a terminal of their own.
	out := decideCLI(t, s.home, "approve", string(req.ID))
	if !strings.Contains(out, "Approved "+string(req.ID)) {
		t.Errorf("approve printed %q", out)
	}
	if got := okText(t, await(t, pending)); got != "wrote self-approved" {
		t.Errorf("write answered %q", got)
	}
	if w := s.writes(t); w != "self-approved\n" {
		t.Errorf("the server wrote %q", w)
	}
}

// TestAgentShellCannotApprove: a shell started by the agent (a child of the
// process that launched the shim, here this test) loops on `portcullis
// approvals --json` and `portcullis approve`, at a pseudo-terminal (script)
// so that the CLI's own terminal check passes: the daemon refuses each
// attempt as coming from the agent's tree, and audits it. Without a terminal
// the CLI refuses before it asks. The person's approve then works.
func TestAgentShellCannotApprove(t *testing.T) {
	s := newSelfApprove(t)
	pending := asyncCall(t, s.agent.Session, "write", map[string]any{"text": "by the person"})
	req := waitApproval(t, s.home, "write", forTool("write", ""))
	run, _ := runOf(t, s.home, s.agent.PID(), "connected", func(r gateway.Status) bool { return r.Run != "" })

	shell := exec.CommandContext(testContext(t, 60*time.Second), "sh", "-c", `
for i in 1 2 3; do
	"$0" approvals --json | grep -q "$1" || { echo "request $1 not listed"; exit 9; }
	script -qec "$0 approve $1" /dev/null
done
"$0" approve "$1"
echo "plain exit=$?"`, portcullis, string(req.ID))
	shell.Env = s.home.Environ()
	b, err := shell.CombinedOutput()
	out := string(b)
	if err != nil {
		t.Fatalf("the agent's shell: %v\n%s", err, out)
	}
	if n := strings.Count(out, "descends from the agent of agent run "+string(run.Run)); n != 3 {
		t.Errorf("the agent's shell saw %d refusals naming its agent run, want 3:\n%s", n, out)
	}
	if !strings.Contains(out, "runs only at a terminal of your own") || !strings.Contains(out, "plain exit=1") {
		t.Errorf("approve without a terminal was not refused by the CLI:\n%s", out)
	}
	if w := s.writes(t); w != "" {
		t.Fatalf("the call ran on the agent's own approval: %q", w)
	}
	refused := refusals(t, s.home)
	if len(refused) != 3 {
		t.Fatalf("audit log has %d decision_refused events, want 3: %+v", len(refused), refused)
	}
	for i, f := range refused {
		if f.Request != req.ID || f.Refusal != "agent" || f.AgentRun != run.Run || f.Executable != front.AppPath(portcullis) || !slices.Contains(f.Ancestry, os.Getpid()) {
			t.Errorf("refusal %d: %+v (want agent run %s, this test's pid %d in the ancestry)", i, f, run.Run, os.Getpid())
		}
	}

	if out := decideCLI(t, s.home, "approve", string(req.ID)); !strings.Contains(out, "Approved "+string(req.ID)) {
		t.Errorf("approve printed %q", out)
	}
	if got := okText(t, await(t, pending)); got != "wrote by the person" {
		t.Errorf("write answered %q", got)
	}
}
