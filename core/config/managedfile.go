package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// ManagedState is what the managed policy file says, as read by
// [ReadManaged].
type ManagedState struct {
	// File is the path read, [ManagedFile].
	File string `json:"file"`
	// Policy is the policy in force: the file's, or [Lockdown] while the
	// file is malformed (Error); nil when there is none (no file, or a file
	// that is Ignored).
	Policy *Managed `json:"policy,omitempty"`
	// Ignored says why a file that exists is not trusted (not owned by
	// root, writable by others, on a path others can change): it sets no
	// floor.
	Ignored string `json:"ignored,omitempty"`
	// Error says why a trusted file does not parse; [Lockdown] is in force
	// until it is fixed.
	Error string `json:"error,omitempty"`
}

// Apply is s.Policy.Apply: cfg as it is when no policy is in force.
func (s ManagedState) Apply(cfg *Config) (*Config, []Floor) { return s.Policy.Apply(cfg) }

// Explain says, for an edit refused because of floors, why and what to do.
func (s ManagedState) Explain(floors []Floor) error {
	var what []string
	for _, f := range floors {
		what = append(what, f.Text)
	}
	why := "your organisation's managed policy " + s.File
	if s.Error != "" {
		why += " (malformed, so every tool asks and approvals need the system's authentication until it is fixed)"
	}
	return fmt.Errorf("%w: %s sets a floor this change goes below: %s; keep the setting at or above the floor (ask whoever manages this machine to change %s); nothing was changed",
		ErrManagedFloor, why, strings.Join(what, "; "), s.File)
}

// ErrManagedFloor is wrapped by an edit refused because it goes below a
// floor of the managed policy.
var ErrManagedFloor = errors.New("refused by the managed policy")

// maxManagedBytes bounds what is read of the managed policy file.
const maxManagedBytes = 1 << 20

// Same reports whether s and o say the same thing: the same file, policy
// and reasons. The daemon reads the file again at each configuration
// check and re-applies the floors only when it changed.
func (s ManagedState) Same(o ManagedState) bool { return reflect.DeepEqual(s, o) }

// ReadManaged reads the managed policy file at [ManagedFile]. The path is
// fixed: no environment variable or flag chooses another, since the agent
// runs as the person and could point it at a file of its own. The file is
// trusted only when it and every directory above it are owned by root and
// writable by no one else (docs/TEAMS.md); otherwise ManagedState.Ignored
// says why.
// A missing file is no policy.
func ReadManaged() ManagedState { return readManaged(ManagedFile) }

// readManaged is ReadManaged for the file at file (tests use a temporary
// one; production code only ManagedFile).
func readManaged(file string) ManagedState {
	st := ManagedState{File: file}
	real, err := filepath.EvalSymlinks(file)
	if errors.Is(err, fs.ErrNotExist) {
		return st
	}
	if err != nil {
		st.Ignored = fmt.Sprintf("it cannot be read: %v", err)
		return st
	}
	// Every directory from / down: root's, and writable by root alone.
	for dir := filepath.Dir(real); ; dir = filepath.Dir(dir) {
		fi, err := os.Lstat(dir)
		if err != nil {
			st.Ignored = fmt.Sprintf("its directory %s cannot be checked: %v", dir, err)
			return st
		}
		if why := notRootOnly(fi); why != "" {
			st.Ignored = fmt.Sprintf("its directory %s %s", dir, why)
			return st
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	f, err := openNoFollow(real)
	if err != nil {
		st.Ignored = fmt.Sprintf("it cannot be opened: %v", err)
		return st
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		st.Ignored = fmt.Sprintf("it cannot be checked: %v", err)
		return st
	}
	if !fi.Mode().IsRegular() {
		st.Ignored = "it is not a regular file"
		return st
	}
	if why := notRootOnly(fi); why != "" {
		st.Ignored = "it " + why
		return st
	}
	data, err := io.ReadAll(io.LimitReader(f, maxManagedBytes+1))
	if err == nil && len(data) > maxManagedBytes {
		err = fmt.Errorf("it is larger than %d bytes", maxManagedBytes)
	}
	if err == nil {
		var m *Managed
		if m, err = ParseManaged(data, file); err == nil {
			st.Policy = m
			return st
		}
	}
	st.Error = err.Error()
	lock := Lockdown
	st.Policy = &lock
	return st
}
