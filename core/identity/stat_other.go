//go:build !linux && !darwin

package identity

import "io/fs"

// statKey reports false: without a portable change time (ctime) a cached
// digest could hide a same-size rewrite, so these systems hash every time.
func statKey(fs.FileInfo) (fileKey, bool) { return fileKey{}, false }
