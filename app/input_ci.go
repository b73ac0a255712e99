//go:build ci

package app

import (
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/platform"
)

// newInputCheck is the approval window's input check in the build with
// Fyne's headless test driver: that build has no window and no display,
// and RunUI runs only under a test, whose taps are the only input there
// is, so every tap counts as a device's ("the test driver"). The real
// check is platform.NewInputCheck (the cgo build).
func newInputCheck() platform.InputCheck { return testDriverInput{} }

type testDriverInput struct{}

func (testDriverInput) Judge(uint64, string) daemon.WindowInput {
	return daemon.WindowInput{Origin: daemon.InputDevice, Device: "Fyne's test driver"}
}

func (testDriverInput) Unknown() daemon.WindowInput { return daemon.WindowInput{} }

func (testDriverInput) Close() error { return nil }
