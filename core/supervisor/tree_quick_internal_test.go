//go:build linux

package supervisor

import (
	"strings"
	"testing"
)

// argsEqual must agree with how viewOf splits /proc/PID/cmdline, or the
// quick check would call an unchanged process changed (a full read each
// time) or, worse, a changed one unchanged.
func TestArgsEqual(t *testing.T) {
	split := func(b string) []string {
		b = strings.TrimSuffix(b, "\x00")
		if b == "" {
			return nil
		}
		return strings.Split(b, "\x00")
	}
	cmdlines := []string{"", "\x00", "sh\x00", "sh", "sh\x00-c\x00x\x00", "a\x00\x00b\x00", "a\x00\x00", "py\x00w.py", "py\x00w.pyc\x00"}
	for _, b := range cmdlines {
		for _, other := range cmdlines {
			want := strings.Join(split(b), "\x01") == strings.Join(split(other), "\x01") && len(split(b)) == len(split(other))
			if got := argsEqual([]byte(b), split(other)); got != want {
				t.Errorf("argsEqual(%q, %q) = %v, want %v", b, split(other), got, want)
			}
		}
	}
}

func TestForksIn(t *testing.T) {
	for _, tc := range []struct {
		text string
		want uint64
		ok   bool
	}{
		{"cpu  1 2 3\nintr 5 0 0\nctxt 9\nbtime 17\nprocesses 123456\nprocs_running 2\n", 123456, true},
		{"cpu 1\nprocesses 18446744073709551615\n", 18446744073709551615, true},
		{"cpu 1\nprocs_running 2\n", 0, false},
		{"cpu 1\nprocesses x\n", 0, false},
		{"cpu 1\nprocesses 18446744073709551616\n", 0, false},
		{"processes 5\n", 0, false},          // never the first line
		{"cpu 1\nprocesses 12345", 0, false}, // cut short
	} {
		got, ok := forksIn([]byte(tc.text))
		if got != tc.want || ok != tc.ok {
			t.Errorf("forksIn(%q) = %d, %v; want %d, %v", tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseStat(t *testing.T) {
	line := "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n"
	st, ok := parseStat([]byte(line))
	if !ok || st.state != 'S' || st.ppid != 17 || st.pgid != 4242 || st.start != 987654 {
		t.Errorf("parseStat = %+v, %v", st, ok)
	}
	for _, bad := range []string{"", "1 (x) S 1 1", "1 (x) SS 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 1 0 5", "1 (x) S a 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 1 0 5"} {
		if _, ok := parseStat([]byte(bad)); ok {
			t.Errorf("parseStat(%q) ok", bad)
		}
	}
}

// A wrapper that execs its argument is a launcher until it did, unless it
// forked a child (setsid as a group leader, setsid -w).
func TestLaunchingWrappers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		views []procView
		want  bool
	}{
		{"setsid before its exec", []procView{{pid: 1, exe: "/usr/bin/dash"}, {pid: 2, ppid: 1, exe: "/usr/bin/setsid", args: []string{"setsid", "sleep", "9"}}}, true},
		{"nohup before its exec", []procView{{pid: 2, exe: "/usr/bin/nohup"}}, true},
		{"setsid that forked", []procView{{pid: 2, exe: "/usr/bin/setsid"}, {pid: 3, ppid: 2, exe: "/usr/bin/sleep"}}, false},
		{"the program it exec'd", []procView{{pid: 1, exe: "/usr/bin/dash", args: []string{"sh", "s.sh"}}, {pid: 2, ppid: 1, exe: "/usr/bin/sleep"}}, false},
	} {
		if got := launching(tc.views); got != tc.want {
			t.Errorf("%s: launching = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A shell's fork that has not exec'd yet (its parent's file and arguments,
// no child) is a launcher: it still holds the server's stdio until its
// redirections, and settling must wait for its exec. A fork of a program
// that is no shell (a prefork worker) is not.
func TestLaunchingShellFork(t *testing.T) {
	script := procView{pid: 1, exe: "/usr/bin/dash", args: []string{"sh", "s.sh"}}
	fork := func(pid, ppid int, of procView) procView {
		of.pid, of.ppid = pid, ppid
		return of
	}
	py := procView{pid: 1, exe: "/usr/bin/python3", args: []string{"python3", "w.py"}}
	for _, tc := range []struct {
		name  string
		views []procView
		want  bool
	}{
		{"the script's fork before its exec", []procView{script, fork(2, 1, script)}, true},
		{"the script alone", []procView{script}, false},
		{"the fork after its exec", []procView{script, {pid: 2, ppid: 1, exe: "/usr/bin/sleep", args: []string{"sleep", "600"}}}, false},
		{"another script the shell started", []procView{script, {pid: 2, ppid: 1, exe: "/usr/bin/dash", args: []string{"sh", "other.sh"}}}, false},
		{"a fork with a child of its own", []procView{script, fork(2, 1, script), {pid: 3, ppid: 2, exe: "/usr/bin/sleep"}}, false},
		{"a fork whose parent left the tree", []procView{fork(2, 1, script)}, false},
		{"a fork of a program that is no shell", []procView{py, fork(2, 1, py)}, false},
	} {
		if got := launching(tc.views); got != tc.want {
			t.Errorf("%s: launching = %v, want %v", tc.name, got, tc.want)
		}
	}
}
