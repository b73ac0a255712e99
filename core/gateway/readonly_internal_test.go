package gateway

import (
	"strings"
	"testing"
)

// TestReadOnlyHint: a sandboxed server whose last words on stderr are a
// write refused on a read-only file system gets, in its start-up failure,
// the path and the command that lets it write there; other failures get
// nothing.
func TestReadOnlyHint(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		tail []string
		want string
	}{
		{"node", []string{"Error: EROFS: read-only file system, open '" + dir + "/db.json'", "    at Object.openSync"},
			"; it could not write " + dir + "/db.json, which its sandbox keeps read-only: to let it write there, run portcullis servers edit fs --write " + dir},
		{"python, a directory", []string{"OSError: [Errno 30] Read-only file system: '" + dir + "'"},
			"; it could not write " + dir + ", which its sandbox keeps read-only: to let it write there, run portcullis servers edit fs --write " + dir},
		{"no path", []string{"write failed: EROFS"},
			"; it could not write a path its sandbox keeps read-only: let it write there with portcullis servers edit fs --write DIR"},
		{"another failure", []string{"Error: Cannot find module '/x/server.js'"}, ""},
	} {
		if got := readOnlyHint("fs", c.tail); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if got := readOnlyHint("fs", []string{"a\x1b[31m EROFS /tmp/x\x1b[0m"}); strings.ContainsRune(got, 0x1b) {
		t.Errorf("a control character reached the hint: %q", got)
	}
}
