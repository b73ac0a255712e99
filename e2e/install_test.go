package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/install"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestInstallClaudeDesktop installs Portcullis into a Claude Desktop
// configuration in a temporary HOME, launches the rewritten entry as Claude
// Desktop would (command, args and env as written in the file) with the MCP
// Inspector CLI, lists and calls the tools of the real echo server behind it,
// then uninstalls and checks that the file is back byte for byte.
func TestInstallClaudeDesktop(t *testing.T) {
	npm := needNPM(t)
	h := newHome(t)
	home := filepath.Join(t.TempDir(), "home")
	// The agent's files are found from HOME; XDG_CONFIG_HOME and
	// CLAUDE_CONFIG_DIR of the machine running the tests must not leak in.
	h.Env = append(h.Env, "HOME="+home, "XDG_CONFIG_HOME=", "CLAUDE_CONFIG_DIR=")
	target, err := install.Locate(install.ClaudeDesktop, install.ScopeUser, install.Env{GOOS: runtime.GOOS, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	// Outside the data directory, which the sandbox hides from the server.
	callLog := filepath.Join(t.TempDir(), "echo-calls.jsonl")
	original := fmt.Sprintf(`{
  "globalShortcut": "",
  "mcpServers": {
    "echo": {
      "command": %q,
      "env": {"ECHO_CALL_LOG": %q}
    },
    "weather": {
      "command": "node",
      "args": ["weather.js"],
      "env": {"WEATHER_API_KEY": "sk-live-0123456789abcdef"}
    },
    "remote": {"type": "http", "url": "https://mcp.example.com/mcp"}
  }
}
`, echoBin, callLog)
	installWriteFile(t, target.Path, original)

	startDaemon(t, h)
	ctx := testContext(t, 2*time.Minute)

	// At a terminal, as the person runs it: a credential scope added to
	// the configuration while the daemon runs widens trust, which only the
	// person at a terminal may do.
	res, err := h.RunAtTerminal(ctx, "install", "claude-desktop")
	if err != nil {
		t.Fatalf("install: %v\nstdout: %s", err, res.Stdout)
	}
	t.Logf("portcullis install claude-desktop:\n%s", res.Stdout)
	// With a Secret Service (make test runs under one), the weather key moves
	// into the keychain; without one, the entry is left as it was.
	keychain := os.Getenv("DBUS_SESSION_BUS_ADDRESS") != ""
	weatherWant := "mcpServers.weather: left alone"
	if keychain {
		weatherWant = "mcpServers.weather: installed"
	}
	for _, want := range []string{"mcpServers.echo: installed", weatherWant, "mcpServers.remote: left alone: remote server", "PORTCULLIS_HOME=" + h.Dir} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("install output lacks %q", want)
		}
	}
	installed := installReadFile(t, target.Path)
	backups, _ := filepath.Glob(target.Path + install.BackupSuffix + "*")
	if len(backups) != 1 || installReadFile(t, backups[0]) != original {
		t.Errorf("backups = %v, want one holding the original file", backups)
	}

	// A second install changes nothing.
	res, err = h.Run(ctx, "install", "claude-desktop")
	if err != nil {
		t.Fatalf("second install: %v", err)
	}
	if got := installReadFile(t, target.Path); got != installed || !strings.Contains(res.Stdout, "Nothing to change") {
		t.Errorf("second install changed the file or said so:\n%s", res.Stdout)
	}

	// The entry now launches this portcullis; the others are as they were.
	var file struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(installed), &file); err != nil {
		t.Fatalf("installed file: %v\n%s", err, installed)
	}
	entry := file.MCPServers["echo"]
	wantExe, err := filepath.EvalSymlinks(portcullis)
	if err != nil {
		t.Fatal(err)
	}
	// Under a custom PORTCULLIS_HOME (as here) the entry carries it: the agent
	// launches it without this shell's environment.
	if entry.Command != wantExe || !slices.Equal(entry.Args, []string{"connect", "echo"}) || !maps.Equal(entry.Env, map[string]string{"PORTCULLIS_HOME": h.Dir}) {
		t.Fatalf("echo entry = %+v, want command %s args [connect echo] and env PORTCULLIS_HOME=%s only", entry, wantExe, h.Dir)
	}

	w := file.MCPServers["weather"]
	switch {
	case keychain && (w.Command != wantExe || len(w.Env) != 1 || w.Env["PORTCULLIS_HOME"] != h.Dir):
		t.Errorf("weather entry = %+v, want it routed through Portcullis with its secret moved out", w)
	case !keychain && (w.Command != "node" || w.Env["WEATHER_API_KEY"] == ""):
		t.Errorf("weather entry (a secret and no keychain) = %+v, want it untouched", w)
	}
	if strings.Contains(installed, "sk-live-0123456789abcdef") && keychain {
		t.Errorf("the secret is still in the agent's file:\n%s", installed)
	}

	// Launch the entry as the agent would, with the MCP Inspector CLI as the
	// agent: the command, args and env written in the file, on top of an
	// environment without PORTCULLIS_HOME, so that only the entry's env says
	// where the data directory is. Tool policies are a person's choice in
	// Portcullis's configuration; this test is about the install.
	allowTools(t, h, "echo", "echo")
	var env []string
	for _, kv := range h.Environ() {
		if !strings.HasPrefix(kv, "PORTCULLIS_HOME=") {
			env = append(env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(entry.Env)) {
		env = append(env, k+"="+entry.Env[k])
	}
	launch := append([]string{entry.Command}, entry.Args...)
	names := toolNames(t, inspect(t, npm, env, append(slices.Clone(launch), "--method", "tools/list")))
	slices.Sort(names)
	if !slices.Equal(names, []string{"add", "echo", "slow"}) {
		t.Errorf("tools/list through the installed entry = %v, want the echo server's [add echo slow]", names)
	}
	const message = "through the installed entry"
	called := inspect(t, npm, env, append(slices.Clone(launch), "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message="+message))
	var result struct {
		Content []struct{ Type, Text string }
		IsError bool
	}
	if err := json.Unmarshal(called, &result); err != nil {
		t.Fatalf("tools/call output: %v\n%s", err, called)
	}
	if result.IsError || len(result.Content) != 1 || result.Content[0].Text != message {
		t.Errorf("tools/call echo through the installed entry returned %s, want the text %q", called, message)
	}
	// The server got ECHO_CALL_LOG from the imported env: the call reached it.
	if calls := installReadFile(t, callLog); !strings.Contains(calls, `"tool":"echo"`) {
		t.Errorf("echo call log = %q, want the call", calls)
	}
	// And it went through this Portcullis: its audit log holds the call.
	var audited bool
	for _, e := range auditEvents(t, h) {
		if e.Type == audit.TypeToolCalled {
			f := auditFields(t, e)
			audited = audited || f["serverLabel"] == "echo" && f["tool"] == "echo"
		}
	}
	if !audited {
		t.Errorf("the audit log of %s has no tool_called for echo.echo", h.Dir)
	}

	res, err = h.RunAtTerminal(ctx, "uninstall", "claude-desktop", "--restore-secrets") // the person's
	if err != nil {
		t.Fatalf("uninstall: %v\nstdout: %s", err, res.Stdout)
	}
	if got := installReadFile(t, target.Path); got != original {
		t.Errorf("after uninstall the file differs from the original:\n--- got\n%s\n--- want\n%s", got, original)
	}
}

// TestInstallClaudeCodeRestoreSecretsLater follows the advice that `portcullis
// uninstall` gives when it leaves a secret out: install a Claude Code entry whose
// env holds only a secret (it moves to the Secret Service), uninstall without
// --restore-secrets (the entry comes back without the secret and without an
// empty "env"), then `uninstall --restore-secrets`, which reads the secret from
// the keychain and gives back the original file byte for byte.
func TestInstallClaudeCodeRestoreSecretsLater(t *testing.T) {
	// Only the throwaway keyring of scripts/with-secret-service.sh (which sets
	// PORTCULLIS_TEST_KEYRING_PASSWORD): never a person's own keychain.
	if runtime.GOOS != "linux" || os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" || os.Getenv("PORTCULLIS_TEST_KEYRING_PASSWORD") == "" {
		t.Skip("skipping: needs the throwaway Secret Service of scripts/with-secret-service.sh")
	}
	h := newHome(t)
	home := filepath.Join(t.TempDir(), "home")
	h.Env = append(h.Env, "HOME="+home, "XDG_CONFIG_HOME=", "CLAUDE_CONFIG_DIR=")
	target, err := install.Locate(install.ClaudeCode, install.ScopeUser, install.Env{GOOS: runtime.GOOS, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	const secret = "sk-live-0123456789abcdef"
	original := `{
  "numStartups": 3,
  "mcpServers": {
    "weather": {
      "command": "node",
      "args": ["weather.js"],
      "env": {"API_KEY": "` + secret + `"}
    }
  }
}
`
	installWriteFile(t, target.Path, original)
	ctx := testContext(t, time.Minute)

	res, err := h.Run(ctx, "install", "claude-code")
	if err != nil {
		t.Fatalf("install: %v\nstdout: %s", err, res.Stdout)
	}
	if !strings.Contains(res.Stdout, "mcpServers.weather: installed") || strings.Contains(installReadFile(t, target.Path), secret) {
		t.Fatalf("install did not move the secret to the keychain:\n%s", res.Stdout)
	}

	res, err = h.Run(ctx, "uninstall", "claude-code")
	if err != nil {
		t.Fatalf("uninstall: %v\nstdout: %s", err, res.Stdout)
	}
	advice := "run portcullis uninstall claude-code --restore-secrets to put it back"
	if !strings.Contains(res.Stdout, "secret API_KEY: left out") || !strings.Contains(res.Stdout, advice) {
		t.Errorf("uninstall output lacks the advice %q:\n%s", advice, res.Stdout)
	}
	withoutSecret := strings.Replace(original, ",\n      \"env\": {\"API_KEY\": \""+secret+"\"}", "", 1)
	if got := installReadFile(t, target.Path); got != withoutSecret {
		t.Errorf("after uninstall the file is\n%s\nwant\n%s", got, withoutSecret)
	}

	// Follow the advice.
	res, err = h.RunAtTerminal(ctx, "uninstall", "claude-code", "--restore-secrets") // the person's
	if err != nil {
		t.Fatalf("uninstall --restore-secrets after uninstall: %v\nstdout: %s\nstderr: %s", err, res.Stdout, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "secret API_KEY: restored from credential scope") || strings.Contains(res.Stdout, secret) {
		t.Errorf("uninstall --restore-secrets output:\n%s", res.Stdout)
	}
	if got := installReadFile(t, target.Path); got != original {
		t.Errorf("after uninstall --restore-secrets the file differs from the original:\n--- got\n%s\n--- want\n%s", got, original)
	}
	// Now nothing is left to uninstall.
	res, err = h.Run(ctx, "uninstall", "claude-code")
	var ee *harness.ExitError
	if !errors.As(err, &ee) || !strings.Contains(res.Stderr, "not installed") {
		t.Errorf("uninstall after everything was restored: %v, stderr %q", err, res.Stderr)
	}
}

// TestInstallRefusesBrokenFile checks that install refuses a file that is not
// JSON, naming line and column, and leaves it untouched; and that a missing
// file is reported clearly.
func TestInstallRefusesBrokenFile(t *testing.T) {
	h := newHome(t)
	home := filepath.Join(t.TempDir(), "home")
	h.Env = append(h.Env, "HOME="+home, "XDG_CONFIG_HOME=", "CLAUDE_CONFIG_DIR=")
	target, err := install.Locate(install.Cursor, install.ScopeUser, install.Env{GOOS: runtime.GOOS, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t, time.Minute)
	res, err := h.Run(ctx, "install", "cursor")
	var ee *harness.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("install without a file: %v", err)
	}
	if want := "no Cursor config at " + target.Path + "; nothing to install"; !strings.Contains(res.Stderr, want) {
		t.Errorf("stderr = %q, want %q", res.Stderr, want)
	}
	broken := "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}\n"
	installWriteFile(t, target.Path, broken)
	res, err = h.Run(ctx, "install", "cursor")
	if !errors.As(err, &ee) || !strings.Contains(res.Stderr, target.Path+":3:26: not valid JSON") {
		t.Errorf("install of a broken file: %v, stderr %q", err, res.Stderr)
	}
	if got := installReadFile(t, target.Path); got != broken {
		t.Errorf("the broken file was changed")
	}
	if m, _ := filepath.Glob(target.Path + install.BackupSuffix + "*"); len(m) != 0 {
		t.Errorf("backups written for a refused file: %v", m)
	}
}

func installWriteFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func installReadFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
