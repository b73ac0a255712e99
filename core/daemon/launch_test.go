package daemon

import (
	"testing"

	"github.com/portcullis/portcullis/core/identity"
)

// TestSwappedExecutable: a plain binary whose started file (as the kernel
// reports it) has another digest than the one measured was swapped between
// measurement and start; a file the kernel could not read, and launches
// through an interpreter or a wrapper (which exec further programs by
// design), are not taken for a swap.
func TestSwappedExecutable(t *testing.T) {
	const measured, other = "sha256:aaaa", "sha256:bbbb"
	base := identity.Record{ResolvedExecutable: identity.FileDigest{Path: "/srv/bin/notes", SHA256: measured}}
	with := func(mod func(*identity.Record)) identity.Record {
		r := base
		if mod != nil {
			mod(&r)
		}
		return r
	}
	tests := []struct {
		name    string
		rec     identity.Record
		running string
		want    bool
	}{
		{"same digest", with(nil), measured, false},
		{"swapped", with(nil), other, true},
		{"unreadable", with(nil), "", false},
		{"shebang interpreter", with(func(r *identity.Record) { r.Interpreter = &identity.FileDigest{Path: "/usr/bin/node", SHA256: other} }), other, false},
		{"wrapper", with(func(r *identity.Record) { r.Wrappers = []identity.FileDigest{base.ResolvedExecutable} }), other, false},
	}
	for _, tt := range tests {
		got, swapped := swappedExecutable(tt.rec, tt.running)
		if swapped != tt.want || (swapped && got != other) {
			t.Errorf("%s: swappedExecutable = %q, %v; want swapped %v", tt.name, got, swapped, tt.want)
		}
	}
}

// TestDescribeChanges: the status line names changed files relative to the
// working directory, once each, and leaves out a watched directory whose
// change is a file already named.
func TestDescribeChanges(t *testing.T) {
	changes := []identity.Change{
		{Field: "extra:/p/dist", Path: "/p/dist"},
		{Field: "entry", Path: "/p/dist/server.mjs"},
		{Field: "lockfile", Path: "/p/package-lock.json"},
		{Field: "extra:/p/distant", Path: "/p/distant"},
		{Field: "runtime"},
		{Field: "entry", Path: "/p/dist/server.mjs"},
		{Field: "environment", Path: "PYTHONPATH", New: "/p/x"},
		{Field: "ignore", New: "data/**"},
	}
	if got, want := describeChanges(changes, "/p"), "dist/server.mjs, distant, environment PYTHONPATH, ignore patterns, package-lock.json, runtime"; got != want {
		t.Errorf("describeChanges = %q, want %q", got, want)
	}
}
