package codediff

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	udiff "github.com/aymanbagabas/go-udiff"
	"github.com/portcullis/portcullis/core/ids"
)

// Added, Removed and Modified are the Kind of a Change: the file is only
// in the new snapshot, only in the old one, or in both with another
// content. They are strings because reports are JSON (approvals --json).
const (
	Added    = "added"
	Removed  = "removed"
	Modified = "modified"
)

// Change is one file that differs between two snapshots.
type Change struct {
	Path    string `json:"path"`              // slash-separated, below the snapshots' Root
	Kind    string `json:"kind"`              // Added, Removed, Modified
	Added   int    `json:"added,omitempty"`   // lines
	Removed int    `json:"removed,omitempty"` // lines
	// Binary or Summary say why there are no lines: a binary file, or a
	// file the snapshots hold by digest only ("text not kept: 2.1 MB").
	Binary  bool   `json:"binary,omitempty"`
	Summary string `json:"summary,omitempty"`
	Diff    string `json:"diff,omitempty"` // unified, three lines of context
}

// Report is what changed in a server's source tree since the code the
// person last approved: the card's "code" section.
type Report struct {
	Label string `json:"label"`          // the server's label
	Root  string `json:"root,omitempty"` // the source tree compared (SourceRoot)
	// Since is the approved epoch the tree is compared with, and when its
	// snapshot was taken; empty when there is none (Note says why).
	Since   ids.EpochID `json:"since,omitempty"`
	SinceAt time.Time   `json:"sinceAt,omitzero"`
	// Epoch is the epoch whose code the request would approve, and
	// TakenAt when its snapshot was taken.
	Epoch   ids.EpochID `json:"epoch,omitempty"`
	TakenAt time.Time   `json:"takenAt,omitzero"`
	Changes []Change    `json:"changes,omitempty"`
	Files   int         `json:"files"` // files in the new snapshot
	// Omitted counts files either snapshot did not record or could not
	// compare (past the limits, unreadable): a change among them cannot
	// be shown. Incomplete: a snapshot's walk stopped early, so files
	// went uncounted too.
	Omitted    int  `json:"omitted,omitempty"`
	Incomplete bool `json:"incomplete,omitempty"`
	// Unexplained is set when the measured identity changed since the
	// approved code and no file of the snapshots shows it: the summary
	// then says so instead of "no file changed".
	Unexplained string `json:"unexplained,omitempty"`
	// Note says why there is no comparison, or what limits it.
	Note string `json:"note,omitempty"`
}

// Compare lists the files that differ from old to new, by path.
func Compare(old, new *Snapshot) []Change {
	paths := make([]string, 0, len(new.Files))
	for p := range new.Files {
		paths = append(paths, p)
	}
	for p := range old.Files {
		if _, ok := new.Files[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var out []Change
	for _, p := range paths {
		a, inOld := old.Files[p]
		b, inNew := new.Files[p]
		switch {
		case !inOld:
			out = append(out, fileChange(p, Added, File{Kept: true}, b))
		case !inNew:
			out = append(out, fileChange(p, Removed, a, File{Kept: true}))
		case a.Digest == "" || b.Digest == "":
			// not read (over MaxReadBytes): counted by Unchecked, never
			// claimed unchanged
		case a.Digest != b.Digest:
			out = append(out, fileChange(p, Modified, a, b))
		}
	}
	return out
}

func fileChange(path, kind string, a, b File) Change {
	c := Change{Path: path, Kind: kind}
	switch {
	case a.Binary || b.Binary:
		c.Binary = true
		c.Summary = fmt.Sprintf("binary, %s → %s", size(a, kind != Added), size(b, kind != Removed))
		return c
	case !a.Kept || !b.Kept:
		c.Summary = fmt.Sprintf("text not kept (over the size limit), %s → %s", size(a, kind != Added), size(b, kind != Removed))
		return c
	}
	from, to := "a/"+Name(path), "b/"+Name(path)
	if kind == Added {
		from = "/dev/null"
	}
	if kind == Removed {
		to = "/dev/null"
	}
	c.Diff = udiff.Unified(from, to, a.Text, b.Text)
	for _, line := range strings.Split(c.Diff, "\n") {
		switch {
		case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
		case strings.HasPrefix(line, "+"):
			c.Added++
		case strings.HasPrefix(line, "-"):
			c.Removed++
		}
	}
	return c
}

func size(f File, present bool) string {
	if !present {
		return "none"
	}
	switch {
	case f.Size >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(f.Size)/(1<<20))
	case f.Size >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(f.Size)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", f.Size)
}

// Summary is the report in one line: "2 files changed (+5 −1): a.py, b.py".
func (r Report) Summary() string {
	if r.Since == "" {
		if r.Note != "" {
			return r.Note
		}
		return "no earlier approved code to compare with"
	}
	if len(r.Changes) == 0 {
		if r.Unexplained != "" {
			return r.Unexplained
		}
		s := "no file of " + r.Root + " changed since the code you approved"
		if r.Omitted > 0 || r.Incomplete {
			s = "no file of " + r.Root + " that was compared changed since the code you approved"
		}
		if r.Omitted > 0 {
			s += fmt.Sprintf(" (%s past the limits or unreadable not compared)", files(r.Omitted))
		}
		if r.Incomplete {
			s += " (the tree was too large to read whole)"
		}
		return s
	}
	add, del, counted := 0, 0, 0
	names := make([]string, 0, len(r.Changes))
	for _, c := range r.Changes {
		if !c.Binary && c.Summary == "" {
			add += c.Added
			del += c.Removed
			counted++
		}
		names = append(names, Name(c.Path))
	}
	// Lines are counted only where text was compared: a binary or a file
	// held by digest alone adds no "+0 −0" it was never measured for.
	lines := ""
	switch counted {
	case len(r.Changes):
		lines = fmt.Sprintf(" (+%d −%d)", add, del)
	case 0:
	default:
		lines = fmt.Sprintf(" (+%d −%d in %s of text)", add, del, files(counted))
	}
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(r.Changes)-5))
	}
	return fmt.Sprintf("%s changed%s: %s", files(len(r.Changes)), lines, strings.Join(names, ", "))
}

// Stat is one change in a line: "M server.py  +3 −1".
func (c Change) Stat() string {
	k := map[string]string{Added: "A", Removed: "D", Modified: "M"}[c.Kind]
	if c.Summary != "" {
		return fmt.Sprintf("%s %s  (%s)", k, Name(c.Path), c.Summary)
	}
	return fmt.Sprintf("%s %s  +%d −%d", k, Name(c.Path), c.Added, c.Removed)
}

// Name is path as a diff header or a list shows it: quoted in Go syntax
// (as git quotes such names) when it holds a line break, so that a file
// named "a\n+++ b" cannot pass for lines of the diff or of the list, which
// keep their lines when shown. Other characters are left to the display's
// escaping (core/textsafe), as all server text is.
func Name(path string) string {
	if strings.ContainsAny(path, "\n\r\u2028\u2029\v\f\u0085") {
		return strconv.Quote(path)
	}
	return path
}

// Unchecked counts the files both snapshots hold that could not be
// compared: one of them was not read (over Limits.MaxReadBytes).
func Unchecked(old, new *Snapshot) int {
	n := 0
	for p, a := range old.Files {
		if b, ok := new.Files[p]; ok && (a.Digest == "" || b.Digest == "") {
			n++
		}
	}
	return n
}

// Check lists where s disagrees with itself or with its launch's
// measurement: a kept text whose digest is not the text's (the snapshot
// was altered after it was taken), a measured file missing from s, or
// read with another content than the launch measured (the tree changed
// between the measurement and the snapshot).
func Check(s *Snapshot) []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(s.Files)) {
		f := s.Files[p]
		if f.Kept && f.Digest != hex.EncodeToString(sha256Sum(f.Text)) {
			out = append(out, fmt.Sprintf("the text kept of %s is not the file its digest names", Name(p)))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(s.Measured)) {
		f, ok := s.Files[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s, measured at launch, is not in the snapshot", Name(p)))
		case f.Digest == "":
			out = append(out, fmt.Sprintf("%s, measured at launch, was too large to read", Name(p)))
		case "sha256:"+f.Digest != s.Measured[p]:
			out = append(out, fmt.Sprintf("%s changed between the launch's measurement and the snapshot: the snapshot is not the code that was measured", Name(p)))
		}
	}
	return out
}

func sha256Sum(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// files is "1 file", "2 files".
func files(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}

// Build is the report of label's code: new compared with old, the
// approved code's snapshot (nil when there is none). An old snapshot that
// fails Check is not compared with: what it would show is not what the
// person approved.
func Build(label string, old, new *Snapshot) Report {
	rep := Report{Label: label, Root: new.Root, Epoch: new.Epoch, TakenAt: new.TakenAt, Files: len(new.Files)}
	if old == nil {
		rep.Note = fmt.Sprintf("no code approved earlier on %s is kept, so there is nothing to compare with (%s in %s)", label, files(len(new.Files)), new.Root)
		return rep
	}
	if probs := Check(old); len(probs) > 0 {
		rep.Note = "the code you approved, as kept, does not agree with itself (" + probs[0] + "): nothing to compare with"
		return rep
	}
	rep.Since, rep.SinceAt = old.Epoch, old.TakenAt
	rep.Changes = Compare(old, new)
	rep.Omitted = old.Omitted + new.Omitted + Unchecked(old, new)
	rep.Incomplete = old.Incomplete != "" || new.Incomplete != ""
	var notes []string
	if old.Root != new.Root {
		notes = append(notes, "the code you approved was in "+old.Root+"; files are compared by their path below each tree")
	}
	notes = append(notes, Check(new)...)
	if old.Identity != "" && new.Identity != "" && old.Identity != new.Identity && len(rep.Changes) == 0 {
		rep.Unexplained = "the measured code changed since the code you approved, but no file the snapshots hold of " + new.Root +
			" differs: the change is in what they leave out (ignored files, files past the limits, files outside the tree, the runtime or the environment; the card's identity lines say which)"
	}
	rep.Note = strings.Join(notes, "; ")
	return rep
}
