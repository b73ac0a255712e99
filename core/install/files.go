package install

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/portcullis/portcullis/core/internal/atomicfile"
)

// BackupSuffix starts the suffix of the backup copy written next to an agent file
// before it is changed: FILE.portcullis-backup-20261130T014700Z (UTC, the layout of
// [BackupTimeLayout]); a second backup within the same second gets "-2", "-3"….
const BackupSuffix = ".portcullis-backup-"

// BackupTimeLayout is the time layout of a backup's suffix (ISO 8601 basic format,
// UTC).
const BackupTimeLayout = "20060102T150405Z"

// maxFileSize is the largest agent file read, in bytes (Claude Code's ~/.claude.json
// grows with its history but stays far below this).
const maxFileSize = 64 << 20

// ErrChanged is returned when the agent file changed on disk between reading and
// writing it (the agent itself may have saved it); nothing was written.
var ErrChanged = errors.New("file changed while Portcullis was editing it")

// readFile reads the file at path, following symbolic links to the file they name;
// it returns that file's path, contents and mode.
func readFile(path string) (string, []byte, fs.FileMode, error) {
	real := atomicfile.FollowLinks(path)
	fi, err := os.Stat(real)
	if err != nil {
		return real, nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return real, nil, 0, fmt.Errorf("%s is not a regular file", real)
	}
	if fi.Size() > maxFileSize {
		return real, nil, 0, fmt.Errorf("%s is larger than %d bytes", real, maxFileSize)
	}
	data, err := os.ReadFile(real)
	return real, data, fi.Mode().Perm(), err
}

// replaceFile writes data to path safely: it checks that path still holds old
// (else [ErrChanged]), copies old to a new backup file next to it (mode 0600,
// synced), then replaces path atomically with data in the same mode. It returns
// the backup's path.
func replaceFile(path string, old, data []byte, mode fs.FileMode, now time.Time) (string, error) {
	cur, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if !bytes.Equal(cur, old) {
		return "", fmt.Errorf("%s: %w; run the command again", path, ErrChanged)
	}
	backup := path + BackupSuffix + now.UTC().Format(BackupTimeLayout)
	for i := 2; ; i++ {
		if _, err := os.Lstat(backup); errors.Is(err, fs.ErrNotExist) {
			break
		}
		backup = path + BackupSuffix + now.UTC().Format(BackupTimeLayout) + fmt.Sprintf("-%d", i)
	}
	if err := atomicfile.Write(backup, old, 0o600); err != nil {
		return "", fmt.Errorf("writing the backup %s: %w", backup, err)
	}
	if err := atomicfile.Write(path, data, mode); err != nil {
		return backup, fmt.Errorf("writing %s: %w", path, err)
	}
	return backup, nil
}
