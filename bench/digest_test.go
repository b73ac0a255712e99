package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/identity"
)

// Shape of the digest benchmark's data: 64 files of 16 MiB, 1 GiB in all.
const (
	digestFiles    = 64
	digestFileSize = 16 << 20
	digestTotal    = digestFiles * digestFileSize
)

// digestData writes digestFiles files of pseudo-random bytes (ChaCha8, so
// nothing compresses or deduplicates) into a new temporary directory, which
// the benchmark removes when it ends, and returns the directory and the file
// paths in lexical order.
func digestData(b *testing.B) (string, []string) {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "tree")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{'p', 'o', 'r', 't', 'c', 'u', 'l', 'l', 'i', 's'})
	buf := make([]byte, digestFileSize)
	var files []string
	for i := range digestFiles {
		_, _ = rng.Read(buf)
		p := filepath.Join(dir, fmt.Sprintf("blob%03d.bin", i))
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
		files = append(files, p)
	}
	return dir, files
}

// sha256sumFiles runs `sha256sum FILES…` (GNU coreutils, one process, one
// thread) and returns how long it took.
func sha256sumFiles(b *testing.B, files []string) time.Duration {
	b.Helper()
	start := time.Now()
	out, err := exec.Command("sha256sum", files...).Output()
	d := time.Since(start)
	if err != nil {
		b.Fatalf("sha256sum: %v", err)
	}
	if n := len(out); n < digestFiles*65 {
		b.Fatalf("sha256sum printed %d bytes for %d files", n, digestFiles)
	}
	return d
}

// BenchmarkDigestThroughput hashes 1 GiB of files (64 × 16 MiB, page cache
// warm) with a fresh identity.Measurer each time, so nothing comes from the
// digest cache, and with GNU `sha256sum` on the same files in the same
// iteration, alternating, so that both see the same machine. Metrics:
//
//   - file-MB/s: Measurer.DigestFile on each file in turn (one goroutine,
//     the same work as sha256sum);
//   - tree-MB/s: Measurer.DigestTree over the directory (up to GOMAXPROCS
//     goroutines);
//   - sha256sum-MB/s: the reference;
//   - file/sha256sum and tree/sha256sum: throughput ratios (target ≥ 0.9 for
//     the one-goroutine comparison).
//
// Skipped when sha256sum is not on PATH.
func BenchmarkDigestThroughput(b *testing.B) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		b.Skip("sha256sum (GNU coreutils) is not on PATH")
	}
	dir, files := digestData(b)
	// Warm the page cache once, so the first timed pass is not a disk read.
	sha256sumFiles(b, files)
	var fileT, treeT, sumT []time.Duration
	for b.Loop() {
		m := identity.NewMeasurer(nil)
		start := time.Now()
		for _, f := range files {
			if _, err := m.DigestFile(f); err != nil {
				b.Fatal(err)
			}
		}
		fileT = append(fileT, time.Since(start))

		m = identity.NewMeasurer(nil)
		start = time.Now()
		if _, err := m.DigestTree(dir); err != nil {
			b.Fatal(err)
		}
		treeT = append(treeT, time.Since(start))

		sumT = append(sumT, sha256sumFiles(b, files))
	}
	mbps := func(d time.Duration) float64 { return float64(digestTotal) / 1e6 / d.Seconds() }
	f, t, s := digestMedian(fileT), digestMedian(treeT), digestMedian(sumT)
	b.ReportMetric(mbps(f), "file-MB/s")
	b.ReportMetric(mbps(t), "tree-MB/s")
	b.ReportMetric(mbps(s), "sha256sum-MB/s")
	b.ReportMetric(s.Seconds()/f.Seconds(), "file/sha256sum")
	b.ReportMetric(s.Seconds()/t.Seconds(), "tree/sha256sum")
}

// digestMedian returns the middle of ds (the upper one of two for an even count);
// 0 for none.
func digestMedian(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
