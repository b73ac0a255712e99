package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/secrets"
)

// credsEnv is an App on a temporary data directory with an in-memory
// credential store.
type credsEnv struct {
	a              *App
	store          *secrets.Memory
	stdout, stderr bytes.Buffer
}

func newCredsEnv(t *testing.T) *credsEnv {
	t.Helper()
	dir := t.TempDir()
	e := &credsEnv{store: &secrets.Memory{}}
	e.a = &App{
		Dirs:   paths.Dirs{Config: filepath.Join(dir, "config"), State: filepath.Join(dir, "state"), Runtime: filepath.Join(dir, "run")},
		Stdin:  strings.NewReader(""),
		Stdout: &e.stdout,
		Stderr: &e.stderr,
	}
	old := newSecretStore
	newSecretStore = func() secrets.Store { return e.store }
	t.Cleanup(func() { newSecretStore = old })
	return e
}

// run runs a creds command with stdin and returns its error.
func (e *credsEnv) run(stdin string, args ...string) error {
	e.a.Stdin = strings.NewReader(stdin)
	e.stdout.Reset()
	e.stderr.Reset()
	return e.a.runCreds(args)
}

// credentials returns the credentials of the configuration file (nil if it
// does not exist).
func (e *credsEnv) credentials(t *testing.T) map[string]config.Credential {
	t.Helper()
	cfg, err := config.Load(e.a.Dirs.ConfigFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Credentials
}

// stored returns the secret of scope, or "" if none.
func (e *credsEnv) stored(scope string) string {
	v, err := e.store.Get(scope)
	if err != nil {
		return ""
	}
	return string(v)
}

// noSecretShown fails if secret appears in err or the command's output.
func (e *credsEnv) noSecretShown(t *testing.T, err error, secret string) {
	t.Helper()
	for what, text := range map[string]string{"error": errText(err), "stdout": e.stdout.String(), "stderr": e.stderr.String()} {
		if strings.Contains(text, secret) {
			t.Errorf("the secret appears in %s: %q", what, text)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func isUsage(err error) bool {
	var ue *usageError
	return errors.As(err, &ue)
}

func TestCredsSet(t *testing.T) {
	const secret = "s3cr3t-token"
	tests := []struct {
		name      string
		stdin     string
		args      []string
		wantCreds map[string]config.Credential
		wantValue string
	}{
		{"env, piped with a newline", secret + "\n", []string{"set", "api", "--env", "API_TOKEN"},
			map[string]config.Credential{"api": {Inject: "env", EnvVar: "API_TOKEN"}}, secret},
		{"env, CRLF", secret + "\r\n", []string{"set", "api", "--env", "API_TOKEN"},
			map[string]config.Credential{"api": {Inject: "env", EnvVar: "API_TOKEN"}}, secret},
		{"only one newline is trimmed", secret + "\n\n", []string{"set", "api", "--env", "API_TOKEN"},
			map[string]config.Credential{"api": {Inject: "env", EnvVar: "API_TOKEN"}}, secret + "\n"},
		{"meta, ask every use", secret, []string{"set", "api", "--meta", "--ask-every-use"},
			map[string]config.Credential{"api": {Inject: "meta", AskEveryUse: true}}, secret},
		{"multi-line secret", "line1\nline2\n", []string{"set", "api", "--meta"},
			map[string]config.Credential{"api": {Inject: "meta"}}, "line1\nline2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCredsEnv(t)
			err := e.run(tt.stdin, tt.args...)
			if err != nil {
				t.Fatalf("creds %v: %v", tt.args, err)
			}
			if diff := cmp.Diff(tt.wantCreds, e.credentials(t)); diff != "" {
				t.Errorf("credentials (-want +got):\n%s", diff)
			}
			if got := e.stored("api"); got != tt.wantValue {
				t.Errorf("stored %q, want %q", got, tt.wantValue)
			}
			if !strings.Contains(e.stdout.String(), "No server uses it yet") {
				t.Errorf("stdout does not say that no server uses the scope:\n%s", e.stdout.String())
			}
			e.noSecretShown(t, err, secret)
		})
	}
}

func TestCredsSetRefusals(t *testing.T) {
	const secret = "s3cr3t-refused"
	tests := []struct {
		name     string
		stdin    string
		args     []string
		fail     error // injected store failure
		usage    bool
		wantText string
	}{
		{"no scope", secret, []string{"set"}, nil, true, "needs a credential scope"},
		{"flag before scope", secret, []string{"set", "--meta"}, nil, true, "needs a credential scope"},
		{"bad scope", secret, []string{"set", "a b", "--meta"}, nil, true, "invalid credential scope name"},
		{"env and meta", secret, []string{"set", "api", "--env", "X", "--meta"}, nil, true, "exclude each other"},
		{"bad env name", secret, []string{"set", "api", "--env", "1X"}, nil, true, "not a valid environment variable name"},
		{"new scope without inject", secret, []string{"set", "api"}, nil, true, "needs --env VAR"},
		{"extra argument", secret, []string{"set", "api", "--meta", "more"}, nil, true, "unexpected argument"},
		{"empty stdin", "", []string{"set", "api", "--meta"}, nil, false, "secret is empty"},
		{"only a newline", "\n", []string{"set", "api", "--meta"}, nil, false, "secret is empty"},
		{"whitespace", "  \t\n", []string{"set", "api", "--meta"}, nil, false, "secret is empty"},
		{"too long", strings.Repeat("x", maxSecretSize+1), []string{"set", "api", "--meta"}, nil, false, "longer than 65536 bytes"},
		{"locked store", secret, []string{"set", "api", "--meta"}, secrets.ErrLocked, false, "credential store is locked"},
		{"no store", secret, []string{"set", "api", "--meta"}, secrets.ErrUnavailable, false, "credential store is unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCredsEnv(t)
			e.store.Fail(tt.fail)
			err := e.run(tt.stdin, tt.args...)
			if err == nil {
				t.Fatalf("creds %v succeeded", tt.args)
			}
			if isUsage(err) != tt.usage {
				t.Errorf("usage error = %v, want %v: %v", isUsage(err), tt.usage, err)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q does not contain %q", err, tt.wantText)
			}
			if tt.fail != nil && !strings.Contains(err.Error(), "nothing was changed") {
				t.Errorf("error %q does not say that nothing was changed", err)
			}
			if creds := e.credentials(t); creds != nil {
				t.Errorf("the configuration was written: %v", creds)
			}
			e.store.Fail(nil)
			if e.store.Len() != 0 {
				t.Errorf("a secret was stored")
			}
			e.noSecretShown(t, err, secret)
		})
	}
}

func TestCredsSetUpdates(t *testing.T) {
	e := newCredsEnv(t)
	if err := e.run("first", "set", "api", "--env", "API_TOKEN"); err != nil {
		t.Fatal(err)
	}
	// Without --env/--meta the settings stay and the secret is replaced.
	if err := e.run("second", "set", "api", "--ask-every-use"); err != nil {
		t.Fatal(err)
	}
	want := map[string]config.Credential{"api": {Inject: "env", EnvVar: "API_TOKEN", AskEveryUse: true}}
	if diff := cmp.Diff(want, e.credentials(t)); diff != "" {
		t.Errorf("credentials (-want +got):\n%s", diff)
	}
	if got := e.stored("api"); got != "second" {
		t.Errorf("stored %q, want %q", got, "second")
	}
	// --meta replaces all settings.
	if err := e.run("third", "set", "api", "--meta"); err != nil {
		t.Fatal(err)
	}
	want = map[string]config.Credential{"api": {Inject: "meta"}}
	if diff := cmp.Diff(want, e.credentials(t)); diff != "" {
		t.Errorf("credentials (-want +got):\n%s", diff)
	}
}

func TestCredsSetConflict(t *testing.T) {
	e := newCredsEnv(t)
	if err := e.run("tok-a", "set", "a", "--env", "A_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := e.a.runServers([]string{"add", "srv", "--env", "TOKEN=plain", "--cred", "a", "--", "true"}); err != nil {
		t.Fatal(err)
	}
	// srv sets TOKEN itself, so scope a may not inject TOKEN: refused before
	// anything is stored.
	err := e.run("s3cr3t-new", "set", "a", "--env", "TOKEN")
	if err == nil || !strings.Contains(err.Error(), "nothing was changed") || !strings.Contains(err.Error(), "env must not set TOKEN") {
		t.Fatalf("conflicting set: %v", err)
	}
	if got := e.stored("a"); got != "tok-a" {
		t.Errorf("stored %q after a refused set, want the old value", got)
	}
	if got := e.credentials(t)["a"].EnvVar; got != "A_TOKEN" {
		t.Errorf("envVar %q after a refused set", got)
	}
	e.noSecretShown(t, err, "s3cr3t-new")
	if err := e.run("tok-a2", "set", "a", "--env", "OTHER"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.stdout.String(), "Used by: srv") {
		t.Errorf("stdout does not name the server using the scope:\n%s", e.stdout.String())
	}
}

// fileStdin returns an *os.File reading data, like a shell pipe or redirect.
func fileStdin(t *testing.T, data string) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "stdin")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestCredsSetFromFile(t *testing.T) {
	e := newCredsEnv(t)
	e.a.Stdin = fileStdin(t, "from-a-file\n")
	if err := e.a.runCreds([]string{"set", "api", "--meta"}); err != nil {
		t.Fatal(err)
	}
	if got := e.stored("api"); got != "from-a-file" {
		t.Errorf("stored %q", got)
	}
	if e.stderr.Len() != 0 {
		t.Errorf("a prompt was written for a file on stdin: %q", e.stderr.String())
	}
}

func TestCredsList(t *testing.T) {
	e := newCredsEnv(t)
	if err := e.run("", "list"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.stdout.String(), "No credential scopes") {
		t.Errorf("empty list:\n%s", e.stdout.String())
	}
	if err := e.run("", "list", "--json"); err != nil || strings.TrimSpace(e.stdout.String()) != "[]" {
		t.Errorf("empty list --json: %q, %v", e.stdout.String(), err)
	}

	for _, c := range [][]string{
		{"s3cr3t-a", "set", "a", "--env", "A_TOKEN"},
		{"s3cr3t-b", "set", "b", "--meta", "--ask-every-use"},
	} {
		if err := e.run(c[0], c[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.a.runServers([]string{"add", "srv2", "--cred", "a", "--", "true"}); err != nil {
		t.Fatal(err)
	}
	if err := e.a.runServers([]string{"add", "srv1", "--cred", "a", "--", "true"}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Delete("b"); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		fail error
		want []credEntry
		note string
	}{
		{"stored and missing", nil, []credEntry{
			{Scope: "a", Inject: "env", EnvVar: "A_TOKEN", Secret: "stored", Servers: []string{"srv1", "srv2"}},
			{Scope: "b", Inject: "meta", AskEveryUse: true, Secret: "missing", Servers: []string{}},
		}, ""},
		{"locked", secrets.ErrLocked, []credEntry{
			{Scope: "a", Inject: "env", EnvVar: "A_TOKEN", Secret: "locked", Servers: []string{"srv1", "srv2"}},
			{Scope: "b", Inject: "meta", AskEveryUse: true, Secret: "locked", Servers: []string{}},
		}, "credential store is locked"},
		{"unavailable", secrets.ErrUnavailable, []credEntry{
			{Scope: "a", Inject: "env", EnvVar: "A_TOKEN", Secret: "unavailable", Servers: []string{"srv1", "srv2"}},
			{Scope: "b", Inject: "meta", AskEveryUse: true, Secret: "unavailable", Servers: []string{}},
		}, "credential store is unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.store.Fail(tt.fail)
			defer e.store.Fail(nil)
			if err := e.run("", "list", "--json"); err != nil {
				t.Fatal(err)
			}
			var got []credEntry
			if err := json.Unmarshal(e.stdout.Bytes(), &got); err != nil {
				t.Fatalf("list --json is not JSON: %v\n%s", err, e.stdout.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("list --json (-want +got):\n%s", diff)
			}
			if tt.note == "" && e.stderr.Len() != 0 {
				t.Errorf("unexpected note on stderr: %q", e.stderr.String())
			}
			if !strings.Contains(e.stderr.String(), tt.note) {
				t.Errorf("stderr %q does not contain %q", e.stderr.String(), tt.note)
			}
			if err := e.run("", "list"); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(e.stdout.String(), w.Secret) {
					t.Errorf("table does not show %q:\n%s", w.Secret, e.stdout.String())
				}
			}
			for _, s := range []string{"s3cr3t-a", "s3cr3t-b"} {
				e.noSecretShown(t, nil, s)
			}
		})
	}
}

func TestCredsRemove(t *testing.T) {
	e := newCredsEnv(t)
	for _, c := range [][]string{
		{"s3cr3t-used", "set", "used", "--env", "USED"},
		{"s3cr3t-free", "set", "free", "--meta"},
	} {
		if err := e.run(c[0], c[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	for _, label := range []string{"beta", "alpha"} {
		if err := e.a.runServers([]string{"add", label, "--cred", "used", "--", "true"}); err != nil {
			t.Fatal(err)
		}
	}

	err := e.run("", "remove", "used")
	if err == nil || !strings.Contains(err.Error(), "still used by alpha, beta") {
		t.Errorf("removing a scope servers use: %v", err)
	}
	if e.stored("used") == "" || e.credentials(t)["used"] == (config.Credential{}) {
		t.Errorf("a refused remove changed something")
	}

	e.store.Fail(secrets.ErrLocked)
	err = e.run("", "remove", "free")
	e.store.Fail(nil)
	if !errors.Is(err, secrets.ErrLocked) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Errorf("removing with a locked store: %v", err)
	}
	if _, ok := e.credentials(t)["free"]; !ok || e.stored("free") == "" {
		t.Errorf("a remove with a locked store changed something")
	}

	if err := e.run("", "remove", "free"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.credentials(t)["free"]; ok || e.stored("free") != "" {
		t.Errorf("after remove: config %v, stored %q", e.credentials(t), e.stored("free"))
	}

	// Only in the store, only in the configuration, in neither.
	if err := e.store.Set("orphan", []byte("s3cr3t-orphan")); err != nil {
		t.Fatal(err)
	}
	if err := e.run("", "remove", "orphan"); err != nil || e.stored("orphan") != "" {
		t.Errorf("removing a secret without settings: %v", err)
	}
	if err := e.run("x", "set", "nosecret", "--meta"); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Delete("nosecret"); err != nil {
		t.Fatal(err)
	}
	if err := e.run("", "remove", "nosecret"); err != nil || !strings.Contains(e.stdout.String(), "no secret was stored") {
		t.Errorf("removing settings without a secret: %v, %q", err, e.stdout.String())
	}
	if err := e.run("", "remove", "never"); err == nil || !strings.Contains(err.Error(), "no credential scope never") {
		t.Errorf("removing an unknown scope: %v", err)
	}
	if err := e.run("", "remove", "bad scope"); !isUsage(err) {
		t.Errorf("removing an invalid scope: %v", err)
	}
}

func TestCredsUsage(t *testing.T) {
	e := newCredsEnv(t)
	for _, args := range [][]string{{}, {"frob"}, {"list", "extra"}, {"remove"}, {"remove", "a", "b"}} {
		if err := e.run("", args...); !isUsage(err) {
			t.Errorf("creds %v: %v, want a usage error", args, err)
		}
	}
}
