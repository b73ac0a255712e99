//go:build !linux && !darwin

package platform

import (
	"fmt"
	"net"
	"runtime"
)

// Peer is not implemented on this operating system.
func (Peers) Peer(c net.Conn) (uid, pid int, err error) {
	return 0, 0, fmt.Errorf("peer credentials are not supported on %s", runtime.GOOS)
}

// Parent is not implemented on this operating system.
func (Peers) Parent(pid int) (int, string, error) {
	return 0, "", fmt.Errorf("process parents are not supported on %s", runtime.GOOS)
}
