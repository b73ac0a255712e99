// Package atomicfile replaces files so that a reader sees the old or the new
// contents, never a mix, and so that the new contents survive a crash once
// Write returns: a synced temporary file in the same directory, a rename over
// the target (rename(2) is atomic within a file system), then a sync of the
// directory to make the rename itself durable.
package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with data, with permission bits mode. The temporary file
// is ".<name>.tmp-*" beside path and is removed on any failure. A directory
// that cannot be synced (some file systems refuse) is not an error: the data
// is on disk by then.
func Write(path string, data []byte, mode fs.FileMode) (err error) {
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
	if err := f.Chmod(mode); err != nil {
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
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// FollowLinks returns the file that path names after following symbolic
// links, even a final one that dangles, so that a caller replaces the target
// and keeps the link (a dotfile managed elsewhere). It gives up after 40 links
// (the Linux limit) and returns the last path reached.
func FollowLinks(path string) string {
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
