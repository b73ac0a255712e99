//go:build !ci

package app

import "github.com/portcullis/portcullis/platform"

// newInputCheck is the approval window's input check: the display
// server's, where it can tell a device's press from synthetic input.
func newInputCheck() platform.InputCheck { return platform.NewInputCheck() }
