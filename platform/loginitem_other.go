//go:build !linux && !darwin

package platform

import (
	"fmt"
	"runtime"

	"github.com/portcullis/portcullis/core/loginitem"
)

// NewLoginItem reports that this system has no "launch at login" support:
// only macOS (LaunchAgent) and Linux (XDG autostart) have one. The error
// wraps [loginitem.ErrUnsupported] and names runtime.GOOS.
func NewLoginItem() (loginitem.Item, error) {
	return nil, fmt.Errorf("%w (%s)", loginitem.ErrUnsupported, runtime.GOOS)
}
