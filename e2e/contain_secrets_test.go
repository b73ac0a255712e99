package e2e

// Issue 15, item 4: secrets never come back out. A server that prints its
// injected credential on stderr and on stdout (a flood of lines that are
// not JSON-RPC) and puts it into a tool's title, description and input
// schema and into its instructions has the value replaced by "…(scope)" in
// status, status --json, catalog show, what the agent lists and the
// daemon's log, and the value appears nowhere in the data directory (not
// even base64-encoded, as the catalog store keeps tools); the daemon's log
// gets a bounded part of the flood and says how many lines it dropped.

import (
	"encoding/base64"
	"encoding/json"
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
		Env: map[string]string{"CREDS_BIN": creds, "CREDS_LEAK": "1"}, Credentials: []string{scope}})
	d := startDaemon(t, h)

	// The launch waits for the person to approve the credential.
	connected := make(chan *agent, 1)
	go func() { connected <- connectCmd(t, h.ConnectCommand("leaky"), "") }()
	req := waitApproval(t, h, "the launch with "+scope, forIdentity)
	decideCLI(t, h, "approve", string(req.ID))
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
	tools, err := a.Session.ListTools(testContext(t, 30*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, tool := range tools.Tools {
		b, _ := json.Marshal(tool)
		listed = append(listed, string(b))
	}
	for _, args := range [][]string{{"catalog", "show", "leaky"}, {"catalog", "show", "leaky", "--json"}} {
		r, err := h.Run(testContext(t, 30*time.Second), args...)
		if err != nil {
			t.Fatalf("portcullis %s: %v", strings.Join(args, " "), err)
		}
		if strings.Contains(r.Stdout, secret) || !strings.Contains(r.Stdout, "It uses the token "+placeholder) {
			t.Errorf("portcullis %s shows the secret or lacks the redacted description:\n%s", strings.Join(args, " "), r.Stdout)
		}
	}
	if l := strings.Join(listed, "\n"); strings.Contains(l, secret) || !strings.Contains(l, "Notes (token "+placeholder+")") {
		t.Errorf("the agent's tools/list holds the secret or lacks the redacted title:\n%s", l)
	}
	if err := a.Close(); err != nil {
		t.Logf("closing the agent: %v", err)
	}
	waitEnded(t, h, string(run.Run))

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
	for _, form := range append([]string{secret}, base64Forms(secret)...) {
		if hits := filesContaining(t, h.Dir, form); len(hits) > 0 {
			t.Errorf("the secret is in the data directory (as %q): %v", form, hits)
		}
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
			live = live || string(r.Run) == run
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

// base64Forms returns what base64 makes of s inside longer bytes, at each
// of the three offsets it can start at: the characters that encode s's
// bytes alone.
func base64Forms(s string) []string {
	var out []string
	for skip := range 3 {
		b := []byte(s)[skip:]
		b = b[:len(b)/3*3]
		out = append(out, base64.StdEncoding.EncodeToString(b))
	}
	return out
}
