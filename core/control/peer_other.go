//go:build !linux && !darwin

package control

import (
	"fmt"
	"net"
	"runtime"
)

// PeerCred cannot read a peer's credentials on this system: the shim's
// Dial and the daemon's accept fail closed.
func PeerCred(net.Conn) (uid, pid int, err error) {
	return 0, 0, fmt.Errorf("reading a Unix socket peer's credentials is not implemented on %s", runtime.GOOS)
}
