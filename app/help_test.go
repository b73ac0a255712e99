package app

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/install"
)

// exit runs args through the CLI's entry point (Run and the printing of its
// error, as Main does) and returns the exit code.
func (e *credsEnv) exit(t *testing.T, args ...string) int {
	t.Helper()
	e.stdout.Reset()
	e.stderr.Reset()
	// A command that ran instead of printing its usage must not run long.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.a.main(ctx, args)
}

// helpEnv is a credsEnv where a command that runs by mistake instead of
// printing its usage changes nothing outside the test.
func helpEnv(t *testing.T) *credsEnv {
	e := newCredsEnv(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("CLAUDE_CONFIG_DIR", "")
	t.Setenv("PORTCULLIS_HOME", t.TempDir())
	chdir(t, home)
	old := installSecretStore
	installSecretStore = func() (install.SecretStore, error) { return nil, nil }
	t.Cleanup(func() { installSecretStore = old })
	return e
}

// helpCases are every command and subcommand of the usage text, with the
// lines of that text their help must show. args may hold positional words
// and flags; the help flag is added at the end.
var helpCases = []struct {
	args []string
	want []string
}{
	{[]string{"daemon"}, []string{"portcullis daemon "}},
	{[]string{"connect"}, []string{"portcullis connect LABEL"}},
	{[]string{"connect", "inv"}, []string{"portcullis connect LABEL"}},
	{[]string{"servers"}, []string{"portcullis servers list|show|add|edit|remove|policy|cred"}},
	{[]string{"servers", "list"}, []string{"portcullis servers list|"}},
	{[]string{"servers", "show"}, []string{"portcullis servers list|show|"}},
	{[]string{"servers", "show", "inv"}, []string{"portcullis servers list|show|"}},
	{[]string{"servers", "add"}, []string{"add LABEL [--cwd D]", "[--restart on-change|manual] [--force] [--session-bus] [--sandbox off|standard|strict]\n", "[--sampling P] [--elicitation P] [--roots P] -- CMD ARGS…"}},
	{[]string{"servers", "edit"}, []string{"edit LABEL [--cwd D|--no-cwd]", "[--watch P|--no-watch]", "[--sampling P] [--elicitation P] [--roots P] [-- CMD ARGS…]"}},
	{[]string{"servers", "edit", "inv", "--cwd", "/nonexistent"}, []string{"edit LABEL [--cwd D|--no-cwd]"}},
	{[]string{"servers", "add", "inv", "--cwd", "/nonexistent"}, []string{"add LABEL [--cwd D]"}},
	{[]string{"servers", "remove"}, []string{"|remove|"}},
	{[]string{"servers", "remove", "inv"}, []string{"|remove|"}},
	{[]string{"servers", "policy"}, []string{"policy LABEL TOOL allow|approve|deny"}},
	{[]string{"servers", "policy", "inv", "tool", "deny"}, []string{"policy LABEL TOOL allow|approve|deny"}},
	{[]string{"servers", "cred"}, []string{"cred LABEL add|remove SCOPE"}},
	{[]string{"servers", "cred", "inv", "add", "api"}, []string{"cred LABEL add|remove SCOPE"}},
	{[]string{"status"}, []string{"portcullis status [--json]"}},
	{[]string{"status", "--json"}, []string{"portcullis status [--json]"}},
	{[]string{"doctor"}, []string{"portcullis doctor [--json]"}},
	{[]string{"creds"}, []string{"portcullis creds set|list|remove"}},
	{[]string{"creds", "set"}, []string{"set SCOPE [--env VAR|--meta] [--ask-every-use]"}},
	{[]string{"creds", "set", "api", "--env", "API_KEY"}, []string{"set SCOPE [--env VAR|--meta]"}},
	{[]string{"creds", "list"}, []string{"portcullis creds set|list|remove"}},
	{[]string{"creds", "remove"}, []string{"portcullis creds set|list|remove"}},
	{[]string{"creds", "remove", "api"}, []string{"portcullis creds set|list|remove"}},
	{[]string{"stop"}, []string{"portcullis stop "}},
	{[]string{"approvals"}, []string{"portcullis approvals [--diff] [--json]"}},
	{[]string{"approve"}, []string{"portcullis approve ID [--once]"}},
	{[]string{"approve", "ID", "--tools", "a"}, []string{"portcullis approve ID [--once]"}},
	{[]string{"deny"}, []string{"portcullis deny ID"}},
	{[]string{"deny", "ID"}, []string{"portcullis deny ID"}},
	{[]string{"revoke"}, []string{"portcullis revoke ID"}},
	{[]string{"revoke", "ID"}, []string{"portcullis revoke ID"}},
	{[]string{"changes"}, []string{"portcullis changes [--json] | confirm ID | reject ID"}},
	{[]string{"changes", "confirm", "chg-1"}, []string{"portcullis changes [--json] | confirm ID | reject ID"}},
	{[]string{"restart"}, []string{"portcullis restart LABEL"}},
	{[]string{"restart", "inv"}, []string{"portcullis restart LABEL"}},
	{[]string{"catalog"}, []string{"portcullis catalog show LABEL [REV] | diff LABEL [FROM TO]"}},
	{[]string{"catalog", "show"}, []string{"portcullis catalog show LABEL"}},
	{[]string{"catalog", "show", "inv", "1"}, []string{"portcullis catalog show LABEL"}},
	{[]string{"catalog", "diff"}, []string{"| diff LABEL [FROM TO]"}},
	{[]string{"catalog", "diff", "inv", "--json"}, []string{"| diff LABEL [FROM TO]"}},
	{[]string{"audit"}, []string{"portcullis audit tail", "the hash-chained audit log"}},
	{[]string{"audit", "tail"}, []string{"portcullis audit tail [--json] [-n N] [-f]"}},
	{[]string{"audit", "tail", "-f"}, []string{"portcullis audit tail [--json] [-n N] [-f]"}},
	{[]string{"audit", "verify"}, []string{"| verify [--key K] [--dir D] [--json]"}},
	{[]string{"audit", "setup-keys"}, []string{"| setup-keys [--force]"}},
	{[]string{"audit", "acknowledge"}, []string{"| acknowledge | rotate-key |"}},
	{[]string{"audit", "rotate-key"}, []string{"| acknowledge | rotate-key |"}},
	{[]string{"audit", "sessions"}, []string{"sessions|activity [-n N] [--server L] [--run R]"}},
	{[]string{"audit", "activity"}, []string{"sessions|activity [-n N] [--server L] [--run R]"}},
	{[]string{"install"}, []string{"portcullis install claude-desktop|claude-code|cursor|vscode|gemini-cli|codex", "route that agent's stdio servers"}},
	{[]string{"install", "cursor"}, []string{"portcullis install claude-desktop|"}},
	{[]string{"uninstall"}, []string{"portcullis uninstall AGENT [--restore-secrets]"}},
	{[]string{"uninstall", "cursor", "--restore-secrets"}, []string{"portcullis uninstall AGENT"}},
	{[]string{"import"}, []string{"portcullis import AGENT"}},
	{[]string{"import", "cursor"}, []string{"portcullis import AGENT"}},
	{[]string{"version"}, []string{"portcullis version"}},
}

// TestHelpEveryCommand: `CMD [SUB…] --help` and `-h` (at the end or right
// after the command), and `help CMD [SUB…]`, print that command's lines of
// the usage text on stdout, nothing on stderr, exit 0, and run nothing.
func TestHelpEveryCommand(t *testing.T) {
	e := helpEnv(t)
	for _, tc := range helpCases {
		var runs [][]string
		for _, flag := range []string{"--help", "-h"} {
			runs = append(runs,
				append(slices.Clone(tc.args), flag),
				append([]string{tc.args[0], flag}, tc.args[1:]...))
		}
		runs = append(runs, append([]string{"help"}, tc.args...))
		for _, args := range runs {
			code := e.exit(t, args...)
			out := e.stdout.String()
			if code != 0 || e.stderr.Len() != 0 {
				t.Errorf("portcullis %s: exit %d, stderr %q, want exit 0 and nothing on stderr", strings.Join(args, " "), code, e.stderr.String())
			}
			if !strings.HasPrefix(out, "Usage:\n") || out == usage {
				t.Errorf("portcullis %s: stdout is not the command's usage:\n%s", strings.Join(args, " "), out)
			}
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("portcullis %s: stdout lacks %q:\n%s", strings.Join(args, " "), want, out)
				}
			}
			// The usage lines come from the usage text; then what the
			// command does, each of its flags, examples, exit codes.
			usageLines, _, _ := strings.Cut(strings.TrimPrefix(out, "Usage:\n"), "\n\n")
			for _, line := range strings.Split(usageLines, "\n") {
				if !strings.Contains(usage, line+"\n") {
					t.Errorf("portcullis %s: usage line %q is not in the usage text", strings.Join(args, " "), line)
				}
			}
			path := commandPath(args)
			if args[0] == "help" {
				path = commandPath(args[1:])
			}
			if mk, ok := commandFlags[path]; ok {
				mk().VisitAll(func(f *flag.Flag) {
					_, what := flag.UnquoteUsage(f)
					if !strings.Contains(out, "-"+f.Name) || strings.TrimSpace(what) == "" || !strings.Contains(out, strings.Fields(what)[0]) {
						t.Errorf("portcullis %s: the help does not describe flag -%s:\n%s", strings.Join(args, " "), f.Name, out)
					}
				})
			}
			for _, want := range []string{"\nExamples:\n  ", "\nExit codes: 0 "} {
				if !strings.Contains(out, want) {
					t.Errorf("portcullis %s: the help lacks %q:\n%s", strings.Join(args, " "), want, out)
				}
			}
		}
	}
	if _, err := os.Stat(e.a.Dirs.ConfigFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a help request wrote the configuration file (%v)", err)
	}
	if e.store.Len() != 0 {
		t.Errorf("a help request stored a secret")
	}
}

// TestEveryFlagDescribed: every command's flags say what they mean, every
// command with flags has a doc, and no command defines its flags outside
// commandFlags (where help finds them).
func TestEveryFlagDescribed(t *testing.T) {
	for path, mk := range commandFlags {
		if d := docs[path]; d.what == "" || len(d.examples) == 0 {
			t.Errorf("%s has flags but no doc with examples", path)
		}
		mk().VisitAll(func(f *flag.Flag) {
			if _, what := flag.UnquoteUsage(f); len(strings.Fields(what)) < 3 {
				t.Errorf("%s: flag -%s is not described (%q)", path, f.Name, f.Usage)
			}
		})
	}
	for path, d := range docs {
		if len(d.examples) == 0 {
			t.Errorf("%s: no example", path)
		}
		cmd, _, _ := strings.Cut(path, " ")
		if !slices.Contains(commands, cmd) {
			t.Errorf("docs has %q, not a command", path)
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f == "flags.go" || strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "newFlags(") || strings.Contains(string(b), "flag.NewFlagSet(") {
			t.Errorf("%s defines a flag set; define it in flags.go's commandFlags so that its help lists its flags", f)
		}
		if m := flagDefinition.Find(b); m != nil {
			t.Errorf("%s defines a flag (%s); define it in flags.go so that the command's help lists it", f, m)
		}
	}
}

// flagDefinition matches the definition of a flag on a FlagSet.
var flagDefinition = regexp.MustCompile(`\.(Bool|String|Int|Int64|Uint|Uint64|Float64|Duration|Var|Func|BoolFunc|TextVar|BoolVar|StringVar|IntVar|DurationVar)\("[a-z]`)

// TestHelpTopics: portcullis help lists the topics, and each prints.
func TestHelpTopics(t *testing.T) {
	e := helpEnv(t)
	for name := range topics {
		if !strings.Contains(usage, name) {
			t.Errorf("the usage text does not list topic %s", name)
		}
		if code := e.exit(t, "help", name); code != 0 || !strings.Contains(e.stdout.String(), topics[name]) {
			t.Errorf("portcullis help %s: exit %d, stdout %q", name, code, e.stdout.String())
		}
	}
}

// TestHelpCasesCoverUsage: every `portcullis CMD` of the usage text is in
// helpCases and in Run's commands, so a new command gets a help test.
func TestHelpCasesCoverUsage(t *testing.T) {
	tested := map[string]bool{}
	for _, tc := range helpCases {
		tested[tc.args[0]] = true
	}
	// "portcullis CMD", not the line of the bare "portcullis" (menu-bar app).
	for _, m := range regexp.MustCompile(`portcullis ([a-z][a-z-]*)`).FindAllStringSubmatch(usage, -1) {
		cmd := m[1]
		if cmd == "help" {
			continue // TestHelpWholeUsage and TestHelpTopics
		}
		if !tested[cmd] {
			t.Errorf("usage names portcullis %s, which helpCases lacks", cmd)
		}
		if !slices.Contains(commands, cmd) {
			t.Errorf("usage names portcullis %s, which commands lacks", cmd)
		}
	}
}

// TestHelpWholeUsage: portcullis help, -h, --help, help help still print
// the whole usage; unknown commands stay usage errors.
func TestHelpWholeUsage(t *testing.T) {
	e := helpEnv(t)
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "help"}, {"help", "--help"}} {
		if code := e.exit(t, args...); code != 0 || e.stdout.String() != usage || e.stderr.Len() != 0 {
			t.Errorf("portcullis %v: exit %d, stdout %q, stderr %q", args, code, e.stdout.String(), e.stderr.String())
		}
	}
	for _, args := range [][]string{{"frob", "--help"}, {"help", "frob"}} {
		if code := e.exit(t, args...); code != 2 || e.stdout.Len() != 0 || !strings.Contains(e.stderr.String(), `unknown command "frob"`) {
			t.Errorf("portcullis %v: exit %d, stdout %q, stderr %q", args, code, e.stdout.String(), e.stderr.String())
		}
	}
}

// TestHelpAfterDoubleDash: after -- in servers add, --help and -h are the
// server's arguments.
func TestHelpAfterDoubleDash(t *testing.T) {
	e := helpEnv(t)
	for label, flag := range map[string]string{"long": "--help", "short": "-h"} {
		if code := e.exit(t, "servers", "add", label, "--", "/bin/echo", flag); code != 0 || !strings.Contains(e.stdout.String(), "Added "+label+".") {
			t.Fatalf("servers add %s -- /bin/echo %s: exit %d, stdout %q, stderr %q", label, flag, code, e.stdout.String(), e.stderr.String())
		}
		if s := e.config(t).Servers[label]; s.Command != "/bin/echo" || !slices.Equal(s.Args, []string{flag}) {
			t.Errorf("stored %+v, want /bin/echo %s", s, flag)
		}
		if code := e.exit(t, "servers", "show", label); code != 0 || !strings.Contains(e.stdout.String(), `"`+flag+`"`) {
			t.Errorf("servers show %s: exit %d, stdout %q", label, code, e.stdout.String())
		}
	}
}

// TestParseFlagsHelp: a help request that reaches package flag is errHelp
// (Run prints the command's usage), never "flag: help requested".
func TestParseFlagsHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help=1"}} {
		fs := newFlags("x")
		fs.Bool("json", false, "")
		if err := parseFlags(fs, args); !errors.Is(err, errHelp) {
			t.Errorf("parseFlags(%v) = %v, want errHelp", args, err)
		}
	}
}

// TestNeedsNoDirs: help and version print without the data directory, so a
// bad PORTCULLIS_HOME does not hide the usage; everything else needs it.
func TestNeedsNoDirs(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"help"}, true},
		{[]string{"--help"}, true},
		{[]string{"version"}, true},
		{[]string{"status", "--help"}, true},
		{[]string{"servers", "add", "-h"}, true},
		{[]string{"servers", "add", "x", "--", "/bin/echo", "--help"}, false},
		{[]string{"status"}, false},
		{[]string{"frob", "--help"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := needsNoDirs(tt.args); got != tt.want {
			t.Errorf("needsNoDirs(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}

// TestServersAddNamesLaunchers: servers add says what a known watcher or
// launcher does to identity and how Portcullis handles it.
func TestServersAddNamesLaunchers(t *testing.T) {
	e := helpEnv(t)
	if code := e.exit(t, "servers", "add", "watched", "--", "/bin/sh", "-c", "nodemon server.js"); code != 0 {
		t.Fatalf("servers add: exit %d, stderr %q", code, e.stderr.String())
	}
	out := e.stdout.String()
	for _, want := range []string{"note: nodemon restarts its worker behind the same stdio pipe", "new epoch (cause observed)"} {
		if !strings.Contains(out, want) {
			t.Errorf("servers add output lacks %q:\n%s", want, out)
		}
	}
}
