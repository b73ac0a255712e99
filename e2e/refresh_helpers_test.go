package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

// pubLabel is the server label the refresh tests give the publish server.
const pubLabel = "pub"

// publishRev* are the -ldflags of the publish server's builds
// (testdata/servers/publish): revision A, revision B, and revision A with a
// different build label (another binary, the same catalog).
const (
	publishRevA      = "-X main.revision=A"
	publishRevB      = "-X main.revision=B"
	publishRevALabel = "-X main.revision=A -X main.buildLabel=rebuilt"
)

// buildPublish runs `go build` of the publish server with ldflags into
// dir/publish, over whatever is there (a rebuild, as a developer does it),
// and returns the path and the time the build returned.
func buildPublish(t *testing.T, dir, ldflags string) (string, time.Time) {
	t.Helper()
	p, err := harness.BuildServer(testContext(t, 3*time.Minute), repoRoot, dir, "publish", ldflags)
	if err != nil {
		t.Fatal(err)
	}
	return p, time.Now()
}

// publishSetup is one PORTCULLIS_HOME with the publish server configured
// under pubLabel and a daemon running.
type publishSetup struct {
	home    *harness.Home
	daemon  *harness.Daemon
	binDir  string // holds the publish binary (the server's cwd)
	bin     string // the configured executable
	callLog string // PUBLISH_CALL_LOG
}

// newPublishSetup builds revision A into a fresh directory, registers it with
// `portcullis servers add pub FLAGS… --cwd BINDIR --env PUBLISH_CALL_LOG=…`,
// sets every tool's policy to allow, and starts a daemon.
func newPublishSetup(t *testing.T, flags ...string) *publishSetup {
	t.Helper()
	s := &publishSetup{home: newHome(t), binDir: t.TempDir()}
	s.callLog = filepath.Join(t.TempDir(), "calls.jsonl")
	s.bin, _ = buildPublish(t, s.binDir, publishRevA)
	// The refresh contract is judged by which process answered, read from
	// the server's own pid: no sandbox, whose PID namespace would number
	// every server 2 (the sandbox has tests of its own, contain_*).
	flags = append([]string{"--cwd", s.binDir, "--env", "PUBLISH_CALL_LOG=" + s.callLog, "--sandbox", "off"}, flags...)
	if err := s.home.AddServer(testContext(t, 30*time.Second), pubLabel, flags, s.bin); err != nil {
		t.Fatal(err)
	}
	// These tests are about the refresh contract, not authorization: every
	// tool, including the one add_tool creates, is allowed without approval.
	if err := s.home.SetToolPolicy(pubLabel, config.PolicyAllow, "publish_preview", "status", "slow_publish", "add_tool", "rollback"); err != nil {
		t.Fatal(err)
	}
	s.daemon = startDaemon(t, s.home)
	return s
}

// rebuild runs `go build` with ldflags over the configured executable.
func (s *publishSetup) rebuild(t *testing.T, ldflags string) time.Time {
	t.Helper()
	_, at := buildPublish(t, s.binDir, ldflags)
	return at
}

// listChangedAgent is a go-sdk client connected through `portcullis connect`
// that counts the notifications/tools/list_changed it receives and
// otherwise ignores them.
type listChangedAgent struct {
	*harness.Agent
	mu      sync.Mutex
	changes []time.Time   // guarded by mu; when each list_changed arrived
	notify  chan struct{} // receives after each list_changed (buffered 1)
}

// listChanged returns how many list_changed notifications arrived so far.
func (a *listChangedAgent) listChanged() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.changes)
}

// waitListChanged waits until at least n list_changed notifications arrived
// and returns the arrival time of the n-th; it fails t after d.
func (a *listChangedAgent) waitListChanged(t *testing.T, n int, d time.Duration) time.Time {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		if len(a.changes) >= n {
			at := a.changes[n-1]
			a.mu.Unlock()
			return at
		}
		a.mu.Unlock()
		select {
		case <-a.notify:
		case <-deadline.C:
			t.Fatalf("received %d tools/list_changed within %s, want %d", a.listChanged(), d, n)
		}
	}
}

// connectListChanged connects a client with protocol version pv ("" = the
// go-sdk's default, 2026-07-28) through `portcullis connect label`.
func connectListChanged(t *testing.T, h *harness.Home, label, pv string) *listChangedAgent {
	t.Helper()
	a := &listChangedAgent{notify: make(chan struct{}, 1)}
	client := mcp.NewClient(&mcp.Implementation{Name: "portcullis-e2e-refresh", Version: "1.0.0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			a.mu.Lock()
			a.changes = append(a.changes, time.Now())
			a.mu.Unlock()
			select {
			case a.notify <- struct{}{}:
			default:
			}
		},
	})
	var opts *mcp.ClientSessionOptions
	if pv != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: pv}
	}
	ha, err := harness.Connect(testContext(t, 60*time.Second), client, h.ConnectCommand(label), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ha.Close() })
	a.Agent = ha
	return a
}

// callText calls tool with args and returns its text content; a JSON-RPC
// error or a tool error fails t.
func callText(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	res, err := s.CallTool(testContext(t, 30*time.Second), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s %v: %v", tool, args, err)
	}
	txt := resultText(res)
	if res.IsError {
		t.Fatalf("calling %s %v: tool error %q", tool, args, txt)
	}
	return txt
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// refusalOf returns the JSON-RPC error code and the gateway's refusal data
// carried by err, failing t when err is not a JSON-RPC error with data.
func refusalOf(t *testing.T, err error) (int64, control.Refusal) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a JSON-RPC error", err, err)
	}
	var r control.Refusal
	if err := json.Unmarshal(we.Data, &r); err != nil {
		t.Fatalf("error data %s: %v", we.Data, err)
	}
	return we.Code, r
}

// toolSchema returns the inputSchema of tool from a ListTools result as
// canonical JSON (RFC 8785).
func toolSchema(t *testing.T, res *mcp.ListToolsResult, tool string) string {
	t.Helper()
	for _, tl := range res.Tools {
		if tl.Name == tool {
			b, err := json.Marshal(tl.InputSchema)
			if err != nil {
				t.Fatal(err)
			}
			c, err := harness.Canonical(b)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatalf("tool %q not in tools/list", tool)
	return ""
}

// canonical returns the RFC 8785 form of the JSON text s.
func canonical(t *testing.T, s string) string {
	t.Helper()
	c, err := harness.Canonical(json.RawMessage(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// publishCall is one line of the publish server's PUBLISH_CALL_LOG.
type publishCall struct {
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	Revision string          `json:"revision"`
	PID      int             `json:"pid"`
}

// readCalls returns every tools/call the publish servers of a setup
// received, oldest first.
func readCalls(t *testing.T, path string) []publishCall {
	t.Helper()
	return readJSONLines[publishCall](t, path)
}

// readJSONLines reads a test server's call log (one JSON object per line,
// as the servers in testdata/servers append them), oldest first; nil when
// the server never wrote it. A line that is not a T fails t.
func readJSONLines[T any](t *testing.T, path string) []T {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var c T
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("call log %s, line %q: %v", path, sc.Text(), err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("call log %s: %v", path, err)
	}
	return out
}

// waitRun polls `portcullis status --json` until the run of the shim with
// pid shimPID satisfies cond, and fails t after d naming what.
func waitRun(t *testing.T, h *harness.Home, shimPID int, d time.Duration, what string, cond func(gateway.Status) bool) gateway.Status {
	t.Helper()
	ctx := testContext(t, d+30*time.Second)
	deadline := time.Now().Add(d)
	var last string
	for {
		rep, err := h.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := harness.RunByShim(rep, shimPID); ok {
			if cond(r) {
				return r
			}
			b, _ := json.Marshal(struct {
				State                          gateway.State
				Reason, Epoch, Build           string
				PID                            int
				CatalogRevision, AgentRevision uint64
				Warnings                       []string
			}{r.State, r.Reason, string(r.Epoch), r.Build, r.PID, r.CatalogRevision, r.AgentRevision, r.Warnings})
			last = string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run of shim %d did not reach %s within %s (last seen: %s)", shimPID, what, d, last)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// readyOn reports whether a run is ready on an epoch other than old, with
// its catalog fetched.
func readyOn(old string) func(gateway.Status) bool {
	return func(r gateway.Status) bool {
		return r.State == gateway.StateReady && r.Epoch != "" && string(r.Epoch) != old && r.CatalogRevision != 0
	}
}

// eras are the protocol versions the refresh tests run with: the go-sdk
// default (2026-07-28: server/discover, list changes on subscriptions/listen)
// and a pinned legacy version (initialize handshake, plain list_changed).
var eras = []struct{ name, version string }{
	{"default", ""},
	{"2025-06-18", "2025-06-18"},
}

// wantCatalogDiff checks `portcullis catalog diff LABEL --json`: revision
// from → to, with exactly the changes want ("TOOL KIND") and a severity.
func wantCatalogDiff(t *testing.T, h *harness.Home, label string, from, to uint64, want ...string) {
	t.Helper()
	res, err := h.Run(testContext(t, 30*time.Second), "catalog", "diff", label, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var diff struct {
		From, To    uint64
		MaxSeverity catalog.Severity
		Changes     []catalog.Change
	}
	if err := json.Unmarshal([]byte(res.Stdout), &diff); err != nil {
		t.Fatalf("catalog diff: %v\n%s", err, res.Stdout)
	}
	var kinds []string
	for _, c := range diff.Changes {
		kinds = append(kinds, c.Tool+" "+c.Kind)
	}
	if diff.From != from || diff.To != to || !slices.Equal(kinds, want) || diff.MaxSeverity == catalog.SeverityNone {
		t.Errorf("catalog diff = %s, want revision %d → %d with %q", res.Stdout, from, to, want)
	}
}
