// Package paths decides where Portcullis keeps its files: the configuration
// directory (config.json), the state directory (audit log, catalog cache, logs) and
// the runtime directory that holds the daemon's control socket.
//
// Every place comes from the person (the user ID and its entry in the user
// database) and the platform, never from the caller's environment: the CLI, the
// menu-bar app and every shim an agent launches find the same daemon whatever
// HOME or XDG_* variables their caller gave them (docs/DESIGN.md, "Data on
// disk"). Layout:
//
//   - PORTCULLIS_HOME, when set, overrides everything: Config = State = $PORTCULLIS_HOME,
//     Runtime = $PORTCULLIS_HOME/run. It must be an absolute path. It is meant for
//     tests and for a second, separate installation: a daemon is found through it
//     only by callers that set it too.
//   - HOME below is the home directory of the user's entry in the user database
//     (/etc/passwd or its equivalent), not $HOME; $HOME is used only when the user
//     has no entry.
//   - macOS: Config = State = HOME/Library/Application Support/Portcullis,
//     Runtime = State/run.
//   - Linux and other Unix systems: Config = HOME/.config/portcullis,
//     State = HOME/.local/state/portcullis (the XDG Base Directory defaults, whatever
//     XDG_CONFIG_HOME and XDG_STATE_HOME say), Runtime = /run/user/UID/portcullis when
//     /run/user/UID is a directory of this user with mode 0700 (the user's runtime
//     directory, made by systemd-logind or elogind for each session), else State/run.
//     XDG_RUNTIME_DIR is not read: an agent may launch a shim without it, and it
//     would then look for the daemon elsewhere.
//
// A Unix socket path must fit in sun_path, 104 bytes on macOS including the final NUL
// (108 on Linux). When Runtime/portcullis.sock would be longer than [MaxSocketPath],
// Runtime moves to a directory of this user's own, never to a shared one such as
// /tmp, where another user could create it first: the first that fits of
// /run/user/UID/portcullis-HASH (when that directory is the user's) and
// CACHE/portcullis-HASH, CACHE being HOME/.cache (Linux and other Unix systems) or
// HOME/Library/Caches (macOS). HASH is the first 8 hex digits of the SHA-256 of the
// runtime directory it replaces, so that two PORTCULLIS_HOME trees (parallel tests)
// never share a socket. [Dirs.Ensure] refuses a runtime directory that another user
// created, and the CLI and the shim refuse to talk through one (package control).
package paths

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

const (
	// ConfigFileName is the name of the configuration file inside Dirs.Config.
	ConfigFileName = "config.json"
	// SocketName is the name of the daemon's control socket inside Dirs.Runtime.
	SocketName = "portcullis.sock"
	// LockFileName is the name of the daemon's lock file inside Dirs.State.
	LockFileName = "daemon.lock"
	// MaxSocketPath is the longest socket path used, in bytes: macOS's sun_path
	// holds 104 bytes including the terminating NUL.
	MaxSocketPath = 103
	// EnvHome is the environment variable that overrides every directory.
	EnvHome = "PORTCULLIS_HOME"
	// UserRuntimeRoot is where Linux's login managers make each user's runtime
	// directory, /run/user/UID.
	UserRuntimeRoot = "/run/user"
)

var (
	// ErrUnsupported is returned by Resolve on systems without Unix-style
	// directories for Portcullis (such as windows); the message names the system.
	ErrUnsupported = errors.New("operating system not supported")
	// ErrNoHome is returned when neither PORTCULLIS_HOME nor a home directory is
	// available.
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

// LockFile returns the file in State that the running daemon holds locked
// for its whole life (one daemon per state directory); it says the daemon's
// pid and socket.
func (d Dirs) LockFile() string { return filepath.Join(d.State, LockFileName) }

// Holder is what the lock file says of the daemon that holds it.
type Holder struct {
	PID    int
	Socket string
}

// ReadHolder reads what d's lock file says; the zero Holder when it says
// nothing. Whether a daemon holds the lock now is not checked here.
func ReadHolder(d Dirs) Holder {
	var h Holder
	b, err := os.ReadFile(d.LockFile())
	if err != nil {
		return h
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "pid":
			h.PID, _ = strconv.Atoi(v)
		case "socket":
			h.Socket = v
		}
	}
	return h
}

// Resolve returns the directories for this user and system (see the package
// documentation). It does not create them; call [Dirs.Ensure].
func Resolve() (Dirs, error) {
	d, _, err := Explain()
	return d, err
}

// Explain is Resolve, and also says in one sentence why the runtime directory
// (so the daemon's socket) is where it is, for `portcullis doctor`.
func Explain() (Dirs, string, error) {
	return resolve(Machine())
}

// Person is who the directories are for: a user ID and the home directory of its
// entry in the user database.
type Person struct {
	UID int
	// Home is the entry's home directory; "" when there is none.
	Home string
	// FromEnv is set when the user has no entry and Home is $HOME.
	FromEnv bool
	// Name is the entry's login name; "" when there is none.
	Name string
}

// CurrentPerson returns the person this process runs as. The home directory
// is the user database's; $HOME only when the user has no entry there.
func CurrentPerson() Person {
	p := Person{UID: os.Getuid()}
	if u, err := user.LookupId(strconv.Itoa(p.UID)); err == nil && filepath.IsAbs(u.HomeDir) {
		p.Home, p.Name = filepath.Clean(u.HomeDir), u.Username
		return p
	}
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		p.Home, p.FromEnv = filepath.Clean(h), true
	}
	return p
}

// UserRuntimeDir returns /run/user/UID when it is a directory (not a symbolic
// link) owned by uid with mode 0700, as login managers make it; "" otherwise.
// Never on macOS, where the system has no such directory.
func UserRuntimeDir(uid int) string {
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return ""
	}
	dir := filepath.Join(UserRuntimeRoot, strconv.Itoa(uid))
	if privateDirOf(dir, uid) {
		return dir
	}
	return ""
}

func privateDirOf(dir string, uid int) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		return false
	}
	owner, ok := ownerUID(fi)
	return ok && owner == uid
}

// Machine returns what Resolve reads from this machine.
func Machine() System {
	p := CurrentPerson()
	return System{
		GOOS:       runtime.GOOS,
		Getenv:     os.Getenv,
		Person:     p,
		RuntimeDir: UserRuntimeDir(p.UID),
	}
}

// System is what the directories are derived from.
type System struct {
	GOOS   string
	Getenv func(string) string // only PORTCULLIS_HOME is read
	Person Person
	// RuntimeDir is the user's runtime directory, /run/user/UID, when it is
	// the user's own; "" when there is none.
	RuntimeDir string
}

// ResolveFor is Explain for s instead of this machine.
func ResolveFor(s System) (Dirs, string, error) { return resolve(s) }

func resolve(s System) (Dirs, string, error) {
	var d Dirs
	var why string
	home := s.Person.Home
	homeWhy := "the home directory of uid " + strconv.Itoa(s.Person.UID) + " in the user database"
	if s.Person.FromEnv {
		homeWhy = "$HOME (uid " + strconv.Itoa(s.Person.UID) + " has no entry in the user database)"
	}
	switch {
	case s.Getenv(EnvHome) != "":
		h := filepath.Clean(s.Getenv(EnvHome))
		if !filepath.IsAbs(h) {
			return Dirs{}, "", fmt.Errorf("%s must be an absolute path, not %q", EnvHome, s.Getenv(EnvHome))
		}
		d = Dirs{Config: h, State: h, Runtime: filepath.Join(h, "run")}
		why = EnvHome + " is set in this environment (" + h + "): only callers that set it too reach this daemon"
	case s.GOOS == "windows" || s.GOOS == "plan9" || s.GOOS == "js" || s.GOOS == "wasip1":
		return Dirs{}, "", fmt.Errorf("resolving Portcullis directories on %s: %w", s.GOOS, ErrUnsupported)
	case !filepath.IsAbs(home):
		return Dirs{}, "", fmt.Errorf("resolving Portcullis directories: %w for uid %d (set %s)", ErrNoHome, s.Person.UID, EnvHome)
	case s.GOOS == "darwin" || s.GOOS == "ios":
		dir := filepath.Join(home, "Library", "Application Support", "Portcullis")
		d = Dirs{Config: dir, State: dir, Runtime: filepath.Join(dir, "run")}
		why = "the per-user data directory under " + homeWhy + " (" + home + ")"
	default:
		d.Config = filepath.Join(home, ".config", "portcullis")
		d.State = filepath.Join(home, ".local", "state", "portcullis")
		d.Runtime = filepath.Join(d.State, "run")
		why = "the state directory under " + homeWhy + " (" + home + "), since " +
			filepath.Join(UserRuntimeRoot, strconv.Itoa(s.Person.UID)) + " is not a private directory of this user"
		if s.RuntimeDir != "" {
			d.Runtime = filepath.Join(s.RuntimeDir, "portcullis")
			why = "the runtime directory of uid " + strconv.Itoa(s.Person.UID) + " (" + s.RuntimeDir + ")"
		}
	}
	if len(d.Socket()) > MaxSocketPath {
		sum := sha256.Sum256([]byte(d.Runtime))
		name := "portcullis-" + hex.EncodeToString(sum[:4])
		var tried []string
		for _, parent := range privateParents(s) {
			dir := filepath.Join(parent, name)
			if len(filepath.Join(dir, SocketName)) <= MaxSocketPath {
				why += "; moved to " + dir + " because " + d.Socket() + " is too long for a socket"
				d.Runtime = dir
				return d, why, nil
			}
			tried = append(tried, dir)
		}
		return Dirs{}, "", fmt.Errorf("resolving Portcullis directories: socket path %s is longer than %d bytes, and so would it be in %v; set %s to a shorter path", d.Socket(), MaxSocketPath, tried, EnvHome)
	}
	return d, why, nil
}

// privateParents are the directories of this user's own where a runtime
// directory whose path is too long moves, in order of preference.
func privateParents(s System) []string {
	var out []string
	if s.RuntimeDir != "" && s.GOOS != "darwin" && s.GOOS != "ios" {
		out = append(out, filepath.Clean(s.RuntimeDir))
	}
	home := s.Person.Home
	switch {
	case !filepath.IsAbs(home):
	case s.GOOS == "darwin" || s.GOOS == "ios":
		out = append(out, filepath.Join(home, "Library", "Caches"))
	default:
		out = append(out, filepath.Join(home, ".cache"))
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
