//go:build !unix

package paths

import "io/fs"

// ownerUID reports no owner: this system has no Unix user IDs, and Resolve already
// refuses it.
func ownerUID(fs.FileInfo) (int, bool) { return 0, false }
