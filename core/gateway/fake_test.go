package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// fakeAudit records what the gateway appends.
type fakeAudit struct {
	mu     sync.Mutex
	events []auditEntry  // guarded by mu
	delay  time.Duration // each tool_called intent takes this long to be durable
	down   error         // guarded by mu; every Append fails with it, and Err reports it
	// hold, when set, makes each tool_called Append signal entered and
	// then wait until hold is closed.
	hold, entered chan struct{} // guarded by mu
	// holds makes each Append of an event of the type wait until its
	// channel is closed (see holdType).
	holds map[string]chan struct{} // guarded by mu
}

// holdType makes the Appends of events of type typ wait until release is
// called (once or more): they are not written before.
func (f *fakeAudit) holdType(typ string) (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holds == nil {
		f.holds = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	f.holds[typ] = ch
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// holdIntents makes the next tool_called Appends wait until release is
// called; entered receives once per Append that waits.
func (f *fakeAudit) holdIntents() (entered <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold, f.entered = make(chan struct{}), make(chan struct{}, 1)
	hold := f.hold
	return f.entered, func() { close(hold) }
}

// Err reports the failure set by fail (see auditHealth).
func (f *fakeAudit) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down
}

// fail makes every later Append fail with err (nil: work again).
func (f *fakeAudit) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = err
}

type auditEntry struct {
	Seq    int64
	Type   string
	Fields any
}

var _ Auditor = (*fakeAudit)(nil)

func (f *fakeAudit) Append(_ context.Context, typ string, fields any) (audit.Event, error) {
	if f.delay > 0 && typ == audit.TypeToolCalled {
		time.Sleep(f.delay)
	}
	f.mu.Lock()
	hold, entered, held := f.hold, f.entered, f.holds[typ]
	f.mu.Unlock()
	if held != nil {
		<-held
	}
	if hold != nil && typ == audit.TypeToolCalled {
		entered <- struct{}{}
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return audit.Event{}, f.down
	}
	f.events = append(f.events, auditEntry{Seq: seq.Add(1), Type: typ, Fields: fields})
	return audit.Event{Type: typ}, nil
}

func (f *fakeAudit) entries() []auditEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// refusal decodes the gateway's refusal in a response line, or nil for a
// result.
func refusal(t testing.TB, line json.RawMessage) (int, *control.Refusal) {
	t.Helper()
	e := mcpwire.GetPath(line, "error")
	if e == nil {
		return 0, nil
	}
	var we struct {
		Code    int              `json:"code"`
		Message string           `json:"message"`
		Data    *control.Refusal `json:"data"`
	}
	if err := json.Unmarshal(e, &we); err != nil {
		t.Fatalf("error %s: %v", e, err)
	}
	if we.Data == nil {
		we.Data = &control.Refusal{Reason: we.Message}
	}
	return we.Code, we.Data
}
