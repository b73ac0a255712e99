package daemon

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/paths"
)

// configHome is a data directory for New.
func configHome(t *testing.T) paths.Dirs {
	t.Helper()
	dir := t.TempDir()
	dirs := paths.Dirs{Config: filepath.Join(dir, "config"), State: filepath.Join(dir, "state"), Runtime: filepath.Join(dir, "run")}
	if err := dirs.Ensure(); err != nil {
		t.Fatal(err)
	}
	return dirs
}

func saveServers(t *testing.T, path string, labels ...string) []byte {
	t.Helper()
	cfg := &config.Config{Servers: map[string]config.Server{}}
	for _, l := range labels {
		cfg.Servers[l] = config.Server{Command: "/bin/cat"}
	}
	if err := config.Save(path, cfg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readOrNil(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

// TestStartWithLastGoodCopy: a daemon that starts while config.json is
// missing (removed, or a symbolic link to nothing) but its last good copy
// exists runs with the copy, says so in Status with the reason and how to
// restore it, writes neither file, keeps the copy in force on every later
// read while the file stays missing, and takes the file again once it is
// back.
func TestStartWithLastGoodCopy(t *testing.T) {
	for _, how := range []string{"removed", "dangling link, copy beside the link", "dangling link, copy beside its target"} {
		t.Run(how, func(t *testing.T) {
			dirs := configHome(t)
			path := dirs.ConfigFile()
			good := saveServers(t, path, "good")
			_, err := New(Options{Dirs: dirs}) // keeps config.json.last-good
			if err != nil {
				t.Fatal(err)
			}
			copyPath := path + config.LastGoodSuffix
			if !bytes.Equal(readOrNil(copyPath), good) {
				t.Fatalf("the first daemon kept no last good copy")
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			restoreTo := path
			if how != "removed" {
				target := filepath.Join(filepath.Dir(path), "elsewhere", "config.json")
				if err := os.Symlink(target, path); err != nil {
					t.Fatal(err)
				}
				restoreTo = target
				if how == "dangling link, copy beside its target" {
					if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(copyPath, target+config.LastGoodSuffix); err != nil {
						t.Fatal(err)
					}
					copyPath = target + config.LastGoodSuffix
				}
			}

			d, err := New(Options{Dirs: dirs})
			if err != nil {
				t.Fatalf("New with only the last good copy: %v", err)
			}
			for i := range 2 { // the start's view, then a read of the file again
				rep := d.Status()
				if len(rep.Servers) != 1 || rep.Servers[0].Label != "good" {
					t.Errorf("status %d lists servers %+v, want good from the last good copy", i, rep.Servers)
				}
				for _, want := range []string{path, copyPath, "cp " + copyPath + " " + restoreTo} {
					if !strings.Contains(rep.ConfigError, want) {
						t.Errorf("status %d configError %q does not name %q", i, rep.ConfigError, want)
					}
				}
				if cfg, err := d.config(); !errors.Is(err, fs.ErrNotExist) || cfg.Servers["good"].Command != "/bin/cat" {
					t.Errorf("config() = %+v, %v; want server good and an error wrapping fs.ErrNotExist", cfg, err)
				}
			}
			if _, err := os.Stat(restoreTo); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the daemon wrote %s: %v", restoreTo, err)
			}
			if !bytes.Equal(readOrNil(copyPath), good) {
				t.Errorf("the last good copy changed:\n%s", readOrNil(copyPath))
			}

			// Restored: the file is in force again, and the error is gone.
			if err := os.MkdirAll(filepath.Dir(restoreTo), 0o700); err != nil {
				t.Fatal(err)
			}
			saveServers(t, restoreTo, "good", "more")
			if rep := d.Status(); rep.ConfigError != "" || len(rep.Servers) != 2 {
				t.Errorf("after the file is back: configError %q, servers %+v", rep.ConfigError, rep.Servers)
			}
			// Gone again: what is in force is the file that loaded last,
			// and the copy is no longer named as what the daemon started with.
			if err := os.Remove(restoreTo); err != nil {
				t.Fatal(err)
			}
			if rep := d.Status(); len(rep.Servers) != 2 || rep.ConfigError == "" || strings.Contains(rep.ConfigError, "started with") {
				t.Errorf("file gone after it loaded: configError %q, servers %+v", rep.ConfigError, rep.Servers)
			}
		})
	}
}

// TestStartConfigRefusals: at start, a config.json that exists but does
// not parse is refused, naming file:line:col, even with a last good copy
// beside it, and neither file is touched; a missing file whose copy does
// not load is refused naming the copy; a missing file without a copy means
// no servers and no error.
func TestStartConfigRefusals(t *testing.T) {
	t.Run("invalid file", func(t *testing.T) {
		dirs := configHome(t)
		path := dirs.ConfigFile()
		good := saveServers(t, path, "good")
		if err := os.WriteFile(path+config.LastGoodSuffix, good, 0o600); err != nil {
			t.Fatal(err)
		}
		bad := []byte("{\n  \"mcpServers\": {,\n}\n")
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := New(Options{Dirs: dirs})
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), path+":2:") {
			t.Errorf("New with an invalid file: %v, want a syntax error at %s:2:", err, path)
		}
		if !bytes.Equal(readOrNil(path), bad) || !bytes.Equal(readOrNil(path+config.LastGoodSuffix), good) {
			t.Error("a file was changed")
		}
	})
	t.Run("missing file, broken copy", func(t *testing.T) {
		dirs := configHome(t)
		path := dirs.ConfigFile()
		if err := os.WriteFile(path+config.LastGoodSuffix, []byte("{,"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := New(Options{Dirs: dirs})
		if err == nil || !strings.Contains(err.Error(), path+config.LastGoodSuffix+":1:") || !strings.Contains(err.Error(), "is missing") {
			t.Errorf("New with a broken copy: %v, want an error naming the copy's line and column", err)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("config.json was written: %v", err)
		}
	})
	t.Run("missing file, no copy", func(t *testing.T) {
		dirs := configHome(t)
		d, err := New(Options{Dirs: dirs})
		if err != nil {
			t.Fatal(err)
		}
		if rep := d.Status(); rep.ConfigError != "" || len(rep.Servers) != 0 {
			t.Errorf("no file: configError %q, servers %+v; want none and no error", rep.ConfigError, rep.Servers)
		}
		if _, err := os.Stat(dirs.ConfigFile() + config.LastGoodSuffix); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("an empty configuration was kept as the last good copy: %v", err)
		}
	})
}
