package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/supervisor"
)

// BenchmarkToolCall measures one tools/call through a Session, agent to
// server and back, over in-memory pipes, with an audit log that costs
// nothing: the gateway's own work per call, without the fsync of the
// intent that dominates relaybench.
func BenchmarkToolCall(b *testing.B) {
	benchToolCall(b, nopAudit{}, nil)
}

// BenchmarkToolCallAllow is the call path of relaybench's allow tool in
// the daemon: an allow-policy tool of a server without credentials, with a
// real audit log (record tier: each call's two events written by the
// reading loops, group-committed every 10 ms), the arguments in canonical
// form as the go-sdk sends them.
func BenchmarkToolCallAllow(b *testing.B) {
	dir, err := os.MkdirTemp("", "gateway-bench-audit-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	l, err := audit.Open(audit.Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	benchToolCall(b, l, func(string) config.Policy { return config.PolicyAllow })
}

func benchToolCall(b *testing.B, a Auditor, policy func(string) config.Policy) {
	benchToolCallPaced(b, a, policy, 0)
}

// benchToolCallPaced is benchToolCall with pace between calls (not
// timed): the latency of a call that is not queued behind the last one's
// after-effects (0: back to back).
func benchToolCallPaced(b *testing.B, a Auditor, policy func(string) config.Policy, pace time.Duration) {
	dir, err := os.MkdirTemp("", "gateway-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cats, err := catalog.OpenStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	proc := newEchoProc()
	defer proc.Stop(context.Background())
	sess := New(Options{
		RunID: "RUN", Label: "bench",
		Launch:  func(context.Context) (*Epoch, error) { return &Epoch{ID: "E1", Proc: proc}, nil },
		Catalog: cats, Audit: a, Policy: policy,
	})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- sess.Serve(context.Background(), inR, outW) }()
	lines := bufio.NewScanner(outR)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			b.Fatal(err)
		}
	}
	next := func() []byte {
		if !lines.Scan() {
			b.Fatalf("the agent's output ended: %v", lines.Err())
		}
		return lines.Bytes()
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`)
	next()
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":"l","method":"tools/list"}`) // waits for the catalog at the gate
	next()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if pace > 0 {
			b.StopTimer()
			time.Sleep(pace)
			b.StartTimer()
		}
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"arguments":{"n":%d,"text":"hello"},"name":"echo"}}`, i+1, i))
		if line := next(); bytes.Contains(line, []byte(`"error"`)) {
			b.Fatalf("the call failed: %s", line)
		}
	}
	b.StopTimer()
	inW.Close()
	<-served
	outR.Close()
}

// nopAudit is an audit log that keeps nothing and costs nothing.
type nopAudit struct{}

func (nopAudit) Append(context.Context, string, any) (audit.Event, error) { return audit.Event{}, nil }

// echoProc is a server process that answers initialize, tools/list (one
// tool, echo) and every tools/call, as fast as it reads them.
type echoProc struct {
	inR, outR *io.PipeReader
	inW, outW *io.PipeWriter
	done      chan struct{}
	once      sync.Once // Stop may be called from two goroutines at once (the run's end, the epoch's)
}

var _ Process = (*echoProc)(nil)

func newEchoProc() *echoProc {
	p := &echoProc{done: make(chan struct{})}
	p.inR, p.inW = io.Pipe()
	p.outR, p.outW = io.Pipe()
	go p.serve()
	return p
}

func (p *echoProc) Pid() int                         { return 7100 }
func (p *echoProc) Stdin() io.WriteCloser            { return p.inW }
func (p *echoProc) Stdout() io.Reader                { return p.outR }
func (p *echoProc) Done() <-chan struct{}            { return p.done }
func (p *echoProc) Exit() supervisor.ExitInfo        { return supervisor.ExitInfo{} }
func (p *echoProc) StderrTail(maxLines int) []string { return nil }

func (p *echoProc) Stop(context.Context) error {
	p.once.Do(func() {
		p.inR.Close()
		p.outW.Close()
		close(p.done)
	})
	return nil
}

func (p *echoProc) serve() {
	sc := bufio.NewScanner(p.inR)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	out := bufio.NewWriter(p.outW)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.ID == nil {
			continue
		}
		result := `{}`
		switch m.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"echo","version":"1"}}`
		case "tools/list":
			result = `{"tools":[{"name":"echo","inputSchema":{"type":"object","properties":{"text":{"type":"string"},"n":{"type":"integer"}}}}]}`
		case "tools/call":
			result = `{"content":[{"type":"text","text":"hello"}]}`
		}
		fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", m.ID, result)
		if out.Flush() != nil {
			return
		}
	}
}
