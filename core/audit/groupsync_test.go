package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncTracker is a write and sync hook pair that knows, for each event
// written, the file offset its line ends at, and how far the file has been
// synced: check says whether an event was durable when its Append returned.
// gate, when set, holds the first sync after arm until it is closed, and
// entered is told when that sync starts.
type syncTracker struct {
	mu      sync.Mutex
	ends    map[string]lineEnd // guarded by mu; by event hash
	durable map[string]int64   // guarded by mu; file name → bytes synced
	syncs   int                // guarded by mu
	armed   bool               // guarded by mu; the next sync waits for gate
	gate    chan struct{}
	entered chan struct{}
	wrote   chan struct{} // when set, told after each write
	gateErr error         // what the held sync returns (nil: it syncs)
}

// lineEnd is where the line of an event ends: file name and offset.
type lineEnd struct {
	file string
	off  int64
}

func newSyncTracker() *syncTracker {
	return &syncTracker{ends: map[string]lineEnd{}, durable: map[string]int64{}}
}

func (s *syncTracker) hooks() *hooks {
	return &hooks{
		write: func(f *os.File, b []byte) (int, error) {
			n, err := f.Write(b)
			end, serr := f.Seek(0, io.SeekCurrent) // O_APPEND: the end of what was just written
			if err == nil && serr == nil {
				s.mu.Lock()
				off := end - int64(n)
				for _, ln := range bytes.SplitAfter(b[:n], []byte{'\n'}) {
					off += int64(len(ln))
					if p, perr := parseLine(bytes.TrimSuffix(ln, []byte{'\n'})); perr == nil {
						s.ends[p.hash] = lineEnd{f.Name(), off}
					}
				}
				s.mu.Unlock()
			}
			if s.wrote != nil {
				s.wrote <- struct{}{}
			}
			return n, err
		},
		sync: func(f *os.File) error {
			st, err := f.Stat()
			if err != nil {
				return err
			}
			s.mu.Lock()
			wait := s.armed
			s.armed = false
			s.mu.Unlock()
			if wait {
				s.entered <- struct{}{}
				<-s.gate
				if s.gateErr != nil {
					return s.gateErr
				}
			}
			if err := syncData(f); err != nil {
				return err
			}
			s.mu.Lock()
			s.syncs++
			s.durable[f.Name()] = max(s.durable[f.Name()], st.Size())
			s.mu.Unlock()
			return nil
		},
	}
}

// check returns an error when the event with hash was not covered by a
// completed sync of the file it was written to.
func (s *syncTracker) check(hash string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.ends[hash]
	if !ok {
		return fmt.Errorf("event %s was not written through the hook", hash)
	}
	if d := s.durable[e.file]; d < e.off {
		return fmt.Errorf("event %s ends at %d of %s, synced only through %d", hash, e.off, e.file, d)
	}
	return nil
}

func (s *syncTracker) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncs
}

// TestAuthorityGroupCommit: while a sync runs, the mutex is free (a record
// event is written and returned, other authority events are written); the
// authority events that arrived during it share one next sync, and none of
// their Appends returns before a sync covering it completed.
func TestAuthorityGroupCommit(t *testing.T) {
	st := newSyncTracker()
	st.gate, st.entered, st.wrote = make(chan struct{}), make(chan struct{}), make(chan struct{}, 64)
	l := openTest(t, Options{Dir: t.TempDir() + "/audit", RecordWindow: time.Hour, hooks: st.hooks()})
	release := sync.OnceFunc(func() { close(st.gate) })
	t.Cleanup(release) // before Close, which waits for the held sync
	base := st.count()
	st.mu.Lock()
	st.armed = true
	st.mu.Unlock()

	type res struct {
		ev  Event
		err error
	}
	results := make(chan res, 16)
	appendOne := func(i int) {
		ev, err := l.Append(context.Background(), "approval_granted", map[string]any{"request": fmt.Sprint("r", i)})
		if err == nil {
			err = st.check(ev.Hash) // at the moment Append returned
		}
		results <- res{ev, err}
	}
	timeout := time.After(20 * time.Second)
	go appendOne(0)
	<-st.wrote
	select {
	case <-st.entered: // the leader is in its sync, without the mutex
	case <-timeout:
		t.Fatal("the first Append did not sync")
	}
	const followers = 7
	for i := 1; i <= followers; i++ {
		go appendOne(i)
	}
	for range followers {
		select {
		case <-st.wrote:
		case <-timeout:
			t.Fatal("authority events could not be written while a sync ran")
		}
	}
	rec := make(chan error, 1)
	go func() {
		_, err := l.AppendRecord(context.Background(), "tool_completed", nil)
		rec <- err
	}()
	select {
	case err := <-rec:
		if err != nil {
			t.Fatal(err)
		}
	case <-timeout:
		t.Fatal("AppendRecord blocked while a sync ran: the sync holds the mutex")
	}
	<-st.wrote
	select {
	case r := <-results:
		t.Fatalf("Append of seq %d returned (%v) while the sync that would cover it was held", r.ev.Seq, r.err)
	default:
	}
	release()
	seqs := map[uint64]bool{}
	for range followers + 1 {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatal(r.err)
			}
			seqs[r.ev.Seq] = true
		case <-timeout:
			t.Fatal("Appends did not return after the sync was released")
		}
	}
	if len(seqs) != followers+1 {
		t.Fatalf("seqs %v: want %d distinct", seqs, followers+1)
	}
	if n := st.count() - base; n != 2 {
		t.Fatalf("%d syncs for %d authority events (1 + %d that arrived during the first sync), want 2", n, followers+1, followers)
	}
	l.Close()
	if hd, ok, _ := readHead(l.opts.Dir); !ok || hd.Seq != uint64(followers+2) {
		t.Fatalf("head.json = %+v (ok %v), want seq %d", hd, ok, followers+2)
	}
	if rep, err := Verify(l.opts.Dir, nil); err != nil || rep.Failed() || rep.Events != followers+2 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

// TestAuthorityNeverBeforeSync: under many concurrent authority and record
// appends, across rotations, every Append returns only once a completed sync
// covers its event.
func TestAuthorityNeverBeforeSync(t *testing.T) {
	st := newSyncTracker()
	l := openTest(t, Options{Dir: t.TempDir() + "/audit", MaxFileBytes: 32 << 10, RecordWindow: time.Millisecond, hooks: st.hooks()})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 150 {
				typ, f := sampleFields(g + 8*i)
				if g%4 == 3 {
					if _, err := l.AppendRecord(context.Background(), typ, f); err != nil {
						errs <- err
						return
					}
					continue
				}
				ev, err := l.Append(context.Background(), typ, f)
				if err == nil {
					err = st.check(ev.Hash)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	l.Close()
	if rep, err := Verify(l.opts.Dir, nil); err != nil || rep.Failed() || rep.Files < 2 {
		t.Fatalf("Verify = %+v, %v (want a rotated log)", rep, err)
	}
}

// TestAuthorityGroupSyncFails: when the sync that authority events wait
// for fails, every one of them fails with ErrUnavailable (none is told it
// is durable), and so do later Appends until Recover.
func TestAuthorityGroupSyncFails(t *testing.T) {
	st := newSyncTracker()
	st.gate, st.entered, st.wrote = make(chan struct{}), make(chan struct{}), make(chan struct{}, 64)
	st.gateErr = syscall.EIO
	l := openTest(t, Options{Dir: t.TempDir() + "/audit", RecordWindow: time.Hour, hooks: st.hooks()})
	release := sync.OnceFunc(func() { close(st.gate) })
	t.Cleanup(release)
	st.mu.Lock()
	st.armed = true
	st.mu.Unlock()
	errs := make(chan error, 8)
	appendOne := func() {
		_, err := l.Append(context.Background(), "approval_granted", nil)
		errs <- err
	}
	timeout := time.After(20 * time.Second)
	go appendOne()
	<-st.wrote
	select {
	case <-st.entered:
	case <-timeout:
		t.Fatal("the first Append did not sync")
	}
	for range 3 {
		go appendOne()
	}
	for range 3 {
		select {
		case <-st.wrote:
		case <-timeout:
			t.Fatal("authority events could not be written while a sync ran")
		}
	}
	release()
	for range 4 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.EIO) {
				t.Fatalf("Append after a failed sync = %v, want ErrUnavailable wrapping EIO", err)
			}
		case <-timeout:
			t.Fatal("Appends did not return after the sync failed")
		}
	}
	if _, err := l.Append(context.Background(), "x", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Append on the failed log = %v", err)
	}
	if err := l.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev, err := l.Append(context.Background(), "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.check(ev.Hash); err != nil {
		t.Fatal(err)
	}
}

// TestRecordDuringAuthoritySync: a record-tier event written while an
// authority event's sync runs (so not covered by it) is synced by the group
// commit within RecordWindow; the authority sync covered the records before
// it, which are not synced again.
func TestRecordDuringAuthoritySync(t *testing.T) {
	st := newSyncTracker()
	st.gate, st.entered, st.wrote = make(chan struct{}), make(chan struct{}), make(chan struct{}, 64)
	done := make(chan struct{}, 16)
	h := st.hooks()
	inner := h.sync
	h.sync = func(f *os.File) error {
		err := inner(f)
		done <- struct{}{}
		return err
	}
	l := openTest(t, Options{Dir: t.TempDir() + "/audit", RecordWindow: 20 * time.Millisecond, hooks: h})
	release := sync.OnceFunc(func() { close(st.gate) })
	t.Cleanup(release)
	before, err := l.AppendRecord(context.Background(), "tool_completed", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-st.wrote
	res, timeout := holdAuthoritySync(t, l, st)
	during, err := l.AppendRecord(context.Background(), "tool_completed", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-st.wrote
	release()
	if r := <-res; r.err != nil {
		t.Fatal(r.err)
	}
	<-done
	if err := st.check(before.Hash); err != nil {
		t.Fatalf("the authority sync did not cover the record before it: %v", err)
	}
	if err := st.check(during.Hash); err == nil {
		t.Fatal("the record written during the sync counts as synced by it")
	}
	select {
	case <-done:
	case <-timeout:
		t.Fatal("the record written during the authority sync was never synced")
	}
	if err := st.check(during.Hash); err != nil {
		t.Fatal(err)
	}
	if n := st.count(); n != 2 {
		t.Fatalf("%d syncs, want 2 (the authority event's, the group commit's)", n)
	}
}

// TestRotationDuringAuthoritySync: a rotation while a leader syncs the
// file it leaves does not close that file under the sync (it is closed
// when the sync is done): the authority event succeeds, durable, and the
// log verifies across the files.
func TestRotationDuringAuthoritySync(t *testing.T) {
	st := newSyncTracker()
	st.gate, st.entered, st.wrote = make(chan struct{}), make(chan struct{}), make(chan struct{}, 256)
	l := openTest(t, Options{Dir: t.TempDir() + "/audit", MaxFileBytes: 4 << 10, RecordWindow: time.Hour, hooks: st.hooks()})
	release := sync.OnceFunc(func() { close(st.gate) })
	t.Cleanup(release)
	res, timeout := holdAuthoritySync(t, l, st)
	first := func() string {
		l.wmu.Lock()
		defer l.wmu.Unlock()
		return l.w.f.Name()
	}()
	for i := 0; ; i++ {
		typ, f := sampleFields(i)
		if _, err := l.AppendRecord(context.Background(), typ, f); err != nil {
			t.Fatal(err)
		}
		<-st.wrote
		l.wmu.Lock()
		rotated := l.w.f.Name() != first
		l.wmu.Unlock()
		if rotated {
			break
		}
		if i > 1000 {
			t.Fatal("no rotation after 1000 events")
		}
	}
	release()
	var ev Event
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("Append whose sync ran across a rotation = %v", r.err)
		}
		ev = r.ev
	case <-timeout:
		t.Fatal("the Append did not return")
	}
	if err := st.check(ev.Hash); err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the log failed after a sync ran across a rotation: %v", err)
	}
	if _, err := l.Append(context.Background(), "x", nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if rep, err := Verify(l.opts.Dir, nil); err != nil || rep.Failed() || rep.Files < 2 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

// appended is what an Append returned.
type appended struct {
	ev  Event
	err error
}

// holdAuthoritySync arms st's gate, starts one authority Append on l and
// returns once that Append leads a sync held at the gate (its result comes
// on res when the gate opens), with a 20 s deadline for the test's waits.
func holdAuthoritySync(t *testing.T, l *Log, st *syncTracker) (res <-chan appended, timeout <-chan time.Time) {
	t.Helper()
	st.mu.Lock()
	st.armed = true
	st.mu.Unlock()
	ch := make(chan appended, 1)
	go func() {
		ev, err := l.Append(context.Background(), "approval_granted", nil)
		ch <- appended{ev, err}
	}()
	timeout = time.After(20 * time.Second)
	<-st.wrote
	select {
	case <-st.entered:
	case <-timeout:
		t.Fatal("the Append did not sync")
	}
	return ch, timeout
}
