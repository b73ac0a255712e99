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

// NewSharedReader returns r: on this system reads take the ordinary path.
func NewSharedReader(r *os.File) io.Reader { return r }

// NewSharedWriter returns w: on this system writes take the ordinary path.
func NewSharedWriter(w *os.File) io.Writer { return w }
