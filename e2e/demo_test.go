package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/demoscript"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestDemo plays the scripted demo of `make demo` (internal/demoscript),
// which checks each outcome it prints, and checks that the story names
// what a person should see: the tools, the stock before and after the
// adjustment, and the epoch in `portcullis status`.
func TestDemo(t *testing.T) {
	var out, log harness.SyncBuffer
	err := demoscript.Run(testContext(t, 3*time.Minute), demoscript.Options{Out: &out, Root: repoRoot, Work: t.TempDir(), DaemonLog: &log})
	if err != nil {
		t.Fatalf("demo: %v\nstory:\n%s\ndaemon log:\n%s", err, out.String(), log.String())
	}
	story := out.String()
	for _, want := range []string{
		"inventory_lookup", "inventory_adjust",
		`"WIDGET-1: 40 on hand"`, `"WIDGET-1 adjusted by -5: 35 on hand"`, `"WIDGET-1: 35 on hand"`,
		"epoch", "done: no process left behind",
	} {
		if !strings.Contains(story, want) {
			t.Errorf("the demo's story lacks %q:\n%s", want, story)
		}
	}
}
