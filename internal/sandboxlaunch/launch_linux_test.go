//go:build linux

package sandboxlaunch

import (
	"strings"
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
