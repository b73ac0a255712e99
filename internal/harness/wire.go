package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"

	"github.com/gowebpki/jcs"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Wire is an mcp.Transport that records every JSON-RPC message its
// connection carries, in order, with params and results as the raw JSON
// that crossed the wire: the go-sdk's typed results drop fields they do not
// know, so comparisons of what a server said use Wire instead.
type Wire struct {
	Transport mcp.Transport // the transport that carries the messages

	mu   sync.Mutex
	msgs []WireMessage         // guarded by mu
	sent map[jsonrpc.ID]string // guarded by mu; our request id → method
	recv map[jsonrpc.ID]string // guarded by mu; peer's request id → method
}

// WireMessage is one recorded message. Out is true for a message this side
// sent. Method is the request's or notification's method, or for a response
// the method of the request it answers. Raw is params for a request or
// notification, result for a successful response; Err is set for an error
// response.
type WireMessage struct {
	Out      bool
	Response bool
	ID       jsonrpc.ID
	Method   string
	Raw      json.RawMessage
	Err      error
}

// Connect implements mcp.Transport.
func (w *Wire) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := w.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	if w.sent == nil {
		w.sent = map[jsonrpc.ID]string{}
		w.recv = map[jsonrpc.ID]string{}
	}
	w.mu.Unlock()
	return &wireConn{Connection: c, w: w}, nil
}

type wireConn struct {
	mcp.Connection
	w *Wire
}

func (c *wireConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err == nil {
		c.w.record(false, m)
	}
	return m, err
}

func (c *wireConn) Write(ctx context.Context, m jsonrpc.Message) error {
	c.w.record(true, m)
	return c.Connection.Write(ctx, m)
}

func (w *Wire) record(out bool, m jsonrpc.Message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	mine, theirs := w.sent, w.recv
	if !out {
		mine, theirs = theirs, mine
	}
	switch m := m.(type) {
	case *jsonrpc.Request:
		if m.ID.IsValid() {
			mine[m.ID] = m.Method
		}
		w.msgs = append(w.msgs, WireMessage{Out: out, ID: m.ID, Method: m.Method, Raw: bytes.Clone(m.Params)})
	case *jsonrpc.Response:
		method := theirs[m.ID]
		w.msgs = append(w.msgs, WireMessage{Out: out, Response: true, ID: m.ID, Method: method, Raw: bytes.Clone(m.Result), Err: m.Error})
	}
}

// Messages returns a copy of everything recorded so far.
func (w *Wire) Messages() []WireMessage {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]WireMessage(nil), w.msgs...)
}

// Results returns the raw results of the successful responses this side
// received to its requests of method, oldest first.
func (w *Wire) Results(method string) []json.RawMessage {
	var out []json.RawMessage
	for _, m := range w.Messages() {
		if !m.Out && m.Response && m.Method == method && m.Err == nil {
			out = append(out, m.Raw)
		}
	}
	return out
}

// LastResult returns the raw result of the most recent request of method
// that this side sent, when a successful response to it was received.
func (w *Wire) LastResult(method string) (json.RawMessage, bool) {
	msgs := w.Messages()
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if !m.Out || m.Response || m.Method != method || !m.ID.IsValid() {
			continue
		}
		for _, r := range msgs[i+1:] {
			if !r.Out && r.Response && r.ID == m.ID && r.Err == nil {
				return r.Raw, true
			}
		}
		return nil, false
	}
	return nil, false
}

// Received returns the params of the requests and notifications of method
// that the peer sent, oldest first.
func (w *Wire) Received(method string) []json.RawMessage {
	return w.filter(false, method)
}

// Sent returns the params of the requests and notifications of method that
// this side sent, oldest first.
func (w *Wire) Sent(method string) []json.RawMessage {
	return w.filter(true, method)
}

func (w *Wire) filter(out bool, method string) []json.RawMessage {
	var res []json.RawMessage
	for _, m := range w.Messages() {
		if m.Out == out && !m.Response && m.Method == method {
			res = append(res, m.Raw)
		}
	}
	return res
}

// Canonical returns raw in the JSON Canonicalization Scheme (RFC 8785), so
// that two encodings of the same JSON value compare equal byte for byte.
func Canonical(raw json.RawMessage) (string, error) {
	b, err := jcs.Transform(raw)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
