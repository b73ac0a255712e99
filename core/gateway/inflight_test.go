package gateway

import (
	"encoding/json"
	"testing"
)

// isClosed reports whether c is closed now.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestInflightIdle(t *testing.T) {
	f := newInflight()
	if !isClosed(f.idleSignal()) {
		t.Fatal("idle signal of an empty inflight is not closed")
	}
	e := &epoch{}
	call := &pending{agentID: json.RawMessage(`7`), method: methodToolsCall, ep: e}
	listen := &pending{agentID: json.RawMessage(`8`), method: methodListen, ep: e}
	own := &pending{method: methodToolsList, ep: e} // the gateway's own: the agent waits for nothing
	callID, listenID := f.add(call), f.add(listen)
	f.add(own)
	f.hold(json.RawMessage(` "h" `))
	if !f.enqueue() {
		t.Fatal("enqueue refused with nothing held")
	}
	if got := f.unanswered(); got != 2 {
		t.Fatalf("unanswered = %d, want 2 (the call, the message held; not the listen stream, not the gateway's own request)", got)
	}
	idle := f.idleSignal()
	f.drop(callID, call)
	if isClosed(idle) {
		t.Fatal("idle with a message still held")
	}
	f.release()
	if !isClosed(idle) {
		t.Fatal("not idle once only the listen stream and the gateway's own request are left")
	}
	if !f.agentID(json.RawMessage(`"h"`)) || !f.agentID(json.RawMessage(`8`)) || f.agentID(json.RawMessage(`7`)) {
		t.Error("agentID: want the held id and the listen stream in flight, the answered call not")
	}
	f.unhold(json.RawMessage(`"h"`))
	if f.agentID(json.RawMessage(`"h"`)) {
		t.Error("the id is still in flight after unhold")
	}
	if _, p, ok := f.ofAgent(json.RawMessage(`8`)); !ok || p != listen {
		t.Errorf("ofAgent(8) = %v %v, want the listen stream", p, ok)
	}
	if f.take(&epoch{}, json.RawMessage(`2`)) != nil {
		t.Error("take answered a request of another epoch")
	}
	if p := f.take(e, json.RawMessage(`2`)); p != listen || f.is(listenID, listen) {
		t.Errorf("take(2) = %v, want the listen stream, gone after", p)
	}
}

func TestInflightBound(t *testing.T) {
	f := newInflight()
	for range maxHeld {
		if !f.enqueue() {
			t.Fatal("enqueue refused below maxHeld")
		}
	}
	if f.enqueue() || !f.full() {
		t.Fatalf("enqueue accepted message %d, over maxHeld", maxHeld+1)
	}
	f.release()
	if f.full() || !f.enqueue() {
		t.Fatal("no room after a release")
	}
}

func TestInflightReverse(t *testing.T) {
	f := newInflight()
	e1, e2 := &epoch{}, &epoch{}
	g1 := f.addReverse(e1, json.RawMessage(`"a"`))
	g2 := f.addReverse(e2, json.RawMessage(`"a"`))
	if g1 == g2 {
		t.Fatal("two server requests got one gateway id")
	}
	if got, ok := f.reverseOf(e2, json.RawMessage(`"a"`)); !ok || got != g2 {
		t.Errorf("reverseOf(e2) = %d %v, want %d", got, ok, g2)
	}
	f.dropReverse(e1)
	if f.takeReverse(json.RawMessage(`1`)) != nil {
		t.Error("a request of the dropped epoch is still there")
	}
	if r := f.takeReverse(json.RawMessage(`2`)); r == nil || r.ep != e2 {
		t.Errorf("takeReverse(2) = %+v, want e2's", r)
	}
	if f.takeReverse(json.RawMessage(`2`)) != nil {
		t.Error("takeReverse answered twice")
	}
}
