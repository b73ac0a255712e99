//go:build unix

package supervisor

import "testing"

// markStdio, as macOS uses it: what holds says for processes it can read,
// holding for those it cannot, the earlier scan for a process that did not
// exec, and holding for all when none is seen holding the pipes.
func TestMarkStdio(t *testing.T) {
	known := map[int]bool{30: false}
	knownOf := func(v procView) (procView, bool) {
		s, ok := known[v.pid]
		return procView{pid: v.pid, stdio: s}, ok
	}
	views := func() []procView { return []procView{{pid: 10}, {pid: 20}, {pid: 30}, {pid: 40}} }
	holds := map[int]bool{10: true, 20: false, 30: true}
	vs := views()
	markStdio(vs, knownOf, func(pid int) (bool, bool) { h, ok := holds[pid]; return h, ok })
	want := map[int]bool{10: true, 20: false, 30: false, 40: true}
	for _, v := range vs {
		if v.stdio != want[v.pid] {
			t.Errorf("pid %d: stdio %v, want %v", v.pid, v.stdio, want[v.pid])
		}
	}
	vs = views()
	markStdio(vs, func(procView) (procView, bool) { return procView{}, false }, func(int) (bool, bool) { return false, true })
	for _, v := range vs {
		if !v.stdio {
			t.Errorf("pid %d: stdio false although no process was seen holding the pipes", v.pid)
		}
	}
}
