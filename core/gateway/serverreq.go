package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// Requests a server sends the agent (MCP 2025-11-25, client features).
const (
	methodSampling    = "sampling/createMessage"
	methodElicitation = "elicitation/create"
	methodRootsList   = "roots/list"
)

// maxServerRequests bounds the requests of a run's servers to the agent
// that wait (for the person, or for the agent's answer): the next one is
// refused to the server at once with too_many_requests.
const maxServerRequests = 16

// requestKind is the kind (config.RequestSampling…) of a server request's
// method, "" for a method that is not a client feature Portcullis knows.
func requestKind(method string) string {
	switch method {
	case methodSampling:
		return config.RequestSampling
	case methodElicitation:
		return config.RequestElicitation
	case methodRootsList:
		return config.RequestRoots
	}
	return ""
}

// requestPolicy is the policy in force for the server's requests of kind.
func (s *Session) requestPolicy(kind string) config.Policy {
	if s.opts.RequestPolicy != nil {
		return s.opts.RequestPolicy(kind)
	}
	return config.Server{}.RequestPolicy(kind)
}

// serverAsks routes a request of e's process to the agent: sampling,
// elicitation and roots go by the server's policy
// (config.Server.ServerRequests) — allow passes them, deny refuses them to the server, approve
// passes them under a grant of the person for this epoch (a new epoch
// needs a new decision), raising an approval card that shows what the
// server asks when there is none. Every one is recorded (server_request)
// before it reaches the agent. Other methods pass as they are. Beyond
// maxServerRequests waiting, the server is refused at once.
func (s *Session) serverAsks(e *epoch, m *mcpwire.Message) {
	kind := requestKind(m.Method)
	s.mu.Lock()
	waiting := len(s.flight.reverse) + s.asking
	if waiting >= maxServerRequests {
		s.mu.Unlock()
		s.log.Warn("server request refused: too many wait for the agent", "epoch", e.ID, "method", m.Method, "waiting", waiting)
		s.refuseServer(e, m, kind, "refused", &control.Refusal{Error: control.TooManyRequests, Server: s.opts.Label, Epoch: e.ID,
			Reason: fmt.Sprintf("%d requests of the server to the agent wait already (the limit)", maxServerRequests),
			Retry:  "wait for the answers to the requests already sent"})
		return
	}
	s.asking++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.asking--
		s.mu.Unlock()
	}()
	if kind == "" {
		s.passServer(e, m, kind, "", "")
		return
	}
	switch s.requestPolicy(kind) {
	case config.PolicyAllow:
		s.passServer(e, m, kind, decisionAllow, "")
		return
	case config.PolicyDeny:
		s.refuseServer(e, m, kind, "denied", &control.Refusal{Error: control.ApprovalDenied, Server: s.opts.Label, Epoch: e.ID,
			Reason: fmt.Sprintf("the person's configuration denies %s requests of %s (serverRequests.%s is deny)", kind, s.opts.Label, kind),
			Retry:  "do not send " + m.Method})
		return
	}
	a := s.opts.Authority
	if a == nil {
		s.passServer(e, m, kind, decisionUnchecked, "")
		return
	}
	if g := a.CheckServerRequest(s.opts.RunID, e.ID, kind); g != nil {
		s.passServer(e, m, kind, decisionGrant, g.Request)
		return
	}
	// Raised now, in the order the server asked; waited for off the
	// server's reading loop, holding one of the maxServerRequests.
	id := a.Raise(s.serverCard(e, m, kind))
	s.mu.Lock()
	s.asking++
	s.mu.Unlock()
	wait := func() {
		defer func() {
			s.mu.Lock()
			s.asking--
			s.mu.Unlock()
		}()
		g, err := a.Wait(s.runCtx(), id)
		if err == nil && g.ExpiresWhen == authz.ExpiresOnce {
			a.Consume(s.opts.RunID, g.ID) // it was for this request
		}
		if s.ended(e) {
			return // nobody is left to answer
		}
		if err != nil || g.ExecutionEpoch != e.ID {
			why, code, outcome := "the person denied it", control.ApprovalDenied, "denied"
			if err == authz.ErrTimeout {
				why, code, outcome = "nobody decided in time", control.ApprovalTimeout, "timeout"
			} else if err != nil && err != authz.ErrDenied {
				why = err.Error()
			}
			s.refuseServer(e, m, kind, outcome, &control.Refusal{Error: code, Server: s.opts.Label, Epoch: e.ID,
				Reason: fmt.Sprintf("Portcullis asked the person about this %s request (approval %s): %s; it did not reach the agent", m.Method, id, why),
				Retry:  "do not send it again unless the person asks for it"})
			return
		}
		s.passServer(e, m, kind, decisionGrant, g.Request)
	}
	if !s.work.goFunc(wait) {
		s.mu.Lock()
		s.asking--
		s.mu.Unlock()
	}
}

// passServer records the server's request m and sends it to the agent
// under a gateway id; decision says why it may go ("" for a method no
// policy covers: not recorded).
func (s *Session) passServer(e *epoch, m *mcpwire.Message, kind, decision string, grant ids.RequestID) {
	if decision != "" {
		if err := s.recordServerRequest(e, m, kind, decision, grant, ""); err != nil {
			// Fail closed, as calls do: what the log cannot record does
			// not reach the agent.
			s.refuseServer(e, m, kind, "refused", &control.Refusal{Error: control.AuditUnavailable, Server: s.opts.Label, Epoch: e.ID,
				Reason: "the audit log cannot be written (" + err.Error() + "), so the request did not reach the agent",
				Retry:  "send it again later"})
			return
		}
	}
	s.mu.Lock()
	if e.ended {
		s.mu.Unlock()
		return
	}
	gid := s.flight.addReverse(e, m.ID)
	s.mu.Unlock()
	out, err := mcpwire.SetMember(m.Raw, "id", mcpwire.NumberID(gid))
	if err != nil {
		return
	}
	s.sendServerMessage(out)
}

// refuseServer answers the server's request m with r, and records it.
func (s *Session) refuseServer(e *epoch, m *mcpwire.Message, kind, outcome string, r *control.Refusal) {
	_ = s.recordServerRequest(e, m, kind, outcome, "", r.Reason) // a refusal goes out whether recorded or not
	if err := e.write(r.Response(m.ID)); err != nil {
		s.log.Debug("answering a server request", "err", err)
	}
}

// recordServerRequest writes the server_request event of m durably (an
// authority event: it comes before the request reaches the agent).
func (s *Session) recordServerRequest(e *epoch, m *mcpwire.Message, kind, decision string, grant ids.RequestID, reason string) error {
	if s.opts.Audit == nil {
		return nil
	}
	_, err := s.opts.Audit.Append(context.Background(), audit.TypeServerRequest, audit.ServerRequest{
		AgentRun: s.opts.RunID, ServerLabel: s.opts.Label, Epoch: e.ID, Method: m.Method, Kind: kind,
		Decision: decision, Grant: grant, Reason: reason,
	})
	if err != nil {
		s.log.Error("audit log write failed", "type", audit.TypeServerRequest, "err", err)
	}
	return err
}

// serverCard is the approval card of the server's request m of kind: what
// the server asks the agent's model or the person, as it wrote it.
func (s *Session) serverCard(e *epoch, m *mcpwire.Message, kind string) authz.Card {
	var reason string
	switch kind {
	case config.RequestSampling:
		reason = fmt.Sprintf("%s asks the agent's model for a completion (sampling): the text below goes to the model, and the answer back to the server", s.opts.Label)
	case config.RequestElicitation:
		reason = fmt.Sprintf("%s asks you, through the agent, for information (elicitation): what you answer goes to the server", s.opts.Label)
	default:
		reason = fmt.Sprintf("%s asks the agent for its roots (the folders it works in)", s.opts.Label)
	}
	return authz.Card{
		Reason: reason, AgentRun: s.opts.RunID, AgentExe: s.opts.Agent.Exe, AgentPID: s.opts.Agent.PID,
		ServerLabel: s.opts.Label, CurrentEpoch: e.ID,
		ServerRequest: &authz.ServerRequest{Kind: kind, Method: m.Method, Asks: asks(kind, redactJSON(e, m.Params))},
	}
}

// maxAskLine bounds each line of a card's ServerRequest.Asks, in runes.
const maxAskLine = 300

// asks says in lines what a server request asks: for sampling the system
// prompt, each message's text (other content by its type), the context it
// wants included and its token limit; for elicitation the message, the
// fields asked for and, in URL mode, the address.
func asks(kind string, params json.RawMessage) []string {
	var p struct {
		SystemPrompt   string `json:"systemPrompt"`
		IncludeContext string `json:"includeContext"`
		MaxTokens      *int   `json:"maxTokens"`
		Messages       []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Message         string `json:"message"`
		Mode            string `json:"mode"`
		URL             string `json:"url"`
		RequestedSchema struct {
			Properties map[string]struct {
				Type        any    `json:"type"`
				Description string `json:"description"`
			} `json:"properties"`
			Required []string `json:"required"`
		} `json:"requestedSchema"`
	}
	_ = json.Unmarshal(params, &p)
	var out []string
	add := func(format string, args ...any) { out = append(out, cut(fmt.Sprintf(format, args...))) }
	switch kind {
	case config.RequestSampling:
		if p.SystemPrompt != "" {
			add("system prompt: %s", p.SystemPrompt)
		}
		for i, msg := range p.Messages {
			if i == 20 {
				add("… %d more messages", len(p.Messages)-i)
				break
			}
			add("%s: %s", msg.Role, contentText(msg.Content))
		}
		if p.IncludeContext != "" && p.IncludeContext != "none" {
			add("include context: %s (the agent's conversation with %s goes to the model too)", p.IncludeContext,
				map[bool]string{true: "every server", false: "this server"}[p.IncludeContext == "allServers"])
		}
		if p.MaxTokens != nil {
			add("at most %d tokens", *p.MaxTokens)
		}
	case config.RequestElicitation:
		add("asks you: %s", p.Message)
		if p.Mode == "url" || p.URL != "" {
			add("opens: %s", p.URL)
		}
		for _, k := range slices.Sorted(maps.Keys(p.RequestedSchema.Properties)) {
			f := p.RequestedSchema.Properties[k]
			req := ""
			if slices.Contains(p.RequestedSchema.Required, k) {
				req = ", required"
			}
			add("field %s (%v%s): %s", k, f.Type, req, f.Description)
		}
	}
	return out
}

// contentText is the text of a sampling message's content (one block or a
// list); blocks without text are named by their type.
func contentText(raw json.RawMessage) string {
	type block struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	var blocks []block
	if len(raw) > 0 && raw[0] == '[' {
		_ = json.Unmarshal(raw, &blocks)
	} else {
		var b block
		_ = json.Unmarshal(raw, &b)
		blocks = []block{b}
	}
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		} else {
			parts = append(parts, "["+b.Type+"]")
		}
	}
	return strings.Join(parts, " ")
}

func cut(s string) string {
	if r := []rune(s); len(r) > maxAskLine {
		return string(r[:maxAskLine-1]) + "…"
	}
	return s
}
