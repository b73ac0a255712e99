package identity

import (
	"maps"
	"slices"
	"strings"
)

// Change is one difference between two execution records. Field is one of
// "resolvedExecutable", "runtime", "interpreter", "entry", "lockfile",
// "wrappers", "package", "extra:<path>", "ignore", "environment" or
// "observed"; Path is the file concerned (the new one when both exist);
// Old and New are the digests ("" for absent), or for "runtime" the
// version strings. When only the path of a file changed (same digest), Old
// and New are the paths. For "environment" Path is the variable's name and
// Old and New its values ("" when unset); for "ignore" Old and New are the
// patterns, joined by ", "; for "observed" Path is an executable or script
// a running process of the server was seen to run, Old and New its digests
// in the two epochs ("" when the old epoch ran no such file).
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
// path), ignore, environment (sorted by name), observed. Observed
// processes are compared only when both records carry them (see
// diffObserved). Launch command, working directory, epoch and pid are not
// compared. Equal records give nil.
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
	if !slices.Equal(old.Ignore, new.Ignore) {
		out = append(out, Change{Field: "ignore", Old: strings.Join(old.Ignore, ", "), New: strings.Join(new.Ignore, ", ")})
	}
	names := slices.Sorted(maps.Keys(old.Environment))
	for k := range new.Environment {
		if _, ok := old.Environment[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		o, had := old.Environment[k]
		n, has := new.Environment[k]
		if o != n || had != has {
			out = append(out, Change{Field: "environment", Path: k, Old: o, New: n})
		}
	}
	return append(out, diffObserved(old.Observed, new.Observed)...)
}

// diffObserved compares the code two epochs' processes were seen to run,
// when both records carry observed processes: an executable or script path
// both ran with another digest, and a path only the new epoch ran whose
// digest the old epoch never ran (the same code under another path is the
// same code). A process whose file could not be read (it had exited) is
// left out. Sorted by path.
func diffObserved(old, new []Observed) []Change {
	if len(old) == 0 || len(new) == 0 {
		return nil
	}
	type file struct{ path, sum string }
	files := func(obs []Observed) []file {
		var out []file
		for _, o := range obs {
			if o.SHA256 != "" {
				out = append(out, file{strings.TrimSuffix(o.Exe, " (deleted)"), o.SHA256})
			}
			if o.Script != "" && o.ScriptSHA256 != "" {
				out = append(out, file{o.Script, o.ScriptSHA256})
			}
		}
		return out
	}
	oldByPath := map[string]string{}
	oldSums := map[string]bool{}
	for _, f := range files(old) {
		oldByPath[f.path] = f.sum
		oldSums[f.sum] = true
	}
	seen := map[file]bool{}
	var out []Change
	for _, f := range files(new) {
		if seen[f] {
			continue
		}
		seen[f] = true
		o, had := oldByPath[f.path]
		switch {
		case had && o != f.sum:
			out = append(out, Change{Field: "observed", Path: f.path, Old: o, New: f.sum})
		case !had && !oldSums[f.sum]:
			out = append(out, Change{Field: "observed", Path: f.path, New: f.sum})
		}
	}
	slices.SortStableFunc(out, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return out
}
