//go:build !linux

package rawio

import (
	"io"
	"os"
)

// NewReader returns r: on this system reads take the ordinary path.
func NewReader(r io.Reader) io.Reader { return r }

// NewWriter returns w: on this system writes take the ordinary path.
func NewWriter(w io.Writer) io.Writer { return w }

// WriteFile writes p to f: on this system with f.Write.
func WriteFile(f *os.File, p []byte) (int, error) { return f.Write(p) }

// SameFile reports whether path still names the file info describes
// (os.Stat and os.SameFile on this system).
func SameFile(path string, info os.FileInfo) (bool, error) {
	st, err := os.Stat(path)
	return err == nil && os.SameFile(st, info), err
}

// NewSharedReader returns r: on this system reads take the ordinary path.
func NewSharedReader(r *os.File) io.Reader { return r }

// NewSharedWriter returns w: on this system writes take the ordinary path.
func NewSharedWriter(w *os.File) io.Writer { return w }

// LocalFS reports false: on this system WriteFile and SameFile take the
// ordinary path anyway.
func LocalFS(string) bool { return false }
