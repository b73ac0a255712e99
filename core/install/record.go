package install

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/portcullis/portcullis/core/internal/atomicfile"
)

// RecordDir is the directory, inside Portcullis's state directory, that holds one
// install record per agent file: STATE/installs/AGENT-HASH.json, where HASH is the
// first 12 hex digits of the SHA-256 of the file's absolute path.
//
// A record keeps what uninstall needs to put every rewritten entry back: the
// entry's place in the file, its original text with each moved secret's value
// replaced by an empty string, and for each such secret the environment variable,
// the credential scope that now holds it and the offset of its placeholder. Secret
// values are never written to a record.
//
// Uninstall removes an entry from the record once it has put it back whole. When
// it put an entry back without some of its secrets (no --restore-secrets, or the
// store could not be read), the entry stays in the record, marked with the
// secrets left out, so that a later `portcullis uninstall AGENT
// --restore-secrets` can still put them in. The record file is deleted when no
// entry is left.
const RecordDir = "installs"

// recordVersion is the version of the record format.
const recordVersion = 1

// record is the install record of one agent file (see [RecordDir]).
type record struct {
	Version int           `json:"version"`
	Agent   Agent         `json:"agent"`
	File    string        `json:"file"`
	Entries []recordEntry `json:"entries"`
}

// recordEntry is one rewritten entry.
type recordEntry struct {
	// Path is the member names from the root object to the entry.
	Path []string `json:"path"`
	// Label is the Portcullis server label the entry now connects to.
	Label string `json:"label"`
	// Command is the executable the rewritten entry launches.
	Command string `json:"command"`
	// Original is the entry's text before install, secrets replaced by "".
	Original string `json:"original"`
	// Secrets lists the env members whose values moved to the secret store.
	Secrets []recordSecret `json:"secrets,omitempty"`
	// InstalledAt is when the entry was rewritten (UTC).
	InstalledAt time.Time `json:"installedAt"`
	// Backup is the backup file written just before. It holds the original
	// entry, secrets included, in plain text.
	Backup string `json:"backup,omitempty"`
	// LeftOut is set once uninstall has put the original entry back without
	// these secrets (their EnvVar names, a subset of Secrets): the entry then
	// holds restoreEntry(Original) with only the other secrets put back.
	LeftOut []string `json:"leftOut,omitempty"`
	// UninstalledAt is when that uninstall ran (UTC); zero while the entry is
	// installed.
	UninstalledAt time.Time `json:"uninstalledAt,omitzero"`
}

// recordSecret is one moved secret.
type recordSecret struct {
	EnvVar string `json:"envVar"`
	Scope  string `json:"scope"`
	// Offset is where the placeholder "" sits in Original, in bytes.
	Offset int `json:"offset"`
	// Reencoded is true when the original string literal was written with escapes
	// that encoding the value again does not reproduce, so a restored file differs
	// in those bytes (not in meaning).
	Reencoded bool `json:"reencoded,omitempty"`
}

// recordPath returns the path of the install record for the agent file at file.
func recordPath(stateDir string, agent Agent, file string) string {
	sum := sha256.Sum256([]byte(file))
	return filepath.Join(stateDir, RecordDir, string(agent)+"-"+hex.EncodeToString(sum[:6])+".json")
}

// loadRecord reads the record at path; a missing file gives an empty record.
func loadRecord(path string, agent Agent, file string) (*record, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &record{Version: recordVersion, Agent: agent, File: file}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the install record: %w", err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("reading the install record %s: %w", path, err)
	}
	if r.Version != recordVersion {
		return nil, fmt.Errorf("the install record %s has version %d; this Portcullis reads version %d", path, r.Version, recordVersion)
	}
	return &r, nil
}

// put adds or replaces the entry with e's path.
func (r *record) put(e recordEntry) {
	for i := range r.Entries {
		if slices.Equal(r.Entries[i].Path, e.Path) {
			r.Entries[i] = e
			return
		}
	}
	r.Entries = append(r.Entries, e)
}

// find returns the entry at path.
func (r *record) find(path []string) (recordEntry, bool) {
	for _, e := range r.Entries {
		if slices.Equal(e.Path, path) {
			return e, true
		}
	}
	return recordEntry{}, false
}

// remove deletes the entry at path.
func (r *record) remove(path []string) {
	r.Entries = slices.DeleteFunc(r.Entries, func(e recordEntry) bool { return slices.Equal(e.Path, path) })
}

// save writes the record atomically (mode 0600), or deletes it when it has no
// entries left.
func (r *record) save(path string) error {
	if len(r.Entries) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing the install record: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("writing the install record: %w", err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing the install record: %w", err)
	}
	return nil
}
