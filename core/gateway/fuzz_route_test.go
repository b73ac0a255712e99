package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/supervisor"
)

// fzProc is the server process of FuzzRoute: stdin and stdout are io.Pipes;
// it first writes the fuzzer's server lines, then answers every request it
// reads (initialize, tools/list with one tool, anything else with {}).
type fzProc struct {
	inR, outR *io.PipeReader
	inW, outW *io.PipeWriter
	done      chan struct{}
	once      sync.Once
	wmu       sync.Mutex // serializes writes to outW
}

var _ Process = (*fzProc)(nil)

func newFzProc(script []byte) *fzProc {
	p := &fzProc{done: make(chan struct{})}
	p.inR, p.inW = io.Pipe()
	p.outR, p.outW = io.Pipe()
	go func() {
		if len(script) > 0 && script[len(script)-1] != '\n' {
			// Its own answers must not be glued to the script's last line.
			script = append(bytes.Clone(script), '\n')
		}
		p.write(script)
		p.serve()
	}()
	return p
}

func (p *fzProc) Pid() int                         { return 4242 }
func (p *fzProc) Stdin() io.WriteCloser            { return p.inW }
func (p *fzProc) Stdout() io.Reader                { return p.outR }
func (p *fzProc) Done() <-chan struct{}            { return p.done }
func (p *fzProc) Exit() supervisor.ExitInfo        { return supervisor.ExitInfo{} }
func (p *fzProc) StderrTail(maxLines int) []string { return nil }

func (p *fzProc) Stop(context.Context) error {
	p.once.Do(func() {
		p.inR.Close()
		p.outR.Close()
		close(p.done)
	})
	return nil
}

func (p *fzProc) write(b []byte) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_, _ = p.outW.Write(b)
}

func (p *fzProc) serve() {
	sc := bufio.NewScanner(p.inR)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m, err := mcpwire.Parse(sc.Bytes())
		if err != nil {
			continue
		}
		if m.Kind != mcpwire.KindRequest {
			continue
		}
		var res json.RawMessage
		switch m.Method {
		case methodInitialize:
			res = json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"fz","version":"1"}}`)
		case methodToolsList:
			res = json.RawMessage(`{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}`)
		case methodToolsCall:
			res = json.RawMessage(`{"content":[{"type":"text","text":"ok"}]}`)
		}
		b, _ := mcpwire.NewResult(m.ID, res)
		p.write(append(b, '\n'))
	}
}

// fzSink collects what the gateway writes to the agent.
type fzSink struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (s *fzSink) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(b)
}

func (s *fzSink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSuffix(s.buf.String(), "\n"), "\n")
}

// fzAgentIDs returns the ids the agent's lines carry (as PeekID or Parse
// recover them), with how often each occurs, and the ids of its requests.
func fzAgentIDs(lines [][]byte) (all map[string]int, requests []string) {
	all = map[string]int{}
	var batched [][]byte // the messages of batches, each answered too
	for _, l := range lines {
		var elems []json.RawMessage
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] == '[' && json.Unmarshal(t, &elems) == nil {
			for _, e := range elems {
				batched = append(batched, e)
			}
		}
	}
	for _, l := range append(slices.Clone(lines), batched...) {
		m, err := mcpwire.Parse(l)
		var ie *mcpwire.InvalidError
		switch {
		case err == nil && m.ID != nil:
			all[string(m.ID)]++
			if m.Kind == mcpwire.KindRequest {
				requests = append(requests, string(m.ID))
			}
		case errors.As(err, &ie) && ie.ID != nil:
			all[string(ie.ID)]++
		}
		if id := mcpwire.PeekID(l); id != nil && (err != nil || m.ID == nil || string(id) != string(m.ID)) {
			all[string(id)]++
		}
	}
	return all, requests
}

// FuzzRoute feeds arbitrary lines from the agent and from the server
// process (an in-memory fake, no processes) through a Session and checks
// the routing invariants that hold whatever the peers send:
//
//   - Serve returns once the agent's input ends, and stops the process;
//   - every line the agent receives is a valid JSON-RPC message;
//   - every response the agent receives carries an id the agent used (or
//     null): gateway and server ids never leak;
//   - a request whose id the agent used once is answered exactly once, and
//     within a bound, unless the agent cancelled something.
//
// Seeds are in testdata/fuzz/FuzzRoute and below.
func FuzzRoute(f *testing.F) {
	const handshake = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
`
	seeds := []struct{ agent, server string }{
		{handshake + `{"jsonrpc":"2.0","id":2,"method":"tools/list"}` + "\n" + `{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"t","arguments":{}}}`, ""},
		{handshake + "not json\n{\"id\":5,\"method\":\"x\"}\n", "banner line\n{bad json\n"},
		{handshake, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}` + "\n"},
		{handshake + `{"jsonrpc":"2.0","id":3,"method":"ping"}`, `{"jsonrpc":"2.0","id":"1","result":{}}` + "\r\n" + `{"jsonrpc":"2.0","id":99,"method":"roots/list"}` + "\n"},
		{`{"jsonrpc":"2.0","id":7,"method":"server/discover","params":{"_meta":{}}}` + "\n" + `{"jsonrpc":"2.0","id":8,"method":"tools/list"}`, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1}}`},
		{handshake + `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":"p"}}}` + "\n" + `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}`, ""},
		{handshake + `{"jsonrpc":"2.0","id":1,"method":"tools/call","id":2,"params":{"name":"t","name":"u"}}`, ""},
	}
	for _, s := range seeds {
		f.Add([]byte(s.agent), []byte(s.server))
	}
	// One store for every input: a session's goroutines may still write
	// to it after Serve returned.
	cats, err := catalog.OpenStore(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, agentIn, serverOut []byte) {
		if len(agentIn) > 8<<10 || len(serverOut) > 8<<10 {
			return
		}
		synctest.Test(t, func(t *testing.T) { fuzzRoute(t, cats, agentIn, serverOut) })
	})
}

// fuzzRoute is one input of FuzzRoute, in a synctest bubble: the bounds
// below are the bubble's clock.
func fuzzRoute(t *testing.T, cats *catalog.Store, agentIn, serverOut []byte) {
	proc := newFzProc(serverOut)
	var launches int
	var lmu sync.Mutex
	sess := New(Options{
		RunID: "RUN", Label: "fz",
		Launch: func(context.Context) (*Epoch, error) {
			lmu.Lock()
			defer lmu.Unlock()
			launches++
			if launches > 1 {
				return nil, errors.New("one process per fuzz run")
			}
			return &Epoch{ID: "E1", Proc: proc}, nil
		},
		Catalog:        cats,
		Policy:         func(string) config.Policy { return policyAllow },
		MaxMessage:     4096,
		StartupTimeout: 2 * time.Second,
		HoldTimeout:    2 * time.Second,
	})
	in, inW := io.Pipe()
	out := &fzSink{}
	served := make(chan error, 1)
	go func() { served <- sess.Serve(context.Background(), in, out) }()

	var lines [][]byte
	r := mcpwire.NewReader(bytes.NewReader(agentIn), 4096)
	for {
		l, err := r.ReadLine()
		var tl *mcpwire.TooLargeError
		if errors.As(err, &tl) {
			if tl.ID != nil { // answered by its id, wherever it stands
				lines = append(lines, []byte(`{"id":`+string(tl.ID)+`}`))
			}
			continue
		}
		if err != nil {
			break
		}
		lines = append(lines, bytes.Clone(l))
	}
	go func() {
		_, _ = inW.Write(agentIn)
		_, _ = inW.Write([]byte("\n"))
	}()
	ids, requests := fzAgentIDs(lines)
	cancels := bytes.Contains(agentIn, []byte("notifications/cancelled"))

	answered := func() map[string]int {
		n := map[string]int{}
		for _, l := range out.lines() {
			for _, msg := range agentMessages(l) {
				if m, err := mcpwire.Parse(msg); err == nil && m.Kind == mcpwire.KindResponse {
					n[string(m.ID)]++
				}
			}
		}
		return n
	}
	// Every request answered while the agent is still connected: held
	// requests time out after HoldTimeout, the fake answers the rest.
	missing := ""
	if !cancels && !until(8*time.Second, func() bool {
		n := answered()
		missing = ""
		for _, id := range requests {
			if ids[id] == 1 && n[id] == 0 {
				missing = id
				break
			}
		}
		return missing == ""
	}) {
		t.Fatalf("request %s was not answered within 8 s; agent got:\n%s", missing, strings.Join(out.lines(), "\n"))
	}
	inW.Close()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return 10 s after the agent's input ended")
	}
	select {
	case <-proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the server process was not stopped")
	}

	n := answered()
	for _, l := range out.lines() {
		if l == "" {
			continue
		}
		for _, msg := range agentMessages(l) {
			m, err := mcpwire.Parse(msg)
			if err != nil {
				t.Fatalf("the agent received an invalid message %q: %v", l, err)
			}
			if m.Kind == mcpwire.KindResponse && string(m.ID) != "null" && ids[string(m.ID)] == 0 {
				t.Fatalf("the agent received a response with an id it never used: %s", l)
			}
		}
	}
	for _, id := range requests {
		if ids[id] == 1 && n[id] > 1 {
			t.Fatalf("request %s was answered %d times", id, n[id])
		}
	}
}

// agentMessages splits a line the agent received into its messages: the
// elements of an array (the answer to a batch, JSON-RPC 2.0 section 6; an
// empty array is returned as is, to fail parsing), or the line itself.
func agentMessages(l string) [][]byte {
	var elems []json.RawMessage
	if strings.HasPrefix(l, "[") && json.Unmarshal([]byte(l), &elems) == nil && len(elems) > 0 {
		out := make([][]byte, len(elems))
		for i, e := range elems {
			out[i] = e
		}
		return out
	}
	return [][]byte{[]byte(l)}
}
