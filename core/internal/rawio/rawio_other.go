//go:build !linux

package rawio

import "io"

// NewReader returns r: on this system reads take the ordinary path.
func NewReader(r io.Reader) io.Reader { return r }

// NewWriter returns w: on this system writes take the ordinary path.
func NewWriter(w io.Writer) io.Writer { return w }
