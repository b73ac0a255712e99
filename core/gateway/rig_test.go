package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/supervisor"
)

// The bubble rig: one Session between an agent and scripted server
// processes, all in memory, run inside a testing/synctest bubble so that a
// test waits for the gateway with synctest.Wait (every goroutine of the
// bubble is blocked) instead of polling, and time (timeouts, the drain, the
// hold) is the bubble's fake clock.

// scriptServer is a server process driven by the test: it answers the
// handshake (initialize, server/discover, notifications aside), tools/list
// and ping itself, and keeps every other line it reads for the test, which
// answers with reply.
type scriptServer struct {
	epoch     string
	inR, outR *io.PipeReader
	inW, outW *io.PipeWriter
	done      chan struct{}
	once      sync.Once  // Stop
	exitOnce  sync.Once  // exit
	wmu       sync.Mutex // serializes writes to outW

	mu   sync.Mutex
	got  []json.RawMessage // guarded by mu; lines read, the handshake and tools/list aside
	seen int               // guarded by mu; lines of got that next returned
	// arrived receives (buffered 1) after each line added to got, for a
	// test outside a bubble (await).
	arrived chan struct{}
	// transcript, when set, answers every tools/call with a text result
	// itself, and wire keeps every line read, the handshake included.
	transcript bool
	wire       []json.RawMessage // guarded by mu
}

var _ Process = (*scriptServer)(nil)

// scriptTools is the tools/list result of a scriptServer: tool "t", whose
// arguments may be anything.
const scriptTools = `{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}`

func newScriptServer(epoch string, transcript bool) *scriptServer {
	p := &scriptServer{epoch: epoch, done: make(chan struct{}), arrived: make(chan struct{}, 1), transcript: transcript}
	p.inR, p.inW = io.Pipe()
	p.outR, p.outW = io.Pipe()
	go p.serve()
	return p
}

func (p *scriptServer) Pid() int                         { return 7000 }
func (p *scriptServer) Stdin() io.WriteCloser            { return p.inW }
func (p *scriptServer) Stdout() io.Reader                { return p.outR }
func (p *scriptServer) Done() <-chan struct{}            { return p.done }
func (p *scriptServer) Exit() supervisor.ExitInfo        { return supervisor.ExitInfo{} }
func (p *scriptServer) StderrTail(maxLines int) []string { return nil }

// Stop ends the process: both pipes close and Done is closed.
func (p *scriptServer) Stop(context.Context) error {
	p.once.Do(func() {
		p.inR.Close()
		p.outW.Close()
		p.exit()
	})
	return nil
}

// exit closes Done, as when the process exits, leaving its pipes as they are.
func (p *scriptServer) exit() { p.exitOnce.Do(func() { close(p.done) }) }

func (p *scriptServer) write(line string) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_, _ = p.outW.Write([]byte(line + "\n"))
}

func (p *scriptServer) serve() {
	sc := bufio.NewScanner(p.inR)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		line := json.RawMessage(slices.Clone(sc.Bytes()))
		m, err := mcpwire.Parse(line)
		if p.transcript {
			p.mu.Lock()
			p.wire = append(p.wire, line)
			p.mu.Unlock()
		}
		if err == nil && m.Kind == mcpwire.KindRequest {
			var result string
			switch m.Method {
			case methodToolsCall:
				if p.transcript {
					var name string
					_ = json.Unmarshal(mcpwire.GetPath(m.Params, "name"), &name)
					result = `{"content":[{"type":"text","text":"called ` + name + ` on ` + p.epoch + `"}]}`
				}
			case methodInitialize:
				result = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"script","version":"` + p.epoch + `"}}`
			case methodDiscover:
				result = `{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"script","version":"` + p.epoch + `"}}`
			case methodToolsList:
				result = scriptTools
			case methodPing:
				result = `{}`
			}
			if result != "" {
				b, _ := mcpwire.NewResult(m.ID, json.RawMessage(result))
				go p.write(string(b)) // reading stdin never waits for the gateway to read stdout
				continue
			}
		}
		if err == nil && m.Kind == mcpwire.KindNotification && m.Method == methodInitialized {
			continue
		}
		p.mu.Lock()
		p.got = append(p.got, line)
		p.mu.Unlock()
		select {
		case p.arrived <- struct{}{}:
		default:
		}
	}
}

// await is next for a test outside a synctest bubble: it waits for the
// line, failing the test after 5 s.
func (p *scriptServer) await(t *testing.T) json.RawMessage {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		p.mu.Lock()
		if p.seen < len(p.got) {
			p.seen++
			l := p.got[p.seen-1]
			p.mu.Unlock()
			return l
		}
		p.mu.Unlock()
		select {
		case <-p.arrived:
		case <-timeout:
			t.Fatal("the server received nothing within 5 s")
		}
	}
}

// received returns the lines the gateway wrote to the process with the
// method (the handshake and tools/list aside).
func (p *scriptServer) received(method string) []json.RawMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []json.RawMessage
	for _, l := range p.got {
		if methodOf(l) == method {
			out = append(out, l)
		}
	}
	return out
}

// next returns the next line the gateway wrote to the process (the
// handshake and tools/list aside), once the bubble is idle; it fails the
// test when there is none.
func (p *scriptServer) next(t *testing.T) json.RawMessage {
	t.Helper()
	synctest.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen >= len(p.got) {
		t.Fatal("the server received nothing")
	}
	p.seen++
	return p.got[p.seen-1]
}

// quiet fails t when the gateway wrote anything to the process that next
// has not returned yet, once the bubble is idle.
func (p *scriptServer) quiet(t *testing.T) {
	t.Helper()
	synctest.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen < len(p.got) {
		t.Fatalf("the server received %.200s", p.got[p.seen])
	}
}

// reply answers request (a line the process received) with result.
func (p *scriptServer) reply(request json.RawMessage, result string) {
	b, _ := mcpwire.NewResult(mcpwire.GetPath(request, "id"), json.RawMessage(result))
	go p.write(string(b))
}

func methodOf(line json.RawMessage) string {
	var m string
	_ = json.Unmarshal(mcpwire.GetPath(line, "method"), &m)
	return m
}

// bubble is a Session in a synctest bubble, with its agent and processes.
type bubble struct {
	t          *testing.T
	transcript bool // its processes are scriptServers in transcript mode
	sess       *Session
	audit      *fakeAudit
	inW        *io.PipeWriter
	outR       *io.PipeReader
	served     chan error

	mu     sync.Mutex
	procs  []*scriptServer   // guarded by mu; one per epoch, in order
	lines  []json.RawMessage // guarded by mu; what the agent got, in order
	closed bool
}

// newBubble starts a Session whose every tool is allowed; edit adjusts its
// options first. It must run inside synctest.Test; the session ends (the
// agent's connection closes) when the test does, unless it did already.
func newBubble(t *testing.T, edit func(*Options)) *bubble {
	t.Helper()
	return startBubble(t, false, edit)
}

// startBubble is newBubble; with transcript set, the processes answer
// tools/call themselves and keep every line (see scriptServer).
func startBubble(t *testing.T, transcript bool, edit func(*Options)) *bubble {
	t.Helper()
	b := &bubble{t: t, audit: &fakeAudit{}, served: make(chan error, 1), transcript: transcript}
	o := Options{
		RunID: "RUN", Label: "script",
		Launch:         b.launch,
		Catalog:        tempCatalogs(t),
		Policy:         func(string) config.Policy { return policyAllow },
		StartupTimeout: 5 * time.Second, HoldTimeout: 5 * time.Second,
		Audit: b.audit,
	}
	if edit != nil {
		edit(&o)
	}
	b.sess = New(o)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	b.inW, b.outR = inW, outR
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 64<<10), 8<<20)
		for sc.Scan() {
			b.mu.Lock()
			b.lines = append(b.lines, slices.Clone(sc.Bytes()))
			b.mu.Unlock()
		}
	}()
	go func() { b.served <- b.sess.Serve(context.Background(), inR, outW) }()
	t.Cleanup(b.end)
	return b
}

func (b *bubble) launch(context.Context) (*Epoch, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := fmt.Sprintf("E%d", len(b.procs)+1)
	p := newScriptServer(id, b.transcript)
	b.procs = append(b.procs, p)
	return &Epoch{ID: id, Record: identity.Record{ServerLabel: "script", Epoch: id}, Proc: p}, nil
}

// proc returns the process of the n-th epoch (from 1).
func (b *bubble) proc(n int) *scriptServer {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > len(b.procs) {
		b.t.Fatalf("epoch %d was never launched (%d were)", n, len(b.procs))
	}
	return b.procs[n-1]
}

// send writes one line to the gateway as the agent.
func (b *bubble) send(line string) {
	b.t.Helper()
	if _, err := b.inW.Write([]byte(line + "\n")); err != nil {
		b.t.Fatalf("writing to the gateway: %v", err)
	}
}

// answer returns the response to the agent's request with the raw id, once
// the gateway is idle (synctest.Wait); it fails the test when there is none.
func (b *bubble) answer(id string) json.RawMessage {
	b.t.Helper()
	synctest.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.lines {
		if string(mcpwire.GetPath(l, "id")) == id && mcpwire.GetPath(l, "method") == nil {
			return l
		}
	}
	b.t.Fatalf("no answer to request %s; the agent got %d lines", id, len(b.lines))
	return nil
}

// answers returns the responses to the agent's request with the raw id, in
// order, once the bubble is idle.
func (b *bubble) answers(id string) []json.RawMessage {
	synctest.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []json.RawMessage
	for _, l := range b.lines {
		if string(mcpwire.GetPath(l, "id")) == id && mcpwire.GetPath(l, "method") == nil {
			out = append(out, l)
		}
	}
	return out
}

// wait returns the n-th (from 1) response with the raw id, once the bubble
// is idle; it fails the test when there are fewer.
func (b *bubble) wait(id string, n int) json.RawMessage {
	b.t.Helper()
	got := b.answers(id)
	if len(got) < n {
		b.t.Fatalf("no answer %d to id %s; got %d", n, id, len(got))
	}
	return got[n-1]
}

// waitRequest returns the first request from the server (method and id
// set) with the method, once the bubble is idle.
func (b *bubble) waitRequest(method string) json.RawMessage {
	b.t.Helper()
	for _, l := range b.all() {
		if methodOf(l) == method && mcpwire.GetPath(l, "id") != nil {
			return l
		}
	}
	b.t.Fatalf("no %s request from the server", method)
	return nil
}

// all returns every line the agent got, in order, once the bubble is idle.
func (b *bubble) all() []json.RawMessage {
	synctest.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lines)
}

// handshake runs the agent's legacy handshake (initialize is id 0) and
// waits until the catalog is in force.
func (b *bubble) handshake() {
	b.t.Helper()
	b.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
	b.answer("0")
	b.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	b.ready()
}

// discover runs the agent's 2026-07-28 discovery (id 0) and waits until the
// catalog is in force.
func (b *bubble) discover() {
	b.t.Helper()
	b.send(`{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{"_meta":` + modernMeta + `}}`)
	b.answer("0")
	b.ready()
}

// modernMeta is the _meta of a 2026-07-28 request.
const modernMeta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

func (b *bubble) ready() {
	b.t.Helper()
	synctest.Wait()
	if st := b.sess.Status(); st.State != StateReady || st.CatalogRevision == 0 {
		b.t.Fatalf("session %s (%s) after the handshake, want ready with a catalog", st.State, st.Reason)
	}
}

// end closes the agent's connection and waits for Serve, then stops the
// processes; idempotent.
func (b *bubble) end() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.mu.Unlock()
	b.inW.Close()
	err := <-b.served
	b.served <- err
	b.mu.Lock()
	procs := slices.Clone(b.procs)
	b.mu.Unlock()
	for _, p := range procs {
		_ = p.Stop(context.Background())
	}
	b.outR.Close()
}

// auditTypes lists the types of the audit events written so far, in order.
func (b *bubble) auditTypes() []string {
	var out []string
	for _, e := range b.audit.entries() {
		out = append(out, e.Type)
	}
	return out
}

// resultOf is the result of a response line, nil for an error.
func resultOf(line []byte) []byte { return mcpwire.GetPath(line, "result") }

// scriptRig is a bubble over one scriptServer, every tool allowed, as the
// routing tests use it.
type scriptRig struct {
	sess   *Session
	proc   *scriptServer
	agent  *bubble
	served chan error
}

// newScriptRig starts a bubble with the message limit (0: the default) and
// the hold timeout, and waits for its first process.
func newScriptRig(t *testing.T, maxMessage int, holdTimeout time.Duration) *scriptRig {
	t.Helper()
	b := newBubble(t, func(o *Options) { o.MaxMessage, o.HoldTimeout = maxMessage, holdTimeout })
	synctest.Wait()
	return &scriptRig{sess: b.sess, proc: b.proc(1), agent: b, served: b.served}
}

func (r *scriptRig) handshake(t *testing.T) { r.agent.handshake() }
