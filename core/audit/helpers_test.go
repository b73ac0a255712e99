package audit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/ids"
)

// stepClock is an injected clock that advances one millisecond per reading.
type stepClock struct {
	mu sync.Mutex
	t  time.Time // guarded by mu
}

func newStepClock() *stepClock {
	return &stepClock{t: time.Date(2026, 11, 30, 1, 38, 0, 0, time.UTC)}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

var testKey = []byte("0123456789abcdef0123456789abcdef")

func openTest(t testing.TB, o Options) *Log {
	t.Helper()
	if o.Clock == nil {
		o.Clock = newStepClock().Now
	}
	l, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// sampleFields returns realistic fields for the i-th event of a test log,
// cycling through the event types.
func sampleFields(i int) (string, any) {
	run := ids.RunID(fmt.Sprintf("run-%d", i%3))
	switch i % 4 {
	case 0:
		return TypeToolCalled, ToolCalled{Call: ids.CallID(fmt.Sprintf("c%d", i)), AgentRun: run, ServerLabel: "inventory-local",
			Epoch: "01JQ7R4S4S0QJ7GZP1S2XYZW", CatalogRevision: 13, Tool: fmt.Sprintf("tool_%d", i),
			ArgsDigest: "sha256:9f2c1d7e8a4b3c6d5e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d", ArgKeys: []string{"count", "sku"}, Decision: "grant", Grant: "req-1"}
	case 1:
		return TypeToolCompleted, ToolCompleted{Call: ids.CallID(fmt.Sprintf("c%d", i-1)), AgentRun: run, ServerLabel: "inventory-local",
			Epoch: "01JQ7R4S4S0QJ7GZP1S2XYZW", Tool: fmt.Sprintf("tool_%d", i-1), Outcome: "ok", DurationMS: 12.5}
	case 2:
		return TypeCatalogRevised, CatalogRevised{ServerLabel: "inventory-local", Epoch: "01JQ7R4S4S0QJ7GZP1S2XYZW", Revision: uint64(i),
			Digest: "sha256:aa", Diff: DiffSummary{Added: []string{"b", "a"}}}
	default:
		return TypeAuthorizationDenied, AuthorizationDenied{AgentRun: run, ServerLabel: "other", Tool: "x", Reason: "authorization_stale",
			ApprovedEpoch: "01A", CurrentEpoch: "01B"}
	}
}

func appendN(t testing.TB, l *Log, n int) []Event {
	t.Helper()
	var evs []Event
	for i := range n {
		typ, f := sampleFields(i)
		ev, err := l.Append(context.Background(), typ, f)
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// writeLog creates a closed log of n events in a fresh directory.
func writeLog(t testing.TB, n int, key []byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "audit")
	l := openTest(t, Options{Dir: dir, Key: key})
	appendN(t, l, n)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func logPath(dir string, n int) string { return filepath.Join(dir, fileName(n)) }

// readLines returns the newline-terminated lines of a log file (without
// newlines).
func readLines(t testing.TB, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.TrimSuffix(b, []byte{'\n'})
	if len(b) == 0 {
		return nil
	}
	return bytes.Split(b, []byte{'\n'})
}

func writeLines(t testing.TB, path string, lines [][]byte) {
	t.Helper()
	var b []byte
	for _, l := range lines {
		b = append(append(b, l...), '\n')
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
