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

func sys(goos, home string, kv ...string) System {
	return System{GOOS: goos, Getenv: env(kv...), Person: Person{UID: 1000, Home: home}}
}

func withRun(s System, dir string) System { s.RuntimeDir = dir; return s }

func TestResolve(t *testing.T) {
	long := "/home/" + strings.Repeat("x", 90)
	xdg := []string{"XDG_CONFIG_HOME", "/c", "XDG_STATE_HOME", "/s/", "XDG_RUNTIME_DIR", "/run/user/1000", "XDG_CACHE_HOME", "/x", "HOME", "/elsewhere"}
	tests := []struct {
		name    string
		sys     System
		want    Dirs
		wantErr error // matched with errors.Is; errAny for any error
	}{
		{"macOS", sys("darwin", "/Users/dev"), Dirs{
			Config:  "/Users/dev/Library/Application Support/Portcullis",
			State:   "/Users/dev/Library/Application Support/Portcullis",
			Runtime: "/Users/dev/Library/Application Support/Portcullis/run",
		}, nil},
		{"macOS ignores XDG and HOME", sys("darwin", "/Users/dev", xdg...), Dirs{
			Config:  "/Users/dev/Library/Application Support/Portcullis",
			State:   "/Users/dev/Library/Application Support/Portcullis",
			Runtime: "/Users/dev/Library/Application Support/Portcullis/run",
		}, nil},
		{"Linux without a runtime directory", sys("linux", "/home/dev"), Dirs{
			Config:  "/home/dev/.config/portcullis",
			State:   "/home/dev/.local/state/portcullis",
			Runtime: "/home/dev/.local/state/portcullis/run",
		}, nil},
		{"Linux with /run/user/UID", withRun(sys("linux", "/home/dev"), "/run/user/1000"), Dirs{
			Config:  "/home/dev/.config/portcullis",
			State:   "/home/dev/.local/state/portcullis",
			Runtime: "/run/user/1000/portcullis",
		}, nil},
		{"Linux ignores the caller's XDG and HOME", sys("linux", "/home/dev", xdg...), Dirs{
			Config:  "/home/dev/.config/portcullis",
			State:   "/home/dev/.local/state/portcullis",
			Runtime: "/home/dev/.local/state/portcullis/run",
		}, nil},
		{"Linux ignores XDG_RUNTIME_DIR beside /run/user/UID", withRun(sys("linux", "/home/dev", "XDG_RUNTIME_DIR", "/tmp/r"), "/run/user/1000"), Dirs{
			Config:  "/home/dev/.config/portcullis",
			State:   "/home/dev/.local/state/portcullis",
			Runtime: "/run/user/1000/portcullis",
		}, nil},
		{"FreeBSD", sys("freebsd", "/home/dev"), Dirs{
			Config: "/home/dev/.config/portcullis", State: "/home/dev/.local/state/portcullis", Runtime: "/home/dev/.local/state/portcullis/run",
		}, nil},
		{"PORTCULLIS_HOME wins on Linux", withRun(sys("linux", "/home/dev", EnvHome, "/tmp/ph/"), "/run/user/1000"), Dirs{
			Config: "/tmp/ph", State: "/tmp/ph", Runtime: "/tmp/ph/run",
		}, nil},
		{"PORTCULLIS_HOME wins on macOS", sys("darwin", "", EnvHome, "/tmp/ph"), Dirs{
			Config: "/tmp/ph", State: "/tmp/ph", Runtime: "/tmp/ph/run",
		}, nil},
		{"relative PORTCULLIS_HOME", sys("linux", "/home/dev", EnvHome, "ph"), Dirs{}, errAny},
		{"no home on Linux", sys("linux", "", "XDG_CONFIG_HOME", "/c", "HOME", "/h"), Dirs{}, ErrNoHome},
		{"no home on macOS", sys("darwin", ""), Dirs{}, ErrNoHome},
		{"windows", sys("windows", `C:\Users\dev`), Dirs{}, ErrUnsupported},
		{"long home moves the socket to /run/user/UID", withRun(sys("linux", "/home/dev", EnvHome, long), "/run/user/501"), Dirs{
			Config: long, State: long, Runtime: "/run/user/501/portcullis-" + hash8(long+"/run"),
		}, nil},
		{"long home, no runtime directory: the cache directory, never /tmp", sys("linux", "/home/dev", EnvHome, long, "XDG_RUNTIME_DIR", "/run/user/1000", "XDG_CACHE_HOME", "/c"), Dirs{
			Config: long, State: long, Runtime: "/home/dev/.cache/portcullis-" + hash8(long+"/run"),
		}, nil},
		{"long home on macOS: ~/Library/Caches", sys("darwin", "/Users/dev", EnvHome, long), Dirs{
			Config: long, State: long, Runtime: "/Users/dev/Library/Caches/portcullis-" + hash8(long+"/run"),
		}, nil},
		{"socket path of exactly 103 bytes stays", sys("linux", "/home/dev", EnvHome, "/"+strings.Repeat("h", 103-len("/run/portcullis.sock")-1)), Dirs{
			Config: "/" + strings.Repeat("h", 82), State: "/" + strings.Repeat("h", 82), Runtime: "/" + strings.Repeat("h", 82) + "/run",
		}, nil},
		{"socket path of 104 bytes moves", sys("linux", "/home/dev", EnvHome, "/"+strings.Repeat("h", 83)), Dirs{
			Config: "/" + strings.Repeat("h", 83), State: "/" + strings.Repeat("h", 83), Runtime: "/home/dev/.cache/portcullis-" + hash8("/"+strings.Repeat("h", 83)+"/run"),
		}, nil},
		{"every private directory too long as well", withRun(sys("linux", long, EnvHome, long), long), Dirs{}, errAny},
		{"long home and no home directory at all", sys("linux", "", EnvHome, long), Dirs{}, errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why, err := resolve(tt.sys)
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
			if err == nil && why == "" {
				t.Errorf("no reason given for %s", got.Runtime)
			}
		})
	}
}

// TestUserRuntimeDir: /run/user/UID counts only when it is a real directory
// of this user with mode 0700; a loose, foreign or symlinked one does not.
func TestUserRuntimeDir(t *testing.T) {
	root := t.TempDir()
	uid := os.Getuid()
	mk := func(name string, mode os.FileMode) string {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	if !privateDirOf(mk("ok", 0o700), uid) {
		t.Error("a 0700 directory of this user is not accepted")
	}
	if privateDirOf(mk("loose", 0o755), uid) {
		t.Error("a 0755 directory is accepted")
	}
	if privateDirOf(mk("foreign", 0o700), uid+4242) {
		t.Error("a directory of another uid is accepted")
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(filepath.Join(root, "ok"), link); err != nil {
		t.Fatal(err)
	}
	if privateDirOf(link, uid) {
		t.Error("a symbolic link is accepted")
	}
	if privateDirOf(filepath.Join(root, "missing"), uid) {
		t.Error("a missing directory is accepted")
	}
}

var errAny = errors.New("any error")

// hash8 is the first 8 hex digits of the SHA-256 of s.
func hash8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}

func TestLongHomesGetDistinctSockets(t *testing.T) {
	a, _, errA := resolve(sys("darwin", "/Users/dev", EnvHome, "/var/folders/zz/"+strings.Repeat("a", 80)+"/T/TestA/001"))
	b, _, errB := resolve(sys("darwin", "/Users/dev", EnvHome, "/var/folders/zz/"+strings.Repeat("a", 80)+"/T/TestB/001"))
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
