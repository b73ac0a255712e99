//go:build !linux

package platform

import (
	"log/slog"
	"os/exec"
	"runtime"

	"github.com/portcullis/portcullis/core/supervisor"
)

// NewCgroups reports that this system puts servers in no cgroup: the
// process group and the epoch's mark end the tree.
func NewCgroups(*slog.Logger) supervisor.Cgroups { return noCgroups{} }

type noCgroups struct{}

func (noCgroups) Place(*exec.Cmd, string) (supervisor.Cgroup, string, error) {
	return nil, "none — " + runtime.GOOS + " has no cgroups; the process group and the epoch's mark end the tree", nil
}
