package gateway

import (
	"bytes"
	"encoding/json"

	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// inflight is what a session has in flight between the agent and its
// processes: the gateway ids it minted, the requests waiting for an answer
// (the agent's, toward a process, and the gateway's own), the agent's ids of
// them, the server requests waiting for the agent's answer, and the agent's
// messages held at the gate. Every change that can leave nothing the agent
// waits for goes through drop, unhold or release, which close the idle
// signal when nothing is left (see idleSignal).
//
// It is guarded by Session.mu: each method is called with it held.
type inflight struct {
	nextID  int64
	pending map[int64]*pending      // gateway id → request toward a process
	byAgent map[string]int64        // agent's raw id → gateway id of its request
	reverse map[int64]*reverseEntry // gateway id → server's request toward the agent
	held    map[string]int          // agent's ids (idKey) of requests held at the gate
	queued  int                     // messages of the agent held at the gate (requests and notifications)
	idle    chan struct{}           // closed once nothing the agent waits for is left; nil while nobody waits
}

// pending is one request in flight toward a process.
type pending struct {
	agentID  json.RawMessage // the agent's id, nil for the gateway's own requests
	method   string
	tool     string // params.name of a tools/call
	ep       *epoch
	token    string // progress token, raw JSON; "" when none
	reply    chan *mcpwire.Message
	call     *callRecord   // a tools/call, for its tool_completed event; set under Session.mu
	unsent   bool          // reserved, not yet written to the server
	approval ids.RequestID // the approval request it waits on, if any
	// suspect: a tools/call sent to a relaying launcher, and a change
	// of the server's source began before its answer (settle.go).
	suspect bool
}

// reverseEntry is a server's request toward the agent.
type reverseEntry struct {
	ep       *epoch
	serverID json.RawMessage
}

func newInflight() inflight {
	return inflight{
		nextID:  1,
		pending: map[int64]*pending{},
		byAgent: map[string]int64{},
		reverse: map[int64]*reverseEntry{},
		held:    map[string]int{},
	}
}

// mint returns a new gateway id.
func (f *inflight) mint() int64 {
	id := f.nextID
	f.nextID++
	return id
}

// add registers p under a new gateway id, and returns the id.
func (f *inflight) add(p *pending) int64 {
	id := f.mint()
	f.pending[id] = p
	if p.agentID != nil {
		f.byAgent[string(p.agentID)] = id
	}
	return id
}

// drop forgets the request id (p); it is idempotent.
func (f *inflight) drop(id int64, p *pending) {
	delete(f.pending, id)
	if p != nil && p.agentID != nil {
		if cur, ok := f.byAgent[string(p.agentID)]; ok && cur == id {
			delete(f.byAgent, string(p.agentID))
		}
	}
	f.settle()
}

// is reports whether p is still in flight as id.
func (f *inflight) is(id int64, p *pending) bool { return f.pending[id] == p }

// take removes and returns the request of e waiting for the answer with the
// gateway id raw, or nil when none does.
func (f *inflight) take(e *epoch, raw json.RawMessage) *pending {
	gid, _, ok := mcpwire.IntID(raw)
	if !ok {
		return nil
	}
	p := f.pending[gid]
	if p == nil || p.ep != e {
		return nil
	}
	f.drop(gid, p)
	return p
}

// ofAgent returns the gateway id and the request of the agent's id raw
// (as the agent wrote it), if in flight toward a process.
func (f *inflight) ofAgent(raw json.RawMessage) (int64, *pending, bool) {
	id, ok := f.byAgent[string(raw)]
	if !ok {
		return 0, nil, false
	}
	return id, f.pending[id], true
}

// hold records that the agent's request id waits at the gate (or for the
// first launch): in flight, though not yet toward a process.
func (f *inflight) hold(id json.RawMessage) { f.held[idKey(id)]++ }

// unhold ends a hold.
func (f *inflight) unhold(id json.RawMessage) {
	key := idKey(id)
	if f.held[key]--; f.held[key] <= 0 {
		delete(f.held, key)
	}
	f.settle()
}

// agentID reports whether a request of the agent with this id is in flight:
// held, or toward a process. Ids compare by their bytes as the agent wrote
// them, white space around them aside: 1 and "1" are different ids, and so
// are 1 and 1.0 (JSON-RPC leaves number spellings to the peers; no agent
// writes one id two ways).
func (f *inflight) agentID(id json.RawMessage) bool {
	key := idKey(id)
	_, ok := f.byAgent[key]
	return ok || f.held[key] > 0
}

func idKey(id json.RawMessage) string { return string(bytes.TrimSpace(id)) }

// enqueue counts one more message held at the gate; it reports false,
// counting nothing, when maxHeld are held already.
func (f *inflight) enqueue() bool {
	if f.queued >= maxHeld {
		return false
	}
	f.queued++
	return true
}

// release ends the count of a message held at the gate.
func (f *inflight) release() {
	f.queued--
	f.settle()
}

// full reports whether no more message can be held.
func (f *inflight) full() bool { return f.queued >= maxHeld }

// token reports whether a request of e in flight carries the progress
// token (raw JSON).
func (f *inflight) token(e *epoch, token string) bool {
	if token == "" {
		return false
	}
	for _, p := range f.pending {
		if p.ep == e && p.token == token {
			return true
		}
	}
	return false
}

// awaiting reports whether a request in flight waits on approval request id.
func (f *inflight) awaiting(id ids.RequestID) bool {
	for _, p := range f.pending {
		if p.approval == id {
			return true
		}
	}
	return false
}

// addReverse registers a server's request of e toward the agent and
// returns the gateway id it gets.
func (f *inflight) addReverse(e *epoch, serverID json.RawMessage) int64 {
	gid := f.mint()
	f.reverse[gid] = &reverseEntry{ep: e, serverID: serverID}
	return gid
}

// takeReverse removes and returns the server's request the agent answers
// with the gateway id raw, or nil.
func (f *inflight) takeReverse(raw json.RawMessage) *reverseEntry {
	gid, _, ok := mcpwire.IntID(raw)
	if !ok {
		return nil
	}
	r := f.reverse[gid]
	delete(f.reverse, gid)
	return r
}

// reverseOf returns the gateway id of the server request of e with the
// server's id serverID.
func (f *inflight) reverseOf(e *epoch, serverID json.RawMessage) (int64, bool) {
	for gid, r := range f.reverse {
		if r.ep == e && bytes.Equal(r.serverID, serverID) {
			return gid, true
		}
	}
	return 0, false
}

// dropReverse forgets the server requests of e.
func (f *inflight) dropReverse(e *epoch) {
	for id, r := range f.reverse {
		if r.ep == e {
			delete(f.reverse, id)
		}
	}
}

// unanswered counts the agent's requests and messages that wait: held at
// the gate, or in flight toward a process. The agent's subscriptions/listen
// stream (2026-07-28) is not one: it stays open until the run ends, and a
// drain waiting for it would last the whole drain timeout.
func (f *inflight) unanswered() int {
	left := f.queued
	for _, gid := range f.byAgent {
		if p := f.pending[gid]; p == nil || p.method != methodListen {
			left++
		}
	}
	return left
}

// idleSignal returns a channel closed once unanswered is 0: at once when it
// is 0 now.
func (f *inflight) idleSignal() <-chan struct{} {
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.settle()
	return idle
}

// settle closes the idle signal when nothing the agent waits for is left.
func (f *inflight) settle() {
	if f.idle != nil && f.unanswered() == 0 {
		close(f.idle)
		f.idle = nil
	}
}
