package audit

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// syncData makes the data appended to f durable with fdatasync(2): an
// append changes the file's size, which fdatasync writes too (it is needed
// to read the data back), but not its timestamps, so it costs one journal
// commit less than fsync when the blocks are already allocated.
func syncData(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.Fdatasync(int(fd))
			if !errors.Is(serr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}
