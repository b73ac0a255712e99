package config

import (
	"regexp"
	"strings"
	"testing"
)

// TestNamesMatchTheirPatterns: ValidLabel, ValidEnvName and bare accept
// exactly what the patterns they replaced accept, for every string of up
// to three bytes over an alphabet holding each class's edges (and bytes
// that are not ASCII, a newline before the end), and for lengths around
// the label's limit of 64.
func TestNamesMatchTheirPatterns(t *testing.T) {
	checks := []struct {
		name string
		re   *regexp.Regexp
		fn   func(string) bool
	}{
		{"ValidLabel", regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`), ValidLabel},
		{"ValidEnvName", regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`), ValidEnvName},
		{"bare", regexp.MustCompile(`^[A-Za-z0-9_-]+$`), bare},
	}
	alphabet := []string{"a", "z", "A", "Z", "0", "9", ".", "_", "-", "/", " ", "\n", "@", "[", "`", "{", "é", "\xff"}
	inputs := []string{""}
	for n, prev := 0, []string{""}; n < 3; n++ {
		var next []string
		for _, p := range prev {
			for _, c := range alphabet {
				next = append(next, p+c)
			}
		}
		inputs = append(inputs, next...)
		prev = next
	}
	for _, n := range []int{63, 64, 65} {
		inputs = append(inputs, strings.Repeat("a", n), "_"+strings.Repeat("a", n-1), strings.Repeat("a", n-1)+"\n")
	}
	accepted := map[string]int{}
	for _, c := range checks {
		for _, in := range inputs {
			want := c.re.MatchString(in)
			if got := c.fn(in); got != want {
				t.Errorf("%s(%q) = %v, want %v (as %s)", c.name, in, got, want, c.re)
			}
			if want {
				accepted[c.name]++
			}
		}
	}
	for _, c := range checks {
		if accepted[c.name] == 0 {
			t.Errorf("no input accepted by %s: the comparison tests nothing", c.name)
		}
	}
}
