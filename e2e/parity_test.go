package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

// paritySpec describes one server for the parity checks: how to run it
// directly, and which tools exercise echo, progress and cancellation.
type paritySpec struct {
	label  string
	direct func() *exec.Cmd // the server, run directly
	// minTools is the least number of tools tools/list must return.
	minTools int
	echo     string
	echoArgs map[string]any
	long     string
	// progressArgs makes long report progress steps times and finish
	// quickly; cancelArgs makes it run long enough to be cancelled.
	progressArgs map[string]any
	steps        int
	cancelArgs   map[string]any
	// sawCancel, when set, reports whether the server's stderr shows that
	// it received the cancellation.
	sawCancel func(stderr string) bool
}

// protocolVersions are the versions each parity check runs with: the
// go-sdk client's default (2026-07-28, falling back to initialize with
// 2025-11-25 for legacy servers) and a pinned legacy version.
var protocolVersions = []struct{ name, version string }{
	{"default", ""},
	{"2025-06-18", "2025-06-18"},
}

// TestEverythingParity proves that the npm reference server
// @modelcontextprotocol/server-everything looks and behaves the same to a
// go-sdk client through `portcullis connect` as when the client runs it
// directly: the same tools/list and echo result (canonical JSON, RFC 8785),
// the same progress notifications from trigger-long-running-operation, and
// a cancelled call that returns at once while the session keeps working.
func TestEverythingParity(t *testing.T) {
	npm := needNPM(t)
	entry := filepath.Join(npm, harness.EverythingEntry)
	node, err := harness.Node()
	if err != nil {
		t.Fatal(err)
	}
	checkParity(t, paritySpec{
		label:        "everything",
		direct:       func() *exec.Cmd { return exec.Command(node, entry, "stdio") },
		minTools:     13,
		echo:         "echo",
		echoArgs:     map[string]any{"message": "hello through the portcullis"},
		long:         "trigger-long-running-operation",
		progressArgs: map[string]any{"duration": 0.6, "steps": 3},
		steps:        3,
		cancelArgs:   map[string]any{"duration": 60, "steps": 60},
	}, []string{node, entry, "stdio"})
}

// TestEchoParity is TestEverythingParity against the Go echo test server,
// whose call log (ECHO_CALL_LOG) proves what reached the server and whose
// stderr proves that the cancellation reached it.
func TestEchoParity(t *testing.T) {
	logDir := t.TempDir()
	checkParity(t, paritySpec{
		label: "echo",
		direct: func() *exec.Cmd {
			cmd := exec.Command(echoBin)
			cmd.Env = append(os.Environ(), "ECHO_CALL_LOG="+filepath.Join(logDir, "direct.log"))
			return cmd
		},
		minTools:     3,
		echo:         "echo",
		echoArgs:     map[string]any{"message": "hello through the portcullis"},
		long:         "slow",
		progressArgs: map[string]any{"duration_ms": 300, "steps": 3},
		steps:        3,
		cancelArgs:   map[string]any{"duration_ms": 60000, "steps": 600},
		sawCancel:    func(stderr string) bool { return strings.Contains(stderr, "slow cancelled") },
	}, []string{"--env", "ECHO_CALL_LOG=" + filepath.Join(logDir, "proxied.log"), "--", echoBin})

	// Both servers received exactly the same calls, once each, in order.
	direct, proxied := readCallLog(t, filepath.Join(logDir, "direct.log")), readCallLog(t, filepath.Join(logDir, "proxied.log"))
	if len(direct) != 2*4 {
		t.Errorf("the directly run server logged %d calls, want %d (echo, slow, slow, echo per protocol version): %q", len(direct), 2*4, direct)
	}
	if diff := cmp.Diff(direct, proxied); diff != "" {
		t.Errorf("calls received through Portcullis differ from calls received directly (-direct +proxied):\n%s", diff)
	}
}

// checkParity runs the parity checks of spec with every protocol version.
// add is what follows the label in `portcullis servers add` ("--" and the
// command, or flags first).
func checkParity(t *testing.T, spec paritySpec, add []string) {
	h := newHome(t)
	if add[0] != "--" && !strings.HasPrefix(add[0], "-") {
		add = append([]string{"--"}, add...)
	}
	if _, err := h.Run(testContext(t, 30*time.Second), append([]string{"servers", "add", spec.label}, add...)...); err != nil {
		t.Fatal(err)
	}
	allowTools(t, h, spec.label, spec.echo, spec.long)
	startDaemon(t, h)
	for _, pv := range protocolVersions {
		t.Run(pv.name, func(t *testing.T) {
			ctx := testContext(t, 2*time.Minute)
			direct := connectCmd(t, spec.direct(), pv.version)
			proxied := connectCmd(t, h.ConnectCommand(spec.label), pv.version)
			if d, p := direct.Session.InitializeResult().ProtocolVersion, proxied.Session.InitializeResult().ProtocolVersion; d != p {
				t.Errorf("negotiated protocol version %q through Portcullis, %q directly", p, d)
			}
			if pv.version != "" {
				for _, a := range []*agent{direct, proxied} {
					if got := a.Session.InitializeResult().ProtocolVersion; got != pv.version {
						t.Errorf("negotiated protocol version %q, want %q", got, pv.version)
					}
				}
			}

			// tools/list: the same raw result, canonicalized.
			dl, dn := settledTools(t, ctx, direct)
			pl, pn := settledTools(t, ctx, proxied)
			if dn < spec.minTools {
				t.Errorf("the server listed %d tools directly, want at least %d", dn, spec.minTools)
			}
			if diff := cmp.Diff(member(t, dl, "tools"), member(t, pl, "tools")); diff != "" {
				t.Errorf("tools/list lists other tools through Portcullis (%d tools direct, %d proxied) (-direct +proxied):\n%s", dn, pn, diff)
			}
			if m := differingMembers(t, dl, pl); len(m) > 0 {
				t.Errorf("tools/list result members %v differ through Portcullis (the gateway must keep the server's own members, such as _meta, ttlMs, cacheScope, resultType):\ndirect:  %s\nproxied: %s", m, dl, pl)
			}

			// tools/call echo: the same raw result.
			de := callCanonical(t, ctx, direct, spec.echo, spec.echoArgs)
			pe := callCanonical(t, ctx, proxied, spec.echo, spec.echoArgs)
			if diff := cmp.Diff(de, pe); diff != "" {
				t.Errorf("%s result differs through Portcullis (-direct +proxied):\n%s", spec.echo, diff)
			}
			if !strings.Contains(pe, spec.echoArgs["message"].(string)) {
				t.Errorf("%s result %s does not carry the message", spec.echo, pe)
			}

			// Progress: the same notifications, in order, then the result.
			dp := progressRun(t, ctx, direct, spec, "progress-"+pv.name)
			pp := progressRun(t, ctx, proxied, spec, "progress-"+pv.name)
			if len(dp) != spec.steps {
				t.Errorf("directly: %d progress notifications, want %d: %v", len(dp), spec.steps, dp)
			}
			if diff := cmp.Diff(dp, pp); diff != "" {
				t.Errorf("progress notifications differ through Portcullis (-direct +proxied):\n%s", diff)
			}

			// Cancellation: the call returns at once, the session goes on.
			for _, c := range []struct {
				name string
				a    *agent
			}{{"direct", direct}, {"proxied", proxied}} {
				cancelRun(t, ctx, c.a, spec, "cancel-"+pv.name+"-"+c.name)
				if got := callCanonical(t, ctx, c.a, spec.echo, spec.echoArgs); got != de {
					t.Errorf("%s: after the cancellation %s answered %s, want %s", c.name, spec.echo, got, de)
				}
			}
			if spec.sawCancel != nil {
				waitFor(t, "the directly run server to log the cancellation", func() bool { return spec.sawCancel(direct.Stderr.String()) })
				runOf(t, h, proxied.PID(), "a server stderr showing the cancellation", func(r gateway.Status) bool {
					return spec.sawCancel(strings.Join(r.StderrTail, "\n"))
				})
			}
		})
	}
}

// settledTools lists the tools until two lists 300 ms apart agree (servers
// such as server-everything add tools after initialization and announce
// each with list_changed) and returns the raw result in canonical JSON and
// the number of tools.
func settledTools(t *testing.T, ctx context.Context, a *agent) (string, int) {
	t.Helper()
	prev := ""
	for range 20 {
		res, err := a.Session.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		// With 2026-07-28 the client may answer from its cache (ttlMs):
		// the last request on the wire is then the one it cached.
		raw, ok := a.Wire.LastResult("tools/list")
		if !ok {
			t.Fatal("no tools/list result was recorded on the wire")
		}
		c, err := harness.Canonical(raw)
		if err != nil {
			t.Fatal(err)
		}
		if c == prev {
			return c, len(res.Tools)
		}
		prev = c
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatal("tools/list did not settle within 6 s")
	return "", 0
}

// member returns the canonical JSON of one member of the JSON object obj
// (canonical JSON itself), "" when absent.
func member(t *testing.T, obj, name string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(obj), &m); err != nil {
		t.Fatal(err)
	}
	if m[name] == nil {
		return ""
	}
	c, err := harness.Canonical(m[name])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// differingMembers returns the names of the members of two JSON objects
// (canonical JSON) whose values differ or that only one of them has.
func differingMembers(t *testing.T, a, b string) []string {
	t.Helper()
	var ma, mb map[string]json.RawMessage
	if err := json.Unmarshal([]byte(a), &ma); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &mb); err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range ma {
		if member(t, a, k) != member(t, b, k) {
			out = append(out, k)
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// callCanonical calls a tool and returns its raw result in canonical JSON.
func callCanonical(t *testing.T, ctx context.Context, a *agent, tool string, args map[string]any) string {
	t.Helper()
	res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s returned a tool error: %+v", tool, res.Content)
	}
	raw, ok := a.Wire.LastResult("tools/call")
	if !ok {
		t.Fatalf("no result of the %s call was recorded on the wire", tool)
	}
	c, err := harness.Canonical(raw)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// progressRun calls the long tool with a progress token and returns the
// progress notifications received for it, without the token.
func progressRun(t *testing.T, ctx context.Context, a *agent, spec paritySpec, token string) []mcp.ProgressNotificationParams {
	t.Helper()
	p := &mcp.CallToolParams{Name: spec.long, Arguments: spec.progressArgs}
	p.SetProgressToken(token)
	res, err := a.Session.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("calling %s: %v", spec.long, err)
	}
	if res.IsError {
		t.Fatalf("%s returned a tool error: %+v", spec.long, res.Content)
	}
	// The notifications precede the response on the wire, and the client
	// handles them in order; a short wait covers the handler goroutine.
	waitFor(t, "all progress notifications", func() bool { return len(a.progress.forToken(token)) >= spec.steps })
	var out []mcp.ProgressNotificationParams
	for _, n := range a.progress.forToken(token) {
		c := *n
		c.ProgressToken = nil
		out = append(out, c)
	}
	return out
}

// cancelRun starts the long tool, cancels it after its first progress
// notification and checks that the call returns within a second with the
// cancellation and that notifications/cancelled went out.
func cancelRun(t *testing.T, ctx context.Context, a *agent, spec paritySpec, token string) {
	t.Helper()
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := &mcp.CallToolParams{Name: spec.long, Arguments: spec.cancelArgs}
	p.SetProgressToken(token)
	done := make(chan error, 1)
	go func() {
		_, err := a.Session.CallTool(callCtx, p)
		done <- err
	}()
	waitFor(t, "the first progress notification of the call to cancel", func() bool { return len(a.progress.forToken(token)) > 0 })
	cancelled := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled call returned %v, want context.Canceled", err)
		}
		if d := time.Since(cancelled); d > time.Second {
			t.Errorf("the cancelled call took %s to return", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled call did not return within 5 s")
	}
	waitFor(t, "notifications/cancelled on the wire", func() bool { return len(a.Wire.Sent("notifications/cancelled")) > 0 })
}

// waitFor polls cond every 20 ms and fails the test when it does not hold
// within 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10 s waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// callRecord is one line of the echo server's ECHO_CALL_LOG, without the pid.
type callRecord struct {
	Tool string
	Args string // canonical JSON
}

func readCallLog(t *testing.T, path string) []callRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []callRecord
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec struct {
			Tool string          `json:"tool"`
			Args json.RawMessage `json:"args"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("call log line %q: %v", line, err)
		}
		c, err := harness.Canonical(rec.Args)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, callRecord{rec.Tool, c})
	}
	return out
}
