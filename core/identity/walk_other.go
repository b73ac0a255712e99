//go:build !linux && !darwin

package identity

import "os"

// dirHandle is a directory open for a walk; entries are stat'ed by path.
type dirHandle struct{ f *os.File }

func openDir(p string) (*dirHandle, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	return &dirHandle{f: f}, nil
}

func (d *dirHandle) close() { d.f.Close() }

func (d *dirHandle) stat(_, abs string) (entryStat, error) { return lstatPath(abs) }
