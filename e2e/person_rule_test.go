package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/config"
)

// TestPersonCommandsNeedATerminal: one rule for the person's commands, in
// the daemon. `servers policy … allow` (a permanent widening) and `audit
// acknowledge` (which lets approvals resume after tampering) are refused to
// a process that does not run at a terminal (here a plain pipe, from a
// process that is neither a server's nor an agent's) and to the agent's
// tree even with a terminal of its own (script); the policy stays as it
// was, the refusals are recorded, and the person's terminal may widen it.
func TestPersonCommandsNeedATerminal(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "echo", echoBin)
	startDaemon(t, h)
	policyOf := func() config.Policy {
		cfg, err := config.Load(h.ConfigFile())
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Servers["echo"].Tools["echo"].Policy
	}

	// No terminal: stdin, stdout and stderr are pipes.
	for _, args := range [][]string{{"servers", "policy", "echo", "echo", "allow"}, {"audit", "acknowledge"}} {
		r, err := h.Run(testContext(t, 30*time.Second), args...)
		if err == nil || !strings.Contains(r.Stderr, "does not run at a terminal") {
			t.Errorf("portcullis %s through a pipe: %v, stderr %q; want a refusal: not at a terminal", strings.Join(args, " "), err, r.Stderr)
		}
	}
	if p := policyOf(); p == config.PolicyAllow {
		t.Fatalf("the policy of echo is %q after a widening from a pipe", p)
	}

	// The agent's tree, with a terminal of its own.
	connectListChanged(t, h, "echo", "2025-06-18")
	shell := exec.CommandContext(testContext(t, 60*time.Second), "script", "-qec", portcullis+" servers policy echo echo allow; "+portcullis+" audit acknowledge", "/dev/null")
	shell.Env = h.Environ()
	out, _ := shell.CombinedOutput()
	if n := strings.Count(string(out), "descends from the agent of agent run"); n != 2 {
		t.Errorf("the agent's shell saw %d refusals as the agent, want 2:\n%s", n, out)
	}
	if p := policyOf(); p == config.PolicyAllow {
		t.Fatalf("the policy of echo is %q after a widening from the agent's tree", p)
	}

	kinds := map[string]int{}
	for _, f := range refusals(t, h) {
		if strings.Contains(f.What, "widen trust") || strings.Contains(f.What, "acknowledge") {
			kinds[f.Refusal]++
		}
	}
	if kinds["no_terminal"] != 2 || kinds["agent"] != 2 {
		t.Errorf("decision_refused kinds %v, want 2 no_terminal and 2 agent", kinds)
	}

	// The person, at a terminal of their own.
	if err := h.SetToolPolicy("echo", config.PolicyAllow, "echo"); err != nil {
		t.Fatal(err)
	}
	if p := policyOf(); p != config.PolicyAllow {
		t.Errorf("the policy of echo is %q after the person allowed it", p)
	}
}
