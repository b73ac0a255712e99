// Package spawn starts the Portcullis daemon in the background for
// `portcullis connect` when none answers. It is apart from package platform
// so that the small front executable, which runs the shim, links none of
// the daemon's packages (docs/DESIGN.md, "Processes").
package spawn

import (
	"io"
	"os"
)

// Started is a daemon StartDaemon launched.
type Started struct {
	// Exited receives the daemon's exit status (nil for exit code 0) if it
	// ends while this process runs, and is then closed; it is nil when the
	// daemon's end cannot be seen (an application bundle opened on macOS).
	Exited <-chan error
	// Log is the file the daemon writes its output to ("" when unknown),
	// and LogFrom its size just before the start: the output of this start
	// follows that offset.
	Log     string
	LogFrom int64
}

// maxOutput bounds what Output reads of a start's output.
const maxOutput = 64 << 10

// Output returns what the daemon wrote to its log since the start, at most
// its last 64 KiB; "" when it cannot be read.
func (s *Started) Output() string {
	if s == nil || s.Log == "" {
		return ""
	}
	f, err := os.Open(s.Log)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	from := s.LogFrom
	if fi.Size() < from { // truncated or replaced since: read it all
		from = 0
	}
	if fi.Size()-from > maxOutput {
		from = fi.Size() - maxOutput
	}
	b, err := io.ReadAll(io.NewSectionReader(f, from, fi.Size()-from))
	if err != nil {
		return ""
	}
	return string(b)
}
