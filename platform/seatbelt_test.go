package platform

import (
	"strings"
	"testing"
)

// TestSeatbeltProfile: the macOS profile denies every write but to the
// writable paths, then the start-up files and PATH directories within
// them, then reading or writing Portcullis's files, in that order (in SBPL
// the last rule that matches decides); signals stay inside the sandbox;
// strict denies the network. Paths are quoted as SBPL strings.
func TestSeatbeltProfile(t *testing.T) {
	s := seatbelt{
		level:    SandboxStandard,
		hide:     []string{"/Users/p/Library/Application Support/Portcullis", `/Users/p/we"ird`},
		write:    []string{"/Users/p/proj", "/private/tmp", "/Users/p/proj", "relative"},
		readOnly: []string{"/Users/p/.zshrc", "/Users/p/proj/bin"},
	}
	p := s.profile()
	order := []string{
		"(version 1)", "(allow default)", "(deny file-write*)",
		"(allow file-write*", `(subpath "/Users/p/proj")`,
		"(deny file-write*\n    (subpath \"/Users/p/.zshrc\")\n    (subpath \"/Users/p/proj/bin\")\n)",
		"(deny file-read* file-write*\n    (subpath \"/Users/p/Library/Application Support/Portcullis\")\n    (subpath \"/Users/p/we\\\"ird\")\n)",
		"(deny signal)\n(allow signal (target same-sandbox))",
	}
	at := 0
	for _, w := range order {
		i := strings.Index(p[at:], w)
		if i < 0 {
			t.Fatalf("the profile lacks %q after offset %d:\n%s", w, at, p)
		}
		at += i + len(w)
	}
	if strings.Count(p, `(subpath "/Users/p/proj")`) != 1 || strings.Contains(p, "relative") {
		t.Errorf("paths are not unique and absolute:\n%s", p)
	}
	if strings.Contains(p, "network") {
		t.Errorf("standard denies the network:\n%s", p)
	}
	s.level = SandboxStrict
	if p := s.profile(); !strings.HasSuffix(p, "(deny network*)\n") {
		t.Errorf("strict does not end denying the network:\n%s", p)
	}
}
