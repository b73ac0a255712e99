package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/internal/harness"
)

// A sandboxed server (bubblewrap) runs in a PID namespace of its own: it
// knows itself as pid 2, its workers by numbers that repeat from one
// sandbox to the next, while status and the kernel's view in the daemon's
// namespace number them otherwise. These translate what a test server
// reports about itself.

// ownPID returns the pid that process hostPID knows itself by: the last
// number of its NSpid (hostPID itself outside a PID namespace of its own).
func ownPID(t *testing.T, hostPID int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(hostPID) + "/status")
	if err != nil {
		t.Fatalf("reading process %d: %v", hostPID, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(l, "NSpid:"); ok {
			fs := strings.Fields(f)
			if n, err := strconv.Atoi(fs[len(fs)-1]); err == nil {
				return n
			}
		}
	}
	return hostPID
}

// hostPIDOf returns the daemon's number for the live process that knows
// itself as own and runs in the PID namespace of process server (an
// epoch's server, as status shows it): what a test server reports of
// itself, made comparable across sandboxes. It fails the test when there
// is none.
func hostPIDOf(t *testing.T, own string, server int) int {
	t.Helper()
	ns, err := os.Readlink("/proc/" + strconv.Itoa(server) + "/ns/pid")
	if err != nil {
		t.Fatalf("the PID namespace of process %d: %v", server, err)
	}
	all, err := harness.Processes()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	for _, p := range all {
		if p.State == "Z" {
			continue
		}
		if l, err := os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/ns/pid"); err != nil || l != ns {
			continue
		}
		if strconv.Itoa(ownPID(t, p.PID)) == own {
			return p.PID
		}
	}
	t.Fatalf("no live process knows itself as pid %s in the PID namespace of process %d", own, server)
	return 0
}
