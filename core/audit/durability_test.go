package audit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// syncCounter is a sync hook that counts syncs and records how many bytes
// the file held at each.
type syncCounter struct {
	mu    sync.Mutex
	sizes []int64
	c     chan struct{}
}

func (s *syncCounter) hooks() *hooks {
	return &hooks{sync: func(f *os.File) error {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.sizes = append(s.sizes, st.Size())
		s.mu.Unlock()
		if s.c != nil {
			s.c <- struct{}{}
		}
		return f.Sync()
	}}
}

func (s *syncCounter) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sizes)
}

// TestRecordTier: AppendRecord returns with the event in the file and no
// sync; the group commit syncs it within RecordWindow; an authority Append
// syncs before it returns, and covers the records written before it.
func TestRecordTier(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	sc := &syncCounter{c: make(chan struct{}, 16)}
	l := openTest(t, Options{Dir: dir, RecordWindow: time.Hour, hooks: sc.hooks()})
	defer l.Close()
	base := sc.count()
	ev, err := l.AppendRecord(context.Background(), "tool_called", map[string]any{"tool": "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if n := sc.count() - base; n != 0 {
		t.Fatalf("AppendRecord synced %d times, want 0", n)
	}
	data, err := os.ReadFile(logPath(dir, 1))
	if err != nil || !bytes.Contains(data, []byte(ev.Hash)) {
		t.Fatalf("the record event %s is not in the file when AppendRecord returns (%v)", ev.Hash, err)
	}
	if hd, ok, _ := readHead(dir); ok && hd.Seq >= ev.Seq {
		t.Fatalf("head.json names seq %d before it was synced", hd.Seq)
	}
	ev2, err := l.Append(context.Background(), "approval_granted", map[string]any{"request": "r"})
	if err != nil {
		t.Fatal(err)
	}
	if n := sc.count() - base; n != 1 {
		t.Fatalf("Append synced %d times, want 1", n)
	}
	if hd, ok, _ := readHead(dir); !ok || hd.Seq != ev2.Seq {
		t.Fatalf("head.json = %+v (ok %v) after the authority event %d", hd, ok, ev2.Seq)
	}
	st, _ := os.Stat(logPath(dir, 1))
	if got := sc.sizes[len(sc.sizes)-1]; got != st.Size() {
		t.Fatalf("the sync covered %d bytes, the file holds %d", got, st.Size())
	}
}

// TestRecordGroupCommit: the records are synced within RecordWindow without
// any further event, and at once when RecordMaxEvents are waiting.
func TestRecordGroupCommit(t *testing.T) {
	t.Run("window", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "audit")
		sc := &syncCounter{c: make(chan struct{}, 16)}
		l := openTest(t, Options{Dir: dir, RecordWindow: 5 * time.Millisecond, hooks: sc.hooks()})
		defer l.Close()
		ev, err := l.AppendRecord(context.Background(), "tool_completed", nil)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-sc.c:
		case <-time.After(10 * time.Second):
			t.Fatal("no group commit after the record window")
		}
		l.Close() // the head is written after the sync: wait for the writer
		if hd, ok, _ := readHead(dir); !ok || hd.Seq != ev.Seq {
			t.Fatalf("head.json = %+v (ok %v), want seq %d", hd, ok, ev.Seq)
		}
	})
	t.Run("max", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "audit")
		sc := &syncCounter{}
		l := openTest(t, Options{Dir: dir, RecordWindow: time.Hour, RecordMaxEvents: 4, hooks: sc.hooks()})
		defer l.Close()
		for i := range 4 {
			if _, err := l.AppendRecord(context.Background(), "tool_completed", nil); err != nil {
				t.Fatal(err)
			}
			if want := i / 3; sc.count() != want {
				t.Fatalf("after %d records: %d syncs, want %d", i+1, sc.count(), want)
			}
		}
	})
}

// TestStrictDurability: under strict every AppendRecord syncs first, and
// SetDurability switches at once.
func TestStrictDurability(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	sc := &syncCounter{}
	l := openTest(t, Options{Dir: dir, Durability: DurabilityStrict, RecordWindow: time.Hour, hooks: sc.hooks()})
	defer l.Close()
	if _, err := l.AppendRecord(context.Background(), "tool_called", nil); err != nil {
		t.Fatal(err)
	}
	if sc.count() != 1 {
		t.Fatalf("strict AppendRecord: %d syncs, want 1", sc.count())
	}
	if err := l.SetDurability(DurabilityAuthority); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendRecord(context.Background(), "tool_called", nil); err != nil {
		t.Fatal(err)
	}
	if sc.count() != 1 {
		t.Fatalf("authority AppendRecord: %d syncs, want still 1", sc.count())
	}
	if err := l.SetDurability("fast"); err == nil {
		t.Fatal(`SetDurability("fast") succeeded`)
	}
	if _, err := Open(Options{Dir: t.TempDir(), Durability: "fast"}); err == nil {
		t.Fatal(`Open with durability "fast" succeeded`)
	}
}

// TestRecordSyncedAtClose and at rotation: nothing waits unsynced past the
// writer's end or the file it was written to.
func TestRecordSyncedAtClose(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	sc := &syncCounter{}
	l := openTest(t, Options{Dir: dir, RecordWindow: time.Hour, MaxFileBytes: 600, hooks: sc.hooks()})
	var last Event
	for range 5 {
		ev, err := l.AppendRecord(context.Background(), "tool_completed", map[string]any{"call": "01JQ7R4S4S0QJ7GZP1S2XXXXXX"})
		if err != nil {
			t.Fatal(err)
		}
		last = ev
	}
	if sc.count() == 0 {
		t.Fatal("a rotation closed a file holding unsynced records")
	}
	l.Close()
	st, _ := os.Stat(logPath(dir, lastFileNum(t, dir)))
	if got := sc.sizes[len(sc.sizes)-1]; got != st.Size() {
		t.Fatalf("the last sync covered %d bytes, the file holds %d", got, st.Size())
	}
	if hd, ok, _ := readHead(dir); !ok || hd.Seq != last.Seq {
		t.Fatalf("head.json = %+v after Close, want seq %d", hd, last.Seq)
	}
}

func lastFileNum(t *testing.T, dir string) int {
	fs, err := listFiles(dir)
	if err != nil || len(fs) == 0 {
		t.Fatalf("listing %s: %v", dir, err)
	}
	return fs[len(fs)-1].num
}

// TestRecordWrittenByCaller: a record-tier event is written by its caller,
// with no round trip through the writer goroutine (here never started), and
// a Log that was closed refuses one.
func TestRecordWrittenByCaller(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	l, err := newLog(Options{Dir: dir, RecordWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := l.AppendRecord(ctx, "tool_called", map[string]any{"tool": "echo"})
	if err != nil {
		t.Fatalf("AppendRecord without the writer goroutine: %v", err)
	}
	data, err := os.ReadFile(logPath(dir, 1))
	if err != nil || !bytes.Contains(data, []byte(ev.Hash)) {
		t.Fatalf("the record event %s is not in the file when AppendRecord returns (%v)", ev.Hash, err)
	}
	l.w.f.Close()
	l.lock.Close()

	l2 := openTest(t, Options{Dir: filepath.Join(t.TempDir(), "audit"), RecordWindow: time.Hour})
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.AppendRecord(context.Background(), "tool_completed", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("AppendRecord after Close: %v, want ErrUnavailable", err)
	}
}

// TestRecordHeadSwapDetected: head.json swapped under the log (cp + mv)
// while only record-tier events are written is noticed by the group commit,
// before head.json is written again: the log goes on in a new file with
// log_tampered naming head.json.
func TestRecordHeadSwapDetected(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	sc := &syncCounter{c: make(chan struct{}, 16)}
	l := openTest(t, Options{Dir: dir, RecordWindow: 5 * time.Millisecond, hooks: sc.hooks()})
	defer l.Close()
	if _, err := l.Append(context.Background(), "approval_granted", nil); err != nil {
		t.Fatal(err) // opens head.json
	}
	<-sc.c
	cpmv(t, filepath.Join(dir, headName))
	if _, err := l.AppendRecord(context.Background(), "tool_completed", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sc.c: // the group commit, which found the swap
	case <-time.After(10 * time.Second):
		t.Fatal("no group commit after the record window")
	}
	l.Close() // waits for the writer to finish that commit
	tp, ok := l.TamperedEvent()
	if !ok || len(tp.Fields.Files) != 1 || tp.Fields.Files[0] != (TamperedFile{File: headName, Change: "replaced"}) || tp.Fields.Segment != fileName(2) {
		t.Fatalf("after a head.json swap and a group commit: %+v (ok %v)", tp, ok)
	}
}
