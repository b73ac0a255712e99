package identity

import (
	"maps"
	"slices"
)

// Change is one difference between two execution records. Field is one of
// "resolvedExecutable", "runtime", "interpreter", "entry", "lockfile",
// "wrappers", "package" or "extra:<path>"; Path is the file concerned (the new one when
// both exist); Old and New are the digests ("" for absent), or for "runtime"
// the version strings. When only the path of a file changed (same digest), Old
// and New are the paths.
type Change struct {
	Field string `json:"field"`
	Path  string `json:"path,omitempty"`
	Old   string `json:"old"`
	New   string `json:"new"`
	// Files are, for "package", the files under Path that changed (as far
	// as the Measurer remembers; at most 20).
	Files []string `json:"files,omitempty"`
}

// Diff lists which measured digests differ between old and new, in a fixed
// order: resolvedExecutable, runtime, interpreter, entry, lockfile, wrappers
// (matched by path, in new's order then removed ones), package, extra:<path> (sorted by
// path). Launch command, working directory, epoch, pid and observed processes
// are not compared. Equal records give nil.
func Diff(old, new Record) []Change {
	var out []Change
	file := func(field string, o, n FileDigest) {
		if o == n {
			return
		}
		c := Change{Field: field, Path: n.Path, Old: o.SHA256, New: n.SHA256}
		if c.Path == "" {
			c.Path = o.Path
		}
		if o.SHA256 == n.SHA256 {
			c.Old, c.New = o.Path, n.Path
		}
		out = append(out, c)
	}
	file("resolvedExecutable", old.ResolvedExecutable, new.ResolvedExecutable)
	if old.Runtime != new.Runtime {
		out = append(out, Change{Field: "runtime", Old: old.Runtime, New: new.Runtime})
	}
	var oi, ni FileDigest
	if old.Interpreter != nil {
		oi = *old.Interpreter
	}
	if new.Interpreter != nil {
		ni = *new.Interpreter
	}
	file("interpreter", oi, ni)
	file("entry", FileDigest{old.Entry, old.EntryDigest}, FileDigest{new.Entry, new.EntryDigest})
	file("lockfile", FileDigest{old.Lockfile, old.LockfileDigest}, FileDigest{new.Lockfile, new.LockfileDigest})

	oldW := make(map[string]string, len(old.Wrappers))
	for _, w := range old.Wrappers {
		oldW[w.Path] = w.SHA256
	}
	seen := make(map[string]bool, len(new.Wrappers))
	for _, w := range new.Wrappers {
		seen[w.Path] = true
		if o, ok := oldW[w.Path]; !ok || o != w.SHA256 {
			out = append(out, Change{Field: "wrappers", Path: w.Path, Old: o, New: w.SHA256})
		}
	}
	for _, w := range old.Wrappers {
		if !seen[w.Path] {
			out = append(out, Change{Field: "wrappers", Path: w.Path, Old: w.SHA256})
		}
	}

	var op, np PackageDigest
	if old.Package != nil {
		op = *old.Package
	}
	if new.Package != nil {
		np = *new.Package
	}
	if op.Dir != np.Dir || op.SHA256 != np.SHA256 {
		c := Change{Field: "package", Path: np.Dir, Old: op.SHA256, New: np.SHA256, Files: np.Changed}
		if c.Path == "" {
			c.Path = op.Dir
		}
		out = append(out, c)
	}
	keys := slices.Sorted(maps.Keys(old.ExtraDigests))
	for k := range new.ExtraDigests {
		if _, ok := old.ExtraDigests[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		o, n := old.ExtraDigests[k], new.ExtraDigests[k]
		if o != n {
			out = append(out, Change{Field: "extra:" + k, Path: k, Old: o, New: n})
		}
	}
	return out
}
