package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/portcullis/portcullis/core/internal/atomicfile"
)

// LastGoodSuffix is appended to the configuration file's path to name the copy of
// the previous valid file that [Save] keeps.
const LastGoodSuffix = ".last-good"

// Marshal encodes c as the file format: indented JSON with two spaces, keys of maps
// sorted, '<', '>' and '&' not escaped, and a final newline. A nil Servers map is
// written as an empty object. It does not validate c.
func Marshal(c *Config) ([]byte, error) {
	out := *c
	if out.Servers == nil {
		out.Servers = map[string]Server{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(&out); err != nil {
		return nil, fmt.Errorf("encoding configuration: %w", err)
	}
	return buf.Bytes(), nil
}

// Save validates c and writes it to path atomically with mode 0600: it writes a
// temporary file in the same directory, syncs it, renames it over path and syncs
// the directory, so a reader sees either the old or the new file, never a mix.
// If path is a symbolic link (or a chain of them), the file it points to is
// written, even if it does not exist yet, and the link is kept.
//
// Before replacing an existing file that parses and validates, Save copies it (the
// same way, atomically) to path + [LastGoodSuffix]; an existing file that is broken
// leaves the previous backup alone. If c is invalid, Save returns its
// *ValidationError and touches no file. Concurrent Saves to one path are not
// serialized: the last rename wins.
func Save(path string, c *Config) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("saving configuration: %w", err)
	}
	data, err := Marshal(c)
	if err != nil {
		return fmt.Errorf("saving configuration: %w", err)
	}
	if _, err := Parse(data, path); err != nil {
		return fmt.Errorf("saving configuration: the encoded file does not parse back: %w", err)
	}
	path = atomicfile.FollowLinks(path)
	old, err := os.ReadFile(path)
	switch {
	case err == nil:
		if _, perr := Parse(old, path); perr == nil {
			if err := atomicfile.Write(path+LastGoodSuffix, old, 0o600); err != nil {
				return fmt.Errorf("saving configuration: keeping the previous file: %w", err)
			}
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return fmt.Errorf("saving configuration: %w", err)
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("saving configuration: %w", err)
	}
	return nil
}

// LastGoodPaths returns where the last good copy of the configuration file
// at path may be, in the order to look: beside path, then beside the file
// that a symbolic link at path points to (Save writes the copy there, a
// daemon beside the path it was given); the second only when it differs.
func LastGoodPaths(path string) []string {
	out := []string{path + LastGoodSuffix}
	if t := atomicfile.FollowLinks(path) + LastGoodSuffix; t != out[0] {
		out = append(out, t)
	}
	return out
}

// ErrMissingWithBackup says the configuration file is missing while its last
// good copy (path + [LastGoodSuffix]) exists: a running daemon keeps that copy
// in force, and an edit that started from an empty configuration would
// replace every server of it.
var ErrMissingWithBackup = errors.New("the configuration file is missing but its last good copy exists")

// LoadForEdit loads the configuration file at path to change it and [Save]
// it. A missing file gives an empty configuration, unless its last good copy
// exists: then it returns an error wrapping [ErrMissingWithBackup] that says
// how to restore it, and nothing should be written. Other errors are Load's.
func LoadForEdit(path string) (*Config, error) {
	c, err := Load(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return c, err
	}
	for _, backup := range LastGoodPaths(path) {
		if _, serr := os.Stat(backup); serr == nil {
			return nil, fmt.Errorf("%w: %s is gone, and %s holds the last configuration that loaded (a running daemon keeps it in force; without one it may lack the latest change); restore it (cp %s %s) or delete the copy to start afresh, then try again; nothing was changed",
				ErrMissingWithBackup, path, backup, backup, atomicfile.FollowLinks(path))
		}
	}
	return c, nil
}
