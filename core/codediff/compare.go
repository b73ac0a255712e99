package codediff

import (
	"fmt"
	"slices"
	"strings"
	"time"

	udiff "github.com/aymanbagabas/go-udiff"
)

// Change kinds.
const (
	Added    = "added"
	Removed  = "removed"
	Modified = "modified"
)

// Change is one file that differs between two snapshots.
type Change struct {
	Path    string `json:"path"`
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
	Label string `json:"label"`
	Root  string `json:"root,omitempty"`
	// Since is the approved epoch the tree is compared with, and when its
	// snapshot was taken; empty when there is none (Note says why).
	Since   string    `json:"since,omitempty"`
	SinceAt time.Time `json:"sinceAt,omitzero"`
	Epoch   string    `json:"epoch,omitempty"`
	TakenAt time.Time `json:"takenAt,omitzero"`
	Changes []Change  `json:"changes,omitempty"`
	Files   int       `json:"files"` // files in the new snapshot
	// Omitted counts files either snapshot did not record (past the
	// limits): a change among them cannot be shown.
	Omitted int `json:"omitted,omitempty"`
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
	from, to := "a/"+path, "b/"+path
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
		s := "no file of " + r.Root + " changed since the code you approved"
		if r.Omitted > 0 {
			s += fmt.Sprintf(" (%d files past the limits not compared)", r.Omitted)
		}
		return s
	}
	add, del := 0, 0
	names := make([]string, 0, len(r.Changes))
	for _, c := range r.Changes {
		add += c.Added
		del += c.Removed
		names = append(names, c.Path)
	}
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(r.Changes)-5))
	}
	files := "files"
	if len(r.Changes) == 1 {
		files = "file"
	}
	return fmt.Sprintf("%d %s changed (+%d −%d): %s", len(r.Changes), files, add, del, strings.Join(names, ", "))
}

// Stat is one change in a line: "M server.py  +3 −1".
func (c Change) Stat() string {
	k := map[string]string{Added: "A", Removed: "D", Modified: "M"}[c.Kind]
	if c.Summary != "" {
		return fmt.Sprintf("%s %s  (%s)", k, c.Path, c.Summary)
	}
	return fmt.Sprintf("%s %s  +%d −%d", k, c.Path, c.Added, c.Removed)
}
