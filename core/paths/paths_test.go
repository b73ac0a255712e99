package paths

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func env(kv ...string) func(string) string {
	m := make(map[string]string)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestResolve(t *testing.T) {
	long := "/home/" + strings.Repeat("x", 90)
	tests := []struct {
		name    string
		sys     system
		want    Dirs
		wantErr error // matched with errors.Is; errAny for any error
	}{
		{"macOS", system{goos: "darwin", getenv: env(), home: "/Users/dev"}, Dirs{
			Config:  "/Users/dev/Library/Application Support/Portcullis",
			State:   "/Users/dev/Library/Application Support/Portcullis",
			Runtime: "/Users/dev/Library/Application Support/Portcullis/run",
		}, nil},
		{"macOS ignores XDG", system{goos: "darwin", getenv: env("XDG_CONFIG_HOME", "/x", "XDG_RUNTIME_DIR", "/r"), home: "/Users/dev"}, Dirs{
			Config:  "/Users/dev/Library/Application Support/Portcullis",
			State:   "/Users/dev/Library/Application Support/Portcullis",
			Runtime: "/Users/dev/Library/Application Support/Portcullis/run",
		}, nil},
		{"Linux defaults", system{goos: "linux", getenv: env(), home: "/home/dev"}, Dirs{
			Config:  "/home/dev/.config/portcullis",
			State:   "/home/dev/.local/state/portcullis",
			Runtime: "/home/dev/.local/state/portcullis/run",
		}, nil},
		{"Linux XDG", system{goos: "linux", getenv: env("XDG_CONFIG_HOME", "/c", "XDG_STATE_HOME", "/s/", "XDG_RUNTIME_DIR", "/run/user/1000"), home: "/home/dev"}, Dirs{
			Config:  "/c/portcullis",
			State:   "/s/portcullis",
			Runtime: "/run/user/1000/portcullis",
		}, nil},
		{"Linux relative XDG ignored", system{goos: "linux", getenv: env("XDG_CONFIG_HOME", "rel", "XDG_STATE_HOME", "./s", "XDG_RUNTIME_DIR", "run"), home: "/home/dev"}, Dirs{
			Config:  "/home/dev/.config/portcullis",
			State:   "/home/dev/.local/state/portcullis",
			Runtime: "/home/dev/.local/state/portcullis/run",
		}, nil},
		{"Linux XDG without home", system{goos: "linux", getenv: env("XDG_CONFIG_HOME", "/c", "XDG_STATE_HOME", "/s")}, Dirs{
			Config: "/c/portcullis", State: "/s/portcullis", Runtime: "/s/portcullis/run",
		}, nil},
		{"FreeBSD uses XDG", system{goos: "freebsd", getenv: env(), home: "/home/dev"}, Dirs{
			Config: "/home/dev/.config/portcullis", State: "/home/dev/.local/state/portcullis", Runtime: "/home/dev/.local/state/portcullis/run",
		}, nil},
		{"PORTCULLIS_HOME wins on Linux", system{goos: "linux", getenv: env(EnvHome, "/tmp/ph/", "XDG_RUNTIME_DIR", "/run/user/1"), home: "/home/dev"}, Dirs{
			Config: "/tmp/ph", State: "/tmp/ph", Runtime: "/tmp/ph/run",
		}, nil},
		{"PORTCULLIS_HOME wins on macOS", system{goos: "darwin", getenv: env(EnvHome, "/tmp/ph")}, Dirs{
			Config: "/tmp/ph", State: "/tmp/ph", Runtime: "/tmp/ph/run",
		}, nil},
		{"relative PORTCULLIS_HOME", system{goos: "linux", getenv: env(EnvHome, "ph"), home: "/home/dev"}, Dirs{}, errAny},
		{"no home on Linux", system{goos: "linux", getenv: env("XDG_CONFIG_HOME", "/c")}, Dirs{}, ErrNoHome},
		{"no home on macOS", system{goos: "darwin", getenv: env()}, Dirs{}, ErrNoHome},
		{"windows", system{goos: "windows", getenv: env(), home: `C:\Users\dev`}, Dirs{}, ErrUnsupported},
		{"long home moves the socket to XDG_RUNTIME_DIR", system{goos: "linux", getenv: env(EnvHome, long, "XDG_RUNTIME_DIR", "/run/user/501"), home: "/home/dev"}, Dirs{
			Config: long, State: long, Runtime: "/run/user/501/portcullis-" + hash8(long+"/run"),
		}, nil},
		{"long home, no XDG_RUNTIME_DIR: the cache directory, never /tmp", system{goos: "linux", getenv: env(EnvHome, long), home: "/home/dev"}, Dirs{
			Config: long, State: long, Runtime: "/home/dev/.cache/portcullis-" + hash8(long+"/run"),
		}, nil},
		{"long home, XDG_CACHE_HOME", system{goos: "linux", getenv: env(EnvHome, long, "XDG_CACHE_HOME", "/c"), home: "/home/dev"}, Dirs{
			Config: long, State: long, Runtime: "/c/portcullis-" + hash8(long+"/run"),
		}, nil},
		{"long home on macOS: ~/Library/Caches", system{goos: "darwin", getenv: env(EnvHome, long), home: "/Users/dev"}, Dirs{
			Config: long, State: long, Runtime: "/Users/dev/Library/Caches/portcullis-" + hash8(long+"/run"),
		}, nil},
		{"socket path of exactly 103 bytes stays", system{goos: "linux", getenv: env(EnvHome, "/"+strings.Repeat("h", 103-len("/run/portcullis.sock")-1)), home: "/home/dev"}, Dirs{
			Config: "/" + strings.Repeat("h", 82), State: "/" + strings.Repeat("h", 82), Runtime: "/" + strings.Repeat("h", 82) + "/run",
		}, nil},
		{"socket path of 104 bytes moves", system{goos: "linux", getenv: env(EnvHome, "/"+strings.Repeat("h", 83)), home: "/home/dev"}, Dirs{
			Config: "/" + strings.Repeat("h", 83), State: "/" + strings.Repeat("h", 83), Runtime: "/home/dev/.cache/portcullis-" + hash8("/"+strings.Repeat("h", 83)+"/run"),
		}, nil},
		{"every private directory too long as well", system{goos: "linux", getenv: env(EnvHome, long, "XDG_RUNTIME_DIR", long), home: long}, Dirs{}, errAny},
		{"long home and no home directory at all", system{goos: "linux", getenv: env(EnvHome, long)}, Dirs{}, errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.sys.getenv == nil {
				tt.sys.getenv = env()
			}
			got, err := resolve(tt.sys)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("resolve: %v", err)
			case tt.wantErr == errAny && err == nil, tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Fatalf("resolve err = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("dirs (-want +got):\n%s", diff)
			}
			if err == nil && len(got.Socket()) > MaxSocketPath {
				t.Errorf("socket path %d bytes long", len(got.Socket()))
			}
		})
	}
}

var errAny = errors.New("any error")

// hash8 is the first 8 hex digits of the SHA-256 of s.
func hash8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}

func TestLongHomesGetDistinctSockets(t *testing.T) {
	a, errA := resolve(system{goos: "darwin", getenv: env(EnvHome, "/var/folders/zz/"+strings.Repeat("a", 80)+"/T/TestA/001"), home: "/Users/dev"})
	b, errB := resolve(system{goos: "darwin", getenv: env(EnvHome, "/var/folders/zz/"+strings.Repeat("a", 80)+"/T/TestB/001"), home: "/Users/dev"})
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if a.Socket() == b.Socket() {
		t.Errorf("two homes share socket %s", a.Socket())
	}
}

func TestFileNames(t *testing.T) {
	d := Dirs{Config: "/c", State: "/s", Runtime: "/r"}
	if d.ConfigFile() != "/c/config.json" || d.Socket() != "/r/portcullis.sock" {
		t.Errorf("ConfigFile=%s Socket=%s", d.ConfigFile(), d.Socket())
	}
}

func TestResolveUsesEnvironment(t *testing.T) {
	home := t.TempDir()
	t.Setenv(EnvHome, home)
	d, err := Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if d.Config != home || d.ConfigFile() != filepath.Join(home, "config.json") {
		t.Errorf("Resolve with %s=%s gave %+v", EnvHome, home, d)
	}
}

func TestEnsure(t *testing.T) {
	root := t.TempDir()
	d := Dirs{Config: filepath.Join(root, "c"), State: filepath.Join(root, "s", "deep"), Runtime: filepath.Join(root, "r")}
	if err := d.Ensure(); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	for _, dir := range []string{d.Config, d.State, d.Runtime, filepath.Join(root, "s")} {
		assertPerm(t, dir, 0o700)
	}
	// A runtime directory someone loosened is made private again.
	if err := os.Chmod(d.Runtime, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(); err != nil {
		t.Fatalf("Ensure again: %v", err)
	}
	assertPerm(t, d.Runtime, 0o700)
	// Ensure is idempotent and keeps existing files.
	if err := os.WriteFile(d.ConfigFile(), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.ConfigFile()); err != nil {
		t.Errorf("config file lost: %v", err)
	}
}

func TestEnsureRefusesSymlinkedRuntime(t *testing.T) {
	root := t.TempDir()
	other := filepath.Join(root, "elsewhere")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	d := Dirs{Config: root, State: root, Runtime: filepath.Join(root, "run")}
	if err := os.Symlink(other, d.Runtime); err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(); !errors.Is(err, ErrInsecure) {
		t.Errorf("Ensure with a symlinked runtime dir: err = %v, want ErrInsecure", err)
	}
}

func TestEnsureRefusesForeignOwner(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	root := t.TempDir()
	d := Dirs{Config: root, State: root, Runtime: filepath.Join(root, "run")}
	if err := os.Mkdir(d.Runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d.Runtime, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(); !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "uid 4242") {
		t.Errorf("Ensure with a foreign runtime dir: err = %v, want ErrInsecure naming uid 4242", err)
	}
}

func assertPerm(t *testing.T, dir string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s mode = %v, want %v", dir, got, want)
	}
}
