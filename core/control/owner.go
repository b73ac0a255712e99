package control

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
)

// ErrForeign is wrapped by Dial's error when the daemon's socket, its
// directory or the process answering on it is not this user's: another
// user could be impersonating Portcullis (reading what the CLI and the
// agents send, answering with fake cards), so nothing is sent.
var ErrForeign = errors.New("the control socket is not this user's")

// checkOwned refuses a socket whose directory is not a real directory of
// this user that no one else may write in (to replace the socket), or that
// is itself not this user's. A directory that does not exist yet is
// ErrNoDaemon: no daemon listens there, and the one started creates it.
func checkOwned(socket string) error {
	uid := os.Getuid()
	dir := filepath.Dir(socket)
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (socket %s: its directory does not exist)", ErrNoDaemon, socket)
	}
	if err != nil {
		return fmt.Errorf("checking the daemon's directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is a %v, not a directory; refusing to use the socket in it (remove it, and start Portcullis again)", ErrForeign, dir, fi.Mode().Type())
	}
	if owner, ok := ownerOf(fi); ok && owner != uid {
		return fmt.Errorf("%w: the daemon's directory %s belongs to uid %d, not to you (uid %d): another user may be impersonating Portcullis, so nothing was sent; have that directory removed (by its owner or root), or set PORTCULLIS_HOME to a directory of your own", ErrForeign, dir, owner, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: the daemon's directory %s has mode %v: other users may write in it and replace the socket, so nothing was sent; make it private (chmod 700 %s) and restart Portcullis", ErrForeign, dir, fi.Mode().Perm(), dir)
	}
	si, err := os.Lstat(socket)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (socket %s does not exist)", ErrNoDaemon, socket)
	}
	if err != nil {
		return fmt.Errorf("checking the daemon's socket %s: %w", socket, err)
	}
	if owner, ok := ownerOf(si); ok && owner != uid {
		return fmt.Errorf("%w: the socket %s belongs to uid %d, not to you (uid %d): another user may be impersonating Portcullis, so nothing was sent", ErrForeign, socket, owner, uid)
	}
	return nil
}

// checkPeer refuses a connection whose peer, as the kernel reports it, is
// another user's process.
func checkPeer(c net.Conn, socket string) error {
	uid, _, err := PeerCred(c)
	if err != nil {
		return fmt.Errorf("%w: cannot tell, from the kernel, whose process answers on %s (%v); nothing was sent", ErrForeign, socket, err)
	}
	if uid != os.Getuid() {
		return fmt.Errorf("%w: the process answering on %s runs as uid %d, not as you (uid %d): another user may be impersonating Portcullis, so nothing was sent", ErrForeign, socket, uid, os.Getuid())
	}
	return nil
}
