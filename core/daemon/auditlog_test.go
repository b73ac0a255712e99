package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
)

// TestRecoveringReportsHealth: the first append that fails because the log
// cannot be written calls onHealth (so the tray and status learn it at once);
// later failures do not call it again, and an invalid event (the caller's
// mistake, not the log's health) never does.
func TestRecoveringReportsHealth(t *testing.T) {
	al, err := audit.Open(audit.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	r := &recovering{log: al, retryEvery: time.Hour, onHealth: func() { calls.Add(1) }}
	ctx := context.Background()
	if _, err := r.Append(ctx, "note", map[string]any{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Append(ctx, "Not A Type", nil); !errors.Is(err, audit.ErrInvalid) {
		t.Fatalf("append of an invalid type: %v", err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("onHealth called %d times while the log works", n)
	}
	al.Close()
	for range 3 {
		if _, err := r.Append(ctx, "note", nil); !errors.Is(err, audit.ErrUnavailable) {
			t.Fatalf("append to a closed log: %v, want ErrUnavailable", err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("onHealth called %d times for one failure, want 1", n)
	}
}
