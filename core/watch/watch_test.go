package watch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func start(t *testing.T) *Watcher {
	t.Helper()
	w, err := New(500*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func next(t *testing.T, w *Watcher) Event {
	t.Helper()
	select {
	case ev := <-w.Events():
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	return Event{}
}

func quiet(t *testing.T, w *Watcher, d time.Duration) {
	t.Helper()
	select {
	case ev := <-w.Events():
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(d):
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWatchFilesAndTrees(t *testing.T) {
	root := t.TempDir()
	dist := filepath.Join(root, "dist")
	lock := filepath.Join(root, "package-lock.json")
	write(t, filepath.Join(dist, "server.js"), "v1")
	write(t, lock, "{}")
	write(t, filepath.Join(root, "README"), "unrelated")

	w := start(t)
	if err := w.Set("inv", []string{dist, lock}); err != nil {
		t.Fatal(err)
	}

	// Several writes in a burst settle into one event.
	for i := range 5 {
		write(t, filepath.Join(dist, "server.js"), "v2-"+string(rune('a'+i)))
	}
	ev := next(t, w)
	if diff := cmp.Diff(Event{Key: "inv", Paths: []string{dist}}, ev, cmpIgnoreTime); diff != "" {
		t.Errorf("burst event (-want +got):\n%s", diff)
	}
	quiet(t, w, 700*time.Millisecond)

	// An unrelated file beside a watched one is not a build.
	write(t, filepath.Join(root, "README"), "changed")
	quiet(t, w, 700*time.Millisecond)

	// A lockfile replaced by rename is seen.
	tmp := filepath.Join(root, ".lock.tmp")
	write(t, tmp, `{"v":2}`)
	if err := os.Rename(tmp, lock); err != nil {
		t.Fatal(err)
	}
	ev = next(t, w)
	if diff := cmp.Diff([]string{lock}, ev.Paths); diff != "" {
		t.Errorf("rename event paths (-want +got):\n%s", diff)
	}

	// A subdirectory created later is watched, and so is what lands in it.
	write(t, filepath.Join(dist, "chunks", "a.js"), "x")
	next(t, w)
	time.Sleep(100 * time.Millisecond)
	write(t, filepath.Join(dist, "chunks", "a.js"), "y")
	if ev := next(t, w); ev.Key != "inv" {
		t.Errorf("event for %q", ev.Key)
	}

	// chmod alone changes no bytes.
	if err := os.Chmod(lock, 0o600); err != nil {
		t.Fatal(err)
	}
	quiet(t, w, 700*time.Millisecond)

	// Unwatching stops events.
	if err := w.Set("inv", nil); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dist, "server.js"), "v3")
	quiet(t, w, 700*time.Millisecond)
}

func TestWatchMissingFileAppears(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "out", "server")
	w := start(t)
	if err := w.Set("srv", []string{bin}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, bin, "binary")
	ev := next(t, w)
	if diff := cmp.Diff([]string{bin}, ev.Paths); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
}

// TestWatchCleanBuilds: a watched directory that a build deletes and writes
// again (rm -rf dist; mkdir dist; write dist/server.js) is seen each time,
// also from the second clean build on, when the directory's first watch went
// with it.
func TestWatchCleanBuilds(t *testing.T) {
	root := t.TempDir()
	dist := filepath.Join(root, "dist")
	write(t, filepath.Join(dist, "server.js"), "v0")
	w := start(t)
	if err := w.Set("inv", []string{dist}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := os.RemoveAll(dist); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dist, "server.js"), fmt.Sprint("v", i+1))
		ev := next(t, w)
		if diff := cmp.Diff([]string{dist}, ev.Paths); diff != "" {
			t.Fatalf("clean build %d: paths (-want +got):\n%s", i+1, diff)
		}
		// A later write inside the new directory is seen too.
		write(t, filepath.Join(dist, "chunk.js"), fmt.Sprint("c", i+1))
		ev = next(t, w)
		if diff := cmp.Diff([]string{dist}, ev.Paths); diff != "" {
			t.Fatalf("write after clean build %d: paths (-want +got):\n%s", i+1, diff)
		}
	}
}

func TestTwoKeysShareADirectory(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a.js"), filepath.Join(root, "b.js")
	write(t, a, "1")
	write(t, b, "1")
	w := start(t)
	if err := w.Set("A", []string{a}); err != nil {
		t.Fatal(err)
	}
	if err := w.Set("B", []string{b}); err != nil {
		t.Fatal(err)
	}
	if err := w.Set("A", nil); err != nil { // must not stop B's watch
		t.Fatal(err)
	}
	write(t, b, "2")
	if ev := next(t, w); ev.Key != "B" {
		t.Errorf("event for %q, want B", ev.Key)
	}
}

var cmpIgnoreTime = cmp.Options{
	cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".LastWrite" }, cmp.Ignore()),
	cmpopts.IgnoreUnexported(Event{}),
}

// The first write of a change is reported on Started at once, before the
// settle delay (500 ms here) ends; one settled Event follows, and a write
// during the settle starts nothing new.
func TestStartedBeforeSettle(t *testing.T) {
	root := t.TempDir()
	entry := filepath.Join(root, "server.js")
	write(t, entry, "v1")
	w := start(t)
	if err := w.Set("srv", []string{entry}); err != nil {
		t.Fatal(err)
	}
	write(t, entry, "v2")
	var st Event
	select {
	case st = <-w.Started():
	case <-time.After(5 * time.Second):
		t.Fatal("no change-started event")
	}
	if st.Key != "srv" || !cmp.Equal(st.Paths, []string{entry}) {
		t.Errorf("started %+v, want srv %s", st, entry)
	}
	select {
	case ev := <-w.Events():
		t.Fatalf("the settled event %+v came with the start; want it after the settle delay", ev)
	default:
	}
	write(t, entry, "v3")
	ev := next(t, w)
	if ev.Key != "srv" || !cmp.Equal(ev.Paths, []string{entry}) {
		t.Errorf("settled %+v", ev)
	}
	if !ev.LastWrite.After(st.LastWrite) && !ev.LastWrite.Equal(st.LastWrite) {
		t.Errorf("settled LastWrite %v before the start %v", ev.LastWrite, st.LastWrite)
	}
	select {
	case again := <-w.Started():
		t.Errorf("a write during the settle started another change: %+v", again)
	default:
	}
}

// TestDataStartsNoBuild: a change the key's filter calls data (the
// server's ledger, its log) is not reported, neither as started nor
// settled; a change of code beside it is; and a data file made
// executable (chmod +x) becomes code, so it is a change too.
func TestDataStartsNoBuild(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "server.py"), "v1")
	w := start(t)
	if err := w.Set("srv", []string{root}); err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(root, "state", "ledger")
	w.SetData("srv", func(p string) bool {
		info, err := os.Stat(p)
		return filepath.Ext(p) == ".log" || p == filepath.Dir(ledger) || (p == ledger && (err != nil || info.Mode()&0o111 == 0))
	})
	write(t, filepath.Join(root, "server.log"), "a")
	write(t, ledger, "b")
	quiet(t, w, time.Second)
	select {
	case st := <-w.Started():
		t.Fatalf("data started a change: %+v", st)
	default:
	}
	if err := os.Chmod(ledger, 0o755); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev.Key != "srv" {
		t.Errorf("after chmod +x: %+v", ev)
	}
	write(t, filepath.Join(root, "server.py"), "v2")
	if ev := next(t, w); ev.Key != "srv" || !cmp.Equal(ev.Paths, []string{root}) {
		t.Errorf("after the code changed: %+v", ev)
	}
	<-w.Started()
}

// TestServeAgainAfterStop: a Serve after the last one returned (the daemon
// restarting its build watcher) watches the same paths again and first
// reports every key changed, since what happened while nothing watched
// was not seen. Before, a second Serve returned at once on the closed
// queue and the build was never seen.
func TestServeAgainAfterStop(t *testing.T) {
	dir := t.TempDir()
	w, err := New(50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Set("srv", []string{filepath.Join(dir, "bin")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := func() error { cancel(); return w.Serve(ctx) }(); err != nil {
		t.Fatalf("first Serve: %v", err)
	}
	write(t, filepath.Join(dir, "bin", "server"), "built while nothing watched")

	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("second Serve: %v", err)
		}
	}()
	if ev := next(t, w); ev.Key != "srv" {
		t.Fatalf("first event after the restart: %+v, want srv reported changed", ev)
	}
	write(t, filepath.Join(dir, "bin", "server"), "built again")
	if ev := next(t, w); ev.Key != "srv" || !cmp.Equal(ev.Paths, []string{filepath.Join(dir, "bin")}) {
		t.Fatalf("event of a build after the restart: %+v", ev)
	}
}

// Unsettled reports a change from its first event until the consumer is
// Done with its settled Event, and nil before and after.
func TestUnsettledUntilDone(t *testing.T) {
	root := t.TempDir()
	server := filepath.Join(root, "server.js")
	write(t, server, "v1")
	w := start(t)
	if err := w.Set("srv", []string{server}); err != nil {
		t.Fatal(err)
	}
	if ch := w.Unsettled("srv"); ch != nil {
		t.Fatal("Unsettled before any change")
	}
	write(t, server, "v2")
	select {
	case <-w.Started():
	case <-time.After(5 * time.Second):
		t.Fatal("no started event")
	}
	ch := w.Unsettled("srv")
	if ch == nil {
		t.Fatal("Unsettled is nil while the change settles")
	}
	ev := next(t, w)
	if w.Unsettled("srv") == nil {
		t.Fatal("Unsettled is nil once the settled event was delivered, before the consumer is Done")
	}
	select {
	case <-ch:
		t.Fatal("the channel closed before the consumer is Done")
	default:
	}
	ev.Done()
	ev.Done() // again: nothing
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the channel did not close at Done")
	}
	if w.Unsettled("srv") != nil {
		t.Fatal("Unsettled after the consumer is Done")
	}
}

// A watched file written on disk is unsettled at once, although its event
// was not read (no Serve runs here): the change is noted as an event
// would note it, and settles as one does.
func TestUnsettledBeforeItsEvent(t *testing.T) {
	root := t.TempDir()
	server := filepath.Join(root, "server.js")
	write(t, server, "v1")
	w, err := New(50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Set("srv", []string{server}); err != nil {
		t.Fatal(err)
	}
	if w.Unsettled("srv") != nil {
		t.Fatal("Unsettled before any change")
	}
	write(t, server, "v2, as long")
	ch := w.Unsettled("srv")
	if ch == nil {
		t.Fatal("a watched file written on disk is not unsettled before its event is read")
	}
	select {
	case <-w.Started():
	default:
		t.Error("no started event for the change found on disk")
	}
	var ev Event
	select {
	case ev = <-w.Events():
	case <-time.After(5 * time.Second):
		t.Fatal("the change found on disk never settled")
	}
	if diff := cmp.Diff(Event{Key: "srv", Paths: []string{server}}, ev, cmpIgnoreTime); diff != "" {
		t.Errorf("settled event (-want +got):\n%s", diff)
	}
	ev.Done()
	<-ch
	if w.Unsettled("srv") != nil {
		t.Fatal("Unsettled once the change settled and the file is as last seen")
	}
}
