package app

import (
	"bytes"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/paths"
)

// TestDenyRefusesApproveFlags: deny takes none of approve's scope flags; it
// refuses each with a message naming approve, before any terminal check or
// daemon, and its help marks them as approve's.
func TestDenyRefusesApproveFlags(t *testing.T) {
	dir := t.TempDir()
	a := &App{Dirs: paths.Dirs{Config: dir, State: dir, Runtime: dir}, Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	for _, args := range [][]string{{"apr_1", "--once"}, {"apr_1", "--all"}, {"apr_1", "--tools", "a,b"}, {"apr_1", "--code"}} {
		err := a.runDecide(authz.Deny, args)
		if err == nil || !strings.Contains(err.Error(), "with approve") {
			t.Errorf("deny %v: %v, want a refusal naming approve", args, err)
		}
	}
	var help bytes.Buffer
	fs := decideFlags("deny").fs
	fs.SetOutput(&help)
	fs.PrintDefaults()
	if n := strings.Count(help.String(), "(approve only, refused by deny)"); n != 4 {
		t.Errorf("deny's flags: %d of 4 marked approve's:\n%s", n, help.String())
	}
	help.Reset()
	fs = decideFlags("approve").fs
	fs.SetOutput(&help)
	fs.PrintDefaults()
	if strings.Contains(help.String(), "refused") {
		t.Errorf("approve's flags are marked as refused:\n%s", help.String())
	}
}
