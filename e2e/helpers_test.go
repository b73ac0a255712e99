package e2e

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

// testContext returns a context that ends with the test or after d.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// newHome returns a fresh PORTCULLIS_HOME for t.
func newHome(t *testing.T) *harness.Home {
	t.Helper()
	h, err := harness.NewHome(portcullis, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// addServer registers a server with `portcullis servers add`.
func addServer(t *testing.T, h *harness.Home, label string, command ...string) {
	t.Helper()
	if err := h.AddServer(testContext(t, 30*time.Second), label, nil, command...); err != nil {
		t.Fatal(err)
	}
}

// allowTools sets the policy of the named tools of label to allow, so that
// calls to them need no approval: these tests are about the proxy, not
// about authorization.
func allowTools(t *testing.T, h *harness.Home, label string, tools ...string) {
	t.Helper()
	if err := h.SetToolPolicy(label, config.PolicyAllow, tools...); err != nil {
		t.Fatal(err)
	}
}

// startDaemon starts `portcullis daemon` for h and stops it (SIGTERM, then the
// group killed) when the test ends; a daemon that hangs on SIGTERM or exits
// with an error fails the test. Its log is printed when the test failed.
func startDaemon(t *testing.T, h *harness.Home) *harness.Daemon {
	t.Helper()
	d, err := h.StartDaemon(testContext(t, 30*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(30 * time.Second); err != nil {
			t.Errorf("stopping the daemon: %v", err)
		} else if t.Failed() {
			t.Logf("daemon log:\n%s", d.Output())
		}
	})
	return d
}

// progressLog collects the progress notifications a client receives.
type progressLog struct {
	mu     sync.Mutex
	params []*mcp.ProgressNotificationParams // guarded by mu
	notify chan struct{}                     // receives after each notification (buffered 1)
}

func (p *progressLog) handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	p.params = append(p.params, req.Params)
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// forToken returns the notifications received for token.
func (p *progressLog) forToken(token string) []*mcp.ProgressNotificationParams {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*mcp.ProgressNotificationParams
	for _, n := range p.params {
		if n.ProgressToken == token {
			out = append(out, n)
		}
	}
	return out
}

// newClient returns a go-sdk client with the options every test agent uses
// (default capabilities: roots with listChanged), recording progress in pl.
func newClient(pl *progressLog) *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "portcullis-e2e", Version: "1.0.0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: pl.handle,
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) {},
	})
}

// agent is a connected go-sdk client with its progress log.
type agent struct {
	*harness.Agent
	progress *progressLog
}

// connectCmd connects a new client to cmd (the shim, or a server run
// directly) with protocol version pv ("" = the SDK's default) and closes
// the session when the test ends.
func connectCmd(t *testing.T, cmd *exec.Cmd, pv string) *agent {
	t.Helper()
	pl := &progressLog{notify: make(chan struct{}, 1)}
	var opts *mcp.ClientSessionOptions
	if pv != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: pv}
	}
	a, err := harness.Connect(testContext(t, 60*time.Second), newClient(pl), cmd, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return &agent{Agent: a, progress: pl}
}

// runOf polls status until the run of the shim with pid shimPID appears and
// cond holds for it, or fails the test after 10 s.
func runOf(t *testing.T, h *harness.Home, shimPID int, what string, cond func(gateway.Status) bool) (gateway.Status, daemon.StatusReport) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	var last string
	for {
		rep, err := h.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := harness.RunByShim(rep, shimPID); ok {
			if cond(r) {
				return r, rep
			}
			last = string(r.State) + " " + r.Reason + " stderr: " + strings.Join(r.StderrTail, " | ")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run of shim %d did not reach %s within 10 s (last seen: %s)", shimPID, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
