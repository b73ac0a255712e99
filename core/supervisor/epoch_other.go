//go:build unix && !linux && !darwin

package supervisor

import (
	"errors"
	"syscall"
)

// findMarked finds nothing: reading another process's environment is
// implemented for Linux and macOS only, so here only the process group is
// stopped.
func findMarked(map[string]bool) ([]marked, error) { return nil, nil }

func signalMarked(marked, syscall.Signal) error { return nil }

func startTimeOf(int) (uint64, error) { return 0, errors.ErrUnsupported }
