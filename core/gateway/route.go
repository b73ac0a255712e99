package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/portcullis/portcullis/core/mcpwire"
)

// Method names the gateway routes specially (MCP spec, 2025-11-25 and
// 2026-07-28 schemas).
const (
	methodPing          = "ping"
	methodInitialize    = "initialize"
	methodInitialized   = "notifications/initialized"
	methodCancelled     = "notifications/cancelled"
	methodProgress      = "notifications/progress"
	methodDiscover      = "server/discover"
	metaSubscriptionKey = "io.modelcontextprotocol/subscriptionId"
)

// readAgent routes every message the agent sends until its input ends.
func (s *Session) readAgent(in io.Reader) error {
	r := mcpwire.NewReader(in, s.opts.MaxMessage)
	for {
		line, err := r.ReadLine()
		if err != nil {
			var tl *mcpwire.TooLargeError
			if errors.As(err, &tl) {
				s.log.Warn("agent message too large", "bytes", tl.Size)
				if id := mcpwire.PeekID(tl.Prefix); id != nil {
					s.writeAgent((&Refusal{
						Error: MessageTooLarge, Server: s.opts.Label, Limit: tl.Limit,
						Reason: fmt.Sprintf("the request is %d bytes, over the %d-byte limit", tl.Size, tl.Limit),
					}).Response(id))
				}
				continue
			}
			return err
		}
		m, err := mcpwire.Parse(bytes.Clone(line))
		if err != nil {
			var ie *mcpwire.InvalidError
			if errors.As(err, &ie) {
				s.log.Warn("invalid message from agent", "reason", ie.Reason)
				msg := "Parse error: " + ie.Reason
				if ie.Code == mcpwire.CodeInvalidRequest {
					msg = "Invalid Request: " + ie.Reason
					if ie.Reason == "batch" {
						msg = "Invalid Request: JSON-RPC batches are not supported; send each message on its own line"
					}
				}
				s.writeAgent(mcpwire.NewError(ie.ID, ie.Code, msg, nil))
				continue
			}
			return err
		}
		switch m.Kind {
		case mcpwire.KindRequest:
			s.agentRequest(m)
		case mcpwire.KindNotification:
			s.agentNotification(m)
		case mcpwire.KindResponse:
			s.agentResponse(m)
		}
	}
}

func (s *Session) agentRequest(m *mcpwire.Message) {
	if m.Method == methodPing {
		// Answered here, also while no process is running (DESIGN.md,
		// "Protocol eras").
		b, _ := mcpwire.NewResult(m.ID, nil)
		s.writeAgent(b)
		return
	}
	token := ""
	if t := mcpwire.GetPath(m.Params, "_meta", "progressToken"); t != nil {
		token = string(t)
	}
	s.mu.Lock()
	e := s.cur
	if e == nil || e.ended {
		r := s.unavailableLocked()
		s.mu.Unlock()
		s.writeAgent(r.Response(m.ID))
		return
	}
	id := s.nextID
	s.nextID++
	p := &pending{agentID: m.ID, method: m.Method, ep: e, token: token}
	s.pending[id] = p
	s.byAgentID[string(m.ID)] = id
	if !e.answered && e.timer == nil {
		e.timer = time.AfterFunc(s.opts.StartupTimeout, func() { s.startupTimeout(e, m.Method) })
	}
	s.mu.Unlock()

	out, err := mcpwire.SetMember(m.Raw, "id", mcpwire.NumberID(id))
	if err == nil {
		err = e.write(out)
	}
	if err != nil {
		s.mu.Lock()
		_, still := s.pending[id]
		s.dropPendingLocked(id, p)
		r := s.unavailableLocked()
		s.mu.Unlock()
		if still {
			r.Reason = "writing to the server failed: " + err.Error()
			s.writeAgent(r.Response(m.ID))
		}
	}
}

// startupTimeout fires when a new process has not answered its first
// request in time: the request is refused and the process group stopped.
func (s *Session) startupTimeout(e *epoch, method string) {
	s.mu.Lock()
	if e.answered || e.ended {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.log.Warn("server did not answer in time", "epoch", e.ID, "method", method)
	why := fmt.Sprintf("the server did not answer %s within %s; its process group was stopped", method, s.opts.StartupTimeout)
	s.failEpoch(e, why)
}

// failEpoch ends e with server_unavailable answers (rather than
// epoch_ended): the requests never reached working code.
func (s *Session) failEpoch(e *epoch, why string) {
	s.mu.Lock()
	var answers [][]byte
	for id, p := range s.pending {
		if p.ep != e || p.reply != nil {
			continue
		}
		s.dropPendingLocked(id, p)
		r := &Refusal{Error: ServerUnavailable, Reason: why, Server: s.opts.Label, Epoch: e.ID, StderrTail: e.Proc.StderrTail(10),
			Retry: "ask the person to check the server's command and logs"}
		answers = append(answers, r.Response(p.agentID))
	}
	s.mu.Unlock()
	for _, a := range answers {
		s.writeAgent(a)
	}
	s.endEpoch(e, why)
}

func (s *Session) agentNotification(m *mcpwire.Message) {
	s.mu.Lock()
	e := s.cur
	s.mu.Unlock()
	line := m.Raw
	switch m.Method {
	case methodCancelled:
		reqID := mcpwire.GetPath(m.Params, "requestId")
		s.mu.Lock()
		id, ok := s.byAgentID[string(reqID)]
		var p *pending
		if ok {
			p = s.pending[id]
			// The agent ignores any later answer (MCP basic/utilities/cancellation).
			s.dropPendingLocked(id, p)
		}
		s.mu.Unlock()
		if !ok || p == nil {
			s.log.Debug("cancellation for an unknown or finished request", "requestId", string(reqID))
			return
		}
		out, err := mcpwire.SetPath(m.Raw, []string{"params", "requestId"}, mcpwire.NumberID(id))
		if err != nil {
			s.log.Warn("rewriting cancellation", "err", err)
			return
		}
		e, line = p.ep, out
	case methodInitialized:
		defer s.completeHandshake()
	}
	if e == nil || e.ended {
		s.log.Debug("notification while no server runs", "method", m.Method)
		return
	}
	if err := e.write(line); err != nil {
		s.log.Debug("forwarding notification", "method", m.Method, "err", err)
	}
}

// agentResponse routes the agent's answer to a server's request back to the
// epoch that asked.
func (s *Session) agentResponse(m *mcpwire.Message) {
	gid, _, ok := mcpwire.IntID(m.ID)
	s.mu.Lock()
	r := s.reverse[gid]
	if ok && r != nil {
		delete(s.reverse, gid)
	}
	s.mu.Unlock()
	if !ok || r == nil {
		s.log.Warn("agent answered an unknown request", "id", string(m.ID))
		return
	}
	out, err := mcpwire.SetMember(m.Raw, "id", r.serverID)
	if err != nil {
		return
	}
	if err := r.ep.write(out); err != nil {
		s.log.Debug("forwarding response to server", "err", err)
	}
}

// readServer routes everything the process of e writes on stdout.
func (s *Session) readServer(e *epoch) {
	r := mcpwire.NewReader(e.Proc.Stdout(), s.opts.MaxMessage)
	for {
		line, err := r.ReadLine()
		if err != nil {
			var tl *mcpwire.TooLargeError
			if errors.As(err, &tl) {
				s.serverTooLarge(e, tl)
				continue
			}
			s.endEpoch(e, "server closed its output")
			return
		}
		s.mu.Lock()
		ended := e.ended
		s.mu.Unlock()
		if ended {
			// Nothing from an ended epoch reaches the agent.
			continue
		}
		m, err := mcpwire.Parse(bytes.Clone(line))
		if err != nil {
			s.diagnostic(e, truncate(string(line), 512))
			continue
		}
		switch m.Kind {
		case mcpwire.KindResponse:
			s.serverResponse(e, m)
		case mcpwire.KindRequest:
			s.serverRequest(e, m)
		case mcpwire.KindNotification:
			s.serverNotification(e, m)
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (s *Session) serverTooLarge(e *epoch, tl *mcpwire.TooLargeError) {
	s.log.Warn("server message too large", "epoch", e.ID, "bytes", tl.Size)
	id := mcpwire.PeekID(tl.Prefix)
	gid, _, ok := mcpwire.IntID(id)
	s.mu.Lock()
	p := s.pending[gid]
	if ok && p != nil && p.ep == e {
		s.dropPendingLocked(gid, p)
	} else {
		p = nil
	}
	s.mu.Unlock()
	if p == nil {
		s.diagnostic(e, fmt.Sprintf("dropped a %d-byte message over the %d-byte limit", tl.Size, tl.Limit))
		return
	}
	if p.reply != nil {
		close(p.reply)
		return
	}
	s.writeAgent((&Refusal{
		Error: MessageTooLarge, Server: s.opts.Label, Epoch: e.ID, Limit: tl.Limit,
		Reason: fmt.Sprintf("the server's answer to %s is %d bytes, over the %d-byte limit", p.method, tl.Size, tl.Limit),
		Retry:  "ask for less data (a narrower query or a smaller page)",
	}).Response(p.agentID))
}

func (s *Session) serverResponse(e *epoch, m *mcpwire.Message) {
	gid, coerced, ok := mcpwire.IntID(m.ID)
	s.mu.Lock()
	p := s.pending[gid]
	if !ok || p == nil || p.ep != e {
		s.mu.Unlock()
		s.log.Warn("server answered an unknown request", "epoch", e.ID, "id", string(m.ID))
		return
	}
	s.dropPendingLocked(gid, p)
	if !e.answered {
		e.answered = true
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	s.mu.Unlock()
	if coerced {
		s.log.Warn("server changed the type of a request id", "epoch", e.ID, "sent", gid, "got", string(m.ID))
	}
	if p.reply != nil {
		p.reply <- m
		return
	}
	out, err := mcpwire.SetMember(m.Raw, "id", p.agentID)
	if err != nil {
		return
	}
	if p.method == methodDiscover && m.Result != nil {
		// 2026-07-28: no handshake follows a successful discovery.
		s.writeAgent(out)
		s.completeHandshake()
		return
	}
	s.writeAgent(out)
}

func (s *Session) serverRequest(e *epoch, m *mcpwire.Message) {
	if m.Method == methodPing {
		b, _ := mcpwire.NewResult(m.ID, nil)
		if err := e.write(b); err != nil {
			s.log.Debug("answering server ping", "err", err)
		}
		return
	}
	s.mu.Lock()
	gid := s.nextID
	s.nextID++
	s.reverse[gid] = &reverseEntry{ep: e, serverID: m.ID}
	s.mu.Unlock()
	out, err := mcpwire.SetMember(m.Raw, "id", mcpwire.NumberID(gid))
	if err != nil {
		return
	}
	s.sendServerMessage(out)
}

func (s *Session) serverNotification(e *epoch, m *mcpwire.Message) {
	line := m.Raw
	switch m.Method {
	case methodProgress:
		token := string(mcpwire.GetPath(m.Params, "progressToken"))
		if !s.tokenInFlight(e, token) {
			s.log.Info("progress for no request in flight on this epoch", "epoch", e.ID, "token", token)
			return
		}
		s.writeAgent(line) // progress belongs to an answered handshake already
		return
	case methodCancelled:
		// The server gives up on one of its own requests to the agent.
		reqID := mcpwire.GetPath(m.Params, "requestId")
		gid, ok := s.reverseID(e, reqID)
		if !ok {
			return
		}
		out, err := mcpwire.SetPath(m.Raw, []string{"params", "requestId"}, mcpwire.NumberID(gid))
		if err != nil {
			return
		}
		line = out
	}
	if sub := mcpwire.GetPath(m.Params, "_meta", metaSubscriptionKey); sub != nil {
		// 2026-07-28: the subscription id is the id of the listen request,
		// which the agent knows by its own id.
		gid, _, ok := mcpwire.IntID(sub)
		s.mu.Lock()
		p := s.pending[gid]
		s.mu.Unlock()
		if !ok || p == nil || p.agentID == nil {
			s.log.Info("notification for an unknown subscription", "epoch", e.ID, "subscriptionId", string(sub))
			return
		}
		out, err := mcpwire.SetPath(line, []string{"params", "_meta", metaSubscriptionKey}, p.agentID)
		if err != nil {
			return
		}
		line = out
	}
	s.sendServerMessage(line)
}

func (s *Session) tokenInFlight(e *epoch, token string) bool {
	if token == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pending {
		if p.ep == e && p.token == token {
			return true
		}
	}
	return false
}

func (s *Session) reverseID(e *epoch, serverID json.RawMessage) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for gid, r := range s.reverse {
		if r.ep == e && bytes.Equal(r.serverID, serverID) {
			return gid, true
		}
	}
	return 0, false
}
