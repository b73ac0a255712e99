package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/supervisor"
)

// The rig: one Session between an agent and fake server processes, all in
// memory, run inside a testing/synctest bubble so that a test waits for the
// gateway with synctest.Wait (every goroutine of the bubble is blocked)
// instead of polling, and time (timeouts, the drain, the hold, approvals)
// is the bubble's fake clock. newRig gives the Session an Authority and a
// meta credential, newBubble allows every tool; both are the same rig.

// scriptServer is a server process in memory: its stdin and stdout are
// io.Pipes. It answers the handshake (initialize, server/discover),
// tools/list and ping itself; with calls set it answers every other
// request too (tools/call with a text result, reported to calls; any other
// method with "method not found"). Every line it does not answer is kept
// for the test, which answers with reply.
type scriptServer struct {
	pid       int
	epoch     string
	tools     string         // the tools/list result
	calls     func(received) // nil: tools/call is the test's to answer
	inR, outR *io.PipeReader
	inW, outW *io.PipeWriter
	done      chan struct{}
	once      sync.Once  // Stop
	exitOnce  sync.Once  // exit
	wmu       sync.Mutex // serializes writes to outW

	mu   sync.Mutex
	got  []json.RawMessage // guarded by mu; lines read, those answered aside
	seen int               // guarded by mu; lines of got that next returned
	// arrived receives (buffered 1) after each line added to got, for a
	// test outside a bubble (await).
	arrived chan struct{}
	// transcript, when set, answers every tools/call with a text result
	// itself, and wire keeps every line read, the handshake included.
	transcript bool
	wire       []json.RawMessage // guarded by mu
	lists      int               // guarded by mu; tools/list answered (tools is guarded by mu once serving)
}

var _ Process = (*scriptServer)(nil)

// scriptTools is the tools/list result of newBubble's processes: tool "t",
// whose arguments may be anything.
const scriptTools = `{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}`

// Tools of newRig's processes: "write" needs approval (policy approve) and a
// meta credential; "read" is allowed without one.
const (
	toolWrite = "write"
	toolRead  = "read"
	credScope = "api"
)

var fakeTools = json.RawMessage(`{"tools":[` +
	`{"name":"write","description":"writes","inputSchema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}},` +
	`{"name":"read","description":"reads","inputSchema":{"type":"object","properties":{"n":{"type":"integer"}}},"annotations":{"readOnlyHint":true}}]}`)

// seq orders what the fakes observe across goroutines.
var seq atomic.Int64

// received is one tools/call a process with calls set read from its stdin.
type received struct {
	Seq   int64
	Epoch string // the epoch of the process that read it
	Tool  string
	N     int64  // arguments.n: the driver's call number
	Cred  string // params._meta["dev.portcullis/credentials"][api], "" when absent
	Creds json.RawMessage
}

// newScriptServer starts a process of the epoch that leaves every
// tools/call to the test (or, in transcript mode, answers it).
func newScriptServer(epoch string, transcript bool) *scriptServer {
	return (&scriptServer{pid: 7000, epoch: epoch, tools: scriptTools, transcript: transcript}).start()
}

func (p *scriptServer) start() *scriptServer {
	p.done, p.arrived = make(chan struct{}), make(chan struct{}, 1)
	p.inR, p.inW = io.Pipe()
	p.outR, p.outW = io.Pipe()
	go p.serve()
	return p
}

func (p *scriptServer) Pid() int                         { return p.pid }
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

// setTools changes the process's tools/list result, as an exec behind the
// same pipe does; listed says how many tools/list it answered.
func (p *scriptServer) setTools(tools string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tools = tools
}

func (p *scriptServer) listed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lists
}

// exit closes Done, as when the process exits, leaving its pipes as they are.
func (p *scriptServer) exit() { p.exitOnce.Do(func() { close(p.done) }) }

// write sends one line to the gateway (an answer, a notification…).
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
				result = p.call(m.Params)
			case methodInitialize:
				result = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"script","version":"` + p.epoch + `"}}`
			case methodDiscover:
				result = `{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"script","version":"` + p.epoch + `"}}`
			case methodToolsList:
				p.mu.Lock()
				result = p.tools
				p.lists++
				p.mu.Unlock()
			case methodPing:
				result = `{}`
			}
			if result != "" {
				b, _ := mcpwire.NewResult(m.ID, json.RawMessage(result))
				go p.write(string(b)) // reading stdin never waits for the gateway to read stdout
				continue
			}
			if p.calls != nil { // it answers every request itself
				b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "method not found"}})
				go p.write(string(b))
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

// call is the process's own result for a tools/call, "" when the test
// answers it.
func (p *scriptServer) call(params json.RawMessage) string {
	var c struct {
		Name      string `json:"name"`
		Arguments struct {
			N int64 `json:"n"`
		} `json:"arguments"`
	}
	_ = json.Unmarshal(params, &c)
	var text string
	switch {
	case p.calls != nil:
		creds := mcpwire.GetPath(params, "_meta", metaCredentialKey)
		var vals map[string]string
		_ = json.Unmarshal(creds, &vals)
		p.calls(received{Seq: seq.Add(1), Epoch: p.epoch, Tool: c.Name, N: c.Arguments.N, Cred: vals[credScope], Creds: creds})
		text = fmt.Sprintf("%s %d on %s", c.Name, c.Arguments.N, p.epoch)
	case p.transcript:
		text = "called " + c.Name + " on " + p.epoch
	default:
		return ""
	}
	q, _ := json.Marshal(text)
	return `{"content":[{"type":"text","text":` + string(q) + `}]}`
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
// method (those the process answered itself aside).
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

// next returns the next line the gateway wrote to the process (those the
// process answered itself aside), once the bubble is idle; it fails the
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

// fakeLauncher starts scriptServers, each with a new epoch "E1", "E2", …;
// the identity record's entry digest differs per epoch (a rebuild).
type fakeLauncher struct {
	label      string
	answer     bool // the processes answer tools/call themselves (scriptServer.calls)
	transcript bool // the processes are in transcript mode
	delay      time.Duration
	wrap       func(*scriptServer) Process // nil: the scriptServer itself (observe_test.go)

	mu    sync.Mutex
	procs []*scriptServer // guarded by mu; one per epoch, in order
	calls []received      // guarded by mu
	fail  atomic.Bool     // the next launches fail: the configured command is not found
	tools atomic.Value    // string: the tools/list result of the next launches
}

func (l *fakeLauncher) launch(ctx context.Context) (*Epoch, error) {
	if l.fail.Load() {
		return nil, fmt.Errorf("measuring %s: %w: ./srv/%s: no such file", l.label, identity.ErrCommandNotFound, l.label)
	}
	if l.delay > 0 {
		time.Sleep(l.delay) // a slow launch, on the bubble's clock
	}
	l.mu.Lock()
	n := len(l.procs) + 1
	id := fmt.Sprintf("E%d", n)
	p := &scriptServer{pid: 1000 + n, epoch: id, tools: l.tools.Load().(string), transcript: l.transcript}
	if l.answer {
		p.calls = l.record
	}
	p.start()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	rec := identity.Record{ServerLabel: l.label, Epoch: ids.EpochID(id), ProcessID: p.pid,
		ResolvedExecutable: identity.FileDigest{Path: "/srv/" + l.label, SHA256: fmt.Sprintf("sha256:%064d", n)},
		Entry:              "/srv/" + l.label, EntryDigest: fmt.Sprintf("sha256:%064d", n)}
	if l.wrap != nil {
		return &Epoch{ID: ids.EpochID(id), Record: rec, Proc: l.wrap(p)}, nil
	}
	return &Epoch{ID: ids.EpochID(id), Record: rec, Proc: p}, nil
}

func (l *fakeLauncher) record(r received) {
	l.mu.Lock()
	l.calls = append(l.calls, r)
	l.mu.Unlock()
}

func (l *fakeLauncher) received() []received {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// last returns the newest process.
func (l *fakeLauncher) last() *scriptServer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.procs[len(l.procs)-1]
}

func (l *fakeLauncher) stopAll() {
	l.mu.Lock()
	ps := slices.Clone(l.procs)
	l.mu.Unlock()
	for _, p := range ps {
		_ = p.Stop(context.Background())
	}
}

// agentConn is the agent's side of a Session: it writes requests and
// keeps every line the gateway writes back, in order.
type agentConn struct {
	t     testing.TB
	inW   *io.PipeWriter
	outR  *io.PipeReader
	mu    sync.Mutex
	lines []json.RawMessage // guarded by mu; every line, in order
	got   chan struct{}     // receives after each line (buffered 1)
}

func newAgentConn(t testing.TB) (*agentConn, io.Reader, io.Writer) {
	a := &agentConn{t: t, got: make(chan struct{}, 1)}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	a.inW, a.outR = inW, outR
	go a.read()
	return a, inR, outW
}

func (a *agentConn) read() {
	sc := bufio.NewScanner(a.outR)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		a.mu.Lock()
		a.lines = append(a.lines, slices.Clone(sc.Bytes()))
		a.mu.Unlock()
		select {
		case a.got <- struct{}{}:
		default:
		}
	}
}

// send writes one line to the gateway.
func (a *agentConn) send(line string) {
	a.t.Helper()
	if _, err := a.inW.Write([]byte(line + "\n")); err != nil {
		a.t.Fatalf("writing to the gateway: %v", err)
	}
}

// request sends a request with the numeric id.
func (a *agentConn) request(id int64, method string, params any) {
	b, err := mcpwire.NewRequest(mcpwire.NumberID(id), method, params)
	if err != nil {
		a.t.Fatal(err)
	}
	a.send(string(b))
}

// responsesLocked returns the responses with the raw id, in order.
func (a *agentConn) responsesLocked(id string) []json.RawMessage {
	var out []json.RawMessage
	for _, l := range a.lines {
		if string(mcpwire.GetPath(l, "id")) == id && mcpwire.GetPath(l, "method") == nil {
			out = append(out, l)
		}
	}
	return out
}

// response returns the latest response to the numeric id so far.
func (a *agentConn) response(id int64) (json.RawMessage, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	got := a.responsesLocked(string(mcpwire.NumberID(id)))
	if len(got) == 0 {
		return nil, false
	}
	return got[len(got)-1], true
}

// wait returns the response to id, failing after d of the bubble's clock.
func (a *agentConn) wait(id int64, d time.Duration) json.RawMessage {
	a.t.Helper()
	r, ok := a.within(id, d)
	if !ok {
		a.t.Fatalf("no response to request %d within %s", id, d)
	}
	return r
}

// within returns the response to id once it comes, or false after d.
func (a *agentConn) within(id int64, d time.Duration) (json.RawMessage, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if r, ok := a.response(id); ok {
			return r, true
		}
		select {
		case <-a.got:
		case <-deadline.C:
			return a.response(id)
		}
	}
}

// notifications returns the messages with the method, in order.
func (a *agentConn) notifications(method string) []json.RawMessage {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []json.RawMessage
	for _, l := range a.lines {
		if mcpwire.GetPath(l, "method") != nil && methodOf(l) == method {
			out = append(out, l)
		}
	}
	return out
}

// answer returns the first response to the request with the raw id, once
// the bubble is idle; it fails the test when there is none.
func (a *agentConn) answer(id string) json.RawMessage {
	a.t.Helper()
	return a.nth(id, 1)
}

// answers returns the responses to the request with the raw id, in order,
// once the bubble is idle.
func (a *agentConn) answers(id string) []json.RawMessage {
	synctest.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.responsesLocked(id)
}

// nth returns the n-th (from 1) response with the raw id, once the bubble
// is idle; it fails the test when there are fewer.
func (a *agentConn) nth(id string, n int) json.RawMessage {
	a.t.Helper()
	got := a.answers(id)
	if len(got) < n {
		a.t.Fatalf("no answer %d to id %s; got %d", n, id, len(got))
	}
	return got[n-1]
}

// waitRequest returns the first request from the server (method and id
// set) with the method, once the bubble is idle.
func (a *agentConn) waitRequest(method string) json.RawMessage {
	a.t.Helper()
	for _, l := range a.all() {
		if methodOf(l) == method && mcpwire.GetPath(l, "id") != nil {
			return l
		}
	}
	a.t.Fatalf("no %s request from the server", method)
	return nil
}

// all returns every line the agent got, in order, once the bubble is idle.
func (a *agentConn) all() []json.RawMessage {
	synctest.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.lines)
}

// rig is one Session over a fakeLauncher with a fake audit log, an agent,
// and (newRig) an Authority of its own. It lives in a synctest bubble: its
// constructors must be called inside synctest.Test. The agent's connection
// closes when the test ends, unless close did it before.
type rig struct {
	t        testing.TB
	sess     *Session
	launcher *fakeLauncher
	audit    *fakeAudit
	auth     *authz.Authority // nil for newBubble
	agent    *agentConn
	served   chan error // Serve's result, put back by end for others to read
	secret   string

	mu      sync.Mutex
	granted []authz.Grant    // guarded by mu; every grant made, in order
	grantAt map[string]int64 // guarded by mu
	denied  []string         // guarded by mu
	closed  bool             // guarded by mu
}

type rigOptions struct {
	approvalTimeout time.Duration
	holdTimeout     time.Duration
	askEveryUse     bool
	noCredentials   bool
	secrets         SecretSource // nil: a fixed secret
	secretCheck     func(string) error
	policy          func(tool string) config.Policy // nil: read allow, everything else approve
	toolDenied      func(run, tool string) bool     // authz.Options.ToolDenied
	auditDelay      time.Duration
	launchDelay     time.Duration
	launchFails     bool // every launch fails: command not found
	wrap            func(*scriptServer) Process
	transcript      bool // the processes keep every line they read (scriptServer.wire)
	shimLines       bool // Options.ShimLines

	sourceUnsettled func() <-chan struct{} // Options.SourceUnsettled
}

const testSecret = "PCSECRET-gateway-7f3a9c21d4"

// tempCatalogs opens a catalog store in a new temporary directory, removed
// when the test ends. Not t.TempDir: a refresh that began before the agent
// left may still write the store while Serve returns; in a bubble the
// directory goes once every goroutine is blocked or gone.
func tempCatalogs(t testing.TB) *catalog.Store {
	t.Helper()
	dir, err := os.MkdirTemp("", "gateway-catalog-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		synctest.Wait()
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing the catalog store: %v", err)
		}
	})
	cats, err := catalog.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cats
}

// newRig starts a Session with an Authority and (unless noCredentials) a
// meta credential, over processes serving fakeTools that answer every
// tools/call themselves. It must be called inside synctest.Test.
func newRig(t testing.TB, o rigOptions) *rig {
	if o.approvalTimeout == 0 {
		o.approvalTimeout = 10 * time.Second
	}
	if o.holdTimeout == 0 {
		o.holdTimeout = 10 * time.Second
	}
	r := &rig{t: t, launcher: &fakeLauncher{label: "fake", answer: true, delay: o.launchDelay, wrap: o.wrap, transcript: o.transcript},
		audit: &fakeAudit{delay: o.auditDelay}, secret: testSecret, grantAt: map[string]int64{}}
	r.launcher.tools.Store(string(fakeTools))
	r.launcher.fail.Store(o.launchFails)
	r.auth = authz.New(authz.Options{
		Timeout:    o.approvalTimeout,
		ToolDenied: o.toolDenied,
		OnGranted: func(_ authz.Request, g authz.Grant) error {
			if err := r.audit.Err(); err != nil {
				return err // as the daemon: a grant the log cannot record is not made
			}
			r.mu.Lock()
			r.granted = append(r.granted, g)
			r.grantAt[string(g.ID)] = seq.Add(1)
			r.mu.Unlock()
			return nil
		},
		OnDenied: func(q authz.Request, why string) {
			r.mu.Lock()
			r.denied = append(r.denied, why)
			r.mu.Unlock()
		},
	})
	secrets := o.secrets
	if secrets == nil {
		secrets = func(scope string) ([]byte, error) {
			if scope != credScope {
				return nil, fmt.Errorf("no secret for %q", scope)
			}
			return []byte(r.secret), nil
		}
	}
	var creds []Credential
	if !o.noCredentials {
		creds = []Credential{{Scope: credScope, Inject: "meta", AskEveryUse: o.askEveryUse}}
	}
	r.start(Options{
		RunID: "RUN", Label: "fake", Agent: Agent{PID: 42, Exe: "/usr/bin/agent"},
		Launch: r.launcher.launch, Catalog: tempCatalogs(t), Authority: r.auth,
		Policy: cmpOr(o.policy, func(tool string) config.Policy {
			if tool == toolRead {
				return policyAllow
			}
			return policyApprove
		}),
		Credentials: creds, Secrets: secrets, SecretCheck: o.secretCheck,
		StartupTimeout: 5 * time.Second, HoldTimeout: o.holdTimeout,
		Audit: r.audit, ShimLines: o.shimLines, SourceUnsettled: o.sourceUnsettled,
	})
	return r
}

// newBubble starts a Session without an Authority whose every tool is
// allowed, over processes serving scriptTools that leave tools/call to the
// test; edit adjusts its options first. It must be called inside
// synctest.Test.
func newBubble(t *testing.T, edit func(*Options)) *rig {
	t.Helper()
	return startBubble(t, false, edit)
}

// startBubble is newBubble; with transcript set, the processes answer
// tools/call themselves and keep every line (see scriptServer).
func startBubble(t *testing.T, transcript bool, edit func(*Options)) *rig {
	t.Helper()
	r := &rig{t: t, launcher: &fakeLauncher{label: "script", transcript: transcript}, audit: &fakeAudit{}, grantAt: map[string]int64{}}
	r.launcher.tools.Store(scriptTools)
	o := Options{
		RunID: "RUN", Label: "script",
		Launch:         r.launcher.launch,
		Catalog:        tempCatalogs(t),
		Policy:         func(string) config.Policy { return policyAllow },
		StartupTimeout: 5 * time.Second, HoldTimeout: 5 * time.Second,
		Audit: r.audit,
	}
	if edit != nil {
		edit(&o)
	}
	r.start(o)
	return r
}

// newScriptRig is newBubble with the message limit (0: the default) and the
// hold timeout, once its first process runs.
func newScriptRig(t *testing.T, maxMessage int, holdTimeout time.Duration) *rig {
	t.Helper()
	r := newBubble(t, func(o *Options) { o.MaxMessage, o.HoldTimeout = maxMessage, holdTimeout })
	synctest.Wait()
	return r
}

func (r *rig) start(o Options) {
	r.sess = New(o)
	r.served = make(chan error, 1)
	agent, in, out := newAgentConn(r.t)
	r.agent = agent
	go func() { r.served <- r.sess.Serve(context.Background(), in, out) }()
	r.t.Cleanup(r.end)
}

// launch is the rig's Launch, for a test that wraps it.
func (r *rig) launch(ctx context.Context) (*Epoch, error) { return r.launcher.launch(ctx) }

// proc returns the process of the n-th epoch (from 1).
func (r *rig) proc(n int) *scriptServer {
	r.t.Helper()
	r.launcher.mu.Lock()
	defer r.launcher.mu.Unlock()
	if n > len(r.launcher.procs) {
		r.t.Fatalf("epoch %d was never launched (%d were)", n, len(r.launcher.procs))
	}
	return r.launcher.procs[n-1]
}

// handshake runs the agent's legacy initialize handshake (initialize is id
// 0) and waits until the first catalog is in force.
func (r *rig) handshake() {
	r.t.Helper()
	r.agent.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
	if _, ref := refusal(r.t, r.agent.wait(0, 10*time.Second)); ref != nil {
		r.t.Fatalf("initialize refused: %+v", ref)
	}
	r.agent.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	r.waitState(StateReady, 10*time.Second)
}

// discover runs the agent's 2026-07-28 discovery (id 0) and waits until the
// catalog is in force.
func (r *rig) discover() {
	r.t.Helper()
	r.agent.send(`{"jsonrpc":"2.0","id":0,"method":"server/discover","params":{"_meta":` + modernMeta + `}}`)
	r.agent.wait(0, 10*time.Second)
	r.waitState(StateReady, 10*time.Second)
}

// modernMeta is the _meta of a 2026-07-28 request.
const modernMeta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

func (r *rig) waitState(want State, d time.Duration) Status {
	r.t.Helper()
	var st Status
	if !until(d, func() bool {
		st = r.sess.Status()
		return st.State == want && (want != StateReady || st.CatalogRevision != 0)
	}) {
		r.t.Fatalf("session state %s (%s), want %s within %s", st.State, st.Reason, want, d)
	}
	return st
}

// pendingFor waits until a pending request exists for the run and returns
// the newest one.
func (r *rig) pendingFor(d time.Duration) authz.Request {
	r.t.Helper()
	var p []authz.Request
	if !until(d, func() bool { p = r.auth.Pending(); return len(p) > 0 }) {
		r.t.Fatalf("no approval request within %s", d)
	}
	return p[len(p)-1]
}

// until reports whether cond holds within d of the bubble's clock. It
// looks each time every goroutine of the bubble is blocked; when cond does
// not hold yet, only a timer can change anything, so it lets the bubble's
// clock run to the next one (at most a millisecond at a time, to look
// again after each) until d has passed.
func until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		synctest.Wait()
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(time.Millisecond) // the bubble's clock, not the wall's
	}
}

// waitFor waits, in a synctest bubble, until cond holds, failing the test
// after 5 s of the bubble's clock.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !until(5*time.Second, cond) {
		t.Fatalf("waited 5s for %s", what)
	}
}

// end closes the agent's connection, waits for Serve and stops the
// processes; idempotent.
func (r *rig) end() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	r.agent.inW.Close()
	err := <-r.served
	r.served <- err
	r.launcher.stopAll()
	r.agent.outR.Close()
}

// close is end, failing the test when Serve returned an error.
func (r *rig) close() {
	r.t.Helper()
	r.end()
	err := <-r.served
	r.served <- err
	if err != nil {
		r.t.Errorf("Serve: %v", err)
	}
}

func (r *rig) grants() []authz.Grant {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.granted)
}

// auditTypes lists the types of the audit events written so far, in order.
func (r *rig) auditTypes() []string {
	var out []string
	for _, e := range r.audit.entries() {
		out = append(out, e.Type)
	}
	return out
}

// resultOf is the result of a response line, nil for an error.
func resultOf(line []byte) []byte { return mcpwire.GetPath(line, "result") }

// callParams is a tools/call of tool with {"n": n}, with a progress token
// when token is not empty.
func callParams(tool string, n int64, token string) map[string]any {
	p := map[string]any{"name": tool, "arguments": map[string]any{"n": n}}
	if token != "" {
		p["_meta"] = map[string]any{"progressToken": token}
	}
	return p
}

// cmpOr returns f, or def when f is nil.
func cmpOr(f, def func(string) config.Policy) func(string) config.Policy {
	if f != nil {
		return f
	}
	return def
}
