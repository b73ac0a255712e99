//go:build unix && !linux && !darwin

package supervisor

import (
	"errors"

	"github.com/portcullis/portcullis/core/identity"
)

// treeSupported: no process table is read on this system.
const treeSupported = false

func scanTree(int, []int, []procView, string, []uint64, string, func(procView) (procView, bool), func(int, uint64, string) bool, bool) ([]procView, error) {
	return nil, ErrTreeUnwatched
}

func digestRunning(*identity.Measurer, int, string) (string, error) {
	return "", errors.ErrUnsupported
}

func newWakeups() wakeups { return noWakeups{} }

func viewOne(int, []uint64) (procView, bool) { return procView{}, false }
