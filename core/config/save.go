package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	path = followLinks(path)
	old, err := os.ReadFile(path)
	switch {
	case err == nil:
		if _, perr := Parse(old, path); perr == nil {
			if err := writeAtomic(path+LastGoodSuffix, old); err != nil {
				return fmt.Errorf("saving configuration: keeping the previous file: %w", err)
			}
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return fmt.Errorf("saving configuration: %w", err)
	}
	if err := writeAtomic(path, data); err != nil {
		return fmt.Errorf("saving configuration: %w", err)
	}
	return nil
}

// followLinks returns the file that path names after following symbolic links, even
// a final one that dangles, so that Save replaces the target and keeps the link. It
// gives up after 40 links (the Linux limit) and returns the last path reached.
func followLinks(path string) string {
	for range 40 {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return path
		}
		target, err := os.Readlink(path)
		if err != nil {
			return path
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = target
	}
	return path
}

// writeAtomic replaces path with data (mode 0600) through a synced temporary file
// in the same directory and a rename, then syncs the directory.
func writeAtomic(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable. Some file systems cannot sync a directory;
	// the file's data is already on disk then, so that is not an error.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
