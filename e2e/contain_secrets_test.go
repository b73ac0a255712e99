package e2e

// Issue 15, item 4: secrets never come back out. A server that prints its
// injected credential on stderr and on stdout (a flood of lines that are
// not JSON-RPC) has the value replaced by "…(scope)" in status, status
// --json and the daemon's log, and the value appears nowhere in the data
// directory; the daemon's log gets a bounded part of the flood and says how
// many lines it dropped.

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/supervisor"
	"github.com/portcullis/portcullis/internal/harness"
)

func TestContainSecretsNeverComeBackOut(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("credentials in the Secret Service: Linux")
	}
	needSecretService(t)
	const scope = "leak-token"
	h := newHome(t)
	secret := newSecret(t)
	setCred(t, h, credsScope{scope: scope, envVar: "NOTES_TOKEN", secret: secret})
	creds := buildCreds(t, t.TempDir(), "")
	script := `echo "starting with token $NOTES_TOKEN" >&2
i=0; while [ $i -lt 400 ]; do echo "junk line $i token=$NOTES_TOKEN"; i=$((i+1)); done
exec "$CREDS_BIN"`
	auditAddServer(t, h, "leaky", config.Server{Command: "/bin/sh", Args: []string{"-c", script},
		Env: map[string]string{"CREDS_BIN": creds}, Credentials: []string{scope}})
	d := startDaemon(t, h)

	// The launch waits for the person to approve the credential.
	connected := make(chan *agent, 1)
	go func() { connected <- connectCmd(t, h.ConnectCommand("leaky"), "") }()
	req := waitApproval(t, h, "the launch with "+scope, forIdentity)
	decideCLI(t, h, "approve", req.ID)
	var a *agent
	select {
	case a = <-connected:
	case <-time.After(60 * time.Second):
		t.Fatal("the agent did not connect within 60 s of the approval")
	}
	run := waitRun(t, h, a.PID(), buildWait, "ready", readyOn(""))
	placeholder := supervisor.Placeholder(scope)

	plain, err := h.Run(testContext(t, 30*time.Second), "status")
	if err != nil {
		t.Fatal(err)
	}
	js, err := h.Run(testContext(t, 30*time.Second), "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{"status": plain.Stdout, "status --json": js.Stdout} {
		if strings.Contains(out, secret) {
			t.Errorf("%s shows the secret:\n%s", what, out)
		}
		if !strings.Contains(out, "starting with token "+placeholder) {
			t.Errorf("%s lacks the server's stderr line, redacted:\n%s", what, out)
		}
	}
	if !strings.Contains(js.Stdout, "token="+placeholder) {
		t.Errorf("status --json lacks the server's diagnostics, redacted:\n%s", js.Stdout)
	}
	if err := a.Close(); err != nil {
		t.Logf("closing the agent: %v", err)
	}
	waitEnded(t, h, run.Run)

	log := d.Output()
	if strings.Contains(log, secret) || strings.Contains(log, secret[:20]) {
		t.Errorf("the daemon's log holds the secret")
	}
	if n := strings.Count(log, "server diagnostic"); n == 0 || n > 100 {
		t.Errorf("%d lines of the server's 400-line flood reached the daemon's log, want some and at most 100", n)
	}
	if !strings.Contains(log, "server output dropped from the log") {
		t.Errorf("the daemon's log does not say it dropped lines of the flood")
	}
	if hits := filesContaining(t, h.Dir, secret); len(hits) > 0 {
		t.Errorf("the secret is in the data directory: %v", hits)
	}
	if hits := filesContaining(t, filepath.Dir(creds), secret); len(hits) > 0 {
		t.Errorf("the secret is next to the server's binary: %v", hits)
	}
}

// waitEnded polls status until agent run run is no longer live (its
// server stopped), failing t after 30 s.
func waitEnded(t *testing.T, h *harness.Home, run string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rep, err := h.Status(testContext(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// Ended, or counted as a health check (it called no tool): no
		// longer live either way.
		live := false
		for _, r := range rep.Runs {
			live = live || r.Run == run
		}
		if !live {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent run %s did not end within 30 s", run)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
