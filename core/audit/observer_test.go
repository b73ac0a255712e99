package audit

import (
	"bytes"
	"context"
	"sync"
	"testing"
)

// seen is an Observer that keeps what it is shown.
type seen struct {
	mu  sync.Mutex
	evs []Event
}

func (s *seen) Observe(ev Event) {
	s.mu.Lock()
	s.evs = append(s.evs, ev)
	s.mu.Unlock()
}

// TestObserverSeesEveryEventInOrder: the telemetry export is shown each
// event as written, of both tiers and those the Log writes itself
// (log_tampered), in the log's order, with fields that stay as they were
// after later appends reuse the writer's buffers.
func TestObserverSeesEveryEventInOrder(t *testing.T) {
	o := &seen{}
	l := openTest(t, Options{Dir: t.TempDir(), Key: testKey, Observer: o})
	ctx := context.Background()
	var want []Event
	for i := range 12 {
		typ, f := sampleFields(i)
		var ev Event
		var err error
		if i%2 == 0 {
			ev, err = l.Append(ctx, typ, f)
		} else {
			ev, err = l.AppendRecord(ctx, typ, f)
		}
		if err != nil {
			t.Fatal(err)
		}
		ev.Fields = bytes.Clone(ev.Fields)
		want = append(want, ev)
	}
	if err := l.RecordTampered(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var got []Event
	for _, ev := range o.evs {
		switch ev.Type {
		case TypeSigningEnabled, TypeLogSealed, TypeLogTampered, TypeLogRecovered:
		default:
			got = append(got, ev)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("observed %d caller events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || got[i].Hash != want[i].Hash || !bytes.Equal(got[i].Fields, want[i].Fields) {
			t.Errorf("event %d: observed seq %d %s %s, want seq %d %s %s", i, got[i].Seq, got[i].Hash, got[i].Fields, want[i].Seq, want[i].Hash, want[i].Fields)
		}
	}
	if last := o.evs[len(o.evs)-1]; last.Type != TypeLogTampered {
		t.Errorf("last observed %s, want the log's own %s", last.Type, TypeLogTampered)
	}
}
