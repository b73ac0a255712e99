package install

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/portcullis/portcullis/core/config"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// fakeStore is an in-memory SecretStore.
type fakeStore struct {
	m       map[string][]byte
	failSet bool
	sets    int
}

var _ SecretStore = (*fakeStore)(nil)

func newFakeStore() *fakeStore { return &fakeStore{m: map[string][]byte{}} }

func (s *fakeStore) Set(scope string, secret []byte) error {
	if s.failSet {
		return errors.New("keychain locked")
	}
	s.sets++
	s.m[scope] = bytes.Clone(secret)
	return nil
}

func (s *fakeStore) Get(scope string) ([]byte, error) {
	v, ok := s.m[scope]
	if !ok {
		return nil, fmt.Errorf("scope %s: %w", scope, fs.ErrNotExist)
	}
	return bytes.Clone(v), nil
}

const testExe = "/opt/portcullis/bin/portcullis"

var testNow = time.Date(2026, 11, 30, 1, 47, 0, 0, time.UTC)

// fixture is a temporary home, project and Portcullis directory.
type fixture struct {
	tmp, home, project, pc string
}

func newFixture(t *testing.T) fixture {
	tmp := t.TempDir()
	f := fixture{tmp: tmp, home: filepath.Join(tmp, "home"), project: filepath.Join(tmp, "project"), pc: filepath.Join(tmp, "portcullis")}
	for _, d := range []string{f.home, f.project, f.pc} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f fixture) target(t *testing.T, agent Agent, scope Scope) Target {
	t.Helper()
	tg, err := Locate(agent, scope, Env{GOOS: "linux", Home: f.home, Dir: f.project})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func (f fixture) opts(tg Target, store SecretStore) Options {
	return Options{
		Target:     tg,
		ConfigFile: filepath.Join(f.pc, "config.json"),
		StateDir:   f.pc,
		Exe:        testExe,
		Store:      store,
		Now:        func() time.Time { return testNow },
	}
}

// expandInput replaces $HOME and $PROJECT in a testdata input.
func (f fixture) expandInput(s string) string {
	return strings.NewReplacer("$HOME", f.home, "$PROJECT", f.project).Replace(s)
}

// scrub replaces the temporary directory in output with $TMP.
func (f fixture) scrub(s string) string { return strings.ReplaceAll(s, f.tmp, "$TMP") }

func writeFile(t *testing.T, path, data string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "(no file)\n"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func reportText(t *testing.T, r *Report) string {
	t.Helper()
	var b strings.Builder
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

func backups(t *testing.T, file string) []string {
	t.Helper()
	m, err := filepath.Glob(file + BackupSuffix + "*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// snapshot holds the bytes of every file under dir.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func restoreSnapshot(t *testing.T, dir string, snap map[string]string) {
	t.Helper()
	for p := range snapshot(t, dir) {
		if _, ok := snap[p]; !ok {
			os.Remove(p)
		}
	}
	for p, data := range snap {
		writeFile(t, p, data, 0o600)
	}
}

// TestGolden runs install (or import, or a dry run) on each testdata/NAME.in file
// in the agent's location, then install again and uninstall, and compares what
// they print and write with testdata/NAME.golden. Beyond the golden text it checks
// the safety properties: a second install changes nothing, the backup holds the
// original bytes, the file keeps its mode, and uninstall (with --restore-secrets
// when secrets moved) gives back the original file byte for byte. When secrets
// moved, it also follows the advice of a plain uninstall: a later uninstall
// --restore-secrets gives back the original file byte for byte too.
func TestGolden(t *testing.T) {
	tests := []struct {
		name     string
		agent    Agent
		scope    Scope
		op       string // "install" (default), "import", "dry-run"
		noStore  bool
		config   string            // Portcullis's configuration before
		extra    map[string]string // more files, relative to the project
		servers  []string
		plainEnv []string
		noInput  bool
		home     bool // run with PORTCULLIS_HOME set (Options.Home)
	}{
		{name: "claude-desktop", agent: ClaudeDesktop},
		{name: "claude-desktop-nostore", agent: ClaudeDesktop, noStore: true, plainEnv: []string{"SEARCH_API_KEY"}},
		{name: "claude-code-user", agent: ClaudeCode},
		{name: "claude-code-project", agent: ClaudeCode, scope: ScopeProject},
		{name: "cursor-project", agent: Cursor, scope: ScopeProject},
		{name: "vscode-user", agent: VSCode},
		{name: "vscode-project", agent: VSCode, scope: ScopeProject,
			extra: map[string]string{".env": "# tasks server\nTASKS_DB=./tasks.db\nexport TASKS_TOKEN=\"tsk_9f8e7d6c5b4a39281706f5e4d3c2b1a0\"\n"}},
		{name: "gemini-cli-user", agent: GeminiCLI},
		{name: "gemini-cli-project", agent: GeminiCLI, scope: ScopeProject},
		{name: "codex-user", agent: Codex},
		{name: "codex-dotted", agent: Codex},
		{name: "codex-inline", agent: Codex, home: true},
		{name: "import", agent: ClaudeDesktop, op: "import"},
		{name: "dry-run", agent: ClaudeDesktop, op: "dry-run"},
		{name: "collision", agent: ClaudeDesktop, servers: []string{"github", "time"},
			config: `{"mcpServers":{"github":{"command":"docker","args":["run","-i","ghcr.io/github/github-mcp-server"]},"time":{"command":"uvx","args":["mcp-server-time"]}}}`},
		{name: "missing", agent: Cursor, noInput: true},
		{name: "portcullis-home", agent: Cursor, home: true},
		{name: "invalid-json", agent: ClaudeDesktop},
		{name: "invalid-jsonc", agent: VSCode, scope: ScopeProject},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tg := f.target(t, tt.agent, tt.scope)
			var original string
			if !tt.noInput {
				in, err := os.ReadFile(filepath.Join("testdata", tt.name+".in"))
				if err != nil {
					t.Fatal(err)
				}
				original = f.expandInput(string(in))
				writeFile(t, tg.Path, original, 0o640)
			}
			for rel, data := range tt.extra {
				writeFile(t, filepath.Join(f.project, rel), data, 0o600)
			}
			if tt.config != "" {
				writeFile(t, filepath.Join(f.pc, "config.json"), tt.config, 0o600)
			}
			store := newFakeStore()
			opts := f.opts(tg, store)
			if tt.noStore {
				opts.Store = nil
			}
			opts.Servers, opts.PlainEnv = tt.servers, tt.plainEnv
			if tt.home {
				opts.Home = f.pc
			}
			before := snapshot(t, f.tmp)

			var out strings.Builder
			var rep *Report
			var err error
			switch tt.op {
			case "import":
				rep, err = Import(opts)
			case "dry-run":
				opts.DryRun = true
				rep, err = Install(opts)
			default:
				rep, err = Install(opts)
			}
			if err != nil {
				fmt.Fprintf(&out, "-- error --\n%s\n", err)
				if diff := cmp.Diff(before, snapshot(t, f.tmp)); diff != "" {
					t.Errorf("a failed %s changed files (-before +after):\n%s", tt.op, diff)
				}
				checkGolden(t, tt.name, f.scrub(out.String()))
				return
			}
			op := tt.op
			if op == "" {
				op = "install"
			}
			fmt.Fprintf(&out, "-- %s --\n%s", op, reportText(t, rep))
			if tt.op == "dry-run" {
				if diff := cmp.Diff(before, snapshot(t, f.tmp)); diff != "" {
					t.Errorf("a dry run changed files (-before +after):\n%s", diff)
				}
				if store.sets != 0 {
					t.Errorf("a dry run stored %d secrets", store.sets)
				}
				checkGolden(t, tt.name, f.scrub(out.String()))
				return
			}
			after := readString(t, tg.Path)
			fmt.Fprintf(&out, "-- agent file --\n%s", after)
			fmt.Fprintf(&out, "-- config.json --\n%s", readString(t, opts.ConfigFile))
			fmt.Fprintf(&out, "-- keychain --\n")
			for _, k := range slices.Sorted(maps.Keys(store.m)) {
				fmt.Fprintf(&out, "%s = %s\n", k, store.m[k])
			}
			if _, err := config.Load(opts.ConfigFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the written configuration does not load: %v", err)
			}
			for v := range store.m {
				if tt.op != "import" && strings.Contains(after, string(store.m[v])) {
					t.Errorf("the agent file still holds the secret of %s", v)
				}
			}

			if tt.op == "import" {
				if after != original {
					t.Errorf("import changed the agent file")
				}
				checkGolden(t, tt.name, f.scrub(out.String()))
				return
			}
			if rep.AgentChanged {
				bk := backups(t, tg.Path)
				if len(bk) != 1 {
					t.Fatalf("backups = %v, want one", bk)
				}
				if got := readString(t, bk[0]); got != original {
					t.Errorf("backup differs from the original file")
				}
				if fi, err := os.Stat(tg.Path); err != nil || fi.Mode().Perm() != 0o640 {
					t.Errorf("mode after install = %v (%v), want 0640", fi.Mode().Perm(), err)
				}
			}

			// Idempotence: a second install changes nothing, writes nothing.
			snap := snapshot(t, f.tmp)
			rep2, err := Install(opts)
			if err != nil {
				t.Fatalf("second install: %v", err)
			}
			fmt.Fprintf(&out, "-- install again --\n%s", reportText(t, rep2))
			if rep2.AgentChanged || rep2.ConfigChanged {
				t.Errorf("second install: AgentChanged=%v ConfigChanged=%v, want false", rep2.AgentChanged, rep2.ConfigChanged)
			}
			if diff := cmp.Diff(snap, snapshot(t, f.tmp)); diff != "" {
				t.Errorf("second install changed files (-first +second):\n%s", diff)
			}

			if !rep.AgentChanged {
				checkGolden(t, tt.name, f.scrub(out.String()))
				return
			}
			// Uninstall without --restore-secrets.
			urep, err := Uninstall(opts)
			if err != nil {
				t.Fatalf("uninstall: %v", err)
			}
			fmt.Fprintf(&out, "-- uninstall --\n%s", reportText(t, urep))
			restored := readString(t, tg.Path)
			if len(store.m) == 0 {
				if restored != original {
					t.Errorf("uninstall did not restore the original file:\n%s", cmp.Diff(original, restored))
				}
				fmt.Fprintf(&out, "-- agent file after uninstall --\n(identical to the original)\n")
			} else {
				fmt.Fprintf(&out, "-- agent file after uninstall --\n%s", restored)
				for v := range store.m {
					if strings.Contains(restored, string(store.m[v])) {
						t.Errorf("uninstall without --restore-secrets put back the secret of %s", v)
					}
				}
				// The advice it gave is followable: uninstall --restore-secrets
				// afterwards puts the secrets back from the store. (Secrets that
				// came from an envFile were never in the entry: nothing is left
				// out then, and no record is kept.)
				_, statErr := os.Stat(recordPath(f.pc, tg.Agent, tg.Path))
				if leftOut := strings.Contains(out.String(), ": left out: "); leftOut != (statErr == nil) {
					t.Fatalf("secrets left out: %v, but install record kept: %v", leftOut, statErr)
				}
				if statErr != nil {
					fmt.Fprintf(&out, "-- then uninstall --restore-secrets --\n(no install record left: nothing was left out)\n")
				} else {
					later := opts
					later.RestoreSecrets = true
					lrep, err := Uninstall(later)
					if err != nil {
						t.Fatalf("uninstall --restore-secrets after uninstall: %v", err)
					}
					fmt.Fprintf(&out, "-- then uninstall --restore-secrets --\n%s", reportText(t, lrep))
					if got := readString(t, tg.Path); got != original {
						t.Errorf("uninstall --restore-secrets after uninstall did not restore the original file:\n%s", cmp.Diff(original, got))
					}
					if _, err := os.Stat(recordPath(f.pc, tg.Agent, tg.Path)); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("install record left after uninstall --restore-secrets: %v", err)
					}
				}
				// From the same installed state, uninstall --restore-secrets.
				restoreSnapshot(t, f.tmp, snap)
				opts.RestoreSecrets = true
				urep, err := Uninstall(opts)
				if err != nil {
					t.Fatalf("uninstall --restore-secrets: %v", err)
				}
				fmt.Fprintf(&out, "-- uninstall --restore-secrets --\n%s", reportText(t, urep))
				if got := readString(t, tg.Path); got != original {
					t.Errorf("uninstall --restore-secrets did not restore the original file:\n%s", cmp.Diff(original, got))
				}
			}
			if _, err := os.Stat(recordPath(f.pc, tg.Agent, tg.Path)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("install record left after a full uninstall: %v", err)
			}
			checkGolden(t, tt.name, f.scrub(out.String()))
		})
	}
}
