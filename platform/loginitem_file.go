//go:build darwin || linux

package platform

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/portcullis/portcullis/core/loginitem"
	"github.com/portcullis/portcullis/internal/front"
)

// fileItem is a [loginitem.Item] that is one file the session manager reads
// at login: a LaunchAgent property list on macOS, an autostart desktop entry
// on Linux. It is enabled while the file exists and its content does not
// switch it off; Enable writes it atomically, Disable removes it.
type fileItem struct {
	// path is the file's location.
	path string
	// content is what Enable writes (mode 0644).
	content []byte
	// active reports whether an existing file's content asks to be started.
	active func(data []byte) bool
	// afterEnable runs after the file is written (may be nil); its error
	// is Enable's.
	afterEnable func() error
}

var _ loginitem.Item = (*fileItem)(nil)

// Enabled reports whether the file exists and its content is active. A
// missing file means false and no error.
func (f *fileItem) Enabled() (bool, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading login item: %w", err)
	}
	return f.active(data), nil
}

// Enable creates the file's directory (mode 0700) when missing and replaces
// the file atomically (temporary file in the same directory, fsync, rename).
func (f *fileItem) Enable() error {
	dir := filepath.Dir(f.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("enabling launch at login: %w", err)
	}
	if err := writeFileAtomic(f.path, f.content, 0o644); err != nil {
		return fmt.Errorf("enabling launch at login: writing %s: %w", f.path, err)
	}
	if f.afterEnable != nil {
		return f.afterEnable()
	}
	return nil
}

// Disable removes the file; a missing file is not an error.
func (f *fileItem) Disable() error {
	if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("disabling launch at login: %w", err)
	}
	return nil
}

// writeFileAtomic replaces path with data and mode perm so that readers see
// the old or the new file, never a part.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// loginExecutable returns the absolute path of the running executable (the
// front `portcullis` beside it when this is the full program), to be
// written into a login item, or an error when it cannot be written there.
func loginExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("launch at login: finding the running executable: %w", err)
	}
	exe = front.FrontOf(exe)
	if err := loginitem.CheckExecutable(exe); err != nil {
		return "", fmt.Errorf("launch at login: %w", err)
	}
	return exe, nil
}
