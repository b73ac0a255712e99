package install

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tailscale/hujson"
)

// claudeCodeSecretOnly is a Claude Code user file whose entry's env holds only
// a secret.
const claudeCodeSecretOnly = `{
  "numStartups": 3,
  "mcpServers": {
    "weather": {
      "command": "node",
      "args": ["weather.js"],
      "env": {"API_KEY": "abc123def456"}
    },
    "time": {"command": "uvx", "args": ["mcp-server-time"]}
  }
}
`

// leftOutSetup installs claudeCodeSecretOnly (with PORTCULLIS_HOME set, so that
// install adds an "env" of its own) and uninstalls it without
// --restore-secrets. It writes what happened to out.
func leftOutSetup(t *testing.T, out *strings.Builder) (fixture, Options, *fakeStore) {
	t.Helper()
	f := newFixture(t)
	tg := f.target(t, ClaudeCode, ScopeUser)
	writeFile(t, tg.Path, claudeCodeSecretOnly, 0o600)
	store := newFakeStore()
	opts := f.opts(tg, store)
	opts.Home = f.pc
	if _, err := Install(opts); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(out, "-- agent file after install --\n%s", readString(t, tg.Path))
	rep, err := Uninstall(opts)
	if err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	fmt.Fprintf(out, "-- uninstall --\n%s", reportText(t, rep))
	fmt.Fprintf(out, "-- agent file after uninstall --\n%s", readString(t, tg.Path))
	return f, opts, store
}

// TestRestoreSecretsAfterUninstall follows the advice of an uninstall that left
// a secret out: `uninstall --restore-secrets` afterwards puts it back from the
// store, giving the original file byte for byte. The first uninstall leaves no
// empty "env" behind.
func TestRestoreSecretsAfterUninstall(t *testing.T) {
	var out strings.Builder
	f, opts, _ := leftOutSetup(t, &out)
	path := opts.Target.Path
	withoutSecret := strings.Replace(claudeCodeSecretOnly, `,
      "env": {"API_KEY": "abc123def456"}`, "", 1)
	if got := readString(t, path); got != withoutSecret {
		t.Errorf("after uninstall without --restore-secrets (-want +got):\n%s", cmp.Diff(withoutSecret, got))
	}

	// Uninstall again, without the flag: nothing to do but say how.
	snap := snapshot(t, f.tmp)
	rep, err := Uninstall(opts)
	if err != nil {
		t.Fatalf("second uninstall: %v", err)
	}
	fmt.Fprintf(&out, "-- uninstall again --\n%s", reportText(t, rep))
	if diff := cmp.Diff(snap, snapshot(t, f.tmp)); diff != "" {
		t.Errorf("second uninstall changed files (-before +after):\n%s", diff)
	}

	// A dry run shows the change, secret masked, and writes nothing.
	opts.RestoreSecrets, opts.DryRun = true, true
	rep, err = Uninstall(opts)
	if err != nil {
		t.Fatalf("uninstall --restore-secrets --dry-run: %v", err)
	}
	fmt.Fprintf(&out, "-- uninstall --restore-secrets --dry-run --\n%s", reportText(t, rep))
	if diff := cmp.Diff(snap, snapshot(t, f.tmp)); diff != "" {
		t.Errorf("dry run changed files (-before +after):\n%s", diff)
	}
	if strings.Contains(rep.AgentDiff, "abc123def456") {
		t.Errorf("dry run diff shows the secret:\n%s", rep.AgentDiff)
	}

	opts.DryRun = false
	rep, err = Uninstall(opts)
	if err != nil {
		t.Fatalf("uninstall --restore-secrets after uninstall: %v", err)
	}
	fmt.Fprintf(&out, "-- uninstall --restore-secrets --\n%s", reportText(t, rep))
	if got := readString(t, path); got != claudeCodeSecretOnly {
		t.Errorf("uninstall --restore-secrets did not give back the original (-want +got):\n%s", cmp.Diff(claudeCodeSecretOnly, got))
	}
	if _, err := os.Stat(recordPath(f.pc, ClaudeCode, path)); !os.IsNotExist(err) {
		t.Errorf("install record left after everything was restored: %v", err)
	}
	if bk := backups(t, path); len(bk) != 3 {
		t.Errorf("backups = %v, want one per write (3)", bk)
	}
	if _, err := Uninstall(opts); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("uninstall after everything was restored: %v, want ErrNotInstalled", err)
	}
	checkGolden(t, "restore-later", f.scrub(out.String()))
}

// TestRestoreSecretsAfterUninstallEntryChanged: when the entry changed (or went)
// after the uninstall that left its secret out, uninstall --restore-secrets
// does not touch it and says which secret is missing, which scope holds it and
// which backup holds it in plain text.
func TestRestoreSecretsAfterUninstallEntryChanged(t *testing.T) {
	var out strings.Builder
	f, opts, _ := leftOutSetup(t, &out)
	path := opts.Target.Path
	data := readString(t, path)
	edited := strings.Replace(data, `"args": ["weather.js"]`, `"args": ["weather.js", "--verbose"]`, 1)
	if edited == data {
		t.Fatalf("test setup: no weather args in\n%s", data)
	}
	writeFile(t, path, edited, 0o600)
	snap := snapshot(t, f.tmp)
	opts.RestoreSecrets = true
	rep, err := Uninstall(opts)
	if err != nil {
		t.Fatalf("uninstall --restore-secrets: %v", err)
	}
	fmt.Fprintf(&out, "-- entry edited; uninstall --restore-secrets --\n%s", reportText(t, rep))
	if diff := cmp.Diff(snap, snapshot(t, f.tmp)); diff != "" {
		t.Errorf("uninstall --restore-secrets changed files (-before +after):\n%s", diff)
	}
	if len(rep.Entries) != 1 || rep.Entries[0].Action != ActionSkipped || len(rep.Entries[0].Secrets) != 1 {
		t.Fatalf("entries = %+v, want weather skipped with its secret", rep.Entries)
	}
	why := rep.Entries[0].Secrets[0].Why
	bk := backups(t, path)[0]
	for _, want := range []string{"weather.api_key", bk, `"API_KEY"`} {
		if !strings.Contains(why, want) {
			t.Errorf("the report on API_KEY (%q) does not name %s", why, want)
		}
	}

	// The backup that held it is gone: the report says so.
	if err := os.Remove(bk); err != nil {
		t.Fatal(err)
	}
	rep, err = Uninstall(opts)
	if err != nil {
		t.Fatalf("uninstall --restore-secrets: %v", err)
	}
	fmt.Fprintf(&out, "-- backup deleted; uninstall --restore-secrets --\n%s", reportText(t, rep))

	// The entry is gone.
	writeFile(t, path, "{\"mcpServers\": {}}\n", 0o600)
	rep, err = Uninstall(opts)
	if err != nil {
		t.Fatalf("uninstall --restore-secrets: %v", err)
	}
	fmt.Fprintf(&out, "-- entry removed; uninstall --restore-secrets --\n%s", reportText(t, rep))
	checkGolden(t, "restore-later-changed", f.scrub(out.String()))
}

// TestRestoreSecretsStoreUnreadable: a secret that --restore-secrets could not
// read is left out and can be put back later, together with the ones that were
// restored.
func TestRestoreSecretsStoreUnreadable(t *testing.T) {
	content := `{"mcpServers":{"s":{"command":"x","env":{"A_TOKEN":"tok-0123456789abcdef","B_TOKEN":"tok-fedcba9876543210","MODE":"fast"}}}}`
	store := newFakeStore()
	f, opts := setup(t, content, store)
	if _, err := Install(opts); err != nil {
		t.Fatal(err)
	}
	saved := store.m["s.b_token"]
	delete(store.m, "s.b_token")
	opts.RestoreSecrets = true
	rep, err := Uninstall(opts)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"mcpServers":{"s":{"command":"x","env":{"A_TOKEN":"tok-0123456789abcdef","MODE":"fast"}}}}`
	if got := readString(t, opts.Target.Path); got != want || len(rep.Warnings) != 1 {
		t.Errorf("after uninstall with B_TOKEN unreadable: %s (warnings %q), want %s", got, rep.Warnings, want)
	}
	rec, err := loadRecord(recordPath(f.pc, Cursor, opts.Target.Path), Cursor, opts.Target.Path)
	if err != nil || len(rec.Entries) != 1 || !slices.Equal(rec.Entries[0].LeftOut, []string{"B_TOKEN"}) {
		t.Fatalf("record = %+v (%v), want s with B_TOKEN left out", rec, err)
	}
	if raw := readString(t, recordPath(f.pc, Cursor, opts.Target.Path)); strings.Contains(raw, "tok-") {
		t.Errorf("the install record holds a secret:\n%s", raw)
	}
	store.m["s.b_token"] = saved
	if _, err := Uninstall(opts); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, opts.Target.Path); got != content {
		t.Errorf("after the second uninstall --restore-secrets:\n%s\nwant\n%s", got, content)
	}
}

// TestInstallNotesLeftOutSecrets: installing an entry again after an uninstall
// left its secret out says that the secret is not in it.
func TestInstallNotesLeftOutSecrets(t *testing.T) {
	var out strings.Builder
	_, opts, _ := leftOutSetup(t, &out)
	rep, err := Install(opts)
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range rep.Entries {
		if e.Name == "weather" {
			notes = e.Notes
		}
	}
	if !strings.Contains(strings.Join(notes, "\n"), "API_KEY") {
		t.Errorf("install after a left-out uninstall: notes %q do not mention API_KEY", notes)
	}
}

func TestDropEmptyEnv(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"command":"x","env":{}}`, `{"command":"x"}`},
		{`{"env":{},"command":"x"}`, `{"command":"x"}`},
		{`{"env":{}}`, `{}`},
		{"{\n  \"command\": \"x\",\n  \"env\": {}\n}", "{\n  \"command\": \"x\"\n}"},
		{`{"command":"x","env":{"A":"1"}}`, `{"command":"x","env":{"A":"1"}}`},
		{`{"command":"x","env":{},"env":{}}`, `{"command":"x","env":{},"env":{}}`},
		// JSON with comments: a comment before "env" stays, so does a trailing comma.
		{"{\n\t\"args\": [],\n\t// The token.\n\t\"env\": {},\n}", "{\n\t\"args\": [],\n\t// The token.\n}"},
		{"{\n\t\"args\": [],\n\t// The token.\n\t\"env\": {}\n}", "{\n\t\"args\": []\n\t// The token.\n}"},
		{"{\n\t// The token.\n\t\"env\": {},\n\t\"args\": []\n}", "{\n\t// The token.\n\t\"args\": []\n}"},
		// A comment inside the empty env keeps it.
		{"{\"command\":\"x\",\"env\":{/* later */}}", "{\"command\":\"x\",\"env\":{/* later */}}"},
	}
	for _, tt := range tests {
		v, err := hujson.Parse([]byte(tt.in))
		if err != nil {
			t.Fatal(err)
		}
		dropEmptyEnv(v.Value.(*hujson.Object))
		got := string(v.Pack())
		if got != tt.want {
			t.Errorf("dropEmptyEnv(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if _, err := hujson.Parse([]byte(got)); err != nil {
			t.Errorf("dropEmptyEnv(%q) = %q, which does not parse: %v", tt.in, got, err)
		}
	}
}
