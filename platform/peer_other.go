//go:build !linux && !darwin

package platform

import (
	"fmt"
	"net"
	"runtime"

	"github.com/portcullis/portcullis/core/control"
)

// Peer returns the uid and pid of the process at the other end of a Unix
// socket connection (control.PeerCred).
func (Peers) Peer(c net.Conn) (uid, pid int, err error) { return control.PeerCred(c) }

// Parent is not implemented on this operating system.
func (Peers) Parent(pid int) (int, string, error) {
	return 0, "", fmt.Errorf("process parents are not supported on %s", runtime.GOOS)
}
