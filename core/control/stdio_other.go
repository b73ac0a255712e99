//go:build !linux && !darwin

package control

import (
	"fmt"
	"net"
	"os"
	"runtime"
)

// StdioKind: this system cannot hand descriptors over; the shim relays.
func StdioKind(*os.File) error {
	return fmt.Errorf("%w: handing descriptors to the daemon is not implemented on %s", ErrNoStdio, runtime.GOOS)
}

// SendStdio is not implemented on this system.
func SendStdio(net.Conn, *os.File, *os.File) error {
	return fmt.Errorf("%w: handing descriptors to the daemon is not implemented on %s", ErrNoStdio, runtime.GOOS)
}

// ReceiveStdio is not implemented on this system.
func ReceiveStdio(net.Conn) (*os.File, *os.File, error) {
	return nil, nil, fmt.Errorf("%w: receiving descriptors is not implemented on %s", ErrNoStdio, runtime.GOOS)
}
