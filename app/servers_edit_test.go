package app

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestServersEditKeepsTheRest: servers edit changes what its flags name and
// keeps the tool policies, credential scopes and the other fields.
func TestServersEditKeepsTheRest(t *testing.T) {
	e := newCredsEnv(t)
	dir := t.TempDir()
	other := t.TempDir()
	if err := e.run("s3cr3t", "set", "inv-token", "--env", "INV_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("add", "inv", "--cwd", dir, "--env", "LOG=info", "--env", "OLD=1", "--watch", "dist", "--cred", "inv-token", "--", "/bin/true", "-x"); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("policy", "inv", "read", "allow"); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("policy", "inv", "drop", "deny"); err != nil {
		t.Fatal(err)
	}
	before := e.config(t).Servers["inv"]

	if err := e.servers("edit", "inv", "--cwd", other, "--env", "LOG=debug", "--unset-env", "OLD", "--env", "NEW=2"); err != nil {
		t.Fatalf("servers edit: %v (stderr %s)", err, e.stderr.String())
	}
	got := e.config(t).Servers["inv"]
	want := before
	want.Cwd = other
	want.Env = map[string]string{"LOG": "debug", "NEW": "2"}
	if got.Command != want.Command || !slices.Equal(got.Args, want.Args) || got.Cwd != want.Cwd ||
		!maps.Equal(got.Env, want.Env) || !slices.Equal(got.Watch, want.Watch) || !slices.Equal(got.Credentials, want.Credentials) ||
		!maps.Equal(got.Tools, want.Tools) || got.Restart != want.Restart {
		t.Errorf("after edit:\n got %+v\nwant %+v", got, want)
	}
	out := e.stdout.String()
	for _, w := range []string{"Changed inv:", "cwd: " + dir + " → " + other, "env: ~LOG -OLD +NEW", "Kept: 2 tool policies, credential scopes inv-token."} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "debug") {
		t.Errorf("the output shows an env value (it may be a secret):\n%s", out)
	}

	// A new command after --, the watch list replaced, then cleared.
	if err := e.servers("edit", "inv", "--watch", "lib", "--watch", "bin", "--restart", "manual", "--", "/bin/echo", "hi"); err != nil {
		t.Fatal(err)
	}
	got = e.config(t).Servers["inv"]
	if got.Command != "/bin/echo" || !slices.Equal(got.Args, []string{"hi"}) || !slices.Equal(got.Watch, []string{"lib", "bin"}) || got.Restart != "manual" || len(got.Tools) != 2 {
		t.Errorf("after the second edit: %+v", got)
	}
	if err := e.servers("edit", "inv", "--no-watch", "--no-cwd"); err != nil {
		t.Fatal(err)
	}
	if got = e.config(t).Servers["inv"]; got.Watch != nil || got.Cwd != "" || len(got.Credentials) != 1 {
		t.Errorf("after --no-watch --no-cwd: %+v", got)
	}

	// The same values again change nothing and say so.
	if err := e.servers("edit", "inv", "--restart", "manual"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.stdout.String(), "nothing changed") {
		t.Errorf("an edit to the same value: %q", e.stdout.String())
	}
}

// TestServersEditRefusals: mistakes change nothing and say what to do.
func TestServersEditRefusals(t *testing.T) {
	e := newCredsEnv(t)
	if err := e.servers("add", "inv", "--env", "A=1", "--", "/bin/true"); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(e.a.Dirs.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"edit", "inv"}, true, "nothing to change"},
		{[]string{"edit"}, true, "needs a label first"},
		{[]string{"edit", "nope", "--env", "B=2"}, false, `no server labelled "nope"`},
		{[]string{"edit", "inv", "--unset-env", "B"}, false, "has no B to remove (it has: A)"},
		{[]string{"edit", "inv", "--cwd", "/nonexistent-dir"}, false, "is not an existing directory"},
		{[]string{"edit", "inv", "--cwd", "/tmp", "--no-cwd"}, true, "contradict"},
		{[]string{"edit", "inv", "--watch", "x", "--no-watch"}, true, "contradict"},
		{[]string{"edit", "inv", "--env", "novalue"}, true, "want NAME=VALUE"},
		{[]string{"edit", "inv", "--restart", "sometimes"}, false, "restart"},
	} {
		err := e.servers(tc.args...)
		var ue *usageError
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &ue) != tc.usage {
			t.Errorf("servers %v: %v (usage error: %v), want one containing %q (usage error: %v)", tc.args, err, errors.As(err, &ue), tc.want, tc.usage)
		}
		if after, _ := os.ReadFile(e.a.Dirs.ConfigFile()); string(after) != string(before) {
			t.Fatalf("servers %v changed the configuration file", tc.args)
		}
	}
}

// TestServersAddRefusesUnfindableEntry: a runtime with a relative script
// and no --cwd would look for it in the daemon's working directory: refused
// (exit 2) with the fix, unless --force; with --cwd or an absolute path it
// is saved. servers edit applies the same check.
func TestServersAddRefusesUnfindableEntry(t *testing.T) {
	e := helpEnv(t)
	work := t.TempDir()
	chdir(t, work)
	if err := os.WriteFile(filepath.Join(work, "server.mjs"), []byte("// server\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code := e.exit(t, "servers", "add", "mysrv", "--watch", "lib", "--", "node", "server.mjs")
	if code != 2 || !strings.Contains(e.stderr.String(), "add --cwd "+work+" (where server.mjs is)") || !strings.Contains(e.stderr.String(), "--force") {
		t.Errorf("servers add with a relative script: exit %d, stderr %q; want 2 and the --cwd fix", code, e.stderr.String())
	}
	if _, err := os.Stat(e.a.Dirs.ConfigFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused server was saved (%v)", err)
	}
	code = e.exit(t, "servers", "add", "elsewhere", "--", "python3", "-u", "missing.py")
	if code != 2 || !strings.Contains(e.stderr.String(), "add --cwd DIR naming the directory that holds missing.py") {
		t.Errorf("servers add with a missing relative script: exit %d, stderr %q", code, e.stderr.String())
	}
	if code := e.exit(t, "servers", "add", "forced", "--force", "--", "node", "server.mjs"); code != 0 {
		t.Errorf("servers add --force: exit %d, stderr %q", code, e.stderr.String())
	}
	if code := e.exit(t, "servers", "add", "mysrv", "--cwd", work, "--", "node", "server.mjs"); code != 0 {
		t.Errorf("servers add --cwd: exit %d, stderr %q", code, e.stderr.String())
	}
	if code := e.exit(t, "servers", "add", "abs", "--", "node", filepath.Join(work, "server.mjs")); code != 0 {
		t.Errorf("servers add with an absolute script: exit %d, stderr %q", code, e.stderr.String())
	}
	cfg := e.config(t)
	if s := cfg.Servers["mysrv"]; s.Cwd != work {
		t.Errorf("mysrv: %+v", s)
	}
	if code := e.exit(t, "servers", "edit", "mysrv", "--no-cwd"); code != 2 || !strings.Contains(e.stderr.String(), "will not be found") {
		t.Errorf("servers edit --no-cwd of a relative script: exit %d, stderr %q", code, e.stderr.String())
	}
	if s := e.config(t).Servers["mysrv"]; s.Cwd != work {
		t.Errorf("the refused edit changed mysrv: %+v", s)
	}
}

// TestServersEditSandboxAndBus: servers edit sets the sandbox level and
// the session bus, and says so.
func TestServersEditSandboxAndBus(t *testing.T) {
	e := newCredsEnv(t)
	if err := e.servers("add", "inv", "--", "/bin/true"); err != nil {
		t.Fatal(err)
	}
	if err := e.servers("edit", "inv", "--sandbox", "strict", "--session-bus"); err != nil {
		t.Fatal(err)
	}
	s := e.config(t).Servers["inv"]
	if s.SandboxLevel() != "strict" || !s.SessionBus {
		t.Errorf("after edit: %+v", s)
	}
	for _, w := range []string{"sandbox: standard → strict", "session bus: false → true"} {
		if !strings.Contains(e.stdout.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, e.stdout.String())
		}
	}
	if err := e.servers("edit", "inv", "--no-session-bus"); err != nil {
		t.Fatal(err)
	}
	if e.config(t).Servers["inv"].SessionBus {
		t.Errorf("--no-session-bus left the bus")
	}
	if err := e.servers("edit", "inv", "--sandbox", "sometimes"); err == nil {
		t.Errorf("an unknown sandbox level was accepted")
	}
}

// TestServersIgnore: servers add --ignore stores the server's own ignore
// patterns, servers edit --ignore replaces them and --no-ignore removes
// them; the help of servers add says how to add one.
func TestServersIgnore(t *testing.T) {
	e := newCredsEnv(t)
	dir := t.TempDir()
	if err := e.servers("add", "ledger", "--cwd", dir, "--watch", ".", "--ignore", "data/**", "--ignore", "*.sqlite", "--", "/bin/true"); err != nil {
		t.Fatalf("servers add: %v (stderr %s)", err, e.stderr.String())
	}
	if got := e.config(t).Servers["ledger"].Ignore; !slices.Equal(got, []string{"data/**", "*.sqlite"}) {
		t.Errorf("after add: ignore %v", got)
	}
	if err := e.servers("edit", "ledger", "--ignore", "state/"); err != nil {
		t.Fatalf("servers edit: %v (stderr %s)", err, e.stderr.String())
	}
	if got := e.config(t).Servers["ledger"].Ignore; !slices.Equal(got, []string{"state/"}) {
		t.Errorf("after edit --ignore: ignore %v", got)
	}
	if !strings.Contains(e.stdout.String(), "ignore: data/**, *.sqlite → state/") {
		t.Errorf("servers edit does not say what changed:\n%s", e.stdout.String())
	}
	if err := e.servers("edit", "ledger", "--no-ignore"); err != nil {
		t.Fatal(err)
	}
	if got := e.config(t).Servers["ledger"].Ignore; got != nil {
		t.Errorf("after --no-ignore: ignore %v", got)
	}
	if err := e.servers("edit", "ledger", "--ignore", "x", "--no-ignore"); err == nil {
		t.Error("--ignore with --no-ignore was accepted")
	}
	if err := e.servers("edit", "ledger", "--ignore", "!server.py"); err == nil {
		t.Error("a negation was accepted as an ignore pattern")
	}
	if code := e.exit(t, "servers", "add", "--help"); code != 0 {
		t.Fatalf("servers add --help: exit %d", code)
	}
	help := e.stdout.String()
	help = strings.Join(strings.Fields(help), " ")
	for _, w := range []string{"[--ignore PATTERN]", "PATTERN files the server writes at run time in its --watch directories", "Data is not code", ".gitignore"} {
		if !strings.Contains(help, w) {
			t.Errorf("servers add --help lacks %q:\n%s", w, help)
		}
	}
}

// TestServersWrite: servers add proposes the existing directories among
// the server's arguments as its write paths and says so; --write names
// them instead; servers edit --write replaces them, --no-write removes
// them, and / is refused.
func TestServersWrite(t *testing.T) {
	e := newCredsEnv(t)
	root, other := t.TempDir(), t.TempDir()
	if err := e.servers("add", "files", "--force", "--", "/usr/bin/node", "server.js", root, "--flag", "--data="+other, "/nonexistent"); err != nil {
		t.Fatalf("servers add: %v (stderr %s)", err, e.stderr.String())
	}
	if got := e.config(t).Servers["files"].Write; !slices.Equal(got, []string{root, other}) {
		t.Errorf("after add: write %v, want the directories among the arguments", got)
	}
	if !strings.Contains(e.stdout.String(), "Write paths: "+root+", "+other) {
		t.Errorf("servers add does not show the write paths it proposes:\n%s", e.stdout.String())
	}
	if err := e.servers("add", "named", "--force", "--write", other, "--", "/usr/bin/node", "server.js", root); err != nil {
		t.Fatal(err)
	}
	if got := e.config(t).Servers["named"].Write; !slices.Equal(got, []string{other}) {
		t.Errorf("servers add --write: write %v", got)
	}
	if err := e.servers("edit", "files", "--force", "--write", other); err != nil {
		t.Fatal(err)
	}
	if got := e.config(t).Servers["files"].Write; !slices.Equal(got, []string{other}) {
		t.Errorf("after edit --write: write %v", got)
	}
	if !strings.Contains(e.stdout.String(), "write: "+root+", "+other+" → "+other) {
		t.Errorf("servers edit does not say what changed:\n%s", e.stdout.String())
	}
	if err := e.servers("edit", "files", "--force", "--no-write"); err != nil {
		t.Fatal(err)
	}
	if got := e.config(t).Servers["files"].Write; got != nil {
		t.Errorf("after --no-write: write %v", got)
	}
	if err := e.servers("edit", "files", "--force", "--write", "/"); err == nil {
		t.Error("--write / was accepted")
	}
}
