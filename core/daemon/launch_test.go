package daemon

import (
	"testing"

	"github.com/portcullis/portcullis/core/identity"
)

// TestSwappedExecutable: a plain binary whose running process (as the kernel
// reports it) has another digest than the one measured was swapped between
// measurement and start; a process the kernel could not read, another
// process of the tree, and launches through an interpreter or a wrapper
// (which exec further programs by design) are not taken for a swap.
func TestSwappedExecutable(t *testing.T) {
	const measured, other = "sha256:aaaa", "sha256:bbbb"
	base := identity.Record{ResolvedExecutable: identity.FileDigest{Path: "/srv/bin/notes", SHA256: measured}}
	with := func(mod func(*identity.Record), obs ...identity.Observed) identity.Record {
		r := base
		r.Observed = obs
		if mod != nil {
			mod(&r)
		}
		return r
	}
	tests := []struct {
		name string
		rec  identity.Record
		want bool
	}{
		{"same digest", with(nil, identity.Observed{PID: 10, SHA256: measured}), false},
		{"swapped", with(nil, identity.Observed{PID: 10, SHA256: other}), true},
		{"unreadable", with(nil, identity.Observed{PID: 10}), false},
		{"a child differs", with(nil, identity.Observed{PID: 10, SHA256: measured}, identity.Observed{PID: 11, PPID: 10, SHA256: other}), false},
		{"shebang interpreter", with(func(r *identity.Record) { r.Interpreter = &identity.FileDigest{Path: "/usr/bin/node", SHA256: other} }, identity.Observed{PID: 10, SHA256: other}), false},
		{"wrapper", with(func(r *identity.Record) { r.Wrappers = []identity.FileDigest{base.ResolvedExecutable} }, identity.Observed{PID: 10, SHA256: other}), false},
	}
	for _, tt := range tests {
		got, swapped := swappedExecutable(tt.rec, 10)
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
	}
	if got, want := describeChanges(changes, "/p"), "dist/server.mjs, distant, package-lock.json, runtime"; got != want {
		t.Errorf("describeChanges = %q, want %q", got, want)
	}
}
