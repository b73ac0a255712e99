//go:build linux

package sandboxlaunch

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		p, dir string
		want   bool
	}{
		{"/a/b", "/a/b", true},
		{"/a/b/c", "/a/b", true},
		{"/a/b/", "/a/b", true},
		{"/a/bc", "/a/b", false},
		{"/a", "/a/b", false},
	} {
		if got := within(c.p, c.dir); got != c.want {
			t.Errorf("within(%q, %q) = %v, want %v", c.p, c.dir, got, c.want)
		}
	}
}

// TestMainRefusesBadArguments: started by hand, or with a relative path to
// hide, the launcher says so before it mounts anything.
func TestMainRefusesBadArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no arguments"},
		{[]string{"x", "/bin/true", "true"}, "bad arguments"},
		{[]string{"2", "/a", "/bin/true", "true"}, "bad arguments"},
		{[]string{"9223372036854775807", "a", "b", "c"}, "bad arguments"}, // 1+n+2 overflows
		{[]string{"1", "rel", "/bin/true", "true"}, "not an absolute path"},
		{[]string{ExecFdArg + "x", "0", "/bin/true", "true"}, "bad arguments"},
		{[]string{ExecFdArg + "1", "0", "/bin/true", "true"}, "bad arguments"},
		{[]string{ExecFdArg + "987", "0", "/bin/true", "true"}, "descriptor 987"},
	} {
		err := Main(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Main(%q) = %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestMainWithoutEntryPoint: this test binary is linked without the
// launcher's entry point, so asked to make its own namespaces the launcher
// says it cannot (the daemon then clones it into them) and runs nothing.
func TestMainWithoutEntryPoint(t *testing.T) {
	for _, mode := range []string{UnshareArg, UnshareNetArg} {
		if err := Main([]string{mode, "0", "/bin/true", "true"}); !errors.Is(err, ErrNoEntry) {
			t.Errorf("Main(%s …) without the entry point = %v, want ErrNoEntry", mode, err)
		}
	}
}

// TestEnteredSaysWhichStepFailed: a failure of the entry point's steps,
// recorded before the runtime started, is reported with the step and the
// kernel's error; only a refused unshare points at AppArmor or seccomp.
func TestEnteredSaysWhichStepFailed(t *testing.T) {
	defer func(r, s, e int64) { entryRan, entryStep, entryErrno = r, s, e }(entryRan, entryStep, entryErrno)
	entryRan = 1
	for _, c := range []struct {
		step  int64
		errno syscall.Errno
		want  []string
	}{
		{entryStepUnshare, syscall.EPERM, []string{"refused to create its user and mount namespaces (operation not permitted)", "AppArmor", "--sandbox off"}},
		{entryStepUnshare, syscall.ENOSPC, []string{"could not create its user and mount namespaces (no space left on device)", "--sandbox off"}},
		{entryStepUidMap, syscall.EPERM, []string{"could not map the person's uid in its user namespace (operation not permitted)", "--sandbox off"}},
		{entryStepGidMap, syscall.EINVAL, []string{"could not map the person's gid"}},
		{entryStepSetgroups, syscall.ENOENT, []string{"could not deny setgroups"}},
		{7, syscall.EIO, []string{"enter its namespaces (step 7)"}},
	} {
		entryStep, entryErrno = c.step, int64(c.errno)
		err := entered()
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("step %d, %v: %v, want it to say %q", c.step, c.errno, err, w)
			}
		}
		if c.step != entryStepUnshare && err != nil && strings.Contains(err.Error(), "AppArmor") {
			t.Errorf("step %d blames AppArmor: %v", c.step, err)
		}
	}
	entryStep = entryStepDone
	if err := entered(); err != nil {
		t.Errorf("after every step: %v", err)
	}
}
