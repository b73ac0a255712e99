package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestLocate(t *testing.T) {
	linux := Env{GOOS: "linux", Home: "/home/u", Dir: "/src/app"}
	xdg := Env{GOOS: "linux", Home: "/home/u", XDGConfigHome: "/xdg", ClaudeConfigDir: "/cc", Dir: "/src/app"}
	mac := Env{GOOS: "darwin", Home: "/Users/u", XDGConfigHome: "/ignored", Dir: "/src/app"}
	tests := []struct {
		agent   Agent
		scope   Scope
		env     Env
		path    string
		format  Format
		key     string
		project string
		wantErr error
	}{
		{ClaudeDesktop, "", linux, "/home/u/.config/Claude/claude_desktop_config.json", JSON, "mcpServers", "", nil},
		{ClaudeDesktop, ScopeUser, xdg, "/xdg/Claude/claude_desktop_config.json", JSON, "mcpServers", "", nil},
		{ClaudeDesktop, ScopeUser, mac, "/Users/u/Library/Application Support/Claude/claude_desktop_config.json", JSON, "mcpServers", "", nil},
		{ClaudeDesktop, ScopeProject, linux, "", 0, "", "", ErrScope},
		{ClaudeCode, ScopeUser, linux, "/home/u/.claude.json", JSON, "mcpServers", "", nil},
		{ClaudeCode, ScopeUser, xdg, "/cc/.claude.json", JSON, "mcpServers", "", nil},
		{ClaudeCode, ScopeProject, mac, "/src/app/.mcp.json", JSON, "mcpServers", "/src/app", nil},
		{Cursor, ScopeUser, mac, "/Users/u/.cursor/mcp.json", JSON, "mcpServers", "", nil},
		{Cursor, ScopeProject, linux, "/src/app/.cursor/mcp.json", JSON, "mcpServers", "/src/app", nil},
		{VSCode, ScopeUser, linux, "/home/u/.config/Code/User/mcp.json", JSONC, "servers", "", nil},
		{VSCode, ScopeUser, mac, "/Users/u/Library/Application Support/Code/User/mcp.json", JSONC, "servers", "", nil},
		{VSCode, ScopeProject, linux, "/src/app/.vscode/mcp.json", JSONC, "servers", "/src/app", nil},
		{VSCode, "global", linux, "", 0, "", "", ErrScope},
		{GeminiCLI, ScopeUser, linux, "/home/u/.gemini/settings.json", JSONC, "mcpServers", "", nil},
		{GeminiCLI, ScopeUser, mac, "/Users/u/.gemini/settings.json", JSONC, "mcpServers", "", nil},
		{GeminiCLI, ScopeProject, linux, "/src/app/.gemini/settings.json", JSONC, "mcpServers", "/src/app", nil},
		{Codex, ScopeUser, linux, "/home/u/.codex/config.toml", TOML, "mcp_servers", "", nil},
		{Codex, ScopeUser, Env{GOOS: "darwin", Home: "/Users/u", CodexHome: "/ch"}, "/ch/config.toml", TOML, "mcp_servers", "", nil},
		{Codex, ScopeProject, linux, "", 0, "", "", ErrScope},
		{"zed", ScopeUser, linux, "", 0, "", "", ErrUnknownAgent},
	}
	for _, tt := range tests {
		got, err := Locate(tt.agent, tt.scope, tt.env)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("Locate(%s, %s, %s) error = %v, want %v", tt.agent, tt.scope, tt.env.GOOS, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if got.Path != tt.path || got.Format != tt.format || got.Key != tt.key || got.ProjectDir != tt.project {
			t.Errorf("Locate(%s, %s, %s) = %+v, want path %s format %d key %s project %q", tt.agent, tt.scope, tt.env.GOOS, got, tt.path, tt.format, tt.key, tt.project)
		}
	}
}

func TestResolveExecutable(t *testing.T) {
	bundle := "/Applications/Portcullis.app/Contents/MacOS/portcullis"
	exists := func(p string) bool { return p == bundle }
	tests := []struct {
		self, want string
		bundles    []string
	}{
		{"/usr/local/bin/portcullis", bundle, []string{"/nope/Portcullis.app/Contents/MacOS/portcullis", bundle}},
		{"/Users/u/Portcullis.app/Contents/MacOS/portcullis", "/Users/u/Portcullis.app/Contents/MacOS/portcullis", []string{bundle}},
		{"/home/u/bin/portcullis", "/home/u/bin/portcullis", nil},
		{"/home/u/bin/portcullis", "/home/u/bin/portcullis", []string{"/nope"}},
	}
	for _, tt := range tests {
		if got := ResolveExecutable(tt.self, tt.bundles, exists); got != tt.want {
			t.Errorf("ResolveExecutable(%s) = %s, want %s", tt.self, got, tt.want)
		}
	}
}

const secretFile = `{
  "mcpServers": {
    "github": {"command": "npx", "args": ["-y", "server-github"], "env": {"GITHUB_TOKEN": "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngABCD1234"}},
    "time": {"command": "uvx", "args": ["mcp-server-time"]}
  }
}
`

// setup writes content as the user's Cursor file and returns the options.
func setup(t *testing.T, content string, store SecretStore) (fixture, Options) {
	t.Helper()
	f := newFixture(t)
	tg := f.target(t, Cursor, ScopeUser)
	writeFile(t, tg.Path, content, 0o600)
	return f, f.opts(tg, store)
}

func TestStoreFailureWritesNothing(t *testing.T) {
	store := newFakeStore()
	store.failSet = true
	f, opts := setup(t, secretFile, store)
	before := snapshot(t, f.tmp)
	_, err := Install(opts)
	if !errors.Is(err, ErrSecretStore) {
		t.Fatalf("Install with a failing store: %v, want ErrSecretStore", err)
	}
	if diff := cmp.Diff(before, snapshot(t, f.tmp)); diff != "" {
		t.Errorf("files changed (-before +after):\n%s", diff)
	}
}

// lossyStore accepts secrets and loses them.
type lossyStore struct{}

func (lossyStore) Set(string, []byte) error   { return nil }
func (lossyStore) Get(string) ([]byte, error) { return []byte("something else"), nil }

func TestStoreReadBackChecked(t *testing.T) {
	f, opts := setup(t, secretFile, lossyStore{})
	before := snapshot(t, f.tmp)
	if _, err := Install(opts); !errors.Is(err, ErrSecretStore) {
		t.Fatalf("Install with a store that loses secrets: %v, want ErrSecretStore", err)
	}
	if diff := cmp.Diff(before, snapshot(t, f.tmp)); diff != "" {
		t.Errorf("files changed (-before +after):\n%s", diff)
	}
}

func TestReplaceFileRefusesConcurrentChange(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mcp.json")
	writeFile(t, path, `{"changed": "by the agent"}`, 0o600)
	_, err := replaceFile(path, []byte(`{}`), []byte(`{"new": 1}`), 0o600, testNow)
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("replaceFile over a changed file: %v, want ErrChanged", err)
	}
	if got := readString(t, path); got != `{"changed": "by the agent"}` {
		t.Errorf("file = %q, want it untouched", got)
	}
	if b := backups(t, path); len(b) != 0 {
		t.Errorf("backups written: %v", b)
	}
}

func TestSymlinkKept(t *testing.T) {
	f := newFixture(t)
	tg := f.target(t, Cursor, ScopeUser)
	real := filepath.Join(f.tmp, "dotfiles", "cursor-mcp.json")
	writeFile(t, real, secretFile, 0o600)
	if err := os.MkdirAll(filepath.Dir(tg.Path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, tg.Path); err != nil {
		t.Fatal(err)
	}
	opts := f.opts(tg, newFakeStore())
	if _, err := Install(opts); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(tg.Path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced by a file (%v)", err)
	}
	if !strings.Contains(readString(t, real), `"connect", "time"`) {
		t.Errorf("the link's target was not rewritten:\n%s", readString(t, real))
	}
	if b := backups(t, real); len(b) != 1 {
		t.Errorf("backups next to the target = %v, want one", b)
	}
	if _, err := Uninstall(opts); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, real); !strings.Contains(got, `"command": "uvx"`) {
		t.Errorf("uninstall through the link did not restore:\n%s", got)
	}
}

func TestUninstallLeavesEditedEntries(t *testing.T) {
	f, opts := setup(t, secretFile, newFakeStore())
	if _, err := Install(opts); err != nil {
		t.Fatal(err)
	}
	// The person points "time" somewhere else by hand.
	data := readString(t, opts.Target.Path)
	edited := strings.Replace(data, `"args": ["connect", "time"]`, `"args": ["--local"]`, 1)
	if edited == data {
		t.Fatalf("test setup: installed file has no time entry:\n%s", data)
	}
	writeFile(t, opts.Target.Path, edited, 0o600)
	rep, err := Uninstall(opts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Action{}
	for _, e := range rep.Entries {
		got[e.Name] = e.Action
	}
	if diff := cmp.Diff(map[string]Action{"github": ActionRestored, "time": ActionSkipped}, got); diff != "" {
		t.Errorf("uninstall actions (-want +got):\n%s", diff)
	}
	after := readString(t, opts.Target.Path)
	if !strings.Contains(after, `"args": ["--local"]`) || !strings.Contains(after, `"server-github"`) {
		t.Errorf("file after uninstall:\n%s", after)
	}
	// The record keeps the entry it could not restore, and github, restored
	// without its secret, for a later uninstall --restore-secrets.
	rec, err := loadRecord(recordPath(f.pc, Cursor, opts.Target.Path), Cursor, opts.Target.Path)
	var kept []string
	for _, e := range rec.Entries {
		kept = append(kept, fmt.Sprintf("%s %v", e.Label, e.LeftOut))
	}
	if diff := cmp.Diff([]string{"github [GITHUB_TOKEN]", "time []"}, kept); err != nil || diff != "" {
		t.Errorf("record after a partial uninstall (%v) (-want +got):\n%s", err, diff)
	}
}

func TestUninstallErrors(t *testing.T) {
	_, opts := setup(t, secretFile, nil)
	if _, err := Uninstall(opts); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("Uninstall before install: %v, want ErrNotInstalled", err)
	}
	opts.Store = newFakeStore()
	if _, err := Install(opts); err != nil {
		t.Fatal(err)
	}
	opts.Store, opts.RestoreSecrets = nil, true
	if _, err := Uninstall(opts); !errors.Is(err, ErrNoStore) {
		t.Errorf("Uninstall --restore-secrets without a store: %v, want ErrNoStore", err)
	}
	os.Remove(opts.Target.Path)
	var mf *MissingFileError
	if _, err := Uninstall(opts); !errors.As(err, &mf) || !errors.Is(err, ErrNoFile) || mf.Op != "uninstall" {
		t.Errorf("Uninstall of a missing file: %v", err)
	}
}

func TestServersSelection(t *testing.T) {
	_, opts := setup(t, secretFile, nil)
	opts.Servers = []string{"nope"}
	if _, err := Install(opts); !errors.Is(err, ErrNoEntry) {
		t.Errorf("Install --servers nope: %v, want ErrNoEntry", err)
	}
	opts.Servers = []string{"time"}
	rep, err := Install(opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Entries) != 1 || rep.Entries[0].Name != "time" || rep.Entries[0].Action != ActionInstalled {
		t.Errorf("entries = %+v, want only time installed", rep.Entries)
	}
	if !strings.Contains(readString(t, opts.Target.Path), `"GITHUB_TOKEN"`) {
		t.Errorf("an entry outside --servers was changed")
	}
}

func TestImportTwiceIsStable(t *testing.T) {
	store := newFakeStore()
	_, opts := setup(t, secretFile, store)
	if _, err := Import(opts); err != nil {
		t.Fatal(err)
	}
	cfg := readString(t, opts.ConfigFile)
	rep, err := Import(opts)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ConfigChanged || readString(t, opts.ConfigFile) != cfg {
		t.Errorf("second import changed the configuration")
	}
	for _, e := range rep.Entries {
		if e.NewServer || e.Label != e.Name {
			t.Errorf("second import: %s → %s new=%v, want the same label reused", e.Name, e.Label, e.NewServer)
		}
	}
	if store.sets != 1 {
		t.Errorf("secrets stored %d times, want once", store.sets)
	}
	// The same name with a different secret is a different server.
	writeFile(t, opts.Target.Path, strings.Replace(secretFile, "ABCD1234", "WXYZ9876", 1), 0o600)
	rep, err = Import(opts)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Entries[0].Label != "github-2" {
		t.Errorf("label for github with a new token = %q, want github-2", rep.Entries[0].Label)
	}
}

func TestRestoreReencodedSecret(t *testing.T) {
	// The file spells the secret's "c" as \u0063: restoring gives the same value
	// with plain spelling, and the report says so.
	content := `{"mcpServers":{"s":{"command":"x","env":{"API_KEY":"sk-ab\u0063defghijklmnop"}}}}`
	store := newFakeStore()
	_, opts := setup(t, content, store)
	if _, err := Install(opts); err != nil {
		t.Fatal(err)
	}
	opts.RestoreSecrets = true
	rep, err := Uninstall(opts)
	if err != nil {
		t.Fatal(err)
	}
	var got, want any
	json.Unmarshal([]byte(readString(t, opts.Target.Path)), &got)
	json.Unmarshal([]byte(content), &want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("restored file differs in meaning (-want +got):\n%s", diff)
	}
	if !strings.Contains(rep.Entries[0].Secrets[0].Why, "escaping") {
		t.Errorf("report does not mention the changed escaping: %+v", rep.Entries[0].Secrets)
	}
}

func TestUnifiedDiff(t *testing.T) {
	tests := []struct{ a, b, want string }{
		{"same\n", "same\n", ""},
		{"a\nb\nc\n", "a\nB\nc\n", "--- x\n+++ y\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"", "new\n", "--- x\n+++ y\n@@ -0,0 +1 @@\n+new\n"},
		{"a\n", "a", "--- x\n+++ y\n@@ -1 +1 @@\n-a\n+a\n\\ No newline at end of file\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "1\nX\n3\n4\n5\n6\n7\n8\n9\n10\nY\n12\n",
			"--- x\n+++ y\n@@ -1,5 +1,5 @@\n 1\n-2\n+X\n 3\n 4\n 5\n@@ -8,5 +8,5 @@\n 8\n 9\n 10\n-11\n+Y\n 12\n"},
	}
	for _, tt := range tests {
		if got := unifiedDiff("x", "y", tt.a, tt.b); got != tt.want {
			t.Errorf("unifiedDiff(%q, %q):\n%s\nwant:\n%s", tt.a, tt.b, got, tt.want)
		}
	}
	// Cross-check with patch(1) when it is installed: applying the diff gives b.
	patch, err := exec.LookPath("patch")
	if err != nil {
		t.Skip("patch(1) not installed; the exact-output cases above ran")
	}
	a := "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n"
	b := "zero\none\nthree\nfour\nFIVE\nsix\nseven\neight\nnine\nten\neleven\n"
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "f"), a, 0o600)
	cmd := exec.Command(patch, "-s", filepath.Join(dir, "f"))
	cmd.Stdin = strings.NewReader(unifiedDiff("f", "f", a, b))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("patch: %v\n%s", err, out)
	}
	if got := readString(t, filepath.Join(dir, "f")); got != b {
		t.Errorf("patched file = %q, want %q", got, b)
	}
}

// TestImports keeps core/install free of fyne, cgo-only packages, platform/ and
// app/ (docs/DESIGN.md, "Packages").
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "fyne.io/") || strings.Contains(dep, "/portcullis/platform") ||
			strings.Contains(dep, "/portcullis/app") || dep == "C" || strings.Contains(dep, "go-keychain") {
			t.Errorf("core/install depends on %s", dep)
		}
	}
}

// TestDiffLinesReconstructs checks on pseudo-random line lists that the edit
// script keeps, removes and adds lines so that it turns x into y.
func TestDiffLinesReconstructs(t *testing.T) {
	seed := uint32(1)
	next := func(n int) int { // xorshift: deterministic, no global state
		seed ^= seed << 13
		seed ^= seed >> 17
		seed ^= seed << 5
		return int(seed % uint32(n))
	}
	for range 300 {
		var x, y []string
		for range next(30) {
			x = append(x, string(rune('a'+next(4)))+"\n")
		}
		for range next(30) {
			y = append(y, string(rune('a'+next(4)))+"\n")
		}
		var gotX, gotY []string
		for _, o := range diffLines(x, y) {
			if o.kind != '+' {
				gotX = append(gotX, o.text)
			}
			if o.kind != '-' {
				gotY = append(gotY, o.text)
			}
		}
		if !cmp.Equal(x, gotX, cmpopts.EquateEmpty()) || !cmp.Equal(y, gotY, cmpopts.EquateEmpty()) {
			t.Fatalf("diffLines(%q, %q) does not reconstruct its inputs", x, y)
		}
	}
}

// TestEditDiffApplies checks with patch(1) that the per-edit diff of random
// edits turns the old text into the new one.
func TestEditDiffApplies(t *testing.T) {
	patch, err := exec.LookPath("patch")
	if err != nil {
		t.Skip("skipping: patch(1) not installed")
	}
	seed := uint32(7)
	next := func(n int) int {
		seed ^= seed << 13
		seed ^= seed >> 17
		seed ^= seed << 5
		return int(seed % uint32(n))
	}
	dir := t.TempDir()
	for i := range 40 {
		var b strings.Builder
		for range 5 + next(40) {
			b.WriteString(strings.Repeat(string(rune('a'+next(3))), 1+next(6)) + "\n")
		}
		old := []byte(b.String())
		var edits []edit
		for pos := next(len(old)); pos < len(old); {
			end := min(len(old), pos+next(15))
			texts := []string{"", "X", "Y\nZ\n", "\n"}
			edits = append(edits, edit{pos, end, []byte(texts[next(len(texts))])})
			pos = end + 1 + next(30)
		}
		want := string(apply(old, slices.Clone(edits)))
		f := filepath.Join(dir, fmt.Sprintf("f%d", i))
		writeFile(t, f, string(old), 0o600)
		cmd := exec.Command(patch, "-s", f)
		cmd.Stdin = strings.NewReader(editDiff("f", "f", old, edits))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("patch: %v\n%s\ndiff:\n%s", err, out, editDiff("f", "f", old, edits))
		}
		if got := readString(t, f); got != want {
			t.Fatalf("case %d: patched = %q, want %q", i, got, want)
		}
	}
}
