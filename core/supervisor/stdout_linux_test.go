//go:build linux

package supervisor_test

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"

	"github.com/portcullis/portcullis/core/supervisor"
)

// A server that sends descriptors on its stdout (sendmsg SCM_RIGHTS on the
// socket fd 1 is) cannot make the daemon keep them: each is closed as it
// arrives, and the bytes still come through.
func TestStdoutDescriptorsAreClosed(t *testing.T) {
	py := realPython(t)
	script := filepath.Join(t.TempDir(), "fds.py")
	if err := writeFile(script, `import os, socket
s = socket.socket(fileno=1)
fd = os.open("/dev/null", os.O_RDONLY)
for i in range(50):
    socket.send_fds(s, [b"line\n"], [fd, fd, fd])
s.detach()
import sys
sys.stdin.read()
`); err != nil {
		t.Fatal(err)
	}
	before := countFDs(t)
	p := start(t, supervisor.Spec{Label: "fds", Command: py, Args: []string{script}}, fast)
	r := bufio.NewReader(p.Stdout())
	for i := 0; i < 50; i++ {
		if got := readLine(t, r); got != "line" {
			t.Fatalf("line %d: %q", i, got)
		}
	}
	// The process's own descriptors (its pipes, a pidfd or two) add a
	// handful; 150 kept descriptors would show.
	if after := countFDs(t); after-before > 20 {
		t.Errorf("this process holds %d descriptors more after the server sent 150 (%d → %d)", after-before, before, after)
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
