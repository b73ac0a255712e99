package front

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFrontStaysSmall: the front's start-up is the initialization of what
// it links, so the top-level package (what agents run as `portcullis
// connect`) must not depend on Fyne, the JSON Schema validator, the
// Markdown renderer, the confusables table, the UI or the daemon's
// packages: those are the full program's (docs/DESIGN.md, "Processes"); nor
// on package regexp, whose patterns compile at start-up.
// For Linux and macOS, with and without the ci tag.
func TestFrontStaysSmall(t *testing.T) {
	banned := []string{
		"fyne.io/",
		"github.com/santhosh-tekuri/jsonschema",
		"github.com/yuin/goldmark",
		"github.com/mtibben/confusables",
		"github.com/portcullis/portcullis/app",
		"github.com/portcullis/portcullis/core/daemon",
		"github.com/portcullis/portcullis/core/gateway",
		"github.com/portcullis/portcullis/core/supervisor",
		// Patterns compiled at start-up (core/config checks names by hand).
		"regexp",
	}
	for _, env := range [][]string{{"GOOS=linux", "GOARCH=amd64"}, {"GOOS=darwin", "GOARCH=arm64"}} {
		for _, tags := range []string{"", "ci"} {
			cmd := exec.Command("go", "list", "-e", "-deps", "-tags", tags, "../..")
			cmd.Env = append(os.Environ(), append(env, "CGO_ENABLED=0")...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go list (%s, tags %q): %v\n%s", env, tags, err, out)
			}
			deps := strings.Fields(string(out))
			for _, d := range deps {
				if slices.ContainsFunc(banned, func(b string) bool { return d == b || strings.HasPrefix(d, strings.TrimSuffix(b, "/")+"/") }) ||
					d == "github.com/portcullis/portcullis/platform" { // platform/spawn is the front's
					t.Errorf("the front (%s, tags %q) depends on %s", env, tags, d)
				}
			}
			// What it must link to run the shim: the list is the real one.
			for _, want := range []string{"github.com/portcullis/portcullis/internal/connect", "github.com/portcullis/portcullis/core/shim"} {
				if !slices.Contains(deps, want) {
					t.Errorf("the front (%s, tags %q) does not depend on %s: %s", env, tags, want, out)
				}
			}
		}
	}
}

// buildFront builds the top-level package (the front) into a new
// directory and returns the executable's path.
func buildFront(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, Name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", exe, "../..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the front: %v\n%s", err, out)
	}
	return exe
}

// fakeApp is a full program that records its pid, arguments, one
// environment variable and a line of its stdin, one per line, into the file
// $FRONT_TEST_OUT, then exits with code 7.
const fakeApp = `#!/bin/sh
{
	echo "$$"
	for a in "$@"; do echo "arg:$a"; done
	echo "env:$FRONT_TEST_ENV"
	read -r line
	echo "stdin:$line"
} > "$FRONT_TEST_OUT"
exit 7
`

// TestFrontExecsFullProgram: for every command line but a well-formed
// `connect LABEL` (no command, another command, connect's help or a
// connect the full program refuses with its usage error) the front
// replaces itself with portcullis-app from the directory of the file it
// is (through a symbolic link too): the same pid, arguments, environment,
// stdin and exit code.
func TestFrontExecsFullProgram(t *testing.T) {
	exe := buildFront(t)
	if err := os.WriteFile(AppPath(exe), []byte(fakeApp), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), Name)
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		nil,
		{"status", "--json"},
		{"servers", "add", "x", "--", "node", "a b.js"},
		{"connect"},
		{"connect", "--help"},
		{"connect", "-x", "notes"},
		{"connect", "notes", "extra"},
		{"version"},
	} {
		out := filepath.Join(t.TempDir(), "out")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, link, args...)
		cmd.Env = append(os.Environ(), "FRONT_TEST_OUT="+out, "FRONT_TEST_ENV=kept")
		cmd.Stdin = strings.NewReader("from the caller\n")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Start()
		if err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		err = cmd.Wait()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 {
			t.Errorf("portcullis %q: %v (stderr %q), want the full program's exit code 7", args, err, stderr.String())
			continue
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Errorf("portcullis %q: the full program did not run: %v", args, err)
			continue
		}
		want := []string{strconv.Itoa(pid)}
		for _, a := range args {
			want = append(want, "arg:"+a)
		}
		want = append(want, "env:kept", "stdin:from the caller")
		if got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"); !slices.Equal(got, want) {
			t.Errorf("portcullis %q: the full program saw\n%q\nwant (the front's pid, arguments, environment, stdin)\n%q", args, got, want)
		}
	}
}

// TestFrontReportsMissingApp: without portcullis-app beside it, a command
// says which file is missing and the one step to take; `connect`, with no
// daemon running, answers the agent's request with that reason (and
// writes it on stderr) instead of starting nothing silently.
func TestFrontReportsMissingApp(t *testing.T) {
	exe := buildFront(t)
	app := AppPath(exe)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cmd := exec.CommandContext(ctx, exe, "status")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("portcullis status without %s: %v, want exit code 1", app, err)
	}
	for _, want := range []string{app + " not found", "beside " + exe, "reinstall Portcullis: make install"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("portcullis status without %s: stderr %q does not say %q", app, stderr.String(), want)
		}
	}

	home := t.TempDir()
	cmd = exec.CommandContext(ctx, exe, "connect", "notes")
	cmd.Env = append(os.Environ(), "PORTCULLIS_HOME="+home)
	cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}` + "\n")
	var stdout bytes.Buffer
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("portcullis connect without %s nor a daemon: %v, want exit code 1", app, err)
	}
	var resp struct {
		ID    int `json:"id"`
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil || resp.ID != 1 {
		t.Fatalf("portcullis connect answered %q (%v), want an error response to request 1", stdout.String(), err)
	}
	for _, w := range []string{resp.Error.Message, stderr.String()} {
		for _, want := range []string{app + " not found", "reinstall Portcullis", "make install", "reconnect the agent"} {
			if !strings.Contains(w, want) {
				t.Errorf("portcullis connect without %s: %q does not say %q", app, w, want)
			}
		}
	}
}

func TestConnectLabel(t *testing.T) {
	for _, c := range []struct {
		args  []string
		label string
		ok    bool
	}{
		{[]string{"connect", "notes"}, "notes", true},
		{[]string{"connect", "--", "notes"}, "notes", true},
		{[]string{"connect", "--", "-h"}, "-h", true},
		{nil, "", false},
		{[]string{"status"}, "", false},
		{[]string{"connect"}, "", false},
		{[]string{"connect", "-h"}, "", false},
		{[]string{"connect", "--help=x", "notes"}, "", false},
		{[]string{"connect", "-v", "notes"}, "", false},
		{[]string{"connect", "notes", "--help"}, "", false},
		{[]string{"connect", "a", "b"}, "", false},
	} {
		label, ok := connectLabel(c.args)
		if label != c.label || ok != c.ok {
			t.Errorf("connectLabel(%q) = %q, %v; want %q, %v", c.args, label, ok, c.label, c.ok)
		}
	}
}

func TestFrontOf(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, AppName)
	if got := FrontOf(app); got != app {
		t.Errorf("FrontOf(%s) with no front beside it = %s, want itself", app, got)
	}
	front := filepath.Join(dir, Name)
	if err := os.WriteFile(front, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := FrontOf(app); got != front {
		t.Errorf("FrontOf(%s) = %s, want the front %s", app, got, front)
	}
	other := filepath.Join(dir, "portcullis-old")
	if got := FrontOf(other); got != other {
		t.Errorf("FrontOf(%s) = %s, want itself (not the full program)", other, got)
	}
}
