package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestServersEditKeepsPoliciesAndCredentials: servers edit, through the
// running daemon, changes the fields it is given and keeps the tool
// policies and credential scopes (remove-and-add used to lose them).
func TestServersEditKeepsPoliciesAndCredentials(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "echo", echoBin)
	allowTools(t, h, "echo", "echo")
	if err := h.SetToolPolicy("echo", config.PolicyDeny, "add"); err != nil {
		t.Fatal(err)
	}
	setCred(t, h, credsScope{scope: "echo-token", envVar: "ECHO_TOKEN", secret: "s3cr3t-for-edit"})
	if r, err := h.Run(testContext(t, 30*time.Second), "servers", "cred", "echo", "add", "echo-token"); err != nil {
		t.Fatalf("servers cred add: %v (%s)", err, r.Stderr)
	}
	startDaemon(t, h)
	dir := t.TempDir()
	r, err := h.RunAtTerminal(testContext(t, 30*time.Second), "servers", "edit", "echo", "--cwd", dir, "--env", "LOG_LEVEL=debug")
	if err != nil {
		t.Fatalf("servers edit: %v\n%s%s", err, r.Stdout, r.Stderr)
	}
	for _, want := range []string{"Changed echo:", "cwd: - → " + dir, "env: +LOG_LEVEL", "Kept: 2 tool policies, credential scopes echo-token."} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("servers edit output lacks %q:\n%s", want, r.Stdout)
		}
	}
	cfg, err := config.Load(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Servers["echo"]
	if s.Command != echoBin || s.Cwd != dir || s.Env["LOG_LEVEL"] != "debug" || !slices.Equal(s.Credentials, []string{"echo-token"}) ||
		s.Policy("echo") != config.PolicyAllow || s.Policy("add") != config.PolicyDeny {
		t.Errorf("after servers edit the entry is %+v", s)
	}
	// The daemon has it in force: status lists the server as configured.
	rep, err := h.Status(testContext(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rep.Servers, func(si daemon.ServerInfo) bool { return si.Label == "echo" }) {
		t.Errorf("status lists servers %+v", rep.Servers)
	}
}

// TestServersAddUnfindableEntry: `servers add mysrv -- node server.mjs`
// without --cwd exits 2 with the fix and saves nothing.
func TestServersAddUnfindableEntry(t *testing.T) {
	h := newHome(t)
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "server.mjs"), []byte("// server\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(testContext(t, 30*time.Second), "servers", "add", "mysrv", "--watch", "lib", "--", "node", "server.mjs")
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("servers add with a relative script and no --cwd: %v, want exit 2\n%s", err, out)
	}
	for _, want := range []string{"will not be found", "add --cwd " + work, "--force"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(h.ConfigFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused server was saved (%v)", err)
	}
}

// TestStatusNamesTheCause: a node server whose entry is missing fails; its
// status shows the line that names the cause (Cannot find module), not only
// Node's last lines. Then restart, with the agent gone, says what starts it.
func TestStatusNamesTheCause(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: " + err.Error())
	}
	h := newHome(t)
	dir := t.TempDir()
	if err := h.AddServer(testContext(t, 30*time.Second), "mysrv", []string{"--cwd", dir}, node, "server.mjs"); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, h)
	a := startRaw(t, h, "mysrv")
	a.request("1", "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "newcomer", "version": "1"}})
	if m, _ := a.await("1", 30*time.Second); m.Error == nil {
		t.Fatalf("initialize of a server whose entry is missing succeeded: %+v", m)
	}
	runOf(t, h, a.pid(), "failed with its stderr", func(s gateway.Status) bool {
		return (s.State == gateway.StateFailed || s.State == gateway.StateCrashLooping || s.Exit != nil) && len(s.StderrTail) > 0
	})
	r, err := h.Run(testContext(t, 30*time.Second), "status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Stdout, "  cause     Error: Cannot find module '"+filepath.Join(dir, "server.mjs")+"'") {
		t.Errorf("status does not name the cause:\n%s", r.Stdout)
	}

	a.in.Close()
	waitNoRuns(t, h, 30*time.Second)
	r, err = h.Run(testContext(t, 30*time.Second), "restart", "mysrv")
	if err != nil {
		t.Fatalf("restart with no agent run: %v (%s)", err, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "nothing was restarted") || !strings.Contains(r.Stdout, "when an agent connects") {
		t.Errorf("restart with no agent run:\n%s", r.Stdout)
	}
}

// TestHelpDescribesEveryFlag: the installed binary's help, for a newcomer:
// every command's --help describes its flags and gives an example.
func TestHelpDescribesEveryFlag(t *testing.T) {
	h := newHome(t)
	for _, args := range [][]string{{"servers", "add"}, {"servers", "edit"}, {"audit", "verify"}, {"install"}, {"creds", "set"}} {
		r, err := h.Run(testContext(t, 30*time.Second), append(args, "--help")...)
		if err != nil {
			t.Fatalf("%v --help: %v", args, err)
		}
		for _, want := range []string{"Usage:", "\nFlags:\n", "\nExamples:\n", "\nExit codes: "} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("portcullis %s --help lacks %q:\n%s", strings.Join(args, " "), want, r.Stdout)
			}
		}
	}
	var ee *harness.ExitError
	if _, err := h.Run(testContext(t, 30*time.Second), "help", "nosuch"); !errors.As(err, &ee) || ee.Result.Code != 2 {
		t.Errorf("help of an unknown topic: %v, want exit 2", err)
	}
}
