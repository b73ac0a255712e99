package gateway

import (
	"bytes"
	"encoding/json"

	"github.com/portcullis/portcullis/core/mcpwire"
)

// handshake is what a session knows of the agent's handshake: the protocol
// era it chose, what it sent to initialize or discover (replayed to every
// new epoch), what it was told, whether the handshake is complete (before,
// the server's messages to the agent wait in queue), and its 2026-07-28
// subscriptions/listen stream.
//
// It is guarded by Session.mu: each method is called with it held.
type handshake struct {
	era          era
	done         bool            // the agent's handshake is complete
	queue        [][]byte        // server → agent messages before it completed
	initParams   json.RawMessage // the agent's initialize params
	initID       json.RawMessage // the id of the agent's last initialize
	negotiated   json.RawMessage // the initialize result the agent received
	discoverMeta json.RawMessage // the agent's _meta on server/discover (or on its first request)
	listen       *listenState    // the agent's subscriptions/listen, nil when none is open
	heard        chan struct{}   // closed once the agent's initialize or protocol _meta arrived (heardSignal)
}

// heardSignal is closed once the agent's initialize or protocol _meta
// arrived: clientName knows what the agent calls itself then.
func (h *handshake) heardSignal() <-chan struct{} {
	if h.heard == nil {
		h.heard = make(chan struct{})
	}
	return h.heard
}

// markHeard closes heardSignal, once.
func (h *handshake) markHeard() {
	h.heardSignal()
	select {
	case <-h.heard:
	default:
		close(h.heard)
	}
}

// era is the protocol era the agent chose (docs/DESIGN.md, "Protocol eras").
type era int

const (
	eraUnknown era = iota
	eraLegacy      // initialize handshake (2024-11-05 … 2025-11-25)
	eraModern      // server/discover, per-request _meta (2026-07-28)
)

// listenState is the agent's open subscriptions/listen stream.
type listenState struct {
	agentID json.RawMessage // the agent's id of its subscriptions/listen request
	raw     []byte          // the request as the agent sent it
	toolsOn bool            // it asked for notifications/tools/list_changed
	// promptsOn and resourcesOn: it asked for the prompts' and the
	// resources' list_changed.
	promptsOn, resourcesOn bool
	ack                    []byte // the params (without _meta) of the acknowledgement the agent got; nil before it
}

// initialize records the agent's initialize request m: the legacy era.
func (h *handshake) initialize(m *mcpwire.Message) {
	h.era, h.initParams, h.initID = eraLegacy, bytes.Clone(m.Params), bytes.Clone(m.ID)
	h.markHeard()
}

// discover records the 2026-07-28 protocol _meta the agent sent, on
// server/discover or on a first request that skips discovery.
func (h *handshake) discover(meta json.RawMessage) {
	h.era, h.discoverMeta = eraModern, bytes.Clone(meta)
	h.markHeard()
}

// subscribe records the agent's subscriptions/listen request m.
func (h *handshake) subscribe(m *mcpwire.Message) {
	h.listen = &listenState{
		agentID:     bytes.Clone(m.ID),
		raw:         bytes.Clone(m.Raw),
		toolsOn:     bytes.Equal(mcpwire.GetPath(m.Params, "notifications", "toolsListChanged"), []byte("true")),
		promptsOn:   bytes.Equal(mcpwire.GetPath(m.Params, "notifications", "promptsListChanged"), []byte("true")),
		resourcesOn: bytes.Equal(mcpwire.GetPath(m.Params, "notifications", "resourcesListChanged"), []byte("true")),
	}
}

// listSubscribed reports whether the agent hears of changes of the list
// method through its listen stream (2026-07-28).
func (h *handshake) listSubscribed(method string) bool {
	if h.listen == nil {
		return false
	}
	switch method {
	case methodToolsList:
		return h.listen.toolsOn
	case "prompts/list":
		return h.listen.promptsOn
	case "resources/list", "resources/templates/list":
		return h.listen.resourcesOn
	}
	return false
}

// isListen reports whether the agent's request id (raw, as the agent wrote
// it) is its open subscriptions/listen stream.
func (h *handshake) isListen(id json.RawMessage) bool {
	return h.listen != nil && string(h.listen.agentID) == string(id)
}

// toolsSubscribed reports whether the agent hears of tool list changes
// through its listen stream (2026-07-28).
func (h *handshake) toolsSubscribed() bool { return h.listen != nil && h.listen.toolsOn }

// complete marks the handshake complete and returns the messages queued
// before, which go to the agent now; ok is false when it was complete
// already.
func (h *handshake) complete() (queued [][]byte, ok bool) {
	if h.done {
		return nil, false
	}
	h.done = true
	queued, h.queue = h.queue, nil
	return queued, true
}

// hold queues a server message for the agent until the handshake is
// complete; it reports false (nothing queued) when it is complete.
func (h *handshake) hold(line []byte) bool {
	if h.done {
		return false
	}
	h.queue = append(h.queue, line)
	return true
}

// clientName is the name the agent gave itself in its handshake (MCP
// Implementation: clientInfo's title, else its name; on initialize or in
// the 2026-07-28 _meta), "" when it sent none. It is the agent's claim, for
// display on approval cards only, never an identity.
func (h *handshake) clientName() string {
	info := mcpwire.GetPath(h.initParams, "clientInfo")
	if info == nil {
		info = mcpwire.GetPath(h.discoverMeta, metaClientInfo)
	}
	var ci struct {
		Name  string `json:"name"`
		Title string `json:"title"`
	}
	if info == nil || json.Unmarshal(info, &ci) != nil {
		return ""
	}
	if ci.Title != "" {
		return ci.Title
	}
	return ci.Name
}
