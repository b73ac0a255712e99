package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// Method names the gateway routes specially (MCP spec, 2025-11-25 and
// 2026-07-28 schemas).
const (
	methodPing             = "ping"
	methodInitialize       = "initialize"
	methodInitialized      = "notifications/initialized"
	methodCancelled        = "notifications/cancelled"
	methodProgress         = "notifications/progress"
	methodToolsChanged     = "notifications/tools/list_changed"
	methodDiscover         = "server/discover"
	methodListen           = "subscriptions/listen"
	methodSubscriptionsAck = "notifications/subscriptions/acknowledged"
	methodToolsList        = "tools/list"
	methodToolsCall        = "tools/call"
	metaSubscriptionKey    = "io.modelcontextprotocol/subscriptionId"
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaClientInfo         = "io.modelcontextprotocol/clientInfo"
	// protocolModern is the first protocol version whose requests carry
	// the client's protocol version and capabilities in _meta.
	protocolModern = "2026-07-28"
)

// readAgent routes every message the agent sends until its input ends.
func (s *Session) readAgent(in io.Reader) error {
	r := mcpwire.NewReader(in, s.opts.MaxMessage)
	unicodeNoted := false
	for {
		line, err := r.ReadLine()
		if err != nil {
			var tl *mcpwire.TooLargeError
			if errors.As(err, &tl) {
				s.agentTooLarge(tl)
				continue
			}
			return err
		}
		if string(line) == control.EndOfInput {
			// The agent sends nothing more; the shim keeps the connection
			// open until the run is over, so that its end (EOF here) still
			// means it is gone.
			s.inputEndOnce.Do(func() { close(s.inputEnded) })
			continue
		}
		m, err := mcpwire.Parse(bytes.Clone(line))
		if err != nil {
			var ie *mcpwire.InvalidError
			if errors.As(err, &ie) {
				s.log.Warn("invalid message from agent", "reason", ie.Reason)
				if ie.Code == mcpwire.CodeInvalidRequest && ie.Reason == "batch" {
					s.refuseBatch(line)
					continue
				}
				msg := "Parse error: " + ie.Reason
				if ie.Code == mcpwire.CodeInvalidRequest {
					msg = "Invalid Request: " + ie.Reason
				}
				s.writeAgent(mcpwire.NewError(ie.ID, ie.Code, msg, nil))
				continue
			}
			return err
		}
		if m, err = s.stripReserved(m); err != nil {
			return err
		}
		if m.Replaced > 0 && !unicodeNoted {
			unicodeNoted = true
			s.log.Warn("the agent sent invalid UTF-8 or lone surrogate escapes, replaced by U+FFFD; reported once", "count", m.Replaced)
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

// refuseBatch answers a JSON-RPC batch from the agent (an array of
// messages, allowed by protocol 2025-03-26 only, and not supported here) as
// JSON-RPC 2.0 section 6 says: one array with a -32600 error for each
// request in it, by its id, so that none waits for an answer that never
// comes; nothing for a batch of notifications only; a single error with id
// null for an empty array. Nothing of it is forwarded.
func (s *Session) refuseBatch(line []byte) {
	const msg = "Invalid Request: JSON-RPC batches are not supported; send each message on its own line"
	var elems []json.RawMessage
	if err := json.Unmarshal(line, &elems); err != nil || len(elems) == 0 {
		s.writeAgent(mcpwire.NewError(nil, mcpwire.CodeInvalidRequest, msg, nil))
		return
	}
	var answers []json.RawMessage
	for _, el := range elems {
		m, err := mcpwire.Parse(el)
		switch {
		case err != nil:
			var id json.RawMessage
			if ie := (*mcpwire.InvalidError)(nil); errors.As(err, &ie) {
				id = ie.ID
			}
			answers = append(answers, mcpwire.NewError(id, mcpwire.CodeInvalidRequest, msg, nil))
		case m.Kind == mcpwire.KindRequest:
			answers = append(answers, mcpwire.NewError(m.ID, mcpwire.CodeInvalidRequest, msg, nil))
		}
	}
	s.log.Warn("JSON-RPC batch from the agent refused", "messages", len(elems), "requests", len(answers))
	if len(answers) == 0 {
		return
	}
	out, _ := json.Marshal(answers)
	s.writeAgent(out)
}

// agentRequest routes one request from the agent: the handshake goes
// straight to the current process; everything else passes the gate, which
// is closed while a new epoch is identity-pending or its catalog is being
// fetched.
func (s *Session) agentRequest(m *mcpwire.Message) {
	if s.idInFlight(m.ID) {
		// JSON-RPC 2.0 (section 4) and MCP (basic/index, "Requests"): an
		// id is unique among the requestor's requests; two answers with one
		// id could not be told apart. The first request goes on untouched.
		s.log.Warn("agent reused the id of a request in flight; refused", "id", string(m.ID), "method", m.Method)
		s.writeAgent(mcpwire.NewError(m.ID, mcpwire.CodeInvalidRequest,
			fmt.Sprintf("Invalid Request: request id %s is already in use by a request in flight; give each request an id of its own", m.ID), nil))
		return
	}
	if m.Method != methodPing {
		if why := requestMetaProblem(m.Params); why != "" {
			// Checked here, not left to the server: a call the server
			// will refuse must not hold at the gate or raise an approval
			// card first.
			s.log.Info("request with an invalid 2026-07-28 _meta", "id", string(m.ID), "method", m.Method, "problem", why)
			s.writeAgent(mcpwire.NewError(m.ID, mcpwire.CodeInvalidParams, "Invalid params: "+why, nil))
			return
		}
	}
	if !checkMethods[m.Method] {
		s.mu.Lock()
		s.acted = true
		s.mu.Unlock()
	}
	var call *toolCall // a tools/call, read once here
	if m.Method == methodToolsCall {
		var why string
		if call, why = parseCall(m); why != "" {
			s.log.Info("tools/call with invalid params", "id", string(m.ID), "problem", why)
			s.writeAgent(mcpwire.NewError(m.ID, mcpwire.CodeInvalidParams,
				"Invalid params: tools/call needs params.name, a string ("+why+")", nil))
			return
		}
	}
	switch m.Method {
	case methodPing:
		// Answered here, also while no process is running (docs/DESIGN.md,
		// "Protocol eras").
		b, _ := mcpwire.NewResult(m.ID, nil)
		s.writeAgent(b)
		return
	case methodInitialize, methodDiscover:
		s.mu.Lock()
		if m.Method == methodInitialize && (s.hs.negotiated != nil || s.initInFlightLocked()) {
			// MCP basic/lifecycle: initialization is the first exchange
			// of a connection, once. Forwarded, it would renegotiate the
			// server behind the back of the session the gateway keeps.
			s.mu.Unlock()
			s.log.Warn("second initialize from the agent refused", "id", string(m.ID))
			s.writeAgent(mcpwire.NewError(m.ID, mcpwire.CodeInvalidRequest,
				"Invalid Request: the session is already initialized; initialize is sent once per connection (start a new connection to initialize again)", nil))
			return
		}
		if m.Method == methodInitialize {
			s.hs.initialize(m)
		} else {
			s.hs.discover(mcpwire.GetPath(m.Params, "_meta"))
		}
		launching := s.cur == nil && s.state == StateStarting
		if !launching && !s.releasingLocked() {
			s.mu.Unlock()
			s.forward(m)
			return
		}
		// The first process is still being launched (bounded by the
		// launch itself: measurement, and approval for credentials), or
		// messages sent before are still held: it keeps its place.
		queued := s.queueLocked(func() {
			s.forward(m)
			s.unhold(m.ID)
		}, nil, 0)
		if queued {
			s.holdLocked(m.ID)
		}
		s.mu.Unlock()
		if !queued {
			s.refuse(m.ID, m.Method, "", s.tooManyHeld(m))
		}
		return
	}
	if refused := s.beforeHandshake(m); refused != nil {
		s.writeAgent(refused)
		return
	}
	s.mu.Lock()
	if !s.inLineLocked() && s.awaitsIdentityLocked(m.Method) == nil {
		s.mu.Unlock()
		s.handle(m, call)
		return
	}
	// Held: never forwarded to either process until the gate opens (and,
	// but for the lists, the epoch's identity is known), and then in the
	// order the agent sent it.
	queued := s.queueForLocked(func() {
		s.handle(m, call)
		s.unhold(m.ID)
	}, func() {
		s.mu.Lock()
		st, cur := s.state, s.cur
		open, _ := s.gate.state()
		unidentified := open && s.awaitsIdentityLocked(m.Method) != nil
		building := !open && s.buildHold != nil
		s.mu.Unlock()
		reason := fmt.Sprintf("the server was %s for more than %s", st, s.opts.HoldTimeout)
		if unidentified {
			reason = fmt.Sprintf("the processes that run the server's epoch were not identified within %s (the supervisor reads them once the launch settled and the server answered); the request was not sent", s.opts.HoldTimeout)
		}
		r := &control.Refusal{Error: control.HoldTimeout, Server: s.opts.Label,
			Reason: reason,
			Retry:  "call again in a moment; if it persists, ask the person to check the server"}
		if building {
			// A build in progress that never settled: the files keep
			// changing.
			r = sourceChanging(s.opts.Label, callName(call), "", s.opts.HoldTimeout)
		}
		if cur != nil {
			r.CurrentEpoch = cur.ID
		}
		s.refuse(m.ID, m.Method, callName(call), r)
		s.unhold(m.ID)
	}, s.opts.HoldTimeout, m.Method)
	if queued {
		s.holdLocked(m.ID)
	}
	s.mu.Unlock()
	if !queued {
		s.refuse(m.ID, m.Method, callName(call), s.tooManyHeld(m))
	}
}

// tooManyHeld is the refusal of a request that finds maxHeld messages held
// already.
func (s *Session) tooManyHeld(m *mcpwire.Message) *control.Refusal {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	s.log.Warn("request refused: too many messages held at the gate", "id", string(m.ID), "method", m.Method, "held", maxHeld)
	return &control.Refusal{Error: control.HoldTimeout, Server: s.opts.Label,
		Reason: fmt.Sprintf("the server is %s and %d messages of this agent wait for it already", st, maxHeld),
		Retry:  "wait for the answers to the requests already sent, then call again"}
}

// handle runs a request past the gate; call is m read as a tools/call (nil
// for other methods).
func (s *Session) handle(m *mcpwire.Message, call *toolCall) {
	s.mu.Lock()
	e := s.cur
	if e == nil || e.ended || s.state == StateFailed || s.state == StateCrashLooping {
		r := s.unavailableLocked()
		s.mu.Unlock()
		s.refuse(m.ID, m.Method, callName(call), r)
		return
	}
	s.mu.Unlock()
	switch m.Method {
	case methodToolsList:
		s.mu.Lock()
		unsubscribed := s.hs.era == eraModern && !s.hs.toolsSubscribed() && e.catalog != nil
		s.mu.Unlock()
		if unsubscribed {
			// 2026-07-28: without a subscription nothing tells the gateway
			// that the list changed, so it asks the server again now.
			s.refresh(e)
		}
		if s.answerToolsList(e, m) {
			return
		}
	case methodToolsCall:
		v := s.decide(e, call)
		if v.kind == verdictRefuse {
			if v.ask != nil {
				askedIn(v.refusal, s.requestFor(e, call, v.ask.reason, v.ask.stale))
			}
			s.refuse(m.ID, m.Method, call.name, v.refusal)
			return
		}
		auth := s.authorize(e, call, v)
		// The call is in flight from now on (a cancellation or the end of
		// its epoch reaches it), but it is sent only once its intent is
		// durable — off the agent's reading loop, so that concurrent calls
		// share the audit log's fsyncs and a call waiting for a person
		// holds nothing else up.
		id, p, rr := s.reserve(e, m)
		if rr != nil {
			s.refuse(m.ID, m.Method, call.name, rr)
			return
		}
		if auth.wait != "" {
			s.mu.Lock()
			p.approval = auth.wait
			s.mu.Unlock()
		}
		if s.recordTier(auth) {
			// Nothing to wait for (no person, no sync): sent from the
			// agent's reading loop, without a goroutine per call.
			s.sendCall(e, call, id, p, auth)
			return
		}
		started := s.work.goFunc(func() {
			if auth.wait != "" {
				auth = s.awaitApproval(e, call, auth.wait)
			}
			s.sendCall(e, call, id, p, auth)
		})
		if !started && s.abandon(id, p) {
			s.mu.Lock()
			r := s.unavailableLocked()
			s.mu.Unlock()
			s.refuse(m.ID, m.Method, call.name, r)
		}
		return
	case methodListen:
		s.mu.Lock()
		s.hs.subscribe(m)
		s.mu.Unlock()
	}
	s.forward(m)
}

// sendCall writes the intent of tools/call c (reserved as id), authorized as
// auth says, to the audit log and forwards auth.out (the call, credentials
// injected), or refuses it.
func (s *Session) sendCall(e *epoch, c *toolCall, id int64, p *pending, auth authorization) {
	m := c.msg
	if r := auth.refusal; r != nil {
		if s.abandon(id, p) {
			s.refuse(m.ID, m.Method, c.name, r)
		}
		return
	}
	rec, err := s.recordIntent(e, c, auth)
	if err != nil {
		r := &control.Refusal{Error: control.AuditUnavailable, Server: s.opts.Label, Tool: c.name, CurrentEpoch: e.ID,
			Reason: "the audit log cannot be written (" + err.Error() + "), so no call is forwarded",
			Retry:  "tell the person that Portcullis cannot write its audit log (they should check the disk and the data directory), then call again"}
		if s.abandon(id, p) {
			s.refuse(m.ID, m.Method, c.name, r)
		}
		return
	}
	// p.call is set only while p is in flight: whoever takes p out of
	// flight afterwards (the epoch's end, a cancellation) records the
	// call's completion, once.
	s.mu.Lock()
	still := s.flight.is(id, p)
	if still {
		p.call = rec
	}
	s.mu.Unlock()
	if !still {
		s.recordCompletion(e, rec, "not_forwarded", "cancelled or its epoch ended before it was sent")
		return
	}
	if r := s.checkTree(e, c.name, auth.decision); r != nil {
		s.notSent(e, c, id, p, rec, r)
		return
	}
	if s.sourceSettled(e, auth.decision) {
		s.transmit(id, p, auth.out) // false: p left flight, its completion recorded there
		return
	}
	// The server's source is changing behind a launcher that relays its
	// stdin: the call waits for it to settle, off the agent's reading loop.
	if !s.work.goFunc(func() { s.sendSettled(e, c, id, p, rec, auth) }) {
		s.mu.Lock()
		r := s.unavailableLocked()
		s.mu.Unlock()
		s.notSent(e, c, id, p, rec, r)
	}
}

// notSent refuses call c (reserved as id, its intent recorded as rec)
// with r, unless it left flight already, and records that it was not
// forwarded.
func (s *Session) notSent(e *epoch, c *toolCall, id int64, p *pending, rec *callRecord, r *control.Refusal) {
	if s.abandon(id, p) {
		s.recordCompletion(e, rec, "not_forwarded", r.Reason)
		s.recordRefused(refusedReq{method: c.msg.Method, tool: c.name, call: rec.id, r: r})
		s.writeAgent(r.Response(c.msg.ID))
	}
}

// forward sends an agent request to the current epoch under a gateway id.
func (s *Session) forward(m *mcpwire.Message) {
	s.mu.Lock()
	e := s.cur
	s.mu.Unlock()
	id, p, r := s.reserve(e, m)
	if r != nil {
		s.refuse(m.ID, m.Method, "", r)
		return
	}
	s.transmit(id, p, m.Raw)
}

// reserve registers m as in flight on e under a new gateway id, before it
// is sent; it refuses when e is no longer the live epoch.
func (s *Session) reserve(e *epoch, m *mcpwire.Message) (int64, *pending, *control.Refusal) {
	token := ""
	if t := mcpwire.GetPath(m.Params, "_meta", "progressToken"); t != nil {
		token = string(t)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e == nil || e.ended || s.cur != e {
		r := s.unavailableLocked()
		if e != nil && s.cur != nil && s.cur != e && !s.cur.ended {
			r = &control.Refusal{Error: control.EpochEnded, Server: s.opts.Label, Epoch: e.ID, CurrentEpoch: s.cur.ID,
				Reason: "the server was replaced before the request was sent; it was not sent", Retry: "call again"}
		}
		return 0, nil, r
	}
	p := &pending{agentID: m.ID, method: m.Method, ep: e, token: token, unsent: true}
	if m.Method == methodToolsCall {
		_ = json.Unmarshal(mcpwire.GetPath(m.Params, "name"), &p.tool)
	}
	id := s.flight.add(p)
	if !e.answered && e.timer == nil {
		method := m.Method
		e.timer = time.AfterFunc(s.opts.StartupTimeout, func() { s.startupTimeout(e, method) })
	}
	return id, p, nil
}

// abandon forgets a reserved request that will not be sent; it reports
// whether it was still waiting (so that the caller answers it).
func (s *Session) abandon(id int64, p *pending) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.flight.is(id, p) {
		return false // cancelled, or answered by the end of its epoch
	}
	s.dropPendingLocked(id, p)
	return true
}

// transmit sends raw under the reserved id, unless the request was
// cancelled or its epoch ended meanwhile (then it reports false). It never
// waits for more than the write: a write that fails is dealt with by
// writeFailed, off the caller's goroutine (the agent's reading loop).
func (s *Session) transmit(id int64, p *pending, raw []byte) bool {
	s.mu.Lock()
	if !s.flight.is(id, p) {
		s.mu.Unlock()
		return false
	}
	p.unsent = false
	s.mu.Unlock()
	out, err := mcpwire.SetMember(raw, "id", mcpwire.NumberID(id))
	if err == nil {
		err = p.ep.write(out)
	}
	if err != nil {
		s.mu.Lock()
		p.unsent = true // until writeFailed knows better: it did not reach the server
		s.mu.Unlock()
		if !s.work.goFunc(func() { s.writeFailed(id, p, err) }) {
			s.writeFailed(id, p, err) // the run is over: its end answered p already
		}
	}
	return true
}

// writeFailGrace bounds the wait for the exit of a process that a request
// could not be written to (see writeFailed).
var writeFailGrace = time.Second // a variable for tests

// writeFailed answers the request reserved as id whose write failed with
// err. Writing fails when the process is gone, and its exit status says
// more than EPIPE: once it has exited (within writeFailGrace), the end of
// its epoch answers the request (exited → failEpoch or endEpoch), as every
// request still waiting on it; otherwise it is refused with
// server_unavailable naming err.
func (s *Session) writeFailed(id int64, p *pending, err error) {
	t := time.NewTimer(writeFailGrace)
	defer t.Stop()
	select {
	case <-p.ep.Proc.Done():
		s.log.Debug("the server exited before a request could be written", "epoch", p.ep.ID, "method", p.method)
		return
	case <-s.runCtx().Done():
		return // the run's end answers it
	case <-t.C:
	}
	s.mu.Lock()
	still := s.flight.is(id, p)
	s.dropPendingLocked(id, p)
	r := s.unavailableLocked()
	call := p.call
	s.mu.Unlock()
	if still {
		r.Reason = "writing to the server failed: " + err.Error()
		s.recordRefused(refusedOf(p, r))
		s.writeAgent(r.Response(p.agentID))
		s.recordCompletion(p.ep, call, "epoch_ended", r.Reason)
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
	var answers []refusedReq
	var calls []*callRecord
	status, tail := exitDetails(e)
	for id, p := range s.flight.pending {
		if p.ep != e || p.reply != nil {
			continue
		}
		s.dropPendingLocked(id, p)
		if p.call != nil {
			calls = append(calls, p.call)
		}
		r := &control.Refusal{Error: control.ServerUnavailable, Reason: why, Server: s.opts.Label, Epoch: e.ID, ExitStatus: status, StderrTail: tail,
			Retry: "ask the person to fix the server and run `portcullis restart " + s.opts.Label + "`"}
		answers = append(answers, refusedOf(p, r))
	}
	if s.cur == e {
		s.state, s.reason = StateFailed, why
		s.openGateLocked()
	}
	s.mu.Unlock()
	s.refuseAll(answers)
	for _, c := range calls {
		s.recordCompletion(e, c, "epoch_ended", why)
	}
	s.endEpoch(e, why, nil)
	s.changed()
}

func (s *Session) agentNotification(m *mcpwire.Message) {
	if m.Method == methodInitialize || m.Method == methodDiscover {
		// Requests of the handshake sent without an id: nothing can
		// answer them, and passed on they would renegotiate the server
		// behind the session's back (MCP basic/lifecycle).
		s.log.Warn("agent sent a handshake request as a notification (no id); dropped", "method", m.Method)
		return
	}
	s.mu.Lock()
	// While the first process is launched, or held requests are still to
	// be released, a notification keeps its place behind them
	// (notifications/initialized after initialize, before tools/list). A
	// cancellation of a request already in flight goes at once.
	_, _, inFlight := s.flight.ofAgent(mcpwire.GetPath(m.Params, "requestId"))
	cancelNow := m.Method == methodCancelled && inFlight
	if !cancelNow && (s.inLineLocked() || (s.cur == nil && s.state == StateStarting)) {
		queued := s.queueLocked(func() { s.routeNotification(m) }, nil, 0)
		s.mu.Unlock()
		if !queued {
			s.log.Warn("notification dropped: too many messages held at the gate", "method", m.Method, "held", maxHeld)
		}
		return
	}
	s.mu.Unlock()
	s.routeNotification(m)
}

// routeNotification forwards one notification of the agent to the current
// process (a cancellation to the process its request went to).
func (s *Session) routeNotification(m *mcpwire.Message) {
	s.mu.Lock()
	e := s.cur
	s.mu.Unlock()
	line := m.Raw
	switch m.Method {
	case methodCancelled:
		reqID := mcpwire.GetPath(m.Params, "requestId")
		s.mu.Lock()
		id, p, ok := s.flight.ofAgent(reqID)
		if ok {
			// The agent ignores any later answer (MCP basic/utilities/cancellation).
			s.dropPendingLocked(id, p)
			if p != nil && p.method == methodListen && s.hs.isListen(reqID) {
				s.hs.listen = nil
			}
		}
		s.mu.Unlock()
		if !ok || p == nil {
			s.log.Debug("cancellation for an unknown or finished request", "requestId", string(reqID))
			return
		}
		s.recordCompletion(p.ep, p.call, "cancelled", "")
		s.withdrawIfUnwaited(p.approval)
		out, err := mcpwire.SetPath(m.Raw, []string{"params", "requestId"}, mcpwire.NumberID(id))
		if err != nil {
			s.log.Warn("rewriting cancellation", "err", err)
			return
		}
		e, line = p.ep, out
	case methodInitialized:
		defer s.completeHandshake(e)
	}
	if e == nil || e.ended {
		s.log.Debug("notification while no server runs", "method", m.Method)
		return
	}
	if err := e.write(line); err != nil {
		s.log.Debug("forwarding notification", "method", m.Method, "err", err)
	}
}

// withdrawIfUnwaited denies approval request id when no call waits on it
// any more (its only caller cancelled): a person is not asked about a call
// that will not happen.
func (s *Session) withdrawIfUnwaited(id ids.RequestID) {
	if id == "" || s.opts.Authority == nil {
		return
	}
	s.mu.Lock()
	waited := s.flight.awaiting(id)
	s.mu.Unlock()
	if waited {
		return
	}
	if err := s.opts.Authority.WithdrawRun(id, s.opts.RunID, "the agent cancelled the call"); err == nil {
		s.log.Info("approval request withdrawn: its call was cancelled", "request", id)
	}
}

// agentResponse routes the agent's answer to a server's request back to the
// epoch that asked.
func (s *Session) agentResponse(m *mcpwire.Message) {
	s.mu.Lock()
	r := s.flight.takeReverse(m.ID)
	s.mu.Unlock()
	if r == nil {
		s.log.Info("agent answered a request of an ended epoch or an unknown one", "id", string(m.ID))
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
	// Tolerant of what servers get wrong around their messages (a BOM,
	// colour codes, a lone '\r', several messages on a line, a batch):
	// the answers still arrive; each kind of repair is a diagnostic, once.
	r := mcpwire.NewTolerantReader(e.Proc.Stdout(), s.opts.MaxMessage, func(note string) { s.diagnostic(e, note) })
	unicodeNoted := false
	for {
		line, err := r.ReadLine()
		e = s.lastOf(e) // an epoch observed on the same process reads on
		if err != nil {
			var tl *mcpwire.TooLargeError
			if errors.As(err, &tl) {
				s.serverTooLarge(e, tl)
				continue
			}
			s.mu.Lock()
			ended := e.ended
			s.mu.Unlock()
			if !ended {
				// Give the exit status a moment to arrive; it says more.
				select {
				case <-e.Proc.Done():
				case <-time.After(200 * time.Millisecond):
					s.exited(e, "server closed its output")
				}
			}
			return
		}
		s.mu.Lock()
		ended := e.ended
		s.mu.Unlock()
		if ended && !r.Unterminated() {
			// Nothing from an ended epoch reaches the agent; an answer to
			// a call it was answered epoch_ended for is recorded.
			if m, err := mcpwire.Parse(bytes.Clone(line)); err == nil {
				s.lateAnswer(m)
			}
			continue
		}
		m, err := mcpwire.Parse(bytes.Clone(line))
		if ended && err == nil {
			s.lateAnswer(m)
			continue // a whole last message, after the end: dropped too (a late answer is recorded)
		}
		if err == nil && m.Replaced > 0 && !unicodeNoted {
			unicodeNoted = true
			s.diagnostic(e, fmt.Sprintf("a message held %d invalid UTF-8 bytes or lone surrogate escapes, replaced by U+FFFD (RFC 8259 asks for UTF-8); reported once", m.Replaced))
		}
		if err != nil && r.Unterminated() {
			// The output ended in the middle of a message: the process
			// died while writing it (or closed its output). The request
			// it answered is answered by the end of the epoch, as for
			// any process that dies during a call (epoch_ended: it may
			// have taken effect), not as an invalid answer to retry.
			// Kept as a diagnostic even when the exit was seen first.
			s.log.Warn("server output ended in the middle of a message", "epoch", e.ID, "bytes", len(line))
			s.diagnostic(e, "the output ended in the middle of a message: "+truncate(string(line), 200))
			continue
		}
		if err != nil {
			s.serverInvalid(e, line, err)
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

// serverTooLarge handles a line from the process of e over the size limit,
// which the reader has discarded: an answer to a request in flight (found by
// its id, wherever the id stands in the line) answers that request with
// message_too_large; the server's own request (a line with a "method") is
// answered to the server the same way, so that it does not wait; anything
// else is dropped. Whatever is dropped is kept in the diagnostics.
func (s *Session) serverTooLarge(e *epoch, tl *mcpwire.TooLargeError) {
	s.log.Warn("server message too large", "epoch", e.ID, "bytes", tl.Size, "limit", tl.Limit,
		"id", string(tl.ID), "method", tl.Method, "hasMethod", tl.HasMethod)
	if tl.HasMethod {
		// The server's own request or notification: never an answer.
		what := "notification"
		if tl.ID != nil {
			what = "request (id " + string(tl.ID) + ")"
		}
		if tl.Method != "" {
			what = strconv.Quote(tl.Method) + " " + what
		}
		s.mu.Lock()
		ended := e.ended
		s.mu.Unlock()
		if tl.ID != nil && !ended {
			r := &control.Refusal{Error: control.MessageTooLarge, Server: s.opts.Label, Epoch: e.ID, Limit: tl.Limit,
				Reason: fmt.Sprintf("the request is %d bytes, over the %d-byte limit; it did not reach the agent", tl.Size, tl.Limit),
				Retry:  "send less data in one request"}
			if err := e.write(r.Response(tl.ID)); err != nil {
				s.log.Debug("answering an oversized server request", "err", err)
			}
			what += ", answered with message_too_large"
		}
		s.diagnostic(e, fmt.Sprintf("dropped the server's %d-byte %s over the %d-byte limit", tl.Size, what, tl.Limit))
		return
	}
	p := s.takePending(e, tl.ID)
	if p == nil {
		why := "it has no id that could be read"
		if tl.ID != nil {
			why = "its id " + string(tl.ID) + " names no request in flight"
		}
		s.diagnostic(e, fmt.Sprintf("dropped a %d-byte message over the %d-byte limit; %s", tl.Size, tl.Limit, why))
		return
	}
	if p.reply != nil {
		failReply(p, fmt.Sprintf("the server's answer is %d bytes, over the %d-byte limit (settings.maxMessageBytes)", tl.Size, tl.Limit))
		return
	}
	s.recordCompletion(e, p.call, "rpc_error", "message_too_large")
	s.refuseAll([]refusedReq{refusedOf(p, &control.Refusal{
		Error: control.MessageTooLarge, Server: s.opts.Label, Epoch: e.ID, Limit: tl.Limit,
		Reason: fmt.Sprintf("the server's answer to %s is %d bytes, over the %d-byte limit", p.method, tl.Size, tl.Limit),
		Retry:  "ask for less data (a narrower query or a smaller page)",
	})})
}

// failReply fails a request of the gateway's own (p.reply) with why, for
// Session.call to report: a message without Raw is the gateway's verdict,
// its Method the reason.
func failReply(p *pending, why string) {
	p.reply <- &mcpwire.Message{Method: why}
}

// takePending removes and returns the request of e waiting for the answer
// with this id (one the gateway minted), or nil when none does.
func (s *Session) takePending(e *epoch, id json.RawMessage) *pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flight.take(e, id)
}

// serverInvalid handles a line from the server that is not a JSON-RPC
// message: a banner, a log line, broken JSON, or an answer that breaks the
// protocol (no "jsonrpc", both result and error...). It is kept as a
// diagnostic. When it still names, by its id, a request of this epoch that
// waits for an answer, that request is answered at once with
// invalid_response rather than left to wait for a reply that will not come.
// A line that names a method is the server's own (broken) request or
// notification, never taken for an answer.
func (s *Session) serverInvalid(e *epoch, line []byte, err error) {
	s.diagnostic(e, truncate(string(line), 512))
	var ie *mcpwire.InvalidError
	if !errors.As(err, &ie) || ie.ID == nil {
		return
	}
	if _, _, hasMethod := mcpwire.ScanID(line); hasMethod {
		return
	}
	p := s.takePending(e, ie.ID)
	if p == nil {
		return
	}
	s.log.Warn("server answered with an invalid message", "epoch", e.ID, "method", p.method, "reason", ie.Reason)
	if p.reply != nil {
		failReply(p, "the server's answer is not a valid JSON-RPC response ("+ie.Reason+")")
		return
	}
	s.recordCompletion(e, p.call, "rpc_error", "invalid_response")
	s.refuseAll([]refusedReq{refusedOf(p, &control.Refusal{
		Error: control.InvalidResponse, Server: s.opts.Label, Epoch: e.ID,
		Reason: fmt.Sprintf("the server's answer to %s is not a valid JSON-RPC response (%s); it is kept in the server's diagnostics", p.method, ie.Reason),
		Retry:  "the server is at fault: retry once, then tell the person (`portcullis status " + s.opts.Label + "` shows the line)",
	})})
}

func (s *Session) serverResponse(e *epoch, m *mcpwire.Message) {
	gid, coerced, ok := mcpwire.IntID(m.ID)
	s.mu.Lock()
	p := s.flight.pending[gid]
	if ok && p != nil && p.ep == e && p.unsent {
		// An answer to a request that was reserved but never written to
		// the server (a call that waits for approval or for the audit
		// log): the server guessed the next id. Never delivered; the
		// request keeps its place and gets the answer to what is sent.
		method := p.method
		s.mu.Unlock()
		s.unrequestedAnswer(e, m, "the id is reserved for a "+method+" request that was not sent to the server yet")
		return
	}
	if !ok || p == nil || p.ep != e {
		never := !ok || gid < 1 || gid >= s.flight.nextID
		s.mu.Unlock()
		if never {
			s.unrequestedAnswer(e, m, "no request with this id was sent to the server")
			return
		}
		if !s.lateAnswer(m) {
			s.log.Warn("server answered an unknown request", "epoch", e.ID, "id", string(m.ID))
		}
		return
	}
	if p.method == methodToolsCall && s.opts.SourceUnsettled != nil {
		s.mu.Unlock()
		if s.suspectAnswer(e, p, m) {
			return // recorded as the new code's late answer, not passed on
		}
		s.mu.Lock()
		if !s.flight.is(gid, p) {
			// Its epoch ended meanwhile: the agent was told so.
			s.mu.Unlock()
			s.lateAnswer(m)
			return
		}
	}
	s.dropPendingLocked(gid, p)
	firstAnswer := !e.answered
	if firstAnswer {
		e.answered = true
		armTree(e) // the tree is read once more as the launch's; then changes are new epochs
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	if (p.method == methodInitialize || p.method == methodDiscover) && m.Result != nil && e.initResult == nil {
		e.initResult = bytes.Clone(m.Result)
		if p.agentID != nil && p.method == methodInitialize {
			s.hs.negotiated = e.initResult // the agent's own handshake
		}
	}
	s.mu.Unlock()
	if firstAnswer {
		s.log.Info("epoch answered", "epoch", e.ID, "method", p.method) // once per epoch: its start-up, in the daemon log
	}
	if coerced {
		s.log.Warn("server changed the type of a request id", "epoch", e.ID, "sent", gid, "got", string(m.ID))
		s.mu.Lock()
		first := !e.idMismatch
		e.idMismatch = true
		s.mu.Unlock()
		if first {
			s.diagnostic(e, fmt.Sprintf("the server answered with the id %s a request whose id was the number %d; the agent got its own id, further mismatches are not listed", m.ID, gid))
		}
	}
	if p.reply != nil {
		p.reply <- m
		return
	}
	if p.call != nil {
		switch {
		case m.Error != nil:
			s.recordCompletion(e, p.call, "rpc_error", redactText(e, string(mcpwire.GetPath(m.Error, "message"))))
		case bytes.Equal(mcpwire.GetPath(m.Result, "isError"), []byte("true")):
			s.recordCompletion(e, p.call, "error", "")
		default:
			s.recordCompletion(e, p.call, "ok", "")
		}
	}
	out, err := mcpwire.SetMember(m.Raw, "id", p.agentID)
	if err != nil {
		return
	}
	if m.Result != nil {
		out = s.forAgent(e, p.method, out)
	}
	if p.method == methodDiscover && m.Result != nil {
		// 2026-07-28: no handshake follows a successful discovery. The
		// gate closes for the catalog before the agent can read the
		// answer and send its next request.
		s.completeHandshakeWith(e, out)
		return
	}
	s.writeAgent(out)
}

// forAgent adjusts a server's answer passed to the agent (out, the agent's
// id already in place) where Portcullis, not the server, is the agent's
// peer:
//
//   - initialize: a server that offers tools gets "listChanged": true added
//     to its tools capability (MCP server/tools, "Capabilities"), since the
//     gateway itself sends notifications/tools/list_changed after a rebuild
//     or a policy change, whatever the server does; an agent that trusts the
//     capability would otherwise ignore them.
//   - tools/list passed through (no catalog could be fetched, or a page by
//     cursor): tools the person's policy denies are removed, as from the
//     lists the gateway answers itself.
//
// Anything it cannot adjust is passed as it is, and logged.
func (s *Session) forAgent(e *epoch, method string, out []byte) []byte {
	switch method {
	case methodInitialize:
		tools := mcpwire.GetPath(out, "result", "capabilities", "tools")
		if len(tools) == 0 || tools[0] != '{' || bytes.Equal(mcpwire.GetPath(tools, "listChanged"), []byte("true")) {
			return out
		}
		adj, err := mcpwire.SetPath(out, []string{"result", "capabilities", "tools", "listChanged"}, []byte("true"))
		if err != nil {
			s.log.Warn("could not advertise tools.listChanged to the agent", "epoch", e.ID, "err", err)
			return out
		}
		s.log.Info("the server does not advertise tools.listChanged; the agent is told it will hear of tool changes, which Portcullis sends", "epoch", e.ID)
		return adj
	case "prompts/list", "resources/list", "resources/templates/list":
		return s.boundTTL(method, out)
	case methodToolsList:
		out = s.boundTTL(method, s.filterDenied(e, out))
		var res struct {
			Tools []json.RawMessage `json:"tools"`
		}
		_ = json.Unmarshal(mcpwire.GetPath(out, "result"), &res)
		s.mu.Lock()
		s.announcedEpoch = e.ID
		s.mu.Unlock()
		s.recordSeen(audit.TypeCatalogPresented, audit.CatalogPresented{AgentRun: s.opts.RunID, ServerLabel: s.opts.Label,
			Epoch: e.ID, Tools: len(res.Tools), PassedThrough: true})
		return out
	}
	return out
}

// filterDenied removes the denied tools from a tools/list answer passed
// through from the server.
func (s *Session) filterDenied(e *epoch, out []byte) []byte {
	raw := mcpwire.GetPath(out, "result", "tools")
	if len(raw) == 0 || raw[0] != '[' {
		return out
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return out
	}
	kept := tools[:0:0]
	var denied []string
	for _, t := range tools {
		var name string
		if err := json.Unmarshal(mcpwire.GetPath(t, "name"), &name); err == nil && s.policy(name) == policyDeny {
			denied = append(denied, name)
			continue
		}
		kept = append(kept, t)
	}
	if len(denied) == 0 {
		return out
	}
	b, err := json.Marshal(kept)
	if err == nil {
		var adj []byte
		if adj, err = mcpwire.SetPath(out, []string{"result", "tools"}, b); err == nil {
			s.log.Info("tools/list passed through: denied tools removed", "epoch", e.ID, "denied", denied)
			return adj
		}
	}
	// Never show a denied tool: an answer that cannot be filtered is
	// replaced by an empty list rather than passed as it is.
	s.log.Warn("could not remove denied tools from a tools/list answer; the agent gets an empty list", "epoch", e.ID, "err", err)
	adj, _ := mcpwire.SetPath(out, []string{"result", "tools"}, []byte("[]"))
	return adj
}

func (s *Session) serverRequest(e *epoch, m *mcpwire.Message) {
	if m.Method == methodPing {
		b, _ := mcpwire.NewResult(m.ID, nil)
		if err := e.write(b); err != nil {
			s.log.Debug("answering server ping", "err", err)
		}
		return
	}
	s.serverAsks(e, m)
}

func (s *Session) serverNotification(e *epoch, m *mcpwire.Message) {
	line := m.Raw
	switch m.Method {
	case methodToolsChanged:
		// A signal to refetch, in either era, advertised or not (docs/DESIGN.md, "Trust model":
		// "a server's own list_changed is a signal to refetch, not proof of
		// anything"). The agent hears of it once the new revision is known.
		s.mu.Lock()
		advertised := bytes.Equal(mcpwire.GetPath(e.initResult, "capabilities", "tools", "listChanged"), []byte("true"))
		legacy := s.hs.era == eraLegacy
		ready := s.hs.done
		s.mu.Unlock()
		if !ready {
			// Before the handshake nothing may be asked of the server;
			// the handshake's completion fetches the catalog anyway.
			s.log.Info("server sent tools list_changed before the handshake completed; the catalog is fetched once it has", "epoch", e.ID)
			return
		}
		if legacy && !advertised && e.initResult != nil {
			s.log.Info("server sent tools list_changed without advertising tools.listChanged; refetching anyway", "epoch", e.ID)
		}
		s.background(func() { s.refresh(e) })
		return
	case methodPromptsChanged, methodResourcesChanged:
		// Consumed (the revision pins these lists: refetch, diff) and
		// passed on, so that the agent refetches them too.
		s.mu.Lock()
		ready := s.hs.done
		s.mu.Unlock()
		if ready {
			s.background(func() { s.refresh(e) })
		}
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
		p := s.flight.pending[gid]
		s.mu.Unlock()
		if !ok || p == nil || p.agentID == nil {
			s.log.Info("notification for an unknown subscription", "epoch", e.ID, "subscriptionId", string(sub))
			return
		}
		if m.Method == methodSubscriptionsAck && !s.firstAck(e, m) {
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

// firstAck reports whether the acknowledgement m of the agent's
// subscriptions/listen stream is the stream's first, which the agent gets
// (2026-07-28: the acknowledgement is the first message of the stream, and
// only that). A new epoch acknowledges the subscription the gateway
// re-opened on it: that one is not passed on, and when it honours other
// notifications than the first, the person is told (the gateway announces
// tool list changes itself either way).
func (s *Session) firstAck(e *epoch, m *mcpwire.Message) bool {
	var params map[string]json.RawMessage
	_ = json.Unmarshal(m.Params, &params)
	delete(params, "_meta")
	ack, _ := json.Marshal(params)
	s.mu.Lock()
	l := s.hs.listen
	if l == nil {
		s.mu.Unlock()
		return true
	}
	prev := l.ack
	if prev == nil {
		l.ack = ack
	}
	s.mu.Unlock()
	if prev == nil {
		return true
	}
	if !bytes.Equal(prev, ack) {
		s.warn(fmt.Sprintf("epoch %s honours other notification subscriptions (%s) than the agent was told (%s); reconnect the agent to see them", e.ID, ack, prev))
	}
	s.log.Info("subscription acknowledgement of a re-opened stream not passed on", "epoch", e.ID)
	return false
}

func (s *Session) tokenInFlight(e *epoch, token string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flight.token(e, token)
}

func (s *Session) reverseID(e *epoch, serverID json.RawMessage) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flight.reverseOf(e, serverID)
}

// agentTooLarge handles a line from the agent over the size limit, which the
// reader has discarded. A request (a "method" and an id, wherever the id
// stands in the line) is refused with message_too_large for its id; an
// answer to a server's request (an id, no "method") answers that request
// to the server with message_too_large, so that it does not wait; a line
// without a usable id is dropped with a warning in the daemon's log.
func (s *Session) agentTooLarge(tl *mcpwire.TooLargeError) {
	switch {
	case tl.ID != nil && tl.HasMethod:
		s.log.Warn("agent request too large; refused with message_too_large", "bytes", tl.Size, "limit", tl.Limit, "id", string(tl.ID), "method", tl.Method)
		s.refuse(tl.ID, tl.Method, "", &control.Refusal{
			Error: control.MessageTooLarge, Server: s.opts.Label, Limit: tl.Limit,
			Reason: fmt.Sprintf("the request is %d bytes, over the %d-byte limit; it was not sent", tl.Size, tl.Limit),
			Retry:  "send less data in one request",
		})
	case tl.ID != nil:
		s.mu.Lock()
		r := s.flight.takeReverse(tl.ID)
		s.mu.Unlock()
		if r == nil {
			s.log.Warn("agent answer too large, to no request of a live epoch; dropped", "bytes", tl.Size, "limit", tl.Limit, "id", string(tl.ID))
			return
		}
		s.log.Warn("agent answer too large; the server's request gets message_too_large", "bytes", tl.Size, "limit", tl.Limit, "epoch", r.ep.ID)
		ref := &control.Refusal{Error: control.MessageTooLarge, Server: s.opts.Label, Epoch: r.ep.ID, Limit: tl.Limit,
			Reason: fmt.Sprintf("the agent's answer is %d bytes, over the %d-byte limit", tl.Size, tl.Limit)}
		if err := r.ep.write(ref.Response(r.serverID)); err != nil {
			s.log.Debug("answering the server's request", "err", err)
		}
	default:
		s.log.Warn("agent message too large and without an id to answer; dropped", "bytes", tl.Size, "limit", tl.Limit, "method", tl.Method, "hasMethod", tl.HasMethod)
	}
}

// requestMetaProblem says what makes a request's _meta unusable in the
// 2026-07-28 protocol, or "" when it is fine. A request whose _meta names
// protocol version 2026-07-28 or later must also carry the client's
// capabilities there, as an object, and its client info, when present, must
// be an object (MCP 2026-07-28, basic: "Request metadata", SEP-2575; the
// go-sdk server answers such a request with -32602 too). Requests without
// that protocol version in _meta are of the legacy era and not checked.
func requestMetaProblem(params json.RawMessage) string {
	raw := mcpwire.GetPath(params, "_meta", metaProtocolVersion)
	var version string
	if raw == nil || json.Unmarshal(raw, &version) != nil || version < protocolModern {
		return ""
	}
	isObject := func(v json.RawMessage) bool { return len(v) > 0 && v[0] == '{' }
	caps := mcpwire.GetPath(params, "_meta", metaClientCapabilities)
	switch {
	case caps == nil:
		return fmt.Sprintf("_meta names protocol version %s but has no %q; the %s protocol requires the client's capabilities in the _meta of every request", version, metaClientCapabilities, protocolModern)
	case !isObject(caps):
		return fmt.Sprintf("_meta %q must be an object", metaClientCapabilities)
	}
	if info := mcpwire.GetPath(params, "_meta", metaClientInfo); info != nil && !isObject(info) {
		return fmt.Sprintf("_meta %q must be an object", metaClientInfo)
	}
	return ""
}

// beforeHandshake looks at a request (other than ping and the handshake's
// own) that comes before any initialize or server/discover. One carrying
// the 2026-07-28 protocol version in its _meta is from an agent that skips
// discovery (allowed in that era): the session takes its era and its
// _meta, and completes the handshake — the catalog is fetched, and the
// request waits for it at the gate like any other. Anything else is
// answered with the returned error: the session is not initialized (MCP
// basic/lifecycle), and a call must not reach a server, nor a person's
// approval window, before its tools are known.
func (s *Session) beforeHandshake(m *mcpwire.Message) []byte {
	s.mu.Lock()
	if s.hs.era != eraUnknown {
		s.mu.Unlock()
		return nil
	}
	if mcpwire.GetPath(m.Params, "_meta", metaProtocolVersion) == nil {
		s.mu.Unlock()
		s.log.Info("request before the handshake refused", "id", string(m.ID), "method", m.Method)
		return mcpwire.NewError(m.ID, mcpwire.CodeInvalidRequest, fmt.Sprintf(
			"Invalid Request: %s before the session was initialized; send initialize (MCP 2025-11-25) or server/discover (2026-07-28) first, or give the request %s in its _meta",
			m.Method, metaProtocolVersion), nil)
	}
	if s.flight.full() {
		s.mu.Unlock()
		r := s.tooManyHeld(m)
		s.recordRefused(refusedReq{method: m.Method, r: r})
		return r.Response(m.ID)
	}
	s.hs.discover(protocolMeta(m.Params))
	if s.cur == nil || s.inLineLocked() {
		// The first process is still launching: the handshake completes
		// in turn, before this request.
		s.queueLocked(func() { // room checked above
			s.mu.Lock()
			e := s.cur
			s.mu.Unlock()
			s.completeHandshake(e)
		}, nil, 0)
		s.mu.Unlock()
		return nil
	}
	e := s.cur
	s.mu.Unlock()
	s.completeHandshake(e)
	return nil
}

// protocolMeta keeps, of a request's _meta, the members the 2026-07-28
// protocol defines for every request (protocol version, client
// capabilities…), for the gateway's own requests to the server; a
// subscription id or a progress token belongs to that request only.
func protocolMeta(params json.RawMessage) json.RawMessage {
	var meta map[string]json.RawMessage
	if json.Unmarshal(mcpwire.GetPath(params, "_meta"), &meta) != nil {
		return nil
	}
	for k := range meta {
		if !strings.HasPrefix(k, "io.modelcontextprotocol/") || k == metaSubscriptionKey {
			delete(meta, k)
		}
	}
	b, _ := json.Marshal(meta)
	return b
}

// holdLocked records that the agent's request id waits for the gate to open
// (or for the first launch); unhold ends it.
func (s *Session) holdLocked(id json.RawMessage) { s.flight.hold(id) }

func (s *Session) unhold(id json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flight.unhold(id)
}

// idInFlight reports whether a request of the agent with this id is in
// flight: held at the gate, waiting for approval or for the audit log, or
// sent to a process and not yet answered or cancelled (inflight.agentID).
func (s *Session) idInFlight(id json.RawMessage) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flight.agentID(id)
}

// initInFlightLocked reports whether the agent's last initialize waits for
// its answer (held, or sent to the server): a second one now would race it.
// One that was refused or answered with an error may be sent again.
func (s *Session) initInFlightLocked() bool {
	if s.hs.initID == nil {
		return false
	}
	return s.flight.agentID(s.hs.initID)
}
