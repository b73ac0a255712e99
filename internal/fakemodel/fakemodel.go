// Package fakemodel is a scripted model endpoint on loopback for driving real
// agents (Claude Code, Gemini CLI, Codex) in tests without a real model. It
// speaks three wire APIs:
//
//   - Anthropic Messages (`POST /v1/messages`, streamed as server-sent events:
//     message_start, content_block_start/delta/stop, message_delta,
//     message_stop; or one JSON message when the request has no `stream`),
//     and `POST /v1/messages/count_tokens`;
//   - Gemini (`POST /v1beta/models/MODEL:generateContent`,
//     `:streamGenerateContent?alt=sse` and `:countTokens`);
//   - OpenAI Responses (`POST /v1/responses`, streamed as server-sent events:
//     response.created, response.output_item.added, response.output_text.delta
//     for a text, response.output_item.done, response.completed; or one JSON
//     response when the request has no `stream`). A tool offered inside a
//     `namespace` tool (Codex offers an MCP server's tools as the namespace
//     mcp__LABEL) is named NAMESPACE__TOOL in a Step and in Request.Tools,
//     and called as the function TOOL with that namespace.
//
// A [Script] says what the model answers at each turn: call this tool with
// these arguments, or say this text and end the turn. A turn is one request
// of the agent's conversation: a request that offers the model tools. Agents
// also send side requests of their own (a title for the session, a check of
// who speaks next, a routing classifier); those offer no tools, consume no
// step and get a short text (or, when they ask for JSON, a small JSON
// object).
//
// Every request is recorded, with the tool results it carried back to the
// model normalised across the APIs ([ToolResult]), so that a test can
// assert on what the model received: the next request after a tool call
// holds the agent's tool_result (Anthropic), functionResponse (Gemini) or
// function_call_output (Responses).
//
// A [Step] may run a hook before its answer is sent: the agent waits for the
// model meanwhile, which lets a test rebuild a server or decide an approval
// at an exact point of a session.
package fakemodel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// API names the wire API of a request.
type API string

// The APIs the server speaks.
const (
	Anthropic API = "anthropic"
	Gemini    API = "gemini"
	OpenAI    API = "openai"
)

// Step is one turn of the model: a tool call (Tool non-empty, Args its
// arguments) or a final text (Text) that ends the agent's turn. Before, when
// set, runs before the answer is sent, with the request that asked for this
// turn; an error from it is recorded ([Server.Err]) and the model answers
// with text naming it instead of the step. Decide, when set, runs after
// Before and chooses the answer from the request (a model that retries a
// refused call, say); its Before and Decide are ignored.
type Step struct {
	Tool   string
	Args   map[string]any
	Text   string
	Before func(ctx context.Context, req Request) error
	Decide func(req Request) Step
}

// Script is the steps of a session, in order.
type Script []Step

// ToolResult is one tool result the agent sent back to the model, as the
// model sees it. Name is the tool's name (for Anthropic, the name of the
// tool_use it answers); Text is the text the model reads: Anthropic's
// tool_result content blocks joined by newlines, Gemini's
// functionResponse.response as JSON, or a function_call_output's output (its
// text items joined by newlines); IsError is Anthropic's is_error, for Gemini
// whether the response has an "error" member, and never set for Responses,
// whose outputs carry no error flag.
type ToolResult struct {
	CallID  string
	Name    string
	Text    string
	IsError bool
}

// Request is one request an agent sent.
type Request struct {
	Seq    int    // 1, 2, … in arrival order
	API    API    // which wire API
	Path   string // URL path and query
	Body   json.RawMessage
	Turn   bool         // a conversation request (it offered tools) that consumed a step
	Step   int          // the index of the step answered, when Turn; else -1
	Tools  []string     // names of the tools the request offered the model
	Result []ToolResult // the tool results in the request's last message
}

// Server is a running scripted model endpoint on 127.0.0.1.
type Server struct {
	srv *http.Server
	ln  net.Listener
	ctx context.Context
	end context.CancelFunc

	mu       sync.Mutex
	script   Script            // guarded by mu
	next     int               // guarded by mu; index of the next step
	seq      int               // guarded by mu; the last Request.Seq given
	requests []Request         // guarded by mu
	errs     []error           // guarded by mu
	callName map[string]string // guarded by mu; tool_use id (Responses: call_id) → tool name
	changed  chan struct{}     // guarded by mu; closed and replaced at each request
}

// Start listens on 127.0.0.1 (a free port) and serves script until Close.
func Start(script Script) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fakemodel: listening on loopback: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{ln: ln, ctx: ctx, end: cancel, script: script, callName: map[string]string{}, changed: make(chan struct{})}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the base URL agents are pointed at (http://127.0.0.1:PORT), for
// ANTHROPIC_BASE_URL and GOOGLE_GEMINI_BASE_URL; a Responses client's base
// URL is URL()+"/v1".
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops the server; hooks still running see their context cancelled.
func (s *Server) Close() error {
	s.end()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// Append adds steps at the end of the script.
func (s *Server) Append(steps ...Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, steps...)
}

// Requests returns every request received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Turns returns the requests that consumed a step, oldest first.
func (s *Server) Turns() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Turn {
			out = append(out, r)
		}
	}
	return out
}

// ResultsFor returns every tool result the agent sent back for tool, in
// order.
func (s *Server) ResultsFor(tool string) []ToolResult {
	var out []ToolResult
	for _, r := range s.Turns() {
		for _, tr := range r.Result {
			if tr.Name == tool {
				out = append(out, tr)
			}
		}
	}
	return out
}

// Remaining is the number of steps not yet answered.
func (s *Server) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script) - s.next
}

// Err returns the errors of hooks and of requests the server could not
// read or answer from the script (a turn after the last step), joined.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// WaitTurns waits until n turns have been answered or ctx ends.
func (s *Server) WaitTurns(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, ch := s.next, s.changed
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("fakemodel: %d of %d turns answered: %w", got, n, ctx.Err())
		}
	}
}

func (s *Server) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	path := r.URL.Path
	switch {
	case r.Method == http.MethodPost && path == "/v1/messages/count_tokens":
		writeJSON(w, map[string]any{"input_tokens": 100})
	case r.Method == http.MethodPost && path == "/v1/messages":
		s.anthropic(w, r, body)
	case r.Method == http.MethodPost && path == "/v1/responses":
		s.openai(w, r, body)
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/v1beta/models/") && strings.HasSuffix(path, ":countTokens"):
		writeJSON(w, map[string]any{"totalTokens": 100})
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/v1beta/models/") &&
		(strings.HasSuffix(path, ":generateContent") || strings.HasSuffix(path, ":streamGenerateContent")):
		s.gemini(w, r, body, strings.HasSuffix(path, ":streamGenerateContent"))
	default:
		// Anything else an agent probes (model lists, quotas) is not part
		// of the contract tested here: a 404 says so.
		s.record(Request{Seq: s.newSeq(), Path: r.URL.RequestURI(), Body: json.RawMessage(body), Step: -1})
		http.NotFound(w, r)
	}
}

// newSeq returns the Seq of a request that just arrived.
func (s *Server) newSeq() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}

// record appends req, keeping requests in Seq order, and wakes WaitTurns.
func (s *Server) record(req Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.requests)
	for i > 0 && s.requests[i-1].Seq > req.Seq {
		i--
	}
	s.requests = slices.Insert(s.requests, i, req)
	close(s.changed)
	s.changed = make(chan struct{})
}

// take returns the next step for a turn request and advances, or false when
// the script is exhausted.
func (s *Server) take() (Step, int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next >= len(s.script) {
		return Step{}, -1, false
	}
	i := s.next
	s.next++
	return s.script[i], i, true
}

// answer decides what the model says to a turn request: the step's tool
// call or text, after its hook.
func (s *Server) answer(req *Request) Step {
	st, i, ok := s.take()
	req.Turn, req.Step = ok, i
	if !ok {
		err := fmt.Errorf("fakemodel: request %s after the last step of the script", req.Path)
		s.fail(err)
		return Step{Text: err.Error()}
	}
	if st.Before != nil {
		if err := st.Before(s.ctx, *req); err != nil {
			err = fmt.Errorf("fakemodel: hook of step %d: %w", i, err)
			s.fail(err)
			return Step{Text: err.Error()}
		}
	}
	if st.Decide != nil {
		st = st.Decide(*req)
	}
	return st
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// sse writes one server-sent event (event may be empty) and flushes it.
func sse(w http.ResponseWriter, event string, data any) {
	var b bytes.Buffer
	if event != "" {
		fmt.Fprintf(&b, "event: %s\n", event)
	}
	d, _ := json.Marshal(data)
	fmt.Fprintf(&b, "data: %s\n\n", d)
	_, _ = w.Write(b.Bytes())
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// Pauser stops the model at chosen steps until the test lets it go on: use
// [Pauser.Hook] as a Step's Before, then [Pauser.Wait] for the request that
// reached it, act (rebuild a server, decide an approval), and [Pauser.Resume].
// The agent waits for the model's answer meanwhile. Wait and Resume are
// meant for the test's own goroutine, so that it may fail the test there.
type Pauser struct {
	at     chan Request
	resume chan struct{}
}

// NewPauser returns a Pauser with no step reached.
func NewPauser() *Pauser {
	return &Pauser{at: make(chan Request), resume: make(chan struct{})}
}

// Hook is a Step.Before that hands req to Wait and blocks until Resume.
func (p *Pauser) Hook(ctx context.Context, req Request) error {
	select {
	case p.at <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-p.resume:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait returns the request of the next paused step, or an error when ctx
// ends first or stop (a channel closed when the agent exits; nil for none)
// is closed.
func (p *Pauser) Wait(ctx context.Context, stop <-chan struct{}) (Request, error) {
	select {
	case req := <-p.at:
		return req, nil
	case <-stop:
		return Request{}, errors.New("fakemodel: the agent ended before the model reached the paused step")
	case <-ctx.Done():
		return Request{}, fmt.Errorf("fakemodel: no paused step reached: %w", ctx.Err())
	}
}

// Resume lets the paused step answer.
func (p *Pauser) Resume() { p.resume <- struct{}{} }
