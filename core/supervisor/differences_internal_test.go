//go:build unix

package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/portcullis/portcullis/core/identity"
)

// systemBinary returns the real path of a program of the operating system
// (root's, in a root-owned directory), or skips.
func systemBinary(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("no %s", name)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Skip(err)
	}
	if personCanChange(real) {
		t.Skipf("%s is not root's alone here", real)
	}
	return real
}

// TestDifferences states which changes of a tree are a new epoch: what an
// answerer runs, and code the epoch does not stand for that can read the
// requests; never a helper running the system's or the epoch's code,
// whatever pipes it holds, and never a process that cannot read the
// requests (its output is judged as it is read).
func TestDifferences(t *testing.T) {
	sleep := systemBinary(t, "sleep")
	sysPy := systemBinary(t, "python3")
	dir := t.TempDir()
	// The server's interpreter is the person's (a virtual environment).
	py := filepath.Join(dir, "python3")
	if err := os.WriteFile(py, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	userScript := filepath.Join(dir, "helper.sh")
	if err := os.WriteFile(userScript, []byte("#!/bin/sh\nsleep 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The answerer: the server's Python process, pid 10.
	server := member{view: procView{pid: 10, ppid: 1, start: 100, exe: py, args: []string{"python3", "/srv/server.py"}, stdio: true},
		obs: identity.Observed{PID: 10, Exe: py, SHA256: "sha256:py", Script: "/srv/server.py", ScriptSHA256: "sha256:server1"}}
	proc := func(pid int, start uint64, exe, script, scriptSum string, stdio bool) member {
		args := []string{exe}
		if script != "" {
			args = append(args, script)
		}
		return member{view: procView{pid: pid, ppid: 10, start: start, exe: exe, args: args, stdio: stdio},
			obs: identity.Observed{PID: pid, Exe: exe, SHA256: "sha256:" + exe, Script: script, ScriptSHA256: scriptSum}}
	}
	// The server's fork (subprocess.run before its exec): the server's
	// own code, holding stdin.
	fork := proc(20, 200, py, "/srv/server.py", "sha256:server1", true)
	execd := func(m member, exe, script, sum string) member {
		n := proc(m.view.pid, m.view.start, exe, script, sum, m.view.stdio)
		n.view.ppid = m.view.ppid
		return n
	}
	newProc := func(base []member) *Process {
		p := &Process{}
		p.setBaseLocked([]member{server}, true, stamp{})
		p.setBaseLocked(base, false, stamp{})
		p.tree.answerers = map[int]uint64{10: 100}
		p.tree.armed = true
		return p
	}
	tests := []struct {
		name          string
		base, now     []member
		want, restart bool
	}{
		{"system helper holding stdin (subprocess.run of sleep)", []member{server, fork}, []member{server, execd(fork, sleep, "", "")}, false, false},
		{"system helper seen only after its exec", []member{server}, []member{server, execd(fork, sleep, "", "")}, false, false},
		{"fork of the server, before its exec", []member{server}, []member{server, fork}, false, false},
		{"helper running the server's own code", []member{server}, []member{server, proc(21, 210, py, "/srv/server.py", "sha256:server1", true)}, false, false},
		{"unmeasured script of the person, holding stdin", []member{server}, []member{server, proc(22, 220, "/bin/sh", userScript, "sha256:helper", true)}, true, false},
		{"unmeasured script that cannot read the requests", []member{server}, []member{server, proc(22, 220, "/bin/sh", userScript, "sha256:helper", false)}, false, false},
		{"the answerer execs the same program", []member{server}, []member{execd(server, py, "/srv/server.py", "sha256:server2")}, true, true},
		{"the answerer execs a system program", []member{server}, []member{execd(server, sleep, "", "")}, true, true},
		{"a worker in place of the answerer, same code", []member{server}, []member{proc(30, 300, py, "/srv/server.py", "sha256:server1", true)}, true, true},
		{"a worker in place of the answerer, new code", []member{server}, []member{proc(30, 300, py, "/srv/server.py", "sha256:server2", true)}, true, true},
		{"the answerer exited, nothing took its place", []member{server}, nil, false, false},
		{"the answerer exited, a system program holds stdin", []member{server}, []member{proc(31, 310, sleep, "", "", true)}, false, false},
		{"the answerer exited, python3 -c of the system holds stdin", []member{server}, []member{proc(31, 310, sysPy, "", "", true)}, false, false},
	}
	for _, tt := range tests {
		p := newProc(tt.base)
		what, restarted, _ := p.differencesLocked(tt.now)
		if got := len(what) > 0; got != tt.want || restarted != tt.restart {
			t.Errorf("%s: differences %q, restarted %v; want a change %v, restarted %v", tt.name, what, restarted, tt.want, tt.restart)
		}
	}
}

// TestPersonCanChange: the system's files are not under review; a file the
// person owns, one in a directory anyone may write (/tmp), or one that is
// missing, is.
func TestPersonCanChange(t *testing.T) {
	sleep := systemBinary(t, "sleep")
	if personCanChange(sleep) {
		t.Errorf("%s counted as the person's", sleep)
	}
	own := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(own, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{own, filepath.Join(os.TempDir()), "/no/such/file", "relative/file", ""} {
		if !personCanChange(p) {
			t.Errorf("%q not counted as the person's", p)
		}
	}
}
