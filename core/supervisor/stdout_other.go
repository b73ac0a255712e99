//go:build unix && !linux

package supervisor

import (
	"errors"
	"io"
	"os"
	"sync"
)

// stdoutPipe is the daemon's end of the server's stdout pipe; reads after
// close report io.EOF. A pipe does not tell who wrote: attribute is never
// called here.
type stdoutPipe struct {
	f         *os.File
	attribute func(pid, pidfd int)
	once      sync.Once
}

// attributed: a pipe does not tell the writer of what it carries.
const attributed = false

// newStdout returns the daemon's end and the server's end of its stdout.
func newStdout() (*stdoutPipe, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	return &stdoutPipe{f: r}, w, nil
}

func (s *stdoutPipe) Read(b []byte) (int, error) {
	n, err := s.f.Read(b)
	if errors.Is(err, os.ErrClosed) {
		err = io.EOF
	}
	return n, err
}

func (s *stdoutPipe) close() { s.once.Do(func() { s.f.Close() }) }

func pidfdAlive(int) bool { return false }
func pidfdIno(int) uint64 { return 0 }
