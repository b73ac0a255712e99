package codediff

import "testing"

// TestSummaryCountsLinesOnlyOfText: a binary's change has no line count,
// and the summary claims none for it ("+0 −0" was never measured).
func TestSummaryCountsLinesOnlyOfText(t *testing.T) {
	bin := Report{Root: "/srv", Since: "E1", Changes: []Change{{Path: "publish", Kind: Modified, Binary: true}}}
	if got, want := bin.Summary(), "1 file changed: publish"; got != want {
		t.Errorf("a binary alone: %q, want %q", got, want)
	}
	mixed := Report{Root: "/srv", Since: "E1", Changes: []Change{{Path: "publish", Kind: Modified, Binary: true}, {Path: "main.go", Kind: Modified, Added: 3, Removed: 1}}}
	if got, want := mixed.Summary(), "2 files changed (+3 −1 in 1 file of text): publish, main.go"; got != want {
		t.Errorf("a binary and a text file: %q, want %q", got, want)
	}
	text := Report{Root: "/srv", Since: "E1", Changes: []Change{{Path: "main.go", Kind: Modified, Added: 3, Removed: 1}}}
	if got, want := text.Summary(), "1 file changed (+3 −1): main.go"; got != want {
		t.Errorf("a text file: %q, want %q", got, want)
	}
}
