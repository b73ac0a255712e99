package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// Auditor is the append-only audit log as the gateway uses it; *audit.Log
// satisfies it. Append returns once the event is durable.
type Auditor interface {
	Append(ctx context.Context, typ string, fields any) (audit.Event, error)
}

// recordAuditor is an Auditor with the record tier (audit.Log.AppendRecord):
// the event is written before AppendRecord returns and synced by a group
// commit shortly after. An Auditor without it syncs every event.
type recordAuditor interface {
	AppendRecord(ctx context.Context, typ string, fields any) (audit.Event, error)
}

// appendRecord appends an event of the record tier when the Auditor has one.
func (s *Session) appendRecord(typ string, fields any) (audit.Event, error) {
	if ra, ok := s.opts.Audit.(recordAuditor); ok {
		return ra.AppendRecord(context.Background(), typ, fields)
	}
	return s.opts.Audit.Append(context.Background(), typ, fields)
}

// auditHealth is an Auditor that can tell, without writing, that it cannot
// write now.
type auditHealth interface {
	Err() error
}

// Decisions of the tool_called event (audit.ToolCalled.Decision): why a
// call may go ahead.
const (
	decisionAllow     = string(policyAllow) // the tool's policy is allow
	decisionGrant     = "grant"             // a grant of the person covers it
	decisionUnchecked = "unchecked"         // the session has no Authority (tests, tools)
)

// callRecord follows one forwarded tools/call from intent to completion.
type callRecord struct {
	id      ids.CallID // the call's ULID in the audit log
	tool    string
	started time.Time
}

// record appends a non-call event; a failure is logged (calls fail closed on
// their own intent write).
func (s *Session) record(typ string, fields any) {
	if s.opts.Audit == nil {
		return
	}
	if _, err := s.opts.Audit.Append(context.Background(), typ, fields); err != nil {
		s.log.Error("audit log write failed", "type", typ, "err", err)
	}
}

// recordSeen records, in the record tier, what the agent was shown
// (catalog_presented, list_changed_sent): it is no authority, and an
// agent's tools/list need not wait for a sync.
func (s *Session) recordSeen(typ string, fields any) {
	if s.opts.Audit == nil {
		return
	}
	if _, err := s.appendRecord(typ, fields); err != nil {
		s.log.Error("audit log write failed", "type", typ, "err", err)
	}
}

// recordTier reports whether the intent of a call authorized by auth is a
// record-tier event (see recordIntent): the tool's policy is allow and the
// server has no credentials (checkTree asks nothing of such a call either).
func (s *Session) recordTier(auth authorization) bool {
	return auth.wait == "" && auth.refusal == nil && auth.decision == decisionAllow && len(s.opts.Credentials) == 0
}

// recordIntent writes the tool_called intent before the call is forwarded.
// A call that uses a person's grant, or of a server that has credentials,
// carries authority: its intent is durable (synced) first. Any other call
// (an allow-policy tool of a server without credentials) is a record: its
// intent is written to the file first and group-committed (docs/DESIGN.md,
// "Audit log"; settings.auditDurability strict syncs these too). On
// failure the call must not be forwarded.
func (s *Session) recordIntent(e *epoch, c *toolCall, auth authorization) (*callRecord, error) {
	rec := &callRecord{id: ids.NewCall(), tool: c.name, started: time.Now()}
	if s.opts.Audit == nil {
		return rec, nil
	}
	s.mu.Lock()
	var rev uint64
	if e.catalog != nil {
		rev = e.catalog.Revision
	}
	s.mu.Unlock()
	ev := audit.ToolCalled{
		Call: rec.id, AgentRun: s.opts.RunID, ServerLabel: s.opts.Label, Epoch: e.ID,
		CatalogRevision: rev, Tool: c.name, ArgsDigest: c.digest, ArgKeys: c.keys, Decision: auth.decision, Grant: auth.grant,
	}
	var err error
	if s.recordTier(auth) {
		_, err = s.appendRecord(audit.TypeToolCalled, ev)
	} else {
		_, err = s.opts.Audit.Append(context.Background(), audit.TypeToolCalled, ev)
	}
	if err != nil {
		return nil, err
	}
	if f := s.opts.Arguments; f != nil && c.args != nil {
		f(rec.id, func() json.RawMessage { return redactJSON(e, c.args) })
	}
	return rec, nil
}

// recordCompletion writes tool_completed for a call that got an answer or
// was ended, before the answer is forwarded: a record-tier event (written
// to the file, group-committed), so it costs no sync and no goroutine.
func (s *Session) recordCompletion(e *epoch, c *callRecord, outcome, errText string) {
	if c == nil {
		return
	}
	ev := audit.ToolCompleted{
		Call: c.id, AgentRun: s.opts.RunID, ServerLabel: s.opts.Label, Epoch: e.ID, Tool: c.tool,
		Outcome: outcome, DurationMS: float64(time.Since(c.started).Microseconds()) / 1000, Error: errText,
	}
	if s.opts.Audit == nil {
		return
	}
	if _, err := s.appendRecord(audit.TypeToolCompleted, ev); err != nil {
		s.log.Error("audit log write failed", "type", audit.TypeToolCompleted, "err", err)
	}
}

// refused is one refusal answered to the agent, for call_refused.
type refusedReq struct {
	id     json.RawMessage // the agent's id
	method string
	tool   string
	call   ids.CallID // the call's ULID when its intent was written
	r      *control.Refusal
}

// refuse answers the agent's request id (method, naming tool for a
// tools/call) with r and records call_refused.
func (s *Session) refuse(id json.RawMessage, method, tool string, r *control.Refusal) {
	s.recordRefused(refusedReq{id: id, method: method, tool: tool, r: r})
	s.writeAgent(r.Response(id))
}

// refusedOf is the refusal r of the request p, for refuseAll.
func refusedOf(p *pending, r *control.Refusal) refusedReq {
	q := refusedReq{id: p.agentID, method: p.method, tool: p.tool, r: r}
	if p.call != nil {
		q.call = p.call.id
	}
	return q
}

// callName is the tool a tools/call names, "" for other requests.
func callName(c *toolCall) string {
	if c == nil {
		return ""
	}
	return c.name
}

// refuseAll records and answers each of rs, in order: the record of a
// refusal comes before the agent reads it.
func (s *Session) refuseAll(rs []refusedReq) {
	for _, q := range rs {
		s.recordRefused(q)
	}
	for _, q := range rs {
		s.writeAgent(q.r.Response(q.id))
	}
}

// recordRefused writes call_refused for q: what the agent was answered
// instead of the server's answer, under the refusal's own name.
func (s *Session) recordRefused(q refusedReq) {
	r := q.r
	tool := q.tool
	if tool == "" {
		tool = r.Tool
	}
	method := q.method
	if method == methodToolsCall && tool != "" {
		method = "" // the default: a tool names it
	}
	s.record(audit.TypeCallRefused, audit.CallRefused{
		Call: q.call, AgentRun: s.opts.RunID, ServerLabel: s.opts.Label, Method: method, Tool: tool,
		Kind: string(r.Error), Reason: r.Reason, Epoch: r.Epoch, ApprovedEpoch: r.ApprovedEpoch, CurrentEpoch: r.CurrentEpoch,
		CatalogRevision: r.CurrentRevision, Request: r.Request,
	})
}

func (s *Session) recordServerStarted(e *epoch) {
	rec, _ := json.Marshal(e.Record)
	s.record(audit.TypeServerStarted, audit.ServerStarted{
		ServerLabel: s.opts.Label, AgentRun: s.opts.RunID, Epoch: e.ID, PID: e.Proc.Pid(), Execution: rec,
	})
}

func (s *Session) recordCatalog(e *epoch, prev, cur catalog.Catalog) {
	d := catalog.Compare(prev, cur)
	var sum audit.DiffSummary
	seen := map[string]bool{}
	for _, c := range d.Changes {
		switch c.Kind {
		case catalog.KindToolAdded:
			sum.Added = append(sum.Added, c.Tool)
		case catalog.KindToolRemoved:
			sum.Removed = append(sum.Removed, c.Tool)
		default:
			name := c.Tool
			if name == "" {
				// The contract beyond tools: "instructions", "prompts/NAME"…
				name = strings.TrimPrefix(c.Path, "/")
			}
			if !seen[name] {
				seen[name] = true
				sum.Changed = append(sum.Changed, name)
			}
		}
	}
	s.record(audit.TypeCatalogRevised, audit.CatalogRevised{
		ServerLabel: s.opts.Label, AgentRun: s.opts.RunID, Epoch: e.ID, Revision: cur.Revision, Digest: cur.Digest, Diff: sum,
	})
}

// maxUnrequestedAudited bounds the unrequested_answer events of one epoch:
// a server that floods them is told apart by the first ones, and its
// further answers are only counted in the daemon's log.
const maxUnrequestedAudited = 16

// unrequestedAnswer deals with an answer of e's process to an id that was
// never sent to it (why says which): it is never delivered, it is kept as
// a diagnostic and recorded in the audit log (the first
// maxUnrequestedAudited of the epoch). It runs on the server's reading loop.
func (s *Session) unrequestedAnswer(e *epoch, m *mcpwire.Message, why string) {
	s.mu.Lock()
	e.unasked++
	n := e.unasked
	s.mu.Unlock()
	id := truncate(string(m.ID), 64)
	s.log.Warn("server answered an id that was not sent to it; not delivered", "epoch", e.ID, "id", id, "reason", why, "count", n)
	if n > maxUnrequestedAudited {
		return
	}
	s.diagnostic(e, fmt.Sprintf("an answer with the id %s was dropped, not delivered: %s", id, why))
	sum := sha256.Sum256(m.Raw)
	ev := audit.UnrequestedAnswer{ServerLabel: s.opts.Label, AgentRun: s.opts.RunID, Epoch: e.ID, ID: id,
		Digest: "sha256:" + hex.EncodeToString(sum[:]), Reason: why}
	// Written before the next line of the server is read: what it answers
	// next is seen by the agent only once this is on record.
	s.record(audit.TypeUnrequestedAnswer, ev)
}
