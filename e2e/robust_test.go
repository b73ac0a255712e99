package e2e

// Robustness (issue 8): real-world faults from servers, agents and the host,
// each one contained. The servers are testdata/servers/faulty with one
// fault switched on; the agents are either the go-sdk client through
// `portcullis connect` or a raw agent that writes JSON-RPC lines by hand and
// checks that every line it receives is a valid JSON-RPC message.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestRobustServerOutput proves, for each fault in how a server writes its
// output (cases 1, 2, 3 and 5 of issue 8), that the agent receives only
// valid JSON-RPC with its own ids and id types, that the session works
// (handshake, tools/list, tools/call, for a raw agent and for the go-sdk
// client), and that the fault is reported in `portcullis status` and the
// daemon's log:
//
//   - a banner line before the initialize answer is a diagnostic, never forwarded;
//   - "{bad json" before every answer is skipped and reported;
//   - answering numeric id N with the string "N", or with the number N.0:
//     the agent still gets its own id (7 stays the number 7, "list-1" stays
//     a string), and the mismatch is reported once;
//   - "\r\n" line endings work.
func TestRobustServerOutput(t *testing.T) {
	tests := []struct {
		name       string
		flags      []string
		diagnostic string // a line of status diagnostics must contain it
		log        string // the daemon's log must contain it
	}{
		{"banner", []string{"-banner"}, "faulty test server 1.0 starting up (this line is not JSON-RPC)", "server diagnostic"},
		{"bad json", []string{"-bad-json"}, "{bad json", "server diagnostic"},
		{"string ids", []string{"-string-ids"}, "answered with the id \"", "server changed the type of a request id"},
		{"float ids", []string{"-float-ids"}, ".0 a request whose id was the number", "server changed the type of a request id"},
		{"crlf", []string{"-crlf"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHome(t)
			addFaulty(t, h, "faulty", tt.flags...)
			d := startDaemon(t, h)

			a := startRaw(t, h, "faulty")
			if init := a.handshake("7"); string(init.ID) != "7" || !strings.Contains(init.Raw, `"serverInfo"`) {
				t.Errorf("initialize answered %.300s, want id 7 (a number) and the server's result", init.Raw)
			}
			list := a.call(`"list-1"`, "tools/list", nil, 30*time.Second)
			if string(list.ID) != `"list-1"` || !strings.Contains(list.Raw, `"name":"echo"`) {
				t.Errorf("tools/list answered %.300s, want id \"list-1\" and the echo tool", list.Raw)
			}
			for i, msg := range []string{"first", "second"} {
				id := fmt.Sprint(8 + i)
				got := a.call(id, "tools/call", toolCall("echo", map[string]any{"message": msg}), 30*time.Second)
				if string(got.ID) != id || got.text(t) != msg {
					t.Errorf("tools/call %s answered %.300s, want id %s and %q", id, got.Raw, id, msg)
				}
			}
			if pong := a.call(`"p"`, "ping", nil, 10*time.Second); pong.Error != nil {
				t.Errorf("ping answered %s", pong.Raw)
			}

			// The go-sdk client, which gives up at the first line it
			// cannot decode, works too.
			sdk := connectCmd(t, h.ConnectCommand("faulty"), "")
			if got := callText(t, sdk.Session, "echo", map[string]any{"message": "sdk"}); got != "sdk" {
				t.Errorf("go-sdk client: echo answered %q", got)
			}

			r, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
			if tt.diagnostic != "" && !slices.ContainsFunc(r.Diagnostics, func(s string) bool { return strings.Contains(s, tt.diagnostic) }) {
				t.Errorf("status diagnostics %q do not mention %q", r.Diagnostics, tt.diagnostic)
			}
			if tt.diagnostic == "" && len(r.Diagnostics) > 0 {
				t.Errorf("status diagnostics %q, want none", r.Diagnostics)
			}
			if tt.log != "" && !strings.Contains(d.Output(), tt.log) {
				t.Errorf("the daemon's log does not mention %q", tt.log)
			}
			if r.Epochs != 1 {
				t.Errorf("the run used %d epochs, want 1 (no restart)", r.Epochs)
			}
		})
	}
}

// TestRobustLargeMessages proves case 4: a 70 KB tool description and a 5 MB
// tool result pass unchanged; a single 40 MB line (over the 32 MiB limit)
// fails only its own request, with message_too_large, and the session and
// its server process go on.
func TestRobustLargeMessages(t *testing.T) {
	h := newHome(t)
	addFaulty(t, h, "faulty", "-description-bytes", "70000")
	startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("faulty"), "")
	ctx := testContext(t, 2*time.Minute)

	tools, err := a.Session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var desc string
	for _, tool := range tools.Tools {
		if tool.Name == "echo" {
			desc = tool.Description
		}
	}
	if desc != strings.Repeat("d", 70000) {
		t.Errorf("echo's description has %d bytes, want the 70000 the server sent", len(desc))
	}

	const big = 5_000_000
	res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "blob", Arguments: map[string]any{"bytes": big}})
	if err != nil {
		t.Fatalf("5 MB result: %v", err)
	}
	if got := resultText(res); got != strings.Repeat("x", big) {
		t.Errorf("5 MB result: got %d bytes of text", len(got))
	}
	before, _ := runOf(t, h, a.PID(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })

	_, err = a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "blob", Arguments: map[string]any{"bytes": 40_000_000}})
	ref := refusalIn(t, err)
	if ref.Error != control.MessageTooLarge || ref.Limit != 32<<20 || !strings.Contains(ref.Reason, "tools/call") {
		t.Errorf("40 MB line: got %v (data %+v), want message_too_large naming tools/call and the 32 MiB limit", err, ref)
	}

	if got := callText(t, a.Session, "echo", map[string]any{"message": "still here"}); got != "still here" {
		t.Errorf("after the 40 MB line, echo answered %q", got)
	}
	after, _ := runOf(t, h, a.PID(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	if after.Epoch != before.Epoch || after.PID != before.PID || after.Epochs != 1 {
		t.Errorf("the session did not survive on its process: epoch %s pid %d → epoch %s pid %d (%d epochs)", before.Epoch, before.PID, after.Epoch, after.PID, after.Epochs)
	}
}

// TestRobustDiesMidAnswer: a server that dies while writing its answer (half
// a line, no newline, then exit) is a process that died during the call:
// the call gets epoch_ended, as in case 9, not invalid_response with advice
// to retry (the call may have taken effect); the half line is kept as a
// diagnostic.
func TestRobustDiesMidAnswer(t *testing.T) {
	h := newHome(t)
	addFaulty(t, h, "faulty")
	startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	a.handshake("1")
	a.call("2", "tools/list", nil, 30*time.Second)
	m := a.call("3", "tools/call", toolCall("broken", map[string]any{"kind": "cut-and-exit"}), 30*time.Second)
	if m.Error == nil {
		t.Fatalf("answered %.300s, want an error", m.Raw)
	}
	if ref := m.refusal(t); ref.Error != control.EpochEnded {
		t.Errorf("a server dying mid-answer gave %+v, want epoch_ended", ref)
	}
	r, _ := runOf(t, h, a.pid(), "the diagnostic", func(r gateway.Status) bool {
		return slices.ContainsFunc(r.Diagnostics, func(s string) bool { return strings.Contains(s, "ended in the middle of a message") })
	})
	if !slices.ContainsFunc(r.Diagnostics, func(s string) bool { return strings.Contains(s, `"text":"cut sh`) }) {
		t.Errorf("status diagnostics %q do not keep the half line", r.Diagnostics)
	}
}

// TestRobustInvalidAnswer proves that an answer a server breaks (no
// "jsonrpc" member, both result and error, a line cut short) is not left
// for the agent to wait on for ever: the gateway keeps the line as a
// diagnostic and answers the call at once with invalid_response, keeping the
// agent's id; the session and its process go on. The server answers numeric
// ids as strings, so the broken answers carry "7" for 7, as in case 3.
func TestRobustInvalidAnswer(t *testing.T) {
	h := newHome(t)
	addFaulty(t, h, "faulty", "-string-ids")
	startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	a.handshake("1")
	a.call("2", "tools/list", nil, 30*time.Second)
	before, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })

	for i, kind := range []string{"no-jsonrpc", "result-and-error", "truncated"} {
		id := fmt.Sprint(10 + i)
		start := time.Now()
		m := a.call(id, "tools/call", toolCall("broken", map[string]any{"kind": kind}), 30*time.Second)
		if string(m.ID) != id || m.Error == nil {
			t.Fatalf("%s: answered %.300s, want an error with id %s", kind, m.Raw, id)
		}
		ref := m.refusal(t)
		if m.Error.Code != -31041 || ref.Error != control.InvalidResponse || !strings.Contains(ref.Reason, "tools/call") || ref.Epoch != before.Epoch {
			t.Errorf("%s: got code %d, data %+v; want -31041 invalid_response naming tools/call and epoch %s", kind, m.Error.Code, ref, before.Epoch)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: the refusal took %v", kind, d)
		}
		echo := fmt.Sprint(20 + i)
		if got := a.call(echo, "tools/call", toolCall("echo", map[string]any{"message": kind}), 30*time.Second); got.text(t) != kind {
			t.Errorf("after %s, echo answered %.300s", kind, got.Raw)
		}
	}
	after, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	if after.Epoch != before.Epoch || after.Epochs != 1 {
		t.Errorf("the session changed epoch: %s → %s (%d epochs)", before.Epoch, after.Epoch, after.Epochs)
	}
	for _, want := range []string{`"text":"no jsonrpc member"`, `"message":"both"`, `"text":"cut sh`} {
		if !slices.ContainsFunc(after.Diagnostics, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("status diagnostics %q do not keep the line with %s", after.Diagnostics, want)
		}
	}
}

// TestRobustListChangedBeforeInitialize proves case 6: a server that sends
// notifications/tools/list_changed before answering initialize is accepted,
// nothing reaches the agent before the initialize answer, and the catalog
// is fetched once the handshake is complete.
func TestRobustListChangedBeforeInitialize(t *testing.T) {
	h := newHome(t)
	log := faultyLog(t)
	addFaulty(t, h, "faulty", "-early-list-changed", "-log", log)
	startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	a.request("1", "initialize", map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw-agent", "version": "1.0.0"},
	})
	init, before := a.await("1", 60*time.Second)
	if len(before) > 0 {
		t.Errorf("the agent received %d messages before its initialize answer, first %.300s", len(before), before[0].Raw)
	}
	if init.Error != nil {
		t.Fatalf("initialize: %s", init.Raw)
	}
	if got := readLines(t, log); slices.Contains(got, "tools/list") {
		t.Errorf("the gateway asked for tools/list before the agent's handshake completed: %q", got)
	}
	a.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	r, _ := runOf(t, h, a.pid(), "ready with a catalog", func(r gateway.Status) bool {
		return r.State == gateway.StateReady && r.CatalogRevision != 0
	})
	want := []string{"initialize", "notifications/initialized", "tools/list"}
	if got := readLines(t, log); !slices.Equal(got[:min(len(got), 3)], want) {
		t.Errorf("the server received %q, want %q first", got, want)
	}
	list := a.call("2", "tools/list", nil, 30*time.Second)
	if !strings.Contains(list.Raw, `"name":"crash"`) {
		t.Errorf("tools/list answered %.300s", list.Raw)
	}
	if got := a.call("3", "tools/call", toolCall("echo", map[string]any{"message": "ok"}), 30*time.Second); got.text(t) != "ok" {
		t.Errorf("echo answered %s", got.Raw)
	}
	if r.Epochs != 1 {
		t.Errorf("%d epochs, want 1", r.Epochs)
	}
}

// TestRobustCrashAtStartup proves case 7: a server that exits 1 with a
// traceback on stderr at start-up shows as failed in status with the exit
// code and the last stderr lines, is not restarted, and the agent's
// requests are answered at once with server_unavailable carrying that
// reason.
func TestRobustCrashAtStartup(t *testing.T) {
	h := newHome(t)
	addFaulty(t, h, "faulty", "-traceback")
	startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	sent := time.Now()
	init := a.call("1", "initialize", map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw-agent", "version": "1.0.0"},
	}, 30*time.Second)
	if d := time.Since(sent); d > 10*time.Second {
		t.Errorf("initialize was answered after %s, want at once", d)
	}
	const lastLine = "ModuleNotFoundError: No module named 'mcp'"
	check := func(m wireMsg) {
		t.Helper()
		ref := m.refusal(t)
		if ref.Error != control.ServerUnavailable || !strings.Contains(ref.Reason+ref.ExitStatus, "exit status 1") ||
			!slices.Contains(ref.StderrTail, lastLine) || !strings.Contains(m.Error.Message, "exit status 1") {
			t.Errorf("got %.600s, want server_unavailable naming exit status 1 with the traceback", m.Raw)
		}
	}
	check(init)
	sent = time.Now()
	check(a.call(`"again"`, "tools/list", nil, 30*time.Second))
	if d := time.Since(sent); d > 5*time.Second {
		t.Errorf("a later request was answered after %s, want at once", d)
	}

	r, _ := runOf(t, h, a.pid(), "failed", func(r gateway.Status) bool { return r.State == gateway.StateFailed })
	if r.Exit == nil || r.Exit.Code != 1 || r.Exit.Signal != "" {
		t.Errorf("status exit %+v, want exit code 1", r.Exit)
	}
	if !slices.Contains(r.StderrTail, lastLine) || !slices.Contains(r.StderrTail, "Traceback (most recent call last):") {
		t.Errorf("status stderr tail %q lacks the traceback", r.StderrTail)
	}
	if !strings.Contains(r.Reason, "exit status 1") {
		t.Errorf("status reason %q does not name the exit status", r.Reason)
	}
	time.Sleep(3 * time.Second) // more than the first restart delay
	r, _ = runOf(t, h, a.pid(), "failed", func(r gateway.Status) bool { return r.State == gateway.StateFailed })
	if r.Epochs != 1 {
		t.Errorf("a server that failed at start-up was launched %d times, want once (no restart)", r.Epochs)
	}
}

// TestRobustNeverAnswersInitialize proves case 8: a server that never
// answers initialize (and ignores the end of stdin and SIGTERM) makes the
// agent's initialize fail after the configured startupTimeout ("2s",
// edited into config.json) with a clear server_unavailable error, and its
// whole process group is stopped.
func TestRobustNeverAnswersInitialize(t *testing.T) {
	h := newHome(t)
	addFaultyShell(t, h, "faulty", `sleep 3600 & exec "$0" -silent -stubborn`)
	setStartupTimeout(t, h, "faulty", 2*time.Second)
	startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	r, _ := runOf(t, h, a.pid(), "a process", func(r gateway.Status) bool { return r.PID > 0 })
	if n := len(groupMembers(t, r.PID)); n < 2 {
		t.Fatalf("want the server and its sleep in group %d, found %d processes", r.PID, n)
	}
	sent := time.Now()
	init := a.call("1", "initialize", map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw-agent", "version": "1.0.0"},
	}, 60*time.Second)
	took := time.Since(sent)
	ref := init.refusal(t)
	if ref.Error != control.ServerUnavailable || !strings.Contains(ref.Reason, "did not answer initialize within 2s") || !strings.Contains(ref.Reason, "process group was stopped") {
		t.Errorf("initialize answered %.500s, want server_unavailable: did not answer initialize within 2s", init.Raw)
	}
	if took < 2*time.Second || took > 20*time.Second {
		t.Errorf("initialize was refused after %s, want after the 2 s start-up timeout", took)
	}
	groupGone(t, r.PID, 30*time.Second, "the silent server's group")
	st, _ := runOf(t, h, a.pid(), "failed", func(r gateway.Status) bool { return r.State == gateway.StateFailed })
	if !strings.Contains(st.Reason, "did not answer initialize") {
		t.Errorf("status reason %q", st.Reason)
	}
}

// TestRobustCrashLoop proves case 9: a server that dies during a tools/call
// answers that call with epoch_ended at once; it is restarted with growing
// delays (backoff); after 5 crashes within 60 s it is crash-looping and not
// restarted, calls are refused with server_unavailable telling the person
// to run `portcullis restart`, and that command brings it back.
func TestRobustCrashLoop(t *testing.T) {
	h := newHome(t)
	addFaulty(t, h, "faulty")
	startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	a.handshake("0")
	var epochs []string
	for i := range 5 {
		r, _ := runOf(t, h, a.pid(), "ready on a new epoch", func(r gateway.Status) bool {
			return r.State == gateway.StateReady && r.CatalogRevision != 0 && !slices.Contains(epochs, string(r.Epoch))
		})
		epochs = append(epochs, string(r.Epoch))
		id := fmt.Sprint(100 + i)
		sent := time.Now()
		m := a.call(id, "tools/call", toolCall("crash", nil), 30*time.Second)
		if d := time.Since(sent); d > 5*time.Second {
			t.Errorf("crash %d: answered after %s, want at once", i+1, d)
		}
		ref := m.refusal(t)
		if ref.Error != control.EpochEnded || ref.Epoch != r.Epoch || !strings.Contains(ref.Reason, "exit status 3") {
			t.Errorf("crash %d: got %.500s, want epoch_ended for epoch %s naming exit status 3", i+1, m.Raw, r.Epoch)
		}
	}
	r, _ := runOf(t, h, a.pid(), "crash-looping", func(r gateway.Status) bool { return r.State == gateway.StateCrashLooping })
	if !strings.Contains(r.Reason, "5 crashes") || !strings.Contains(r.Reason, "portcullis restart faulty") {
		t.Errorf("status reason %q", r.Reason)
	}
	time.Sleep(5 * time.Second) // longer than any backoff delay: nothing restarts
	r, _ = runOf(t, h, a.pid(), "crash-looping", func(r gateway.Status) bool { return r.State == gateway.StateCrashLooping })
	if r.Epochs != 5 {
		t.Errorf("%d epochs while crash-looping, want 5", r.Epochs)
	}
	m := a.call("200", "tools/call", toolCall("echo", map[string]any{"message": "x"}), 10*time.Second)
	if ref := m.refusal(t); ref.Error != control.ServerUnavailable || !strings.Contains(ref.Retry, "portcullis restart faulty") {
		t.Errorf("a call while crash-looping answered %.500s", m.Raw)
	}

	// Backoff: each relaunch came later after its crash than the one before.
	exited := eventsOf(t, h, audit.TypeServerExited, string(r.Run))
	started := eventsOf(t, h, audit.TypeServerStarted, string(r.Run))
	if len(exited) != 5 || len(started) != 5 {
		t.Fatalf("audit log has %d server_exited and %d server_started for the run, want 5 each", len(exited), len(started))
	}
	for i := range 4 {
		gap := started[i+1].TS.Sub(exited[i].TS)
		want := time.Duration(500<<i) * time.Millisecond
		if gap < want-50*time.Millisecond {
			t.Errorf("relaunch %d came %s after the crash, want at least %s (backoff)", i+1, gap, want)
		}
	}

	if res, err := h.Run(testContext(t, 30*time.Second), "restart", "faulty"); err != nil {
		t.Fatalf("portcullis restart faulty: %v %+v", err, res)
	}
	r, _ = runOf(t, h, a.pid(), "ready after restart", func(r gateway.Status) bool {
		return r.State == gateway.StateReady && r.CatalogRevision != 0 && !slices.Contains(epochs, string(r.Epoch))
	})
	if got := a.call("201", "tools/call", toolCall("echo", map[string]any{"message": "back"}), 30*time.Second); got.text(t) != "back" {
		t.Errorf("after portcullis restart, echo answered %s", got.Raw)
	}
	if r.Epochs != 6 {
		t.Errorf("%d epochs after the restart, want 6", r.Epochs)
	}
}

// TestRobustStubbornServerGroupKilled proves case 10: a server that ignores
// the end of stdin and SIGTERM, runs behind `sh -c` (which ignores SIGTERM
// too) and has a grandchild holding its stdout, is killed by process group
// once the grace periods (stdin closed, then SIGTERM) have passed when its
// agent leaves; no process is left.
func TestRobustStubbornServerGroupKilled(t *testing.T) {
	h := newHome(t)
	addFaultyShell(t, h, "faulty", `trap "" TERM; sleep 3600 & "$0" -stubborn; wait`)
	startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	a.handshake("1")
	if got := a.call("2", "tools/call", toolCall("echo", map[string]any{"message": "hi"}), 30*time.Second); got.text(t) != "hi" {
		t.Fatalf("echo answered %s", got.Raw)
	}
	r, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	members := groupMembers(t, r.PID)
	if len(members) < 3 {
		t.Fatalf("want sh, sleep and faulty in group %d, found %+v", r.PID, members)
	}
	// Check that SIGTERM really is ignored by the whole group.
	if err := syscall.Kill(-r.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(groupMembers(t, r.PID)); n != len(members) {
		t.Fatalf("SIGTERM ended %d of the %d processes: the server is not stubborn", len(members)-n, len(members))
	}

	closed := time.Now()
	a.in.Close() // the agent leaves
	groupGone(t, r.PID, 60*time.Second, "the stubborn server's group")
	took := time.Since(closed)
	// The supervisor waits DefaultStopGrace (2 s) after closing stdin and
	// DefaultKillGrace (3 s) after SIGTERM before SIGKILL.
	if took < 4*time.Second {
		t.Errorf("the group was gone %s after the agent left, before the grace periods", took)
	}
	for _, p := range members {
		if syscall.Kill(p.PID, 0) == nil {
			if left := groupMembers(t, r.PID); len(left) > 0 {
				t.Errorf("process %d (%s) is still alive", p.PID, p.Comm)
			}
		}
	}
	// The run ends before the reaper recorded the exit (it drains stderr
	// first): wait for both.
	st, _ := runOf(t, h, a.pid(), "ended with its exit", func(r gateway.Status) bool { return r.State == gateway.StateEnded && r.Exit != nil })
	if st.Exit.Signal != "SIGKILL" {
		t.Errorf("ended run shows exit %+v, want killed by SIGKILL", st.Exit)
	}
	if code := a.waitExited(30 * time.Second); code != 0 {
		t.Errorf("the shim exited with %d after its agent left, want 0", code)
	}
}

// TestRobustAgentGarbage proves case 11: a line from the agent that is not
// JSON gets a -32700 answer, a request without "jsonrpc" a -32600 answer,
// each with the request's id when it can be recovered (null otherwise),
// and the session goes on.
func TestRobustAgentGarbage(t *testing.T) {
	h := newHome(t)
	log := faultyLog(t)
	addFaulty(t, h, "faulty", "-log", log)
	startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	a.handshake("1")
	tests := []struct {
		line string
		id   string
		code int
	}{
		{`this is not JSON at all`, "null", -32700},
		{`{"id":5,"method":"tools/list"}`, "5", -32600},
		{`{"jsonrpc":"2.0","id":6,"method":"tools/list"`, "6", -32700},
		{`{"jsonrpc":"2.0","id":"s-7","method":"tools/list","params":"x"}`, `"s-7"`, -32600},
		{`{"jsonrpc":"1.0","id":8,"method":"tools/list"}`, "8", -32600},
		{`[]`, "null", -32600},
	}
	for _, tt := range tests {
		a.send(tt.line)
		m := a.next(30 * time.Second)
		if string(m.ID) != tt.id || m.Error == nil || m.Error.Code != tt.code {
			t.Errorf("%s: answered %.300s, want error %d with id %s", tt.line, m.Raw, tt.code, tt.id)
		}
	}
	// A batch (JSON-RPC 2.0 section 6; MCP 2025-03-26 only): one array
	// answering each request in it by its id; the notification gets
	// nothing.
	a.send(`[{"jsonrpc":"2.0","id":9,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}]`)
	select {
	case line := <-a.lines:
		var got []wireMsg
		if err := json.Unmarshal(line, &got); err != nil || len(got) != 1 || string(got[0].ID) != "9" || got[0].Error == nil || got[0].Error.Code != -32600 {
			t.Errorf("batch answered %.300s, want an array with one -32600 error for id 9", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer to the batch within 30 s")
	}
	if got := a.call("10", "tools/call", toolCall("echo", map[string]any{"message": "fine"}), 30*time.Second); got.text(t) != "fine" {
		t.Errorf("after the garbage, echo answered %s", got.Raw)
	}
	for _, m := range readLines(t, log) {
		if m != "initialize" && m != "notifications/initialized" && m != "tools/list" && m != "tools/call" {
			t.Errorf("the server received %q", m)
		}
	}
	if n := strings.Count(strings.Join(readLines(t, log), " "), "tools/list"); n != 1 {
		t.Errorf("the server received %d tools/list (the gateway's own), want 1: the invalid ones must not pass", n)
	}
}

// TestRobustAgentKilled proves case 12: when the shim is killed with
// SIGKILL, the daemon stops the server's process group, the run ends in
// status with its grants gone, and the audit log records the run's end.
func TestRobustAgentKilled(t *testing.T) {
	h := newHome(t)
	addFaultyShell(t, h, "faulty", `sleep 3600 & exec "$0"`)
	if err := h.SetToolPolicy("faulty", config.PolicyApprove, "echo"); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	a.handshake("1")
	a.request("2", "tools/call", toolCall("echo", map[string]any{"message": "approved"}))
	var reqs []authz.Request
	waitFor(t, "the approval request", func() bool {
		r, err := h.Run(testContext(t, 30*time.Second), "approvals", "--json")
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(r.Stdout), &reqs); err != nil {
			t.Fatalf("approvals --json: %v\n%s", err, r.Stdout)
		}
		return len(reqs) == 1
	})
	if _, err := h.RunAtTerminal(testContext(t, 30*time.Second), "approve", string(reqs[0].ID)); err != nil {
		t.Fatal(err)
	}
	if m, _ := a.await("2", 30*time.Second); m.text(t) != "approved" {
		t.Fatalf("the approved call answered %s", m.Raw)
	}
	r, _ := runOf(t, h, a.pid(), "a grant", func(r gateway.Status) bool { return len(r.Grants) == 1 })
	if g := r.Grants[0]; g.ExecutionEpoch != r.Epoch || g.AgentRun != r.Run || !slices.Contains(g.ToolScope, "echo") {
		t.Errorf("grant %+v, want one for run %s epoch %s covering echo", g, r.Run, r.Epoch)
	}
	if n := len(groupMembers(t, r.PID)); n < 2 {
		t.Fatalf("want the server and its sleep in group %d, found %d", r.PID, n)
	}

	signalPID(t, a.pid(), syscall.SIGKILL)
	groupGone(t, r.PID, 30*time.Second, "the killed agent's server group")
	st, _ := runOf(t, h, a.pid(), "ended", func(r gateway.Status) bool { return r.State == gateway.StateEnded })
	if len(st.Grants) != 0 {
		t.Errorf("the ended run still has grants %+v", st.Grants)
	}
	waitFor(t, "run_ended in the audit log", func() bool { return len(eventsOf(t, h, audit.TypeRunEnded, string(r.Run))) == 1 })
	verifyAudit(t, h)
}

// TestRobustDaemonKilledDuringCall proves case 13: when the daemon is killed
// with SIGKILL during a call, the agent is not left hanging and keeps its
// connection: the shim answers the pending call epoch_ended (it may or may
// not have taken effect), starts a new daemon, replays the agent's
// initialize and tells it list_changed; the next call is answered by the new
// daemon, whose run_started records the run it continues. The server (which
// ignores the end of its stdin, with a grandchild in its group) left
// orphaned is found by the new daemon, which stops its whole group; the
// audit log verifies.
func TestRobustDaemonKilledDuringCall(t *testing.T) {
	h := newHome(t)
	log := faultyLog(t)
	addFaultyShell(t, h, "faulty", `sleep 3600 & exec "$0" -stubborn -log `+log)
	ctx := testContext(t, 3*time.Minute)
	stopDaemonsOf(t, h)
	d1, err := h.StartDaemon(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d1.Stop(5 * time.Second)
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(h.Dir, "daemon.log"))
			t.Logf("the first daemon's output:\n%s\ndaemon.log:\n%s", d1.Output(), b)
		}
	})
	a := startRaw(t, h, "faulty")
	a.handshake("1")
	r, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	a.request("2", "tools/call", toolCall("slow", map[string]any{"ms": 120000}))
	waitFor(t, "the slow call to reach the server", func() bool { return slices.Contains(readLines(t, log), "tools/call") })
	// Only the recorded group is to find them (see leaveEpochCgroups).
	leaveEpochCgroups(t, pidsOf(groupMembers(t, r.PID))...)

	signalPID(t, d1.PID(), syscall.SIGKILL)
	<-d1.Done()
	killed := time.Now()
	m, _ := a.await("2", 30*time.Second)
	if d := time.Since(killed); d > 10*time.Second {
		t.Errorf("the pending call was answered %s after the daemon died", d)
	}
	if ref := m.refusal(t); ref.Error != control.EpochEnded || !strings.Contains(ref.Reason, "connection to the Portcullis daemon (pid "+strconv.Itoa(d1.PID())+") was lost") ||
		!strings.Contains(ref.Reason, "may or may not have taken effect") || ref.Tool != "slow" {
		t.Errorf("the pending call answered %.500s, want epoch_ended: connection lost, with the call's effect unknown", m.Raw)
	}
	// The agent is told its tools changed, and its next call is answered
	// by a new daemon.
	for {
		n := a.next(30 * time.Second)
		if strings.Contains(string(n.Raw), "notifications/tools/list_changed") {
			break
		}
	}
	res := a.call("3", "tools/call", toolCall("slow", map[string]any{"ms": 1}), time.Minute)
	if strings.Contains(string(res.Raw), `"error"`) {
		t.Errorf("the call after the restart was answered %.500s", res.Raw)
	}
	pid2 := daemonPID(t, h)
	if pid2 == d1.PID() {
		t.Fatalf("still daemon %d", pid2)
	}
	if !strings.Contains(a.stderr.String(), "connection to the Portcullis daemon (pid "+strconv.Itoa(d1.PID())+") was lost") ||
		!strings.Contains(a.stderr.String(), "connected again") {
		t.Errorf("the shim's stderr does not say what happened: %q", a.stderr.String())
	}
	groupGone(t, r.PID, 30*time.Second, "the previous daemon's orphaned server group")
	if b, _ := os.ReadFile(filepath.Join(h.Dir, "daemon.log")); !bytes.Contains(b, []byte("stopping a server left running by a previous daemon")) {
		t.Errorf("the new daemon's log does not mention the orphan:\n%s", b)
	}
	a.in.Close()
	a.eof(30 * time.Second)
	if code := a.waitExited(30 * time.Second); code != 0 {
		t.Errorf("the shim exited %d once the agent closed its input, want 0", code)
	}
	verifyAudit(t, h)
	if evs := eventsOf(t, h, audit.TypeToolCalled, string(r.Run)); len(evs) != 1 {
		t.Errorf("%d tool_called events for the first run, want 1", len(evs))
	}
	cont := continuedRuns(t, h)
	if len(cont) != 1 || cont[0].Continues.AgentRun != r.Run || cont[0].Continues.DaemonPID != d1.PID() {
		t.Errorf("run_started events recording a continued run: %+v; want one continuing %s of daemon %d", cont, r.Run, d1.PID())
	}
}

// TestRobustCorruptConfig proves case 14: while a daemon runs, a config.json
// broken by hand is reported in status (file, line, column) and the last
// good configuration stays in force; the last good file, including a
// server added while the daemon ran, is kept as config.json.last-good; a new
// daemon refuses to start naming the file, line and column, and leaves the
// file untouched.
func TestRobustCorruptConfig(t *testing.T) {
	h := newHome(t)
	addFaulty(t, h, "one")
	d := startDaemon(t, h)
	addFaulty(t, h, "two") // while the daemon runs
	if _, err := h.Status(testContext(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(good, []byte(`"mcpServers": {`), []byte(`"mcpServers": {,`), 1)
	if bytes.Equal(bad, good) {
		t.Fatalf("nothing to break in:\n%s", good)
	}
	line := bytes.Count(good[:bytes.Index(good, []byte(`"mcpServers"`))], []byte("\n")) + 1
	if err := os.WriteFile(h.ConfigFile(), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	where := fmt.Sprintf("%s:%d:", h.ConfigFile(), line)

	rep, err := h.Status(testContext(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.ConfigError, where) {
		t.Errorf("status configError %q does not name %s", rep.ConfigError, where)
	}
	a := startRaw(t, h, "two")
	a.handshake("1")
	if got := a.call("2", "tools/call", toolCall("echo", map[string]any{"message": "last good"}), 30*time.Second); got.text(t) != "last good" {
		t.Errorf("with a broken file, the last good configuration did not serve: %s", got.Raw)
	}
	a.in.Close()
	a.waitExited(30 * time.Second)
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	r, err := h.Run(testContext(t, 30*time.Second), "daemon")
	var ee *harness.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("portcullis daemon with a broken config: %v, want a non-zero exit", err)
	}
	if !strings.Contains(r.Stderr, where) || !strings.Contains(r.Stderr, ".last-good") {
		t.Errorf("stderr does not name %s and the .last-good copy:\n%s", where, r.Stderr)
	}
	if after, _ := os.ReadFile(h.ConfigFile()); !bytes.Equal(after, bad) {
		t.Errorf("config.json was changed:\n%s", after)
	}
	if lg, _ := os.ReadFile(h.ConfigFile() + ".last-good"); !bytes.Equal(lg, good) {
		t.Errorf("config.json.last-good is not the last good file (with server two):\n%s", lg)
	}
}

// TestRobustRequestsBeforeHandshake: a request that comes before any
// initialize or server/discover is refused as an Invalid Request unless it
// carries the 2026-07-28 protocol version in its _meta; then the agent
// skipped discovery (which that era allows), the gateway fetches the catalog
// itself, and the request is checked against it: an unknown tool is
// unknown_tool, arguments missing a required member are invalid_arguments,
// a call whose _meta lacks the client's capabilities is -32602, no approval
// request is raised for any of them, and none reaches the server.
func TestRobustRequestsBeforeHandshake(t *testing.T) {
	h := newHome(t)
	log := filepath.Join(t.TempDir(), "calls.jsonl")
	auditAddServer(t, h, "echo", config.Server{Command: echoBin, Env: map[string]string{"ECHO_CALL_LOG": log}})
	startDaemon(t, h)

	legacy := startRaw(t, h, "echo")
	m := legacy.call("1", "tools/call", toolCall("echo", map[string]any{"message": "early"}), 30*time.Second)
	if m.Error == nil || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "before the session was initialized") {
		t.Errorf("a legacy call before initialize answered %.300s, want -32600", m.Raw)
	}
	legacy.handshake("2")
	if got := legacy.call("3", "tools/list", nil, 30*time.Second); got.Error != nil || !strings.Contains(string(got.Result), `"echo"`) {
		t.Errorf("tools/list after the handshake answered %.300s", got.Raw)
	}
	if calls := auditCallLog(t, log); len(calls) != 0 {
		t.Errorf("the refused call reached the server: %s", calls)
	}

	modern := startRaw(t, h, "echo")
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{}}
	call := func(id, tool string, args map[string]any) wireMsg {
		return modern.call(id, "tools/call", map[string]any{"name": tool, "arguments": args, "_meta": meta}, 60*time.Second)
	}
	// The agent has not listed the tools yet: the catalog the gateway
	// fetched itself tells it to.
	if m := call("1", "nope", map[string]any{}); m.refusal(t).Error != control.CatalogStale {
		t.Errorf("an unknown tool without discovery answered %.300s, want catalog_stale", m.Raw)
	}
	if l := modern.call("2", "tools/list", map[string]any{"_meta": meta}, 30*time.Second); l.Error != nil || !strings.Contains(string(l.Result), `"echo"`) {
		t.Fatalf("tools/list without discovery answered %.300s", l.Raw)
	}
	if m := call("3", "nope", map[string]any{}); m.Error == nil || m.Error.Code != -32602 {
		t.Errorf("an unknown tool answered %.300s, want unknown_tool (-32602)", m.Raw)
	}
	if m := call("4", "echo", map[string]any{}); m.refusal(t).Error != control.InvalidArguments {
		t.Errorf("echo without its required message answered %.300s, want invalid_arguments", m.Raw)
	}
	// The 2026-07-28 protocol requires the client's capabilities in the
	// _meta of every request: a call without them is refused at once, before
	// any approval request.
	noCaps := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
	if m := modern.call("5", "tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"message": "no caps"}, "_meta": noCaps}, 30*time.Second); m.Error == nil || m.Error.Code != -32602 || !strings.Contains(m.Error.Message, "clientCapabilities") {
		t.Errorf("a call without clientCapabilities answered %.300s, want -32602 naming them", m.Raw)
	}
	if p := approvals(t, h); len(p) != 0 {
		t.Errorf("approval requests raised for calls the catalog or the protocol refuses: %+v", p)
	}
	if calls := auditCallLog(t, log); len(calls) != 0 {
		t.Errorf("a refused call reached the server: %s", calls)
	}
	st := waitRun(t, h, modern.pid(), buildWait, "ready with a catalog", func(r gateway.Status) bool {
		return r.State == gateway.StateReady && r.CatalogRevision > 0
	})
	if st.Epochs != 1 {
		t.Errorf("%d epochs, want 1", st.Epochs)
	}
}
