//go:build !linux && !darwin

package identity

import (
	"io/fs"
	"os"
	"time"
)

// statKey reports false: without a portable change time (ctime) a cached
// digest could hide a same-size rewrite, so these systems hash every time.
func statKey(fs.FileInfo) (fileKey, bool) { return fileKey{}, false }

// stampTick is not known here: the one-second racy window applies.
func stampTick(*os.File) (time.Duration, bool) { return 0, false }
