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

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/supervisor"
)

// Tools of the fake server: "write" needs approval (policy approve) and a
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

// received is one tools/call a fake server process read from its stdin.
type received struct {
	Seq   int64
	Epoch string // the epoch of the process that read it
	Tool  string
	N     int64  // arguments.n: the driver's call number
	Cred  string // params._meta["dev.portcullis/credentials"][api], "" when absent
	Creds json.RawMessage
}

// fakeProc is an in-memory server process: its stdin and stdout are
// io.Pipes, and a goroutine answers initialize, tools/list and tools/call
// and records every call it reads.
type fakeProc struct {
	pid   int
	epoch string
	inR   *io.PipeReader
	inW   *io.PipeWriter
	outR  *io.PipeReader
	outW  *io.PipeWriter
	done  chan struct{}
	once  sync.Once
	calls func(received)

	wmu   sync.Mutex      // serializes writes to outW
	tools json.RawMessage // the tools/list result
}

var _ Process = (*fakeProc)(nil)

func newFakeProc(pid int, epoch string, calls func(received), tools json.RawMessage) *fakeProc {
	p := &fakeProc{pid: pid, epoch: epoch, done: make(chan struct{}), calls: calls, tools: tools}
	p.inR, p.inW = io.Pipe()
	p.outR, p.outW = io.Pipe()
	go p.serve()
	return p
}

func (p *fakeProc) Pid() int                         { return p.pid }
func (p *fakeProc) Stdin() io.WriteCloser            { return p.inW }
func (p *fakeProc) Stdout() io.Reader                { return p.outR }
func (p *fakeProc) Done() <-chan struct{}            { return p.done }
func (p *fakeProc) Exit() supervisor.ExitInfo        { return supervisor.ExitInfo{Code: 0} }
func (p *fakeProc) StderrTail(maxLines int) []string { return nil }

// Stop ends the process: both pipes close and Done is closed.
func (p *fakeProc) Stop(context.Context) error {
	p.once.Do(func() {
		p.inR.Close()
		p.outW.Close()
		close(p.done)
	})
	return nil
}

func (p *fakeProc) send(v any) {
	b, _ := json.Marshal(v)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_, _ = p.outW.Write(append(b, '\n'))
}

// sendRaw writes one line to the gateway (a notification, for instance).
func (p *fakeProc) sendRaw(line string) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_, _ = p.outW.Write([]byte(line + "\n"))
}

func (p *fakeProc) serve() {
	// Answers go out through their own goroutine so that reading stdin
	// never waits for the gateway to read stdout.
	out := make(chan any, 4096)
	go func() {
		for v := range out {
			p.send(v)
		}
	}()
	defer close(out)
	sc := bufio.NewScanner(p.inR)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.ID == nil || m.Method == "" {
			continue // notifications and responses
		}
		reply := map[string]any{"jsonrpc": "2.0", "id": m.ID}
		switch m.Method {
		case "initialize":
			reply["result"] = map[string]any{"protocolVersion": "2025-06-18",
				"capabilities": map[string]any{"tools": map[string]any{"listChanged": true}},
				"serverInfo":   map[string]any{"name": "fake", "version": p.epoch}}
		case "tools/list":
			reply["result"] = p.tools
		case "tools/call":
			var c struct {
				Name      string `json:"name"`
				Arguments struct {
					N int64 `json:"n"`
				} `json:"arguments"`
			}
			_ = json.Unmarshal(m.Params, &c)
			creds := mcpwire.GetPath(m.Params, "_meta", metaCredentialKey)
			var vals map[string]string
			_ = json.Unmarshal(creds, &vals)
			p.calls(received{Seq: seq.Add(1), Epoch: p.epoch, Tool: c.Name, N: c.Arguments.N, Cred: vals[credScope], Creds: creds})
			reply["result"] = map[string]any{"content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("%s %d on %s", c.Name, c.Arguments.N, p.epoch)}}}
		default:
			reply["error"] = map[string]any{"code": -32601, "message": "method not found"}
		}
		out <- reply
	}
}

// fakeLauncher starts fakeProcs, each with a new epoch "E1", "E2", …; the
// identity record's entry digest differs per epoch (a rebuild).
type fakeLauncher struct {
	mu    sync.Mutex
	procs []*fakeProc // guarded by mu
	calls []received  // guarded by mu
	fail  atomic.Bool // the next launches fail: the configured command is not found
	delay time.Duration
	tools atomic.Value            // json.RawMessage: the tools/list result of the next launches (nil: fakeTools)
	wrap  func(*fakeProc) Process // nil: the fakeProc itself (observe_test.go)
}

func (l *fakeLauncher) launch(ctx context.Context) (*Epoch, error) {
	if l.fail.Load() {
		return nil, fmt.Errorf("measuring fake: %w: ./srv/fake: no such file", identity.ErrCommandNotFound)
	}
	if l.delay > 0 {
		time.Sleep(l.delay)
	}
	l.mu.Lock()
	n := len(l.procs) + 1
	id := fmt.Sprintf("E%d", n)
	tools := fakeTools
	if t, ok := l.tools.Load().(json.RawMessage); ok {
		tools = t
	}
	p := newFakeProc(1000+n, id, l.record, tools)
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	rec := identity.Record{ServerLabel: "fake", Epoch: id, ProcessID: p.pid,
		ResolvedExecutable: identity.FileDigest{Path: "/srv/fake", SHA256: fmt.Sprintf("sha256:%064d", n)},
		Entry:              "/srv/fake", EntryDigest: fmt.Sprintf("sha256:%064d", n)}
	if l.wrap != nil {
		return &Epoch{ID: id, Record: rec, Proc: l.wrap(p)}, nil
	}
	return &Epoch{ID: id, Record: rec, Proc: p}, nil
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

func (l *fakeLauncher) stopAll() {
	l.mu.Lock()
	ps := slices.Clone(l.procs)
	l.mu.Unlock()
	for _, p := range ps {
		_ = p.Stop(context.Background())
	}
}

// fakeAudit records what the gateway appends.
type fakeAudit struct {
	mu     sync.Mutex
	events []auditEntry  // guarded by mu
	delay  time.Duration // each tool_called intent takes this long to be durable
	down   error         // guarded by mu; every Append fails with it, and Err reports it
	// hold, when set, makes each tool_called Append signal entered and
	// then wait until hold is closed.
	hold, entered chan struct{} // guarded by mu
	// holds makes each Append of an event of the type wait until its
	// channel is closed (see holdType).
	holds map[string]chan struct{} // guarded by mu
}

// holdType makes the Appends of events of type typ wait until release is
// called (once or more): they are not written before.
func (f *fakeAudit) holdType(typ string) (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holds == nil {
		f.holds = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	f.holds[typ] = ch
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// holdIntents makes the next tool_called Appends wait until release is
// called; entered receives once per Append that waits.
func (f *fakeAudit) holdIntents() (entered <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold, f.entered = make(chan struct{}), make(chan struct{}, 1)
	hold := f.hold
	return f.entered, func() { close(hold) }
}

// Err reports the failure set by fail (see auditHealth).
func (f *fakeAudit) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down
}

// fail makes every later Append fail with err (nil: work again).
func (f *fakeAudit) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = err
}

type auditEntry struct {
	Seq    int64
	Type   string
	Fields any
}

var _ Auditor = (*fakeAudit)(nil)

func (f *fakeAudit) Append(_ context.Context, typ string, fields any) (audit.Event, error) {
	if f.delay > 0 && typ == audit.TypeToolCalled {
		time.Sleep(f.delay)
	}
	f.mu.Lock()
	hold, entered, held := f.hold, f.entered, f.holds[typ]
	f.mu.Unlock()
	if held != nil {
		<-held
	}
	if hold != nil && typ == audit.TypeToolCalled {
		entered <- struct{}{}
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return audit.Event{}, f.down
	}
	f.events = append(f.events, auditEntry{Seq: seq.Add(1), Type: typ, Fields: fields})
	return audit.Event{Type: typ}, nil
}

func (f *fakeAudit) entries() []auditEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// agentConn is the agent's side of a Session: it writes requests and
// collects the responses and notifications the gateway writes back.
type agentConn struct {
	t     testing.TB
	inW   *io.PipeWriter
	outR  *io.PipeReader
	mu    sync.Mutex
	resp  map[string]json.RawMessage // guarded by mu; raw id → whole response line
	notes []json.RawMessage          // guarded by mu; notifications, in order
	got   chan struct{}              // receives after each message (buffered 1)
}

func newAgentConn(t testing.TB) (*agentConn, io.Reader, io.Writer) {
	a := &agentConn{t: t, resp: map[string]json.RawMessage{}, got: make(chan struct{}, 1)}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	a.inW, a.outR = inW, outR
	go a.read()
	return a, inR, outW
}

func (a *agentConn) read() {
	sc := bufio.NewScanner(a.outR)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := json.RawMessage(append([]byte(nil), sc.Bytes()...))
		id := mcpwire.GetPath(line, "id")
		a.mu.Lock()
		if id != nil && mcpwire.GetPath(line, "method") == nil {
			a.resp[string(id)] = line
		} else {
			a.notes = append(a.notes, line)
		}
		a.mu.Unlock()
		select {
		case a.got <- struct{}{}:
		default:
		}
	}
}

func (a *agentConn) send(line string) {
	if _, err := a.inW.Write([]byte(line + "\n")); err != nil {
		a.t.Errorf("writing to the gateway: %v", err)
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

func (a *agentConn) response(id int64) (json.RawMessage, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.resp[string(mcpwire.NumberID(id))]
	return r, ok
}

// wait returns the response to id, failing after d.
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

func (a *agentConn) notifications(method string) []json.RawMessage {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []json.RawMessage
	for _, n := range a.notes {
		var m string
		_ = json.Unmarshal(mcpwire.GetPath(n, "method"), &m)
		if m == method {
			out = append(out, n)
		}
	}
	return out
}

// refusal decodes the gateway's refusal in a response line, or nil for a
// result.
func refusal(t testing.TB, line json.RawMessage) (int, *Refusal) {
	t.Helper()
	e := mcpwire.GetPath(line, "error")
	if e == nil {
		return 0, nil
	}
	var we struct {
		Code    int      `json:"code"`
		Message string   `json:"message"`
		Data    *Refusal `json:"data"`
	}
	if err := json.Unmarshal(e, &we); err != nil {
		t.Fatalf("error %s: %v", e, err)
	}
	if we.Data == nil {
		we.Data = &Refusal{Reason: we.Message}
	}
	return we.Code, we.Data
}

// rig is one Session over a fake launcher, with a fake audit log and an
// Authority of its own.
type rig struct {
	t        testing.TB
	sess     *Session
	launcher *fakeLauncher
	audit    *fakeAudit
	auth     *authz.Authority
	agent    *agentConn
	served   chan error
	secret   string
	bubble   bool // it runs in a synctest bubble (newBubbleRig)

	mu      sync.Mutex
	granted []authz.Grant // guarded by mu; every grant made, in order
	grantAt map[string]int64
	denied  []string // guarded by mu
}

type rigOptions struct {
	approvalTimeout time.Duration
	holdTimeout     time.Duration
	askEveryUse     bool
	noCredentials   bool
	secrets         SecretSource // nil: a fixed secret
	secretCheck     func(string) error
	policy          func(tool string) config.Policy // nil: read allow, everything else approve
	auditDelay      time.Duration
	launchDelay     time.Duration
	launchFails     bool // every launch fails: command not found
	wrap            func(*fakeProc) Process
}

const testSecret = "PCSECRET-gateway-7f3a9c21d4"

// tempCatalogs opens a catalog store in a new temporary directory. Not
// t.TempDir: a refresh that began before the agent left may still write the
// store while Serve returns; the directory goes when quiet.
func tempCatalogs(t testing.TB) *catalog.Store {
	t.Helper()
	dir, err := os.MkdirTemp("", "gateway-catalog-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 50 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	cats, err := catalog.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cats
}

func newRig(t testing.TB, o rigOptions) *rig {
	if o.approvalTimeout == 0 {
		o.approvalTimeout = 10 * time.Second
	}
	if o.holdTimeout == 0 {
		o.holdTimeout = 10 * time.Second
	}
	r := &rig{t: t, launcher: &fakeLauncher{delay: o.launchDelay, wrap: o.wrap}, audit: &fakeAudit{delay: o.auditDelay}, served: make(chan error, 1), secret: testSecret, grantAt: map[string]int64{}}
	r.auth = authz.New(authz.Options{
		Timeout: o.approvalTimeout,
		OnGranted: func(_ authz.Request, g authz.Grant) error {
			if err := r.audit.Err(); err != nil {
				return err // as the daemon: a grant the log cannot record is not made
			}
			r.mu.Lock()
			r.granted = append(r.granted, g)
			r.grantAt[g.ID] = seq.Add(1)
			r.mu.Unlock()
			return nil
		},
		OnDenied: func(q authz.Request, why string) {
			r.mu.Lock()
			r.denied = append(r.denied, why)
			r.mu.Unlock()
		},
	})
	cats := tempCatalogs(t)
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
	r.sess = New(Options{
		RunID: "RUN", Label: "fake", Agent: Agent{PID: 42, Exe: "/usr/bin/agent"},
		Launch: r.launcher.launch, Catalog: cats, Authority: r.auth,
		Policy: cmpOr(o.policy, func(tool string) config.Policy {
			if tool == toolRead {
				return "allow"
			}
			return "approve"
		}),
		Credentials: creds, Secrets: secrets, SecretCheck: o.secretCheck,
		StartupTimeout: 5 * time.Second, HoldTimeout: o.holdTimeout,
		Audit: r.audit,
	})
	agent, in, out := newAgentConn(t)
	r.agent = agent
	r.launcher.fail.Store(o.launchFails)
	go func() { r.served <- r.sess.Serve(context.Background(), in, out) }()
	return r
}

// handshake runs the agent's legacy initialize handshake and waits until
// the first catalog is in force.
func (r *rig) handshake() {
	r.t.Helper()
	r.agent.request(1_000_000, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "test", "version": "1"}})
	if _, ref := refusal(r.t, r.agent.wait(1_000_000, 10*time.Second)); ref != nil {
		r.t.Fatalf("initialize refused: %+v", ref)
	}
	r.agent.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	r.waitState(StateReady, 10*time.Second)
}

func (r *rig) waitState(want State, d time.Duration) Status {
	r.t.Helper()
	var st Status
	if !r.until(d, func() bool {
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
	if !r.until(d, func() bool { p = r.auth.Pending(); return len(p) > 0 }) {
		r.t.Fatalf("no approval request within %s", d)
	}
	return p[len(p)-1]
}

// until reports whether cond holds within d. In a bubble it looks each
// time every goroutine of the bubble is blocked, and moves the bubble's
// clock on by a millisecond when cond does not hold yet (a timer's turn);
// outside one (TestRandomInterleavings, which wants real interleavings) it
// looks every 2 ms.
func (r *rig) until(d time.Duration, cond func() bool) bool {
	if r.bubble {
		return until(d, cond)
	}
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// inBubble reports whether the caller runs inside a synctest bubble
// (synctest.Wait panics outside one).
func inBubble() (in bool) {
	defer func() {
		if recover() != nil {
			in = false
		}
	}()
	synctest.Wait()
	return true
}

// until is rig.until in a synctest bubble. Outside a bubble (the tests of
// core/authz's card scope, merged before their conversion) it polls on the
// wall clock.
func until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	if !inBubble() {
		for !cond() {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(2 * time.Millisecond)
		}
		return true
	}
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

// newBubbleRig is newRig in a synctest bubble: it must be called inside
// synctest.Test.
func newBubbleRig(t testing.TB, o rigOptions) *rig {
	r := newRig(t, o)
	r.bubble = true
	return r
}

// close ends the agent's input and waits for Serve to return.
func (r *rig) close() {
	r.t.Helper()
	r.agent.inW.Close()
	select {
	case err := <-r.served:
		if err != nil {
			r.t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		r.t.Error("Serve did not return within 10 s of the agent's input ending")
	}
	r.launcher.stopAll()
	r.agent.outR.Close()
}

func (r *rig) grants() []authz.Grant {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.granted)
}

// callParams is a tools/call of tool with {"n": n}, with a progress token
// when token is not empty.
func callParams(tool string, n int64, token string) map[string]any {
	p := map[string]any{"name": tool, "arguments": map[string]any{"n": n}}
	if token != "" {
		p["_meta"] = map[string]any{"progressToken": token}
	}
	return p
}

// waitFor waits, in a synctest bubble, until cond holds, failing the test
// after 5 s of the bubble's clock.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !until(5*time.Second, cond) {
		t.Fatalf("waited 5s for %s", what)
	}
}

// cmpOr returns f, or def when f is nil.
func cmpOr(f, def func(string) config.Policy) func(string) config.Policy {
	if f != nil {
		return f
	}
	return def
}
