//go:build linux

package platform

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/portcullis/portcullis/core/control"
)

// Peer returns the uid and pid of the process at the other end of a Unix
// socket connection (control.PeerCred).
func (Peers) Peer(c net.Conn) (uid, pid int, err error) { return control.PeerCred(c) }

// Parent returns the parent of pid and the parent's executable, from
// /proc/PID/stat (field 4) and /proc/PPID/exe (proc(5)).
func (Peers) Parent(pid int) (ppid int, exe string, err error) {
	ppid, err = linuxPPID(pid)
	if err != nil {
		return 0, "", err
	}
	exe, err = os.Readlink("/proc/" + strconv.Itoa(ppid) + "/exe")
	if err != nil {
		return ppid, "", fmt.Errorf("executable of pid %d: %w", ppid, err)
	}
	return ppid, strings.TrimSuffix(exe, " (deleted)"), nil
}

func linuxPPID(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, errors.New("malformed /proc stat")
	}
	return strconv.Atoi(f[1])
}
