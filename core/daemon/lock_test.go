package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/paths"
)

// TestTakeLockOnePerStateDirectory: a second daemon for the same state
// directory is refused with ErrRunning naming the first (its pid and
// socket), even when it would listen on another socket; once the first
// releases the lock, a new one takes it.
func TestTakeLockOnePerStateDirectory(t *testing.T) {
	root := t.TempDir()
	first := paths.Dirs{Config: root, State: root, Runtime: filepath.Join(root, "run")}
	l, err := TakeLock(first)
	if err != nil {
		t.Fatal(err)
	}
	if h, held := Held(first); !held || h.PID != os.Getpid() || h.Socket != first.Socket() {
		t.Errorf("Held = %+v, %v; want this pid and %s", h, held, first.Socket())
	}
	elsewhere := first
	elsewhere.Runtime = filepath.Join(t.TempDir(), "other-run")
	for _, d := range []paths.Dirs{first, elsewhere} {
		_, err := TakeLock(d)
		if !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), first.Socket()) {
			t.Errorf("second TakeLock (socket %s): %v; want ErrRunning naming this pid and %s", d.Socket(), err, first.Socket())
		}
	}
	if _, err := TakeLock(elsewhere); err == nil || !strings.Contains(err.Error(), "not on "+elsewhere.Socket()) {
		t.Errorf("a second daemon that would listen elsewhere is not told where the first listens: %v", err)
	}
	l.Release()
	if _, held := Held(first); held {
		t.Error("the lock is still held after Release")
	}
	l2, err := TakeLock(elsewhere)
	if err != nil {
		t.Fatalf("TakeLock after Release: %v", err)
	}
	l2.Release()
}
