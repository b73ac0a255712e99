//go:build unix

package supervisor

import (
	"bytes"
	"encoding/binary"
)

// parseProcargs2 splits what macOS's kern.procargs2 sysctl returns for a
// process: a 32-bit argc in host byte order, the executable path ending in
// NUL, NUL padding, argc arguments each ending in NUL, then the environment
// entries each ending in NUL (and, after an empty one, strings of the
// kernel's own). It returns the path and what follows the arguments, for
// envHas; ok is false when b is too short to hold a path. It lives in a
// file of its own, without a build tag for macOS, so that Linux tests run it.
func parseProcargs2(b []byte) (exe string, env []byte, ok bool) {
	if len(b) < 4 {
		return "", nil, false
	}
	argc := int(binary.NativeEndian.Uint32(b[:4]))
	rest := b[4:]
	i := bytes.IndexByte(rest, 0)
	if i <= 0 {
		return "", nil, false
	}
	exe, rest = string(rest[:i]), rest[i:]
	for len(rest) > 0 && rest[0] == 0 {
		rest = rest[1:]
	}
	for range argc {
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return exe, nil, true
		}
		rest = rest[i+1:]
	}
	return exe, rest, true
}
