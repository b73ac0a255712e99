package codediff

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkTake is one launch's snapshot of a source tree at the default
// limits: 4,000 text files of 2 KiB in 40 directories, and 10,000 files
// past MaxFiles that are only counted.
func BenchmarkTake(b *testing.B) {
	root := b.TempDir()
	line := strings.Repeat("x", 63) + "\n"
	for i := range 14000 {
		write(b, root, fmt.Sprintf("d%02d/f%05d.py", i%40, i), strings.Repeat(line, 32))
	}
	b.ReportAllocs()
	for b.Loop() {
		s, err := Take(root, DefaultLimits)
		if err != nil || len(s.Files) != 4000 || s.Omitted != 10000 {
			b.Fatalf("%d files, %d omitted, %v", len(s.Files), s.Omitted, err)
		}
	}
}
