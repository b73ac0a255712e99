// Package paths decides where Portcullis keeps its files: the configuration
// directory (config.json), the state directory (audit log, catalog cache, logs) and
// the runtime directory that holds the daemon's control socket.
//
// Layout (docs/DESIGN.md, "Data on disk"):
//
//   - PORTCULLIS_HOME, when set, overrides everything: Config = State = $PORTCULLIS_HOME,
//     Runtime = $PORTCULLIS_HOME/run. It must be an absolute path.
//   - macOS: Config = State = ~/Library/Application Support/Portcullis,
//     Runtime = State/run.
//   - Linux and other Unix systems (XDG Base Directory Specification 0.8):
//     Config = $XDG_CONFIG_HOME/portcullis (default ~/.config/portcullis),
//     State = $XDG_STATE_HOME/portcullis (default ~/.local/state/portcullis),
//     Runtime = $XDG_RUNTIME_DIR/portcullis when XDG_RUNTIME_DIR is set, else State/run.
//     As the specification asks, an XDG variable holding a relative path is ignored.
//
// A Unix socket path must fit in sun_path, 104 bytes on macOS including the final NUL
// (108 on Linux). When Runtime/portcullis.sock would be longer than [MaxSocketPath],
// Runtime moves to a directory of this user's own, never to a shared one such as
// /tmp, where another user could create it first: the first that fits of
// $XDG_RUNTIME_DIR/portcullis-HASH (when XDG_RUNTIME_DIR is set) and
// CACHE/portcullis-HASH, CACHE being $XDG_CACHE_HOME or ~/.cache (Linux and other
// Unix systems) or ~/Library/Caches (macOS). HASH is the first 8 hex digits of
// the SHA-256 of the runtime directory it replaces, so that two PORTCULLIS_HOME
// trees (parallel tests) never share a socket. [Dirs.Ensure] refuses a runtime
// directory that another user created, and the CLI and the shim refuse to talk
// through one (package control).
package paths

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

const (
	// ConfigFileName is the name of the configuration file inside Dirs.Config.
	ConfigFileName = "config.json"
	// SocketName is the name of the daemon's control socket inside Dirs.Runtime.
	SocketName = "portcullis.sock"
	// MaxSocketPath is the longest socket path used, in bytes: macOS's sun_path
	// holds 104 bytes including the terminating NUL.
	MaxSocketPath = 103
	// EnvHome is the environment variable that overrides every directory.
	EnvHome = "PORTCULLIS_HOME"
)

var (
	// ErrUnsupported is returned by Resolve on systems without Unix-style
	// directories for Portcullis (such as windows); the message names the system.
	ErrUnsupported = errors.New("operating system not supported")
	// ErrNoHome is returned when neither PORTCULLIS_HOME nor a home directory (nor,
	// on Linux, the XDG variables that would make one unnecessary) is available.
	ErrNoHome = errors.New("no home directory")
	// ErrInsecure is returned by Ensure when the runtime directory is not a
	// directory owned by the current user.
	ErrInsecure = errors.New("runtime directory is not safe to use")
)

// Dirs are Portcullis's directories, all absolute.
type Dirs struct {
	// Config holds config.json.
	Config string
	// State holds the audit log, catalog cache and logs.
	State string
	// Runtime holds the control socket; it must be private (mode 0700).
	Runtime string
}

// ConfigFile returns the path of the configuration file, Config/config.json.
func (d Dirs) ConfigFile() string { return filepath.Join(d.Config, ConfigFileName) }

// Socket returns the path of the daemon's control socket, Runtime/portcullis.sock.
// Resolve guarantees it is at most MaxSocketPath bytes long.
func (d Dirs) Socket() string { return filepath.Join(d.Runtime, SocketName) }

// Resolve returns the directories for this user and system from the environment (see
// the package documentation). It does not create them; call [Dirs.Ensure].
func Resolve() (Dirs, error) {
	home, _ := os.UserHomeDir()
	return resolve(system{
		goos:   runtime.GOOS,
		getenv: os.Getenv,
		home:   home,
	})
}

// system is what resolve reads from the machine, injected for tests.
type system struct {
	goos   string
	getenv func(string) string
	home   string
}

func resolve(s system) (Dirs, error) {
	var d Dirs
	switch {
	case s.getenv(EnvHome) != "":
		h := filepath.Clean(s.getenv(EnvHome))
		if !filepath.IsAbs(h) {
			return Dirs{}, fmt.Errorf("%s must be an absolute path, not %q", EnvHome, s.getenv(EnvHome))
		}
		d = Dirs{Config: h, State: h, Runtime: filepath.Join(h, "run")}
	case s.goos == "windows" || s.goos == "plan9" || s.goos == "js" || s.goos == "wasip1":
		return Dirs{}, fmt.Errorf("resolving Portcullis directories on %s: %w", s.goos, ErrUnsupported)
	case s.goos == "darwin" || s.goos == "ios":
		if !filepath.IsAbs(s.home) {
			return Dirs{}, fmt.Errorf("resolving Portcullis directories: %w (set %s)", ErrNoHome, EnvHome)
		}
		dir := filepath.Join(s.home, "Library", "Application Support", "Portcullis")
		d = Dirs{Config: dir, State: dir, Runtime: filepath.Join(dir, "run")}
	default:
		base := func(env, def string) (string, error) {
			if v := s.getenv(env); filepath.IsAbs(v) {
				return filepath.Join(v, "portcullis"), nil
			}
			if !filepath.IsAbs(s.home) {
				return "", fmt.Errorf("resolving Portcullis directories: %w (set %s or %s)", ErrNoHome, env, EnvHome)
			}
			return filepath.Join(s.home, def, "portcullis"), nil
		}
		var err error
		if d.Config, err = base("XDG_CONFIG_HOME", ".config"); err != nil {
			return Dirs{}, err
		}
		if d.State, err = base("XDG_STATE_HOME", filepath.Join(".local", "state")); err != nil {
			return Dirs{}, err
		}
		d.Runtime = filepath.Join(d.State, "run")
		if v := s.getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(v) {
			d.Runtime = filepath.Join(v, "portcullis")
		}
	}
	if len(d.Socket()) > MaxSocketPath {
		sum := sha256.Sum256([]byte(d.Runtime))
		name := "portcullis-" + hex.EncodeToString(sum[:4])
		var tried []string
		for _, parent := range privateParents(s) {
			dir := filepath.Join(parent, name)
			if len(filepath.Join(dir, SocketName)) <= MaxSocketPath {
				d.Runtime = dir
				return d, nil
			}
			tried = append(tried, dir)
		}
		return Dirs{}, fmt.Errorf("resolving Portcullis directories: socket path %s is longer than %d bytes, and so would it be in %v; set %s to a shorter path", d.Socket(), MaxSocketPath, tried, EnvHome)
	}
	return d, nil
}

// privateParents are the directories of this user's own where a runtime
// directory whose path is too long moves, in order of preference.
func privateParents(s system) []string {
	var out []string
	if v := s.getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(v) && s.goos != "darwin" && s.goos != "ios" {
		out = append(out, filepath.Clean(v))
	}
	switch {
	case s.goos == "darwin" || s.goos == "ios":
		if filepath.IsAbs(s.home) {
			out = append(out, filepath.Join(s.home, "Library", "Caches"))
		}
	case filepath.IsAbs(s.getenv("XDG_CACHE_HOME")):
		out = append(out, filepath.Clean(s.getenv("XDG_CACHE_HOME")))
	case filepath.IsAbs(s.home):
		out = append(out, filepath.Join(s.home, ".cache"))
	}
	return out
}

// Ensure creates the directories that do not exist, with mode 0700 (and any missing
// parents with 0700 too). The runtime directory must be a real directory (not a
// symbolic link) owned by the current user: if its mode is not 0700 Ensure sets it;
// if another user owns it Ensure returns an error wrapping [ErrInsecure], because
// that user could replace the socket.
func (d Dirs) Ensure() error {
	for _, dir := range []string{d.Config, d.State, d.Runtime} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	fi, err := os.Lstat(d.Runtime)
	if err != nil {
		return fmt.Errorf("checking runtime directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("runtime directory %s is a %v, not a directory: %w", d.Runtime, fi.Mode().Type(), ErrInsecure)
	}
	if owner, ok := ownerUID(fi); ok && owner != os.Getuid() {
		return fmt.Errorf("runtime directory %s is owned by uid %d, not %d: %w", d.Runtime, owner, os.Getuid(), ErrInsecure)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(d.Runtime, 0o700); err != nil {
			return fmt.Errorf("making runtime directory private: %w", err)
		}
	}
	return nil
}
