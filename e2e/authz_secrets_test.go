package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
)

// TestSecretsStayOutOfEverything runs a session with a meta and an env
// credential (recognisable secrets) through an identity approval, a
// denial, an approval, a rebuild with a new identity approval, a stale
// call, an approval timeout and a last approved call, with the daemon
// logging at debug level, and then searches for the secrets in: the
// daemon's log, `portcullis status --json`, every `portcullis approvals
// --json` and `creds list` output, the audit log as `audit tail --json`
// prints it, every message and error the agent received, the shim's
// stderr, and every file under PORTCULLIS_HOME. The server's own call log
// (outside PORTCULLIS_HOME) holds digests only.
func TestSecretsStayOutOfEverything(t *testing.T) {
	needSecretService(t)
	metaSecret, envSecret := newSecret(t), newSecret(t)
	s := newCredsSetup(t, []credsScope{
		{scope: "notes-api", secret: metaSecret},
		{scope: "notes-token", envVar: "NOTES_TOKEN", secret: envSecret},
	}, approvalTimeout(6*time.Second), true) // room for a loaded machine to decide in time
	s.home.Env = append(s.home.Env, "PORTCULLIS_DEBUG=1")
	d := startDaemon(t, s.home)

	var outputs []string // everything a person or an agent could see
	capture := func(what string, args ...string) string {
		run := s.home.Run
		if args[0] == "approve" || args[0] == "deny" {
			run = s.home.RunAtTerminal // as the person, at a terminal of their own
		}
		r, err := run(testContext(t, 30*time.Second), args...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		outputs = append(outputs, what+": "+r.Stdout+r.Stderr)
		return r.Stdout
	}
	approveNext := func(what string, ok func(authz.Card) bool, args ...string) {
		t.Helper()
		req := waitApproval(t, s.home, what, ok)
		capture("approvals --json ("+what+")", "approvals", "--json")
		capture("approvals ("+what+")", "approvals")
		capture(strings.Join(args, " ")+string(" "+req.ID), append(args, string(req.ID))...)
	}

	connected := make(chan *listChangedAgent, 1)
	go func() { connected <- connectListChanged(t, s.home, credsLabel, "") }()
	approveNext("the first launch", forIdentity, "approve")
	var a *listChangedAgent
	select {
	case a = <-connected:
	case <-time.After(60 * time.Second):
		t.Fatal("the agent did not connect")
	}
	epochA := epochOf(t, s.home, a.PID(), "")
	var agentErrors []string
	refused := func(r asyncResult, want control.Reason) {
		t.Helper()
		if r.err == nil {
			t.Fatalf("call succeeded, want %s", want)
		}
		agentErrors = append(agentErrors, r.err.Error())
		if _, ref := refusalOf(t, r.err); ref.Error != want {
			t.Errorf("refusal %+v, want %s", ref, want)
		}
	}

	pending := asyncCall(t, a.Session, noteWrite, map[string]any{"text": "denied"})
	approveNext("a call to deny", forTool(noteWrite, epochA), "deny")
	refused(await(t, pending), control.ApprovalDenied)

	pending = asyncCall(t, a.Session, noteWrite, map[string]any{"text": "approved"})
	approveNext("a call to approve", forTool(noteWrite, epochA), "approve")
	if got := okText(t, await(t, pending)); got != wroteWith("A", 1, metaSecret) {
		t.Errorf("approved call on A: %q", got)
	}

	buildCreds(t, s.binDir, credsRevB)
	approveNext("the rebuilt identity", forIdentity, "approve")
	epochB := epochOf(t, s.home, a.PID(), epochA)
	refused(await(t, asyncCall(t, a.Session, noteWrite, map[string]any{"text": "stale"})), control.AuthorizationStale)
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	// The request raised with the refusal times out unanswered.
	refused(await(t, asyncCall(t, a.Session, noteWrite, map[string]any{"text": "timeout"})), control.ApprovalTimeout)
	pending = asyncCall(t, a.Session, noteWrite, map[string]any{"text": "last"})
	approveNext("the last call", forTool(noteWrite, epochB), "approve", "--once")
	if got := okText(t, await(t, pending)); got != wroteWith("B", 1, metaSecret) {
		t.Errorf("approved call on B: %q", got)
	}

	capture("status --json", "status", "--json")
	capture("status", "status")
	capture("creds list", "creds", "list")
	capture("audit tail --json", "audit", "tail", "--json", "-n", "1000000")
	capture("audit sessions --json", "audit", "sessions", "--json")
	capture("audit activity --json", "audit", "activity", "--json")
	for _, m := range a.Wire.Messages() {
		if !m.Out {
			outputs = append(outputs, fmt.Sprintf("agent received %s: %s %v", m.Method, m.Raw, m.Err))
		}
	}
	outputs = append(outputs, "agent errors: "+strings.Join(agentErrors, "\n"))
	if err := a.Close(); err != nil {
		t.Logf("closing the agent: %v", err)
	}
	outputs = append(outputs, "shim stderr: "+a.Stderr.String())
	waitRun(t, s.home, a.PID(), 30*time.Second, "ended", func(r gateway.Status) bool { return r.State == gateway.StateEnded })
	outputs = append(outputs, "daemon log: "+d.Output())

	for _, secret := range []string{metaSecret, envSecret} {
		for _, out := range outputs {
			if i := strings.Index(out, secret); i >= 0 {
				what, _, _ := strings.Cut(out, ":")
				t.Errorf("the secret appears in %s: …%s…", what, out[max(0, i-120):min(len(out), i+len(secret)+40)])
			}
		}
		if hits := filesContaining(t, s.home.Dir, secret); len(hits) > 0 {
			t.Errorf("the secret is in files under PORTCULLIS_HOME: %v", hits)
		}
		b, err := os.ReadFile(s.callLog)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("the server's call log holds a secret")
		}
	}
	// The searches searched something: the log and the outputs are there,
	// and the calls carried both credentials (as digests in the call log).
	if !strings.Contains(d.Output(), "approval granted") || len(outputs) < 20 {
		t.Errorf("too little was searched: %d outputs, daemon log:\n%s", len(outputs), d.Output())
	}
	var sawMeta, sawEnv bool
	for _, c := range readCredsCalls(t, s.callLog) {
		sawMeta = sawMeta || c.Meta == digest(metaSecret)
		sawEnv = sawEnv || c.Env == digest(envSecret)
	}
	if !sawMeta || !sawEnv {
		t.Errorf("the calls carried meta %v / env %v credentials, want both", sawMeta, sawEnv)
	}
	b, _ := json.Marshal(agentErrors)
	t.Logf("agent errors searched: %s", b)
}
