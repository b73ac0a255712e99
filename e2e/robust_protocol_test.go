package e2e

// Protocol edge cases that an SDK produces or an agent gets wrong: a
// message over the size limit whose "id" comes last (the official
// TypeScript SDK writes {...request, jsonrpc, id} and {result, jsonrpc,
// id}), a tools/call whose params name no tool, and a request id reused
// while the first request is in flight.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

// setMaxMessage edits config.json by hand, as a person would, to set
// settings.maxMessageBytes.
func setMaxMessage(t *testing.T, h *harness.Home, n int) {
	t.Helper()
	cfg, err := config.Load(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Settings.MaxMessageBytes = n
	if err := config.Save(h.ConfigFile(), cfg); err != nil {
		t.Fatal(err)
	}
}

// TestRobustOversizedIDLast proves that a line over settings.maxMessageBytes
// fails only its own request even when its "id" is the last member, in
// both directions, through the real shim and daemon: the agent's oversized
// tools/call gets message_too_large (−31040) with the agent's id, and an
// oversized answer from a server that writes "id" last gets
// message_too_large for the pending call, with the agent's id; the session
// goes on, on the same process.
func TestRobustOversizedIDLast(t *testing.T) {
	const limit = config.MinMaxMessageBytes // 1 MiB keeps the test fast
	h := newHome(t)
	addFaulty(t, h, "faulty", "-id-last")
	setMaxMessage(t, h, limit)
	d := startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	a.handshake("1")
	a.call("2", "tools/list", nil, 30*time.Second)
	before, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })

	// Agent → server, id last, with decoy ids inside the arguments.
	big := strings.Repeat(`x\"id\":9,`, (limit+100_000)/9)
	a.send(`{"method":"tools/call","params":{"name":"echo","arguments":{"message":"` + big + `"},"_meta":{"id":8}},"jsonrpc":"2.0","id":"big-call"}`)
	m, _ := a.await(`"big-call"`, 30*time.Second)
	ref := m.refusal(t)
	if m.Error.Code != -31040 || ref.Error != control.MessageTooLarge || ref.Limit != limit {
		t.Errorf("oversized tools/call: code %d, data %+v; want -31040 message_too_large with limit %d", m.Error.Code, ref, limit)
	}

	// Server → agent: the answer to a call in flight, written with "id" last.
	m = a.call("5", "tools/call", toolCall("blob", map[string]any{"bytes": limit + 200_000}), 30*time.Second)
	ref = m.refusal(t)
	if m.Error.Code != -31040 || ref.Error != control.MessageTooLarge || ref.Limit != limit || !strings.Contains(ref.Reason, "tools/call") || ref.Epoch != before.Epoch {
		t.Errorf("oversized answer: code %d, data %+v; want -31040 message_too_large naming tools/call, the limit and epoch %s", m.Error.Code, ref, before.Epoch)
	}

	if got := a.call("6", "tools/call", toolCall("echo", map[string]any{"message": "still here"}), 30*time.Second); got.text(t) != "still here" {
		t.Errorf("after the oversized lines, echo answered %.300s", got.Raw)
	}
	after, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	if after.Epoch != before.Epoch || after.Epochs != 1 || after.InFlight != 0 {
		t.Errorf("the session did not go on: epoch %s → %s (%d epochs, %d in flight)", before.Epoch, after.Epoch, after.Epochs, after.InFlight)
	}
	// The shim, which reads the agent's lines, tells on its stderr.
	if !strings.Contains(a.stderr.String(), `refused the agent's`) {
		t.Errorf("the shim's stderr does not tell of the refused request: %s", a.stderr.String())
	}
	if !strings.Contains(d.Output(), "server message too large") {
		t.Error("the daemon's log does not tell of the server's oversized answer")
	}
}

// TestRobustOversizedCatalog: when the server's own tools/list answer is
// over settings.maxMessageBytes, the gateway cannot fetch the catalog; it
// says so truthfully (the answer was too large, not "the epoch ended"),
// passes tools/list through, and the agent's tools/list fails alone with
// message_too_large while calls still reach the server.
func TestRobustOversizedCatalog(t *testing.T) {
	const limit = config.MinMaxMessageBytes
	h := newHome(t)
	addFaulty(t, h, "faulty", "-description-bytes", fmt.Sprint(limit+1000))
	setMaxMessage(t, h, limit)
	d := startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	a.handshake("1")
	m := a.call("2", "tools/list", nil, 30*time.Second)
	if ref := m.refusal(t); m.Error == nil || ref.Error != control.MessageTooLarge {
		t.Errorf("tools/list with an oversized answer: %.300s; want message_too_large", m.Raw)
	}
	if got := a.call("3", "tools/call", toolCall("blob", map[string]any{"bytes": 3}), 30*time.Second); got.text(t) != "xxx" {
		t.Errorf("blob answered %.300s", got.Raw)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.Output(), "over the 1048576-byte limit") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if out := d.Output(); !strings.Contains(out, "could not fetch the catalog") || !strings.Contains(out, "over the 1048576-byte limit") || strings.Contains(out, "ended before answering") {
		t.Errorf("the daemon's log does not say that the catalog answer was too large:\n%s", out)
	}
}

// TestRobustToolsCallParamsAndDuplicateIDs proves, through the real shim
// and daemon, that a tools/call without a usable params.name is −32602
// Invalid params (not catalog_stale), and that a request reusing the id of
// a request in flight is refused with −32600 and that id while the first
// request's answer still comes back, once.
func TestRobustToolsCallParamsAndDuplicateIDs(t *testing.T) {
	h := newHome(t)
	log := faultyLog(t)
	addFaulty(t, h, "faulty", "-log", log)
	startDaemon(t, h)
	a := startRaw(t, h, "faulty")
	a.handshake("1")

	for i, line := range []string{
		`{"jsonrpc":"2.0","id":10,"method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":["echo"]}`,
		`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"arguments":{}}}`,
		`{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":42}}`,
	} {
		a.send(line)
		m, _ := a.await(fmt.Sprint(10+i), 30*time.Second)
		if m.Error == nil || m.Error.Code != -32602 || !strings.Contains(m.Error.Message, "tools/call needs params.name, a string") {
			t.Errorf("%s: answered %.300s, want -32602 naming params.name", line, m.Raw)
		}
	}

	// The gateway reads the agent's lines in order: the first 60 is in
	// flight when the second arrives, however slow the machine.
	a.request("60", "tools/call", toolCall("slow", map[string]any{"ms": 5000}))
	m := a.call("60", "tools/call", toolCall("echo", map[string]any{"message": "second"}), 30*time.Second)
	if m.Error == nil || m.Error.Code != -32600 || !strings.Contains(m.Error.Message, "request id 60 is already in use by a request in flight") {
		t.Fatalf("reused id 60: answered %.300s, want -32600", m.Raw)
	}
	if got := a.call(`"60"`, "tools/call", toolCall("echo", map[string]any{"message": "string id"}), 30*time.Second); got.text(t) != "string id" {
		t.Errorf(`id "60" (a string) answered %.300s, want its result`, got.Raw)
	}
	first, _ := a.await("60", 30*time.Second)
	if first.text(t) != "slept" {
		t.Errorf("the first request 60 answered %.300s, want \"slept\"", first.Raw)
	}
	// Nothing more for 60: a ping after it is the next answer with that id.
	pong := a.call("60", "ping", nil, 10*time.Second)
	if pong.Error != nil || strings.Contains(pong.Raw, "slept") {
		t.Errorf("ping 60 after the answer: %.300s", pong.Raw)
	}
	calls := 0
	for _, l := range readLines(t, log) {
		if l == "tools/call" {
			calls++
		}
	}
	if calls != 2 {
		t.Errorf("the server received %d tools/call, want 2 (slow and the string id's echo)", calls)
	}
}
