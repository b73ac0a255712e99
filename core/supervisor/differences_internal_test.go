//go:build unix

package supervisor

import (
	"testing"

	"github.com/portcullis/portcullis/core/identity"
)

// TestDifferencesForkBeforeExec: a helper the scan caught between its fork
// and its exec (still the shell, holding no pipe) that then execs another
// program holding no pipe is no new epoch, whether or not the fork was seen;
// an exec that holds the server's stdio is one; so is an exec that changes
// the code of a process the epoch recorded.
func TestDifferencesForkBeforeExec(t *testing.T) {
	sh := member{view: procView{pid: 10, ppid: 1, start: 100, exe: "/bin/sh", args: []string{"sh", "server.sh"}, stdio: true}, obs: identity.Observed{PID: 10, Exe: "/bin/sh", SHA256: "sha256:sh"}}
	worker := member{view: procView{pid: 11, ppid: 10, start: 110, exe: "/usr/bin/python3", args: []string{"python3", "w.py"}}, obs: identity.Observed{PID: 11, Exe: "/usr/bin/python3", SHA256: "sha256:py", Script: "w.py", ScriptSHA256: "sha256:w1"}}
	// The shell's child after fork, before its redirections and exec.
	forked := member{view: procView{pid: 20, ppid: 10, start: 200, exe: "/bin/sh", args: []string{"sh", "server.sh"}}, obs: identity.Observed{PID: 20, Exe: "/bin/sh", SHA256: "sha256:sh"}}
	execd := func(m member, exe string, stdio bool) member {
		m.view.exe, m.view.args, m.view.stdio = exe, []string{exe}, stdio
		m.obs.Exe, m.obs.SHA256 = exe, "sha256:"+exe
		return m
	}
	newProc := func(base, recorded []member) *Process {
		p := &Process{}
		p.setBaseLocked(recorded, true, stamp{})
		p.setBaseLocked(base, false, stamp{})
		return p
	}
	tests := []struct {
		name          string
		base          []member
		now           []member
		want, restart bool
	}{
		{"fork seen, exec without the pipe", []member{sh, worker, forked}, []member{sh, worker, execd(forked, "/usr/bin/portcullis", false)}, false, false},
		{"fork not seen, exec without the pipe", []member{sh, worker}, []member{sh, worker, execd(forked, "/usr/bin/portcullis", false)}, false, false},
		{"fork seen, exec holding the pipe", []member{sh, worker, forked}, []member{sh, worker, execd(forked, "/usr/bin/python3", true)}, true, true},
		{"new process holding the pipe", []member{sh, worker}, []member{sh, worker, execd(forked, "/usr/bin/python3", true)}, true, true},
		{"recorded worker execs other code", []member{sh, worker}, []member{sh, execd(worker, "/usr/bin/node", false)}, true, false},
	}
	for _, tt := range tests {
		p := newProc(tt.base, []member{sh, worker})
		what, restarted := p.differencesLocked(tt.now)
		if got := len(what) > 0; got != tt.want || restarted != tt.restart {
			t.Errorf("%s: differences %q, restarted %v; want a change %v, restarted %v", tt.name, what, restarted, tt.want, tt.restart)
		}
	}
}
