package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// fullConfig sets every field, with characters JSON encoders like to escape.
func fullConfig() *Config {
	c := validConfig()
	s := c.Servers["inventory"]
	s.Args = append(s.Args, "--filter=<a&b>", "naïve ✓", `quote " and \ backslash`)
	s.StartupTimeout = Duration(90 * time.Second)
	c.Servers["inventory"] = s
	c.Servers["second.one"] = Server{Command: "/usr/bin/env", Args: []string{"python3"}, Restart: RestartOnChange}
	c.Settings = Settings{ApprovalTimeout: Duration(time.Minute), HoldTimeout: Duration(1500 * time.Millisecond), MaxMessageBytes: 2097152, AuditSigning: new(false)}
	return c
}

func TestMarshalRoundTrip(t *testing.T) {
	for name, c := range map[string]*Config{"full": fullConfig(), "zero": {}, "design": mustLoad(t, "testdata/design-example.json")} {
		t.Run(name, func(t *testing.T) {
			data, err := Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse(data, "round-trip.json")
			if err != nil {
				t.Fatalf("Parse(Marshal(c)): %v\n%s", err, data)
			}
			if diff := cmp.Diff(c, back, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("round trip (-before +after):\n%s", diff)
			}
			again, _ := Marshal(back)
			if !bytes.Equal(data, again) {
				t.Errorf("Marshal is not stable:\n%s\n---\n%s", data, again)
			}
		})
	}
	data, _ := Marshal(fullConfig())
	for _, want := range []string{`"--filter=<a&b>"`, `"naïve ✓"`, `"startupTimeout": "1m30s"`, `"holdTimeout": "1.5s"`, `"auditSigning": false`, "\n  \"mcpServers\": {\n"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("Marshal output lacks %q:\n%s", want, data)
		}
	}
	if empty, _ := Marshal(&Config{}); string(empty) != "{\n  \"mcpServers\": {}\n}\n" {
		t.Errorf("Marshal(empty) = %q", empty)
	}
}

func mustLoad(t *testing.T, path string) *Config {
	t.Helper()
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSaveAndLastGood(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")

	first := fullConfig()
	if err := Save(path, first); err != nil {
		t.Fatalf("first Save: %v", err)
	}
	assertMode(t, path, 0o600)
	if _, err := os.Stat(path + LastGoodSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a backup exists after the first Save (err=%v)", err)
	}
	firstBytes := readFile(t, path)
	if got := mustLoad(t, path); !cmp.Equal(first, got, cmpopts.EquateEmpty()) {
		t.Errorf("Load after Save differs: %s", cmp.Diff(first, got, cmpopts.EquateEmpty()))
	}

	second := fullConfig()
	if err := second.RemoveServer("second.one"); err != nil {
		t.Fatal(err)
	}
	if err := Save(path, second); err != nil {
		t.Fatalf("second Save: %v", err)
	}
	if got := readFile(t, path+LastGoodSuffix); !bytes.Equal(got, firstBytes) {
		t.Errorf("backup is not the previous file:\n%s", got)
	}
	assertMode(t, path+LastGoodSuffix, 0o600)
	if got := mustLoad(t, path); len(got.Servers) != 1 {
		t.Errorf("second Save not visible: %v", got.Servers)
	}

	// A hand-broken file is replaced, but the backup keeps the last good one.
	if err := os.WriteFile(path, []byte(`{"mcpServers": {`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Save(path, first); err != nil {
		t.Fatalf("Save over a broken file: %v", err)
	}
	if got := readFile(t, path+LastGoodSuffix); !bytes.Equal(got, firstBytes) {
		t.Errorf("backup was replaced by a broken file:\n%s", got)
	}
	assertMode(t, path, 0o600)

	// An invalid config is refused and nothing is written.
	before := readFile(t, path)
	bad := fullConfig()
	setServer(bad, func(s *Server) { s.Restart = "sometimes" })
	err := Save(path, bad)
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("Save(invalid) err = %v, want ErrInvalid", err)
	}
	if !bytes.Equal(readFile(t, path), before) || !bytes.Equal(readFile(t, path+LastGoodSuffix), firstBytes) {
		t.Errorf("Save(invalid) changed files")
	}
	assertOnlyFiles(t, dir, "config.json", "config.json.last-good")
}

func TestSaveFailureLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if err := os.Mkdir(path, 0o700); err != nil { // rename onto a directory fails
		t.Fatal(err)
	}
	if err := Save(path, fullConfig()); err == nil {
		t.Fatal("Save onto a directory succeeded")
	}
	assertOnlyFiles(t, dir, "config.json")
}

func TestSaveThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "dotfiles", "portcullis.json")
	if err := os.MkdirAll(filepath.Dir(real), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "config.json")
	if err := os.Symlink(filepath.Join("dotfiles", "portcullis.json"), link); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := Save(link, fullConfig()); err != nil {
			t.Fatalf("Save: %v", err)
		}
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link replaced by a file (err=%v)", err)
	}
	mustLoad(t, real)
	mustLoad(t, real+LastGoodSuffix)
}

// TestSaveAtomicForReaders has a reader parse the file while a writer replaces it;
// with a plain truncate-and-write the reader would see partial files.
func TestSaveAtomicForReaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	a, b := fullConfig(), validConfig()
	if err := Save(path, a); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := Load(path); err != nil {
				t.Errorf("reader saw a broken file: %v", err)
				return
			}
		}
	})
	for i := range 30 {
		c := a
		if i%2 == 1 {
			c = b
		}
		if err := Save(path, c); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s mode = %v, want %v", filepath.Base(path), got, want)
	}
}

func assertOnlyFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files in dir (-want +got):\n%s", diff)
	}
}

// TestLoadForEdit: a missing file is an empty configuration to start from,
// unless its last good copy exists: then the edit is refused, so that it
// cannot replace every server the daemon keeps in force.
func TestLoadForEdit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	c, err := LoadForEdit(path)
	if err != nil || len(c.Servers) != 0 {
		t.Fatalf("LoadForEdit of a missing file: %+v, %v; want an empty configuration", c, err)
	}
	if err := Save(path, &Config{Servers: map[string]Server{"a": {Command: "/bin/true"}}}); err != nil {
		t.Fatal(err)
	}
	if err := Save(path, &Config{Servers: map[string]Server{"a": {Command: "/bin/true"}, "b": {Command: "/bin/true"}}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadForEdit(path); !errors.Is(err, ErrMissingWithBackup) || !strings.Contains(err.Error(), "cp "+path+LastGoodSuffix+" "+path) {
		t.Errorf("LoadForEdit with only the last good copy: %v, want ErrMissingWithBackup saying how to restore", err)
	}

	// A configuration reached through a link whose target is gone, with the
	// copy beside the link (where a daemon given the link's path keeps it).
	link := filepath.Join(dir, "linked.json")
	if err := os.Symlink(filepath.Join(dir, "target", "config.json"), link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(link+LastGoodSuffix, []byte(`{"mcpServers":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadForEdit(link); !errors.Is(err, ErrMissingWithBackup) {
		t.Errorf("LoadForEdit of a link to a missing file, with the copy beside the link: %v, want ErrMissingWithBackup", err)
	}
}
