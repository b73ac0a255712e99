//go:build linux

package identity

import (
	"os"
	"testing"
	"time"
)

// On the file system of the test's temporary directory (ext4 or tmpfs on
// a Linux test machine), the stamp tick is the coarse clock's: a few
// milliseconds at most.
func TestStampTickOfLocalFileSystem(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "tick")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tick, ok := stampTick(f)
	if !ok {
		t.Skip("the temporary directory is on a file system whose stamps are not known")
	}
	if tick <= 0 || tick > 20*time.Millisecond {
		t.Errorf("stamp tick %s, want a timer interrupt (1–10 ms)", tick)
	}
	t.Logf("stamp tick %s", tick)
}
