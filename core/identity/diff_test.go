package identity_test

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/identity"
)

func TestDiff(t *testing.T) {
	base := identity.Record{
		ResolvedExecutable: identity.FileDigest{Path: "/usr/bin/node", SHA256: "sha256:n1"},
		Runtime:            "node v22.14.0",
		Entry:              "/p/dist/server.js",
		EntryDigest:        "sha256:e1",
		Interpreter:        &identity.FileDigest{Path: "/bin/sh", SHA256: "sha256:s1"},
		Lockfile:           "/p/package-lock.json",
		LockfileDigest:     "sha256:l1",
		Wrappers:           []identity.FileDigest{{Path: "/p/run.sh", SHA256: "sha256:w1"}, {Path: "/usr/bin/npx", SHA256: "sha256:x1"}},
		ExtraDigests:       map[string]string{"dist": "sha256:d1", "node_modules": "sha256:m1"},
		Epoch:              "01A",
		ProcessID:          1,
		Observed:           []identity.Observed{{PID: 1, Exe: "/usr/bin/node"}},
	}
	edit := func(f func(*identity.Record)) identity.Record {
		r := base
		r.Interpreter = &identity.FileDigest{Path: base.Interpreter.Path, SHA256: base.Interpreter.SHA256}
		r.Wrappers = append([]identity.FileDigest(nil), base.Wrappers...)
		r.ExtraDigests = map[string]string{"dist": "sha256:d1", "node_modules": "sha256:m1"}
		f(&r)
		return r
	}
	tests := []struct {
		name string
		new  identity.Record
		want []identity.Change
	}{
		{"identical apart from epoch, pid and observed", edit(func(r *identity.Record) {
			r.Epoch, r.ProcessID, r.Observed = "01B", 2, nil
		}), nil},
		{"binary rebuilt", edit(func(r *identity.Record) { r.ResolvedExecutable.SHA256 = "sha256:n2" }),
			[]identity.Change{{Field: "resolvedExecutable", Path: "/usr/bin/node", Old: "sha256:n1", New: "sha256:n2"}}},
		{"same bytes, other path", edit(func(r *identity.Record) { r.ResolvedExecutable.Path = "/opt/node" }),
			[]identity.Change{{Field: "resolvedExecutable", Path: "/opt/node", Old: "/usr/bin/node", New: "/opt/node"}}},
		{"runtime", edit(func(r *identity.Record) { r.Runtime = "node v23.0.0" }),
			[]identity.Change{{Field: "runtime", Old: "node v22.14.0", New: "node v23.0.0"}}},
		{"interpreter removed", edit(func(r *identity.Record) { r.Interpreter = nil }),
			[]identity.Change{{Field: "interpreter", Path: "/bin/sh", Old: "sha256:s1"}}},
		{"entry and lockfile", edit(func(r *identity.Record) { r.EntryDigest, r.LockfileDigest = "sha256:e2", "sha256:l2" }),
			[]identity.Change{
				{Field: "entry", Path: "/p/dist/server.js", Old: "sha256:e1", New: "sha256:e2"},
				{Field: "lockfile", Path: "/p/package-lock.json", Old: "sha256:l1", New: "sha256:l2"},
			}},
		{"wrappers changed, added, removed", edit(func(r *identity.Record) {
			r.Wrappers = []identity.FileDigest{{Path: "/usr/bin/npx", SHA256: "sha256:x2"}, {Path: "/p/new.sh", SHA256: "sha256:n"}}
		}), []identity.Change{
			{Field: "wrappers", Path: "/usr/bin/npx", Old: "sha256:x1", New: "sha256:x2"},
			{Field: "wrappers", Path: "/p/new.sh", New: "sha256:n"},
			{Field: "wrappers", Path: "/p/run.sh", Old: "sha256:w1"},
		}},
		{"wrapper order alone is no change", edit(func(r *identity.Record) {
			r.Wrappers[0], r.Wrappers[1] = r.Wrappers[1], r.Wrappers[0]
		}), nil},
		{"extra sorted", edit(func(r *identity.Record) {
			r.ExtraDigests["node_modules"] = "sha256:m2"
			r.ExtraDigests["build"] = "sha256:b"
			delete(r.ExtraDigests, "dist")
		}), []identity.Change{
			{Field: "extra:build", Path: "build", New: "sha256:b"},
			{Field: "extra:dist", Path: "dist", Old: "sha256:d1"},
			{Field: "extra:node_modules", Path: "node_modules", Old: "sha256:m1", New: "sha256:m2"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, identity.Diff(base, tt.new)); diff != "" {
				t.Errorf("Diff (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDiffNamesWhatRuns: a change of a variable that changes what code
// runs, of the code a process was observed to run, and of the ignore
// patterns is a change, named; observed processes are compared only when
// both records carry them (a measurement before launch has none).
func TestDiffNamesWhatRuns(t *testing.T) {
	npx := identity.Observed{PID: 10, Exe: "/usr/bin/node", SHA256: "sha256:node", Script: "/usr/lib/node_modules/npm/bin/npx-cli.js", ScriptSHA256: "sha256:npx"}
	srv := identity.Observed{PID: 11, PPID: 10, Exe: "/usr/bin/node", SHA256: "sha256:node", Script: "/h/.npm/_npx/ab/node_modules/pkg/index.js", ScriptSHA256: "sha256:v1"}
	old := identity.Record{
		ResolvedExecutable: identity.FileDigest{Path: "/usr/bin/npx", SHA256: "sha256:x"},
		Environment:        map[string]string{"NODE_OPTIONS": "--max-old-space-size=100"},
		Observed:           []identity.Observed{npx, srv},
	}
	changedSrv := srv
	changedSrv.PID, changedSrv.ScriptSHA256 = 21, "sha256:v2"
	helper := identity.Observed{PID: 22, Exe: "/tmp/x/evil", SHA256: "sha256:evil"}
	sameCodeElsewhere := identity.Observed{PID: 23, Exe: "/opt/node", SHA256: "sha256:node"}
	tests := []struct {
		name string
		new  identity.Record
		want []identity.Change
	}{
		{"a variable added and one changed", identity.Record{
			ResolvedExecutable: old.ResolvedExecutable,
			Environment:        map[string]string{"NODE_OPTIONS": "--require /tmp/evil.js", "PYTHONPATH": "/x"},
			Observed:           old.Observed,
		}, []identity.Change{
			{Field: "environment", Path: "NODE_OPTIONS", Old: "--max-old-space-size=100", New: "--require /tmp/evil.js"},
			{Field: "environment", Path: "PYTHONPATH", New: "/x"},
		}},
		{"a variable removed", identity.Record{ResolvedExecutable: old.ResolvedExecutable, Observed: old.Observed},
			[]identity.Change{{Field: "environment", Path: "NODE_OPTIONS", Old: "--max-old-space-size=100"}}},
		{"the npx cache's script changed", identity.Record{
			ResolvedExecutable: old.ResolvedExecutable, Environment: old.Environment,
			Observed: []identity.Observed{npx, changedSrv},
		}, []identity.Change{{Field: "observed", Path: srv.Script, Old: "sha256:v1", New: "sha256:v2"}}},
		{"a new program, and the same code under another path", identity.Record{
			ResolvedExecutable: old.ResolvedExecutable, Environment: old.Environment,
			Observed: []identity.Observed{npx, srv, helper, sameCodeElsewhere},
		}, []identity.Change{{Field: "observed", Path: "/tmp/x/evil", New: "sha256:evil"}}},
		{"not compared without observed processes", identity.Record{
			ResolvedExecutable: old.ResolvedExecutable, Environment: old.Environment,
		}, nil},
		{"ignore patterns added", identity.Record{
			ResolvedExecutable: old.ResolvedExecutable, Environment: old.Environment, Observed: old.Observed,
			Ignore: []string{"data/**"},
		}, []identity.Change{{Field: "ignore", New: "data/**"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, identity.Diff(old, tc.new)); d != "" {
				t.Errorf("Diff (-want +got):\n%s", d)
			}
		})
	}
}

// TestMeasureRecordsCodeEnvironment: the variables that change what runs
// are measured, from the daemon's environment and the configured one (the
// configured one wins); others are not.
func TestMeasureRecordsCodeEnvironment(t *testing.T) {
	t.Setenv("NODE_OPTIONS", "--inspect")
	t.Setenv("PYTHONPATH", "")
	os.Unsetenv("PYTHONPATH")
	rec, err := identity.NewMeasurer(nil).Measure(t.Context(), identity.MeasureSpec{
		Command: "/bin/sh", Args: []string{"-c", "true"},
		Env: []string{"PYTHONPATH=/x", "NODE_OPTIONS=--require /y.js", "LOG_LEVEL=debug"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"PYTHONPATH": "/x", "NODE_OPTIONS": "--require /y.js"}
	if d := cmp.Diff(want, rec.Environment); d != "" {
		t.Errorf("Environment (-want +got):\n%s", d)
	}
}
