//go:build linux || darwin

package identity

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// dirHandle is a directory open for a walk: its listing, and stats relative
// to it (fstatat).
type dirHandle struct {
	f  *os.File
	fd int
}

// openDir opens directory p without registering it with the runtime's
// poller (a directory cannot be polled; os.Open would try).
func openDir(p string) (*dirHandle, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return &dirHandle{f: os.NewFile(uintptr(fd), p), fd: fd}, nil
}

func (d *dirHandle) close() { d.f.Close() }

// stat lstats the entry name of d (abs names it in errors).
func (d *dirHandle) stat(name, abs string) (entryStat, error) {
	var st unix.Stat_t
	var err error
	for {
		err = unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return entryStat{}, &fs.PathError{Op: "lstat", Path: abs, Err: err}
	}
	return statOfUnix(&st), nil
}

// statOfUnix is entryStat from a stat result; its key is the one statKey
// gives for the same file.
func statOfUnix(st *unix.Stat_t) entryStat {
	es := entryStat{keyOK: true, key: fileKey{
		dev:   uint64(st.Dev),
		ino:   uint64(st.Ino),
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
	}}
	m := uint32(st.Mode)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		es.kind = kindDir
	case unix.S_IFREG:
		es.kind = kindFile
	case unix.S_IFLNK:
		es.kind = kindSymlink
	default:
		es.kind = kindOther
	}
	es.mode = fs.FileMode(m & 0o777)
	if m&unix.S_ISUID != 0 {
		es.mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		es.mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		es.mode |= fs.ModeSticky
	}
	return es
}
