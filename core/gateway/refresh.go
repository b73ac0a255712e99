package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// maxListPages bounds a tools/list fetch: a server whose cursors never end
// is not allowed to keep the gateway busy forever.
const maxListPages = 1000

// call sends one request of the gateway's own to e and waits for the answer,
// at most timeout. A JSON-RPC error answer is returned as *RPCError.
func (s *Session) call(e *epoch, method string, params any, timeout time.Duration) (json.RawMessage, error) {
	reply := make(chan *mcpwire.Message, 1)
	s.mu.Lock()
	if e.ended {
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: epoch %s ended: %s", method, e.ID, e.endWhy)
	}
	id := s.flight.add(&pending{method: method, ep: e, reply: reply})
	s.mu.Unlock()
	req, err := mcpwire.NewRequest(mcpwire.NumberID(id), method, params)
	if err == nil {
		err = e.write(req)
	}
	if err != nil {
		s.mu.Lock()
		s.flight.drop(id, nil)
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m, ok := <-reply:
		if !ok || m == nil {
			return nil, fmt.Errorf("%s: epoch %s ended before answering", method, e.ID)
		}
		if m.Raw == nil {
			// The gateway's own verdict on what the server sent (see
			// failReply), not an answer of the server.
			return nil, fmt.Errorf("%s: %s", method, m.Method)
		}
		if m.Error != nil {
			var we mcpwire.WireError
			_ = json.Unmarshal(m.Error, &we)
			return nil, &RPCError{Method: method, Code: we.Code, Message: we.Message}
		}
		return m.Result, nil
	case <-t.C:
		s.mu.Lock()
		s.flight.drop(id, nil)
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: no answer within %s", method, timeout)
	}
}

// RPCError is a JSON-RPC error answer to one of the gateway's own requests.
type RPCError struct {
	Method  string
	Code    int
	Message string
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("%s: server answered error %d: %s", e.Method, e.Code, e.Message)
}

// requestParams adds the agent's 2026-07-28 request _meta (protocol version,
// client capabilities) to params when the agent speaks that era.
func (s *Session) requestParams(params map[string]any) map[string]any {
	s.mu.Lock()
	meta := s.hs.discoverMeta
	modern := s.hs.era == eraModern
	s.mu.Unlock()
	if modern && len(meta) > 0 {
		if params == nil {
			params = map[string]any{}
		}
		params["_meta"] = json.RawMessage(meta)
	}
	return params
}

// fetchCatalog reads every page of tools/list from e. The first page's other
// members (2026-07-28 ttlMs, cacheScope, resultType, _meta) are kept for the
// answers given to the agent.
func (s *Session) fetchCatalog(e *epoch) ([]catalog.Tool, error) {
	var pages []json.RawMessage
	cursor := json.RawMessage(nil)
	seen := map[string]bool{}
	for range maxListPages {
		params := map[string]any{}
		if cursor != nil {
			params["cursor"] = cursor
		}
		res, err := s.call(e, methodToolsList, s.requestParams(params), s.opts.StartupTimeout)
		if err != nil {
			return nil, err
		}
		// The catalog holds, stores, digests, diffs and gives the agent the
		// page without the credentials' values (redact.go).
		res = redactJSON(e, res)
		pages = append(pages, res)
		if len(pages) == 1 {
			extra := listEnvelope(res)
			s.mu.Lock()
			e.listExtra = extra
			s.mu.Unlock()
		}
		next := mcpwire.GetPath(res, "nextCursor")
		if next == nil || bytes.Equal(next, []byte("null")) {
			return catalog.Parse(pages)
		}
		if seen[string(next)] {
			return nil, fmt.Errorf("tools/list: cursor %s repeats", next)
		}
		seen[string(next)] = true
		cursor = bytes.Clone(next)
	}
	return nil, fmt.Errorf("tools/list: more than %d pages", maxListPages)
}

// listEnvelope returns the members of a tools/list result other than tools
// and nextCursor, as a JSON object (nil when there are none).
func listEnvelope(res json.RawMessage) json.RawMessage {
	var members map[string]json.RawMessage
	if json.Unmarshal(res, &members) != nil {
		return nil
	}
	delete(members, "tools")
	delete(members, "nextCursor")
	if len(members) == 0 {
		return nil
	}
	b, _ := json.Marshal(members)
	return b
}

// refresh fetches e's catalog and makes it the revision the agent sees. A
// burst of list_changed costs one extra fetch at most: a refresh asked for
// while one runs is merged into a single follow-up.
func (s *Session) refresh(e *epoch) {
	s.mu.Lock()
	if s.refreshing {
		s.refreshAgain = true
		s.mu.Unlock()
		return
	}
	s.refreshing = true
	s.mu.Unlock()
	for {
		tools, err := s.fetchCatalog(e)
		var cat catalog.Catalog
		var changed bool
		prev, _ := s.opts.Catalog.Current(s.opts.Label)
		if err == nil {
			extras := s.fetchExtras(e, prev)
			cat, changed, err = s.opts.Catalog.UpdateContract(s.opts.Label, e.ID, tools, extras)
		}
		if err == nil && changed {
			s.recordCatalog(e, prev, cat)
		}
		s.mu.Lock()
		s.refreshedLocked(e)
		if e.ended {
			s.refreshing, s.refreshAgain = false, false
			s.mu.Unlock()
			return
		}
		notify, unannounced := false, false
		if err != nil {
			if e.catalog == nil {
				// Without a catalog the gateway cannot answer tools/list
				// or validate calls: pass them through, and say so.
				e.fallback = true
			}
			s.mu.Unlock()
			s.warn(fmt.Sprintf("could not fetch the catalog of epoch %s, passing tools/list through: %v", e.ID, err))
			s.mu.Lock()
			// The agent listed the tools of another epoch: what it holds
			// is suspect, whatever this one's tools are.
			unannounced = e.fallback && s.announced != nil && s.announcedEpoch != "" && s.announcedEpoch != e.ID
		} else {
			c := cat
			e.catalog, e.fallback = &c, false
			// A new revision is announced, and so is a new epoch even
			// when its tools/list is byte-identical: the agent's cached
			// catalog describes code that no longer answers
			// (docs/DESIGN.md, "The refresh contract").
			notify = s.agentRev != 0 && (s.agentRev != c.Revision || s.announcedEpoch != e.ID)
		}
		if s.cur == e && (s.state == StateStarting || s.state == StateCatalogPending) {
			s.state, s.reason = StateReady, ""
		}
		if s.cur == e && s.state == StateReady {
			s.openGateLocked()
		}
		again := s.refreshAgain
		s.refreshAgain = false
		if !again {
			s.refreshing = false
		}
		fetched := err == nil
		s.mu.Unlock()
		if fetched {
			// A new revision or a new epoch is announced; so is the same
			// revision when the policy changed what the agent sees while
			// it was fetched.
			s.announceTools(e, notify)
		} else if unannounced && s.notifyToolsChanged(e, "new epoch; its tools/list could not be fetched") {
			s.mu.Lock()
			s.announcedEpoch = e.ID
			s.mu.Unlock()
		}
		s.changed()
		if !again {
			return
		}
	}
}

// refreshedLocked marks the end of one fetch of refresh for e.
func (s *Session) refreshedLocked(e *epoch) {
	s.refreshGen++
	s.refreshedFor = e
	if s.refreshTick != nil {
		close(s.refreshTick)
		s.refreshTick = nil
	}
}

// refreshWait is refresh that returns only once a fetch of e's catalog
// begun after the call has completed, or e ended: what the catalog holds
// then was answered after the call.
func (s *Session) refreshWait(e *epoch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !e.ended {
		target := s.refreshGen + 1
		if s.refreshing {
			target++ // the fetch in flight began before
		}
		s.mu.Unlock()
		s.refresh(e)
		s.mu.Lock()
		for s.refreshGen < target && !e.ended {
			if s.refreshTick == nil {
				s.refreshTick = make(chan struct{})
			}
			tick := s.refreshTick
			s.mu.Unlock()
			<-tick
			s.mu.Lock()
		}
		if s.refreshedFor == e {
			return
		}
		// The fetches were another epoch's (one ending): ask again.
	}
}

// notifyToolsChanged tells the agent that what it sees of the tools
// changed, in the form its protocol era expects: a plain notification after
// the initialize handshake, or on its subscriptions/listen stream. It
// reports whether the agent was told, and records list_changed_sent (why
// says what changed) when it was.
func (s *Session) notifyToolsChanged(e *epoch, why string) bool {
	s.mu.Lock()
	modern := s.hs.era == eraModern
	listen := s.hs.listen
	done := s.hs.done
	var rev uint64
	if e.catalog != nil {
		rev = e.catalog.Revision
	}
	s.mu.Unlock()
	if !done {
		return false // the handshake completion fetches and the agent lists anyway
	}
	var params any
	sub := ""
	if modern {
		if listen == nil || !listen.toolsOn {
			s.log.Info("tools changed but the agent has no subscription for it")
			return false
		}
		params = map[string]any{"_meta": map[string]json.RawMessage{metaSubscriptionKey: listen.agentID}}
		sub = string(listen.agentID)
		if err := json.Unmarshal(listen.agentID, &sub); err != nil {
			sub = string(listen.agentID) // a number
		}
	}
	b, err := mcpwire.NewNotification(methodToolsChanged, params)
	if err != nil {
		return false
	}
	s.writeAgent(b)
	s.recordSeen(audit.TypeListChangedSent, audit.ListChangedSent{AgentRun: s.opts.RunID, ServerLabel: s.opts.Label,
		Epoch: e.ID, Revision: rev, Method: methodToolsChanged, Reason: why, Subscription: sub})
	return true
}

// answerToolsList answers the agent's tools/list from e's catalog revision.
// It returns false when the request must be passed through instead (no
// catalog could be fetched, or the agent asks for a page by cursor).
func (s *Session) answerToolsList(e *epoch, m *mcpwire.Message) bool {
	if !s.writeToolsList(e, m) {
		return false
	}
	s.changed()
	return true
}

// writeToolsList writes answerToolsList's answer and records what the agent
// was shown. What the agent is shown and the record of it go together, under
// vmu: a policy change announced meanwhile is either in this answer or told
// after it.
func (s *Session) writeToolsList(e *epoch, m *mcpwire.Message) bool {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	s.mu.Lock()
	cat := e.catalog
	if cat == nil || e.fallback || mcpwire.GetPath(m.Params, "cursor") != nil {
		s.mu.Unlock()
		return false
	}
	s.agentRev = cat.Revision
	s.agentListedEpoch = e.ID
	s.announcedEpoch = e.ID
	extra := e.listExtra
	s.mu.Unlock()
	shown := make([]string, 0, len(cat.Tools))
	res := cat.ListResult(func(name string) bool {
		if s.policy(name) == policyDeny {
			return false
		}
		shown = append(shown, name)
		return true
	})
	slices.Sort(shown)
	if len(extra) > 0 {
		var members map[string]json.RawMessage
		if json.Unmarshal(extra, &members) == nil {
			keys := make([]string, 0, len(members))
			for k := range members {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				if out, err := mcpwire.SetMember(res, k, members[k]); err == nil {
					res = out
				}
			}
		}
	}
	b, err := mcpwire.NewResult(m.ID, res)
	if err != nil {
		return false
	}
	b = s.boundTTL(methodToolsList, b)
	s.mu.Lock()
	s.announced = shown
	s.mu.Unlock()
	s.writeAgent(b)
	s.recordSeen(audit.TypeCatalogPresented, audit.CatalogPresented{AgentRun: s.opts.RunID, ServerLabel: s.opts.Label,
		Epoch: e.ID, Revision: cat.Revision, Digest: cat.Digest, Tools: len(shown)})
	return true
}

// nonCosmetic drops the cosmetic changes.
func nonCosmetic(changes []catalog.Change) []catalog.Change {
	return slices.DeleteFunc(changes, func(c catalog.Change) bool { return c.Severity == catalog.Cosmetic })
}

// summaries lists the changes' sentences.
func summaries(changes []catalog.Change) []string {
	var out []string
	for _, c := range changes {
		out = append(out, c.Summary)
	}
	return out
}

// setsAdded reports whether args sets a top-level argument that changes
// added: a call formed from the current contract, whatever the older one
// accepted.
func setsAdded(changes []catalog.Change, args json.RawMessage) bool {
	var set map[string]json.RawMessage
	_ = json.Unmarshal(args, &set)
	for _, p := range catalog.ChangedProperties(changes) {
		if _, ok := set[p]; !ok {
			continue
		}
		for _, c := range changes {
			if c.Kind == catalog.KindPropertyAdded && c.Path == "/inputSchema/properties/"+escapePointer(p) {
				return true
			}
		}
	}
	return false
}

// omittedDefaults lists the top-level arguments that changes concern and
// args omits; only is true when every change concerns one of them (then
// each gives or takes away the default of an omitted argument: see
// catalog.Unseen), so that setting them is the step to take.
func omittedDefaults(changes []catalog.Change, args json.RawMessage) (names []string, only bool) {
	var set map[string]json.RawMessage
	_ = json.Unmarshal(args, &set)
	only = len(changes) > 0
	for _, c := range changes {
		ps := catalog.ChangedProperties([]catalog.Change{c})
		if len(ps) != 1 {
			only = false
			continue
		}
		if _, ok := set[ps[0]]; ok {
			only = false
			continue
		}
		if !slices.Contains(names, ps[0]) {
			names = append(names, ps[0])
		}
	}
	return names, only
}

func escapePointer(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// noteTold records that a refusal's message told the agent the contract
// of tool of digest.
func (s *Session) noteTold(tool, digest string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.told == nil {
		s.told = map[string]string{}
	}
	s.told[tool] = digest
}

// argumentShape is the current shape of tool's arguments for a refusal:
// the required names and the properties names (all, up to a bound, when
// names is empty).
func argumentShape(tool catalog.Tool, names []string) *control.ArgumentShape {
	sh := catalog.ArgumentShape(tool, names)
	out := &control.ArgumentShape{Tool: sh.Tool, Required: sh.Required, Omitted: sh.Omitted}
	if out.Required == nil {
		out.Required = []string{}
	}
	for _, p := range sh.Properties {
		out.Properties = append(out.Properties, control.PropertyShape{Name: p.Name, Type: p.Type, Enum: p.Enum, Default: p.Default, Required: p.Required})
	}
	return out
}

// Replace starts a new epoch for this agent run and retires the current one
// (docs/DESIGN.md, "The refresh contract"): the session goes identity-pending and
// holds the agent's requests; the new process is launched, calls still in
// flight on the old one are answered with epoch_ended naming both epochs,
// the old process group is stopped, the agent's handshake is replayed to the
// new process, its catalog is fetched, and the agent is told when the tools
// it sees changed. why is recorded in the status.
// A Replace asked for while one runs is merged into one more replacement
// right after it, so a build that lands mid-replacement is never missed.
func (s *Session) Replace(why string) {
	if !s.work.add() {
		return // the run is over
	}
	defer s.work.done()
	s.mu.Lock()
	if s.state == StateEnded {
		s.mu.Unlock()
		return
	}
	if s.replacing {
		s.replaceAgain, s.replaceWhy = true, why
		s.mu.Unlock()
		return
	}
	s.replacing = true
	s.mu.Unlock()
	for {
		s.replaceOnce(why)
		s.mu.Lock()
		again := s.replaceAgain && s.state != StateEnded
		why = s.replaceWhy
		s.replaceAgain = false
		if !again {
			s.replacing = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

func (s *Session) replaceOnce(why string) {
	s.mu.Lock()
	old := s.cur
	ctx := s.ctx
	s.state, s.reason = StateIdentityPending, why
	s.buildNote = ""
	s.closeGateLocked()
	s.mu.Unlock()
	s.changed()

	e, err := s.startEpoch(ctx)
	s.mu.Lock()
	s.replaceErr = err
	s.mu.Unlock()
	if err != nil {
		s.mu.Lock()
		if old != nil && !old.ended {
			// The running process keeps serving: nothing new can run.
			s.state, s.reason = StateReady, ""
			old.superseded = false
			s.mu.Unlock()
			s.warn(fmt.Sprintf("could not launch a new epoch (%v); epoch %s keeps running", err, old.ID))
			s.mu.Lock()
		} else {
			s.state, s.reason = StateFailed, "the server could not be launched: "+err.Error()
		}
		s.openGateLocked()
		s.mu.Unlock()
		s.changed()
		return
	}
	s.mu.Lock()
	if s.state == StateEnded {
		// The agent run ended while the process was being launched:
		// shutdown stopped the processes it knew of, this one is ours.
		s.mu.Unlock()
		s.endEpoch(e, "agent run ended", nil)
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Proc.Stop(stopCtx); err != nil {
			s.log.Warn("stopping server", "epoch", e.ID, "err", err)
		}
		return
	}
	s.cur = e
	s.mu.Unlock()
	t := takeover{old: old, e: e, why: why, name: "the new epoch", replay: true, stopOld: true}
	if old != nil {
		t.replaced = audit.ServerReplaced{ServerLabel: s.opts.Label, AgentRun: s.opts.RunID,
			OldEpoch: old.ID, NewEpoch: e.ID, Reason: why}
	}
	s.takeOver(t)
}

// takeover says how a new epoch takes over from the one it ends.
type takeover struct {
	old, e *epoch // old is nil when e is the first epoch
	why    string
	// name names e in logs and failures ("the new epoch").
	name string
	// replaced is the server_replaced record, written when old is set.
	replaced audit.ServerReplaced
	// replay: a new program reads the requests and is sent the agent's
	// handshake; otherwise e keeps old's.
	replay bool
	// stopOld stops old's process once its calls are answered (a
	// replacement); an observed epoch runs on the same process.
	stopOld bool
	// taken, when set, is called once old's calls were answered: output
	// the supervisor held back for the change may be read now.
	taken func()
	// async: the handshake and the catalog fetch run after takeOver
	// returned (an epoch observed on the same process).
	async bool
}

// takeOver completes the change to t.e, which the caller made current with
// the gate closed (docs/DESIGN.md "The refresh contract"): grants of older
// epochs are void before anything reaches t.e, the replacement is audited,
// the calls of t.old are answered epoch_ended, the handshake is replayed
// (or kept), then the catalog is fetched and the agent told; the gate
// opens when the catalog is ready.
func (s *Session) takeOver(t takeover) {
	old, e := t.old, t.e
	if a := s.opts.Authority; a != nil {
		// Before anything reaches the new epoch: grants of older epochs
		// no longer hold.
		for _, g := range a.VoidEpoch(s.opts.RunID, e.ID, t.why) {
			s.log.Info("grant voided by "+t.name, "grant", g.ID, "epoch", g.ExecutionEpoch, "newEpoch", e.ID)
		}
	}
	if old != nil {
		s.record(audit.TypeServerReplaced, t.replaced)
		s.endEpoch(old, t.why, e)
	}
	if t.taken != nil {
		t.taken()
	}
	if old != nil && t.stopOld {
		go func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = old.Proc.Stop(stopCtx)
		}()
	}
	if t.async {
		// The rest talks to the process: the caller (the supervisor's
		// changes, read one at a time) must be free to take a newer
		// change meanwhile, which may end e.
		go s.finishTakeOver(t)
		return
	}
	s.finishTakeOver(t)
}

// finishTakeOver replays the handshake to t.e when a new program reads the
// requests, then fetches its catalog; an epoch ended meanwhile (a newer
// change took over) is left as it is.
func (s *Session) finishTakeOver(t takeover) {
	old, e := t.old, t.e
	if t.replay {
		if err := s.handshake(e); err != nil {
			s.mu.Lock()
			ended := e.ended
			s.mu.Unlock()
			if !ended {
				s.failEpoch(e, t.name+" did not complete the handshake: "+err.Error())
			}
			return
		}
	}
	s.mu.Lock()
	done := s.hs.done
	if e.ended {
		s.mu.Unlock()
		return
	}
	if !t.replay && old != nil {
		e.answered, e.initResult = old.answered, old.initResult
	}
	if done {
		s.state, s.reason = StateCatalogPending, ""
	} else {
		// The agent has not finished its own handshake: it goes to e.
		s.state, s.reason = StateStarting, ""
		s.openGateLocked()
	}
	s.mu.Unlock()
	s.changed()
	if done {
		s.refresh(e)
	}
}

// handshake replays the agent's handshake to a new epoch: the initialize
// request (2025-11-25 and earlier) or a server/discover probe (2026-07-28),
// since a rebuild can change the era. Capabilities the new epoch offers
// beyond what the agent negotiated stay hidden and are reported.
func (s *Session) handshake(e *epoch) error {
	s.mu.Lock()
	era, initParams, done, listen := s.hs.era, s.hs.initParams, s.hs.done, s.hs.listen
	oldInit := s.hs.negotiated // what the agent itself was told
	s.mu.Unlock()
	if !done {
		return nil
	}
	switch era {
	case eraLegacy:
		res, err := s.call(e, methodInitialize, json.RawMessage(initParams), s.opts.StartupTimeout)
		if err != nil {
			return err
		}
		s.mu.Lock()
		e.initResult = bytes.Clone(res)
		s.mu.Unlock()
		if extra := widerCapabilities(mcpwire.GetPath(oldInit, "capabilities"), mcpwire.GetPath(res, "capabilities")); oldInit != nil && len(extra) > 0 {
			s.warn(fmt.Sprintf("epoch %s offers capabilities the agent did not negotiate (%s); they stay hidden: reconnect the agent to use them", e.ID, strings.Join(extra, ", ")))
		}
		if oldV, newV := mcpwire.GetPath(oldInit, "protocolVersion"), mcpwire.GetPath(res, "protocolVersion"); oldV != nil && !bytes.Equal(oldV, newV) {
			s.warn(fmt.Sprintf("epoch %s negotiated protocol version %s instead of %s; reconnect the agent", e.ID, newV, oldV))
		}
		b, _ := mcpwire.NewNotification(methodInitialized, nil)
		return e.write(b)
	case eraModern:
		res, err := s.call(e, methodDiscover, s.requestParams(nil), s.opts.StartupTimeout)
		if err != nil {
			return err
		}
		s.mu.Lock()
		e.answered = true
		e.initResult = bytes.Clone(res) // its instructions and capabilities
		s.mu.Unlock()
		if listen != nil {
			// Re-open the agent's subscription on the new process; its
			// notifications keep the agent's subscription id.
			m, err := mcpwire.Parse(listen.raw)
			if err == nil {
				s.forward(m)
			}
		}
	}
	return nil
}

// widerCapabilities lists the capability paths present in cur but not in
// negotiated (top level and one level down, e.g. "tools.listChanged").
func widerCapabilities(negotiated, cur json.RawMessage) []string {
	var a, b map[string]json.RawMessage
	_ = json.Unmarshal(negotiated, &a)
	if json.Unmarshal(cur, &b) != nil {
		return nil
	}
	var out []string
	for k, v := range b {
		av, ok := a[k]
		if !ok {
			out = append(out, k)
			continue
		}
		var am, bm map[string]json.RawMessage
		if json.Unmarshal(av, &am) == nil && json.Unmarshal(v, &bm) == nil {
			for k2, v2 := range bm {
				if a2, ok := am[k2]; !ok || (bytes.Equal(v2, []byte("true")) && !bytes.Equal(a2, []byte("true"))) {
					out = append(out, k+"."+k2)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// NoteBuild records a build seen on disk that the running epoch does not
// run (restart policy manual). It shows in the status until the next epoch.
func (s *Session) NoteBuild(note string) {
	s.mu.Lock()
	s.buildNote = note
	s.mu.Unlock()
	s.changed()
}

// Record returns the execution record of the current epoch, if any.
func (s *Session) Record() (rec *Epoch, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return nil, false
	}
	ep := s.cur.Epoch
	return &ep, true
}

// Restart is Replace asked for by a person: it also forgets past crashes,
// so a crash-looping run gets a fresh start.
func (s *Session) Restart(why string) {
	s.mu.Lock()
	s.crashes = nil
	s.mu.Unlock()
	s.Replace(why)
}

// RestartResult is what Restart came to for one agent run.
type RestartResult struct {
	Run ids.RunID `json:"run"`
	// Epoch is the new epoch, once it completed the handshake; "" when
	// none serves.
	Epoch ids.EpochID `json:"epoch,omitempty"`
	// Error says why no new epoch serves: the launch failed (Kept then
	// names the epoch that keeps serving) or the new process failed.
	Error string      `json:"error,omitempty"`
	Kept  ids.EpochID `json:"kept,omitempty"`
}

// RestartWait is Restart, returning once the replacement is over (the new
// epoch took over and answered the replayed handshake, or the launch or
// the process failed) or ctx ends, and says which.
func (s *Session) RestartWait(ctx context.Context, why string) RestartResult {
	s.mu.Lock()
	var before ids.EpochID
	if s.cur != nil {
		before = s.cur.ID
	}
	s.mu.Unlock()
	s.Restart(why)
	// Another replacement was under way: this one runs after it.
	for {
		s.mu.Lock()
		busy := s.replacing
		s.mu.Unlock()
		if !busy {
			break
		}
		select {
		case <-ctx.Done():
			return RestartResult{Run: s.opts.RunID, Error: "the restart did not finish in time: " + ctx.Err().Error()}
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := RestartResult{Run: s.opts.RunID}
	switch {
	case s.state == StateEnded:
		r.Error = "the agent run ended during the restart"
	case s.replaceErr != nil:
		r.Error = "the new epoch could not be launched: " + s.replaceErr.Error()
		if s.cur != nil && !s.cur.ended {
			r.Kept = s.cur.ID
		}
	case s.state == StateFailed:
		r.Error = s.reason
	case s.cur == nil || s.cur.ID == before:
		r.Error = "no new epoch took over"
	default:
		r.Epoch = s.cur.ID
	}
	return r
}
