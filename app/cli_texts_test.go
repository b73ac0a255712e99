package app

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/install"
)

// chdir changes the working directory for the rest of the test.
func chdir(t *testing.T, dir string) {
	t.Helper()
	old, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chdir(old) })
}

// servers runs a servers command on e's App.
func (e *credsEnv) servers(args ...string) error {
	e.stdout.Reset()
	e.stderr.Reset()
	return e.a.runServers(args)
}

func (e *credsEnv) config(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Load(e.a.Dirs.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// storeCatalog records one catalog revision of label with the named tools.
func (e *credsEnv) storeCatalog(t *testing.T, label string, tools ...string) {
	t.Helper()
	store, err := e.a.openCatalogs()
	if err != nil {
		t.Fatal(err)
	}
	var objs []string
	for _, name := range tools {
		objs = append(objs, `{"name":"`+name+`","description":"Does `+name+`.","inputSchema":{"type":"object","properties":{"sku":{"type":"string"},"env":{"type":"string","enum":["staging","production"],"default":"staging"}},"required":["sku"]},"annotations":{"destructiveHint":true}}`)
	}
	parsed, err := catalog.Parse([]json.RawMessage{json.RawMessage(`{"tools":[` + strings.Join(objs, ",") + `]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Update(label, "01JQ7R4S4S0QJ7GZP1S2AAAAAA", parsed); err != nil {
		t.Fatal(err)
	}
}

// TestServersAddResolvesRelativePaths: a command holding a slash is made
// absolute against --cwd or the current directory, and the output says so;
// a bare name stays a PATH lookup; relative watch paths without --cwd are
// made absolute, with --cwd they stay relative to it.
func TestServersAddResolvesRelativePaths(t *testing.T) {
	e := newCredsEnv(t)
	work := t.TempDir()
	proj := t.TempDir()
	for _, p := range []string{filepath.Join(work, "faulty"), filepath.Join(proj, "bin", "server")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	chdir(t, work)

	if err := e.servers("add", "faulty", "--watch", "dist", "--", "./faulty", "-x"); err != nil {
		t.Fatal(err)
	}
	out := e.stdout.String()
	abs := filepath.Join(work, "faulty")
	for _, want := range []string{"Command ./faulty is relative: stored as " + abs + " (resolved against the current directory)", "Watch path dist is relative", "Added faulty."} {
		if !strings.Contains(out, want) {
			t.Errorf("servers add output lacks %q:\n%s", want, out)
		}
	}
	if e.stderr.Len() != 0 {
		t.Errorf("warnings for an existing executable: %s", e.stderr.String())
	}
	s := e.config(t).Servers["faulty"]
	if s.Command != abs || !slices.Equal(s.Args, []string{"-x"}) || !slices.Equal(s.Watch, []string{filepath.Join(work, "dist")}) {
		t.Errorf("stored %+v, want command %s and an absolute watch path", s, abs)
	}

	if err := e.servers("add", "proj", "--cwd", proj, "--watch", "dist", "--", "bin/server"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.stdout.String(), "(resolved against --cwd)") {
		t.Errorf("servers add --cwd output:\n%s", e.stdout.String())
	}
	s = e.config(t).Servers["proj"]
	if s.Command != filepath.Join(proj, "bin", "server") || !slices.Equal(s.Watch, []string{"dist"}) || s.Cwd != proj {
		t.Errorf("stored %+v, want the command under --cwd and the watch path relative to it", s)
	}

	if err := e.servers("add", "bare", "--", "portcullis-no-such-command-here", "server.js"); err != nil {
		t.Fatal(err)
	}
	if s := e.config(t).Servers["bare"]; s.Command != "portcullis-no-such-command-here" {
		t.Errorf("a bare name was changed to %q", s.Command)
	}
	if strings.Contains(e.stdout.String(), "is relative") || !strings.Contains(e.stderr.String(), "is not in this shell's PATH") {
		t.Errorf("bare name: stdout %q stderr %q", e.stdout.String(), e.stderr.String())
	}

	// A relative command that does not exist (yet) is stored, with a warning;
	// an argument naming a file here, without --cwd, is pointed out.
	if err := os.WriteFile(filepath.Join(work, "server.js"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("add", "later", "--", "./build/out", "server.js"); err != nil {
		t.Fatal(err)
	}
	if s := e.config(t).Servers["later"]; s.Command != filepath.Join(work, "build", "out") {
		t.Errorf("stored command %q", s.Command)
	}
	for _, want := range []string{"command not found", "argument server.js names a file here", "--cwd " + work} {
		if !strings.Contains(e.stderr.String(), want) {
			t.Errorf("warnings lack %q:\n%s", want, e.stderr.String())
		}
	}
}

func TestServersCred(t *testing.T) {
	e := newCredsEnv(t)
	if err := e.servers("add", "inv", "--", "/bin/true"); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("cred", "inv", "add", "tok"); err == nil || !strings.Contains(err.Error(), "portcullis creds set tok") {
		t.Errorf("adding an undefined scope: %v, want advice to create it", err)
	}
	if err := e.run("s3cret\n", "set", "tok", "--env", "TOKEN"); err != nil {
		t.Fatal(err)
	}
	if out := e.stdout.String(); !strings.Contains(out, "portcullis servers cred LABEL add tok") || strings.Contains(out, "servers add LABEL --cred") ||
		!strings.Contains(out, "settings in "+e.a.Dirs.ConfigFile()+": injected as $TOKEN into the environment") {
		t.Errorf("creds set output:\n%s", out)
	}
	if err := e.servers("cred", "inv", "add", "tok"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.stdout.String(), "inv now uses credential scope tok") {
		t.Errorf("servers cred add output:\n%s", e.stdout.String())
	}
	if got := e.config(t).Servers["inv"].Credentials; !slices.Equal(got, []string{"tok"}) {
		t.Errorf("credentials %v, want [tok]", got)
	}
	if err := e.servers("cred", "inv", "add", "tok"); err != nil || !strings.Contains(e.stdout.String(), "already uses") {
		t.Errorf("adding twice: %v %q", err, e.stdout.String())
	}
	if err := e.run("", "remove", "tok"); err == nil || !strings.Contains(err.Error(), "portcullis servers cred LABEL remove tok") {
		t.Errorf("creds remove of a used scope: %v", err)
	}
	if err := e.servers("cred", "inv", "remove", "tok"); err != nil {
		t.Fatal(err)
	}
	if got := e.config(t).Servers["inv"].Credentials; len(got) != 0 {
		t.Errorf("credentials after remove: %v", got)
	}
	if err := e.servers("cred", "inv", "remove", "tok"); err == nil {
		t.Error("removing a scope the server does not use succeeded")
	}
	if err := e.servers("cred", "inv", "drop", "tok"); !isUsage(err) {
		t.Errorf("bad verb: %v, want a usage error", err)
	}
	if err := e.servers("cred", "nope", "add", "tok"); err == nil || !strings.Contains(err.Error(), `no server labelled "nope"`) {
		t.Errorf("unknown label: %v", err)
	}
}

// TestIdentityNote: a server run by a runtime from an entry file, without
// watched paths, is told what identifies its code (the entry and its
// package) and how to choose other paths — at servers add, and when an env
// credential is added to it; a wrapper is told that what it runs is not
// measured; with --watch, or for a binary that is its own entry, nothing is
// said.
func TestIdentityNote(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed (make test-deps): %v", err)
	}
	dir := t.TempDir()
	entry := filepath.Join(dir, "server.mjs")
	if err := os.WriteFile(entry, []byte("import './lib.mjs'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newCredsEnv(t)
	if err := e.servers("add", "js", "--", node, entry); err != nil {
		t.Fatal(err)
	}
	if out := e.stdout.String(); !strings.Contains(out, "identifies the code of js by its entry and its package "+dir+" (measured: ") || !strings.Contains(out, "servers edit js --watch PATH") {
		t.Errorf("servers add of a node entry without --watch:\n%s", out)
	}
	if err := e.servers("add", "js-watched", "--watch", dir, "--", node, entry); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec \"$(dirname \"$0\")/server\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("add", "wrapped", "--", wrapper); err != nil {
		t.Fatal(err)
	}
	if out := e.stdout.String(); !strings.Contains(out, "wrapped starts through a wrapper ("+wrapper+")") || !strings.Contains(out, "--watch PATH") {
		t.Errorf("servers add of a wrapper script:\n%s", out)
	}
	if err := e.servers("add", "bin", "--", "/bin/true"); err != nil {
		t.Fatal(err)
	}
	if out := e.stdout.String(); strings.Contains(out, "identif") {
		t.Errorf("a binary that is its own entry got a note:\n%s", out)
	}
	if err := e.run("s3cret\n", "set", "tok", "--env", "TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("cred", "js", "add", "tok"); err != nil {
		t.Fatal(err)
	}
	if out := e.stdout.String(); !strings.Contains(out, "identifies the code of js by its entry and its package") {
		t.Errorf("servers cred add of an env credential:\n%s", out)
	}
	if err := e.servers("cred", "js-watched", "add", "tok"); err != nil {
		t.Fatal(err)
	}
	if out := e.stdout.String(); strings.Contains(out, "identif") {
		t.Errorf("a watched server got the note:\n%s", out)
	}
}

// TestServersPolicyWarnsAboutUnknownTools: a tool absent from the latest
// stored catalog revision is warned about, not refused; without a catalog
// the note says it could not be checked.
func TestServersPolicyWarnsAboutUnknownTools(t *testing.T) {
	e := newCredsEnv(t)
	if err := e.servers("add", "inv", "--", "/bin/true"); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("policy", "inv", "lookup", "allow"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.stderr.String(), "no catalog of inv is stored yet") {
		t.Errorf("without a catalog: stderr %q", e.stderr.String())
	}
	e.storeCatalog(t, "inv", "lookup", "adjust")
	if err := e.servers("policy", "inv", "lookup", "allow"); err != nil {
		t.Fatal(err)
	}
	if e.stderr.Len() != 0 {
		t.Errorf("a known tool warned: %q", e.stderr.String())
	}
	if err := e.servers("policy", "inv", "nosuchtool", "allow"); err != nil {
		t.Fatalf("an unknown tool failed: %v", err)
	}
	if want := `warning: inv offers no tool "nosuchtool" in its latest catalog revision 1 (it has: lookup, adjust)`; !strings.Contains(e.stderr.String(), want) {
		t.Errorf("stderr %q, want %q", e.stderr.String(), want)
	}
	if p := e.config(t).Servers["inv"].Policy("nosuchtool"); p != config.PolicyAllow {
		t.Errorf("the policy of the unknown tool was not stored: %q", p)
	}
}

func TestServersUsageNamesEverySubcommand(t *testing.T) {
	e := newCredsEnv(t)
	err := e.servers()
	if !isUsage(err) || !strings.Contains(err.Error(), "policy") || !strings.Contains(err.Error(), "cred") {
		t.Errorf("servers without a subcommand: %v", err)
	}
	for _, want := range []string{"servers list|show|add|edit|remove|policy|cred", "policy LABEL TOOL allow|approve|deny", "cred LABEL add|remove SCOPE"} {
		if !strings.Contains(usage, want) {
			t.Errorf("portcullis help lacks %q", want)
		}
	}
}

func TestConfigErrorWording(t *testing.T) {
	e := newCredsEnv(t)
	if err := os.MkdirAll(e.a.Dirs.Config, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.a.Dirs.ConfigFile(), []byte(`{"mcpServers":{"x":{}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := e.servers("list")
	if err == nil || !errors.Is(err, config.ErrInvalid) || !strings.HasSuffix(err.Error(), "fix it (or restore the .last-good copy beside it) and run the command again") {
		t.Errorf("servers list on an invalid file: %v", err)
	}
}

func TestCatalogText(t *testing.T) {
	e := newCredsEnv(t)
	if err := e.servers("add", "inv", "--", "/bin/true"); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("policy", "inv", "lookup", "allow"); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("add", "fresh", "--", "/bin/true"); err != nil {
		t.Fatal(err)
	}
	if err := e.a.runCatalog([]string{"show", "fresh"}); err == nil || !strings.Contains(err.Error(), "once an agent has connected") {
		t.Errorf("catalog show of a server never connected: %v", err)
	}
	if err := e.a.runCatalog([]string{"show", "nosuch"}); err == nil || !strings.Contains(err.Error(), `no server labelled "nosuch"`) || !strings.Contains(err.Error(), "fresh, inv") {
		t.Errorf("catalog show of an unknown label: %v", err)
	}
	e.storeCatalog(t, "inv", "lookup")
	e.storeCatalog(t, "inv", "lookup", "adjust")
	run := func(args ...string) string {
		t.Helper()
		e.stdout.Reset()
		if err := e.a.runCatalog(args); err != nil {
			t.Fatalf("catalog %v: %v", args, err)
		}
		return e.stdout.String()
	}
	show := run("show", "inv")
	for _, want := range []string{"inv: catalog revision 2 (the latest), 2 tool(s)", "\nlookup\n  policy allow, destructive hint\n  Does lookup.\n",
		"\nadjust\n  policy approve, destructive hint\n", `  · env (string, one of ["staging","production"], default "staging")`, "  · sku (string, required)"} {
		if !strings.Contains(show, want) {
			t.Errorf("catalog show lacks %q:\n%s", want, show)
		}
	}
	if old := run("show", "inv", "1"); !strings.Contains(old, "revision 1 (the latest is 2), 1 tool(s)") {
		t.Errorf("catalog show inv 1:\n%s", old)
	}
	var c catalog.Catalog
	if err := json.Unmarshal([]byte(run("show", "--json", "inv")), &c); err != nil || c.Revision != 2 {
		t.Errorf("catalog show --json: revision %d, %v", c.Revision, err)
	}
	diff := run("diff", "inv")
	if want := "inv: catalog revision 1 → 2 (most severe change: "; !strings.HasPrefix(diff, want) || !strings.Contains(diff, "\n  authority ") {
		t.Errorf("catalog diff:\n%s", diff)
	}
	var d struct {
		From, To uint64
		Changes  []catalog.Change
	}
	if err := json.Unmarshal([]byte(run("diff", "inv", "1", "2", "--json")), &d); err != nil || d.From != 1 || d.To != 2 || len(d.Changes) != 1 {
		t.Errorf("catalog diff --json: %+v, %v", d, err)
	}
}

func TestDecideHint(t *testing.T) {
	tests := []struct {
		card authz.Card
		want string
	}{
		{authz.Card{Tool: "a", ToolScope: []string{"a"}, OtherTools: []string{"b"}}, "portcullis approve R (grants a) [--tools a,b | --all]   |   portcullis approve R --once (this call only)   |   portcullis deny R"},
		{authz.Card{Tool: "a", ToolScope: []string{"a", "b"}}, "portcullis approve R (grants a, b)   |   portcullis approve R --once (this call only)   |   portcullis deny R"},
		{authz.Card{Tool: "a", ToolScope: []string{"a"}, OtherTools: []string{"b"}, Stale: true}, "portcullis approve R (grants a) [--tools a,b | --all]   |   portcullis deny R"},
		{authz.Card{Identity: "sha256:x", CredentialScope: []string{"tok"}}, "portcullis approve R   |   portcullis approve R --once (this launch only)   |   portcullis deny R"},
		{authz.Card{Tool: "a", ToolScope: []string{"a"}, AskEveryUse: true}, "portcullis approve R (this call only: a credential asks on every use)   |   portcullis deny R"},
		{authz.Card{Identity: "sha256:x", AskEveryUse: true}, "portcullis approve R (this launch only: a credential asks on every use)   |   portcullis deny R"},
	}
	for _, tt := range tests {
		if got := decideHint(authz.Request{ID: "R", Card: tt.card, Deadline: time.Now()}); got != tt.want {
			t.Errorf("decideHint(%+v):\n got %q\nwant %q", tt.card, got, tt.want)
		}
	}
}

func TestRestartApprovals(t *testing.T) {
	e := newCredsEnv(t)
	if err := e.servers("add", "inv", "--", "/bin/true"); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(t)
	if got := e.a.restartApprovals(cfg, "inv"); !strings.Contains(got, "tools with policy approve (the default) ask for approval again") {
		t.Errorf("without a catalog: %q", got)
	}
	e.storeCatalog(t, "inv", "lookup", "adjust")
	if got := e.a.restartApprovals(cfg, "inv"); !strings.Contains(got, "lookup, adjust (policy approve) ask for approval again") {
		t.Errorf("with approve tools: %q", got)
	}
	for _, tool := range []string{"lookup", "adjust"} {
		if err := e.servers("policy", "inv", tool, "allow"); err != nil {
			t.Fatal(err)
		}
	}
	got := e.a.restartApprovals(e.config(t), "inv")
	if diff := cmp.Diff("Every tool of its latest catalog revision has policy allow or deny, so calls need no new approval.", got); diff != "" {
		t.Errorf("every tool allowed (-want +got):\n%s", diff)
	}
}

// TestInstallWritesPortcullisHome: under a custom PORTCULLIS_HOME, install
// writes it into each rewritten entry's env and says so.
func TestInstallWritesPortcullisHome(t *testing.T) {
	e := newCredsEnv(t)
	home, pc := t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("PORTCULLIS_HOME", pc)
	old := installSecretStore
	installSecretStore = func() (install.SecretStore, error) { return nil, nil }
	t.Cleanup(func() { installSecretStore = old })
	agentFile := filepath.Join(home, ".cursor", "mcp.json")
	if err := os.MkdirAll(filepath.Dir(agentFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agentFile, []byte(`{"mcpServers":{"time":{"command":"uvx","args":["mcp-server-time"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.a.runInstall(context.Background(), []string{"cursor"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.stdout.String(), "PORTCULLIS_HOME="+pc) {
		t.Errorf("install output does not mention PORTCULLIS_HOME:\n%s", e.stdout.String())
	}
	var doc struct {
		MCPServers map[string]struct {
			Command string
			Args    []string
			Env     map[string]string
		}
	}
	b, err := os.ReadFile(agentFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.MCPServers["time"]; !slices.Equal(got.Args, []string{"connect", "time"}) || got.Env["PORTCULLIS_HOME"] != pc {
		t.Errorf("rewritten entry %+v, want connect time with PORTCULLIS_HOME=%s", got, pc)
	}
}

func TestInstallMissingUserFileMentionsProjectScope(t *testing.T) {
	e := newCredsEnv(t)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", "")
	err := e.a.runInstall(context.Background(), []string{"vscode"})
	if err == nil || !strings.Contains(err.Error(), "--scope project") || !strings.Contains(err.Error(), filepath.Join(".vscode", "mcp.json")) {
		t.Errorf("install vscode without a user file: %v", err)
	}
}

// TestServersRequestFlags: servers add and edit set the policies of a
// server's requests to the agent (--sampling, --elicitation, --roots),
// edit says what changed and keeps the kinds not named, a bad policy is a
// usage error naming the flag, and with no daemon running a widening
// written to the file is said to be held until confirmed.
func TestServersRequestFlags(t *testing.T) {
	e := newCredsEnv(t)
	if err := e.servers("add", "asker", "--sampling", "deny", "--roots", "approve", "--", "/bin/true"); err != nil {
		t.Fatal(err)
	}
	want := map[string]config.Policy{config.RequestSampling: config.PolicyDeny, config.RequestRoots: config.PolicyApprove}
	if diff := cmp.Diff(want, e.config(t).Servers["asker"].ServerRequests); diff != "" {
		t.Errorf("serverRequests after add (-want +got):\n%s", diff)
	}
	err := e.servers("add", "bad", "--elicitation", "ask", "--", "/bin/true")
	if !isUsage(err) || !strings.Contains(err.Error(), `--elicitation "ask": want allow, approve or deny`) {
		t.Errorf("a bad policy: %v", err)
	}
	if _, ok := e.config(t).Servers["bad"]; ok {
		t.Error("a server with a bad policy was added")
	}

	e.stdout.Reset()
	e.stderr.Reset()
	if err := e.servers("edit", "asker", "--sampling", "allow"); err != nil {
		t.Fatal(err)
	}
	want[config.RequestSampling] = config.PolicyAllow
	if diff := cmp.Diff(want, e.config(t).Servers["asker"].ServerRequests); diff != "" {
		t.Errorf("serverRequests after edit (-want +got):\n%s", diff)
	}
	if out := e.stdout.String(); !strings.Contains(out, "sampling requests: deny → allow") || strings.Contains(out, "roots requests") {
		t.Errorf("servers edit says:\n%s", out)
	}
	if msg := e.stderr.String(); !strings.Contains(msg, "asker: sampling requests to the agent deny → allow") || !strings.Contains(msg, "portcullis changes confirm") {
		t.Errorf("the widening written without a daemon is not said to be held: %q", msg)
	}
	if err := e.servers("edit", "asker", "--roots", "sometimes"); !isUsage(err) || !strings.Contains(err.Error(), "--roots") {
		t.Errorf("edit with a bad policy: %v", err)
	}
}

// fixedAuth is an Authenticator whose availability the test sets.
type fixedAuth struct{ avail error }

func (f fixedAuth) Mechanism() string { return "polkit" }
func (f fixedAuth) Available() error  { return f.avail }
func (f fixedAuth) Authenticate(context.Context, daemon.AuthSubject, string) error {
	return daemon.ErrAuthFailed
}

// TestInstallAndDoctorSayApprovalsAreNotOSAuthenticated: with no daemon
// running and the polkit action not installed, `install` ends with a note
// and `doctor` lists a problem, each saying approvals are not
// OS-authenticated, why and the command that installs the action; where
// polkit can authenticate, install adds nothing and doctor says so.
func TestInstallAndDoctorSayApprovalsAreNotOSAuthenticated(t *testing.T) {
	const fix = "install it with: sudo install -m 0644 /p/share/polkit-1/actions/dev.portcullis.approve.policy /usr/share/polkit-1/actions/"
	for _, tc := range []struct {
		name  string
		avail error
		want  []string // in install's output; nil: no note
	}{
		{"action not installed", &daemon.UnavailableError{Reason: daemon.AuthReasonNoAction, Text: "polkit does not know the action dev.portcullis.approve: " + fix},
			[]string{"note: Approval authentication: off (the default), NOT OS-authenticated: polkit's action dev.portcullis.approve is not installed", "Approvals are not OS-authenticated", fix}},
		{"available", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCredsEnv(t)
			home := t.TempDir()
			t.Setenv("HOME", home)
			t.Setenv("XDG_CONFIG_HOME", "")
			old, oldAuth := installSecretStore, localAuthenticator
			installSecretStore = func() (install.SecretStore, error) { return nil, nil }
			localAuthenticator = func() daemon.Authenticator { return fixedAuth{tc.avail} }
			t.Cleanup(func() { installSecretStore, localAuthenticator = old, oldAuth })
			agentFile := filepath.Join(home, ".cursor", "mcp.json")
			if err := os.MkdirAll(filepath.Dir(agentFile), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(agentFile, []byte(`{"mcpServers":{"time":{"command":"uvx","args":["mcp-server-time"]}}}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := e.a.runInstall(context.Background(), []string{"cursor"}); err != nil {
				t.Fatal(err)
			}
			out := e.stdout.String()
			if tc.want == nil && strings.Contains(out, "OS-authenticated") {
				t.Errorf("install says something of OS authentication where polkit can authenticate:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("install output lacks %q:\n%s", w, out)
				}
			}
			r := e.a.doctor()
			problem := slices.ContainsFunc(r.Problems, func(p string) bool {
				return strings.HasPrefix(p, "approvals are not OS-authenticated: polkit does not know the action") && strings.Contains(p, fix)
			})
			if problem != (tc.avail != nil) || r.Authentication.OSAuthenticated != (tc.avail == nil) {
				t.Errorf("doctor: problems %q, authentication %+v", r.Problems, r.Authentication)
			}
		})
	}
}

// TestEditWithoutDaemonSaysOneThing: with no daemon running, `servers
// policy … allow` writes the file and says that nothing of it is in force
// until a daemon starts (not "in force at once"), and the note says that a
// starting daemon holds the widening until the person confirms it; the
// change the daemon then holds is called written while no daemon ran, not
// "made outside Portcullis" (a portcullis command wrote it).
func TestEditWithoutDaemonSaysOneThing(t *testing.T) {
	e := newCredsEnv(t)
	if err := e.servers("add", "inv", "--", "/bin/true"); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("policy", "inv", "lookup", "allow"); err != nil {
		t.Fatal(err)
	}
	out, note := e.stdout.String(), e.stderr.String()
	if strings.Contains(out, "in force at once") || !strings.Contains(out, "no daemon is running, so nothing is in force until one starts") {
		t.Errorf("stdout %q: want written, not in force until a daemon starts", out)
	}
	if !strings.Contains(note, "nothing of it is in force yet") || !strings.Contains(note, "when it starts it holds that until you confirm it") {
		t.Errorf("stderr %q: want the note that a starting daemon holds the widening", note)
	}
	var b strings.Builder
	writePending(&b, &daemon.PendingChange{ID: "chg-1", File: e.a.Dirs.ConfigFile(), AtStart: true,
		Held: []config.Widening{{Text: "tool lookup of inv: allow"}}})
	if s := b.String(); strings.Contains(s, "outside Portcullis") || !strings.Contains(s, "written while no daemon ran") {
		t.Errorf("a change found at start reads:\n%s", s)
	}
}

// TestJSONListsAreNeverNull: a --json list with nothing in it is [], a map
// {} (changes --json, creds list --json, servers list --json…).
func TestJSONListsAreNeverNull(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{[]*daemon.PendingChange(nil), "[]\n"},
		{map[string]config.Server(nil), "{}\n"},
		{[]string{"a"}, "[\n  \"a\"\n]\n"},
		{struct{}{}, "{}\n"},
	} {
		var b strings.Builder
		if err := writeJSON(&b, tc.v); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("writeJSON(%#v) = %q, want %q", tc.v, b.String(), tc.want)
		}
	}
}

// TestVerifyTextAgrees: one event in one file is "1 event in 1 file".
func TestVerifyTextAgrees(t *testing.T) {
	var b strings.Builder
	writeVerify(&b, verifyResult{Dir: "/d", OK: true, Events: 1, Files: 1})
	if s := b.String(); !strings.Contains(s, "Audit log OK: 1 event in 1 file verified") {
		t.Errorf("verify says %q", s)
	}
	b.Reset()
	writeVerify(&b, verifyResult{Dir: "/d", OK: true, Events: 3, Files: 2})
	if s := b.String(); !strings.Contains(s, "Audit log OK: 3 events in 2 files verified") {
		t.Errorf("verify says %q", s)
	}
}

// TestDoctorListsWithheldSorted: what a daemon started from here would not
// get is listed in order, as a person looks a name up.
func TestDoctorListsWithheldSorted(t *testing.T) {
	e := newCredsEnv(t)
	t.Setenv("ZZ_PORTCULLIS_DOCTOR", "1")
	t.Setenv("AA_PORTCULLIS_DOCTOR", "1")
	t.Setenv("MM_PORTCULLIS_DOCTOR", "1")
	r := e.a.doctor()
	if !slices.Contains(r.Withheld, "ZZ_PORTCULLIS_DOCTOR") || !slices.Contains(r.Withheld, "AA_PORTCULLIS_DOCTOR") {
		t.Fatalf("withheld %q lacks the test's variables", r.Withheld)
	}
	if !slices.IsSorted(r.Withheld) {
		t.Errorf("withheld is not sorted: %q", r.Withheld)
	}
}

// TestStandingTexts: approvals --standing lists each standing approval with
// the step that ends it; status counts them; a file refused at start is
// said, with what follows (none in force, every run asked).
func TestStandingTexts(t *testing.T) {
	rep := daemon.StatusReport{Standing: []authz.StandingApproval{{ID: "apr_1", ServerLabel: "inv", AgentExe: "/usr/bin/claude",
		Code: "sha256:0123456789abcdef", Tools: []string{"lookup", "adjust"}, Granted: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}}}
	var b strings.Builder
	writeStanding(&b, rep, true)
	for _, w := range []string{"apr_1  inv: lookup, adjust for every run of /usr/bin/claude while its code is", "portcullis revoke ID"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("approvals --standing lacks %q:\n%s", w, b.String())
		}
	}
	b.Reset()
	writeStanding(&b, rep, false)
	if s := b.String(); s != "Standing approvals (approve --code): 1 approval in force; see portcullis approvals --standing\n" {
		t.Errorf("status says %q", s)
	}
	b.Reset()
	writeStanding(&b, daemon.StatusReport{StandingError: "the standing approvals' file is not as the daemon wrote it: x"}, true)
	if s := b.String(); !strings.Contains(s, "none in force") || !strings.Contains(s, "not as the daemon wrote it") || strings.Contains(s, "No standing approvals") {
		t.Errorf("a refused file reads %q", s)
	}
	if err := newCredsEnv(t).a.runRevoke(nil); !isUsage(err) {
		t.Errorf("revoke without an ID: %v", err)
	}
}
