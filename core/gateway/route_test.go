package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// wireError decodes the error of a response line.
func wireError(t *testing.T, line json.RawMessage) (code int, message string, data *control.Refusal) {
	t.Helper()
	var e struct {
		Code    int              `json:"code"`
		Message string           `json:"message"`
		Data    *control.Refusal `json:"data"`
	}
	raw := mcpwire.GetPath(line, "error")
	if raw == nil || json.Unmarshal(raw, &e) != nil {
		t.Fatalf("want an error response, got %.300s", line)
	}
	return e.Code, e.Message, e.Data
}

// TestOversizedIDLast: a line over the limit whose "id" comes after
// everything else (as the TypeScript SDK writes it) still fails only its own
// request, in each direction; a server's oversized request is never taken
// for the answer to a call that has the same id; what cannot be answered is
// kept in the diagnostics.
func TestOversizedIDLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 64 << 10
		pad := strings.Repeat(`{"id":0,"s":"\"id\":1"},`, 8000) // ~190 KB, decoy ids included
		r := newScriptRig(t, limit, 5*time.Second)
		r.handshake()

		// Agent → server: refused with message_too_large for the agent's id.
		r.agent.send(`{"method":"tools/call","params":{"name":"t","arguments":{"a":[` + pad + `{}]}},"jsonrpc":"2.0","id":"big-1"}`)
		code, _, ref := wireError(t, r.agent.nth(`"big-1"`, 1))
		if code != -31040 || ref.Error != control.MessageTooLarge || ref.Limit != limit {
			t.Errorf("oversized call: code %d, %+v; want -31040 message_too_large with limit %d", code, ref, limit)
		}
		r.proc(1).quiet(t)

		// Server → agent: the answer to a call in flight, id last.
		r.agent.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}}`)
		call := r.proc(1).next(t)
		gid := string(mcpwire.GetPath(call, "id"))
		r.proc(1).write(`{"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 2*limit) + `"}],"id":99},"jsonrpc":"2.0","id":` + gid + `}`)
		code, _, ref = wireError(t, r.agent.nth("7", 1))
		if code != -31040 || ref.Error != control.MessageTooLarge || !strings.Contains(ref.Reason, "tools/call") || ref.Epoch != "E1" {
			t.Errorf("oversized answer: code %d, %+v; want -31040 message_too_large naming tools/call and E1", code, ref)
		}

		// The server's own oversized request, whose id happens to equal the
		// gateway id of a call in flight: answered to the server, never taken
		// for the call's answer.
		r.agent.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"t"}}`)
		call = r.proc(1).next(t)
		gid = string(mcpwire.GetPath(call, "id"))
		r.proc(1).write(`{"method":"sampling/createMessage","params":{"messages":[` + pad + `{}]},"jsonrpc":"2.0","id":` + gid + `}`)
		back := r.proc(1).next(t)
		if string(mcpwire.GetPath(back, "id")) != gid || mcpwire.GetPath(back, "error", "code") == nil || string(mcpwire.GetPath(back, "error", "code")) != "-31040" {
			t.Errorf("the server's oversized request was answered %.300s, want error -31040 with id %s", back, gid)
		}
		if got := r.agent.answers("8"); len(got) != 0 {
			t.Fatalf("call 8 was answered by the server's request: %.300s", got[0])
		}
		r.proc(1).write(`{"jsonrpc":"2.0","id":` + gid + `,"result":{"content":[{"type":"text","text":"fine"}]}}`)
		if got := r.agent.nth("8", 1); mcpwire.GetPath(got, "result") == nil {
			t.Errorf("call 8 answered %.300s, want its result", got)
		}

		// A notification and an answer without id: dropped, with a trace.
		r.proc(1).write(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":[` + pad + `{}]}}`)
		r.proc(1).write(`{"jsonrpc":"2.0","result":{"data":[` + pad + `{}]}}`)
		r.proc(1).write(`{"jsonrpc":"2.0","result":{"data":[` + pad + `{}]},"id":12345}`)

		// Agent → server: the agent's oversized answer to a server request
		// answers that request to the server with an error.
		r.proc(1).write(`{"jsonrpc":"2.0","id":"srv-1","method":"roots/list"}`)
		req := r.agent.waitRequest("roots/list")
		aid := string(mcpwire.GetPath(req, "id"))
		r.agent.send(`{"result":{"roots":[` + pad + `{}]},"jsonrpc":"2.0","id":` + aid + `}`)
		back = r.proc(1).next(t)
		if string(mcpwire.GetPath(back, "id")) != `"srv-1"` || string(mcpwire.GetPath(back, "error", "code")) != "-31040" {
			t.Errorf("the server's roots/list was answered %.300s, want error -31040 with id \"srv-1\"", back)
		}

		synctest.Wait()
		want := []string{`"sampling/createMessage" request (id ` + gid + `), answered with message_too_large`, `"notifications/message" notification`, "it has no id that could be read", "its id 12345 names no request in flight"}
		diags := r.sess.Status().Diagnostics
		for _, w := range want {
			if !slices.ContainsFunc(diags, func(d string) bool { return strings.Contains(d, w) }) {
				t.Errorf("diagnostics %q do not mention %q", diags, w)
			}
		}
		if st := r.sess.Status(); st.State != StateReady || st.InFlight != 0 {
			t.Errorf("session %s with %d in flight, want ready and none", st.State, st.InFlight)
		}
	})
}

// TestToolsCallInvalidParams: a tools/call whose params do not name a tool
// is -32602 Invalid params (JSON-RPC 2.0 section 5.1), not catalog_stale; a
// well-formed name absent from the revision the agent holds stays
// catalog_stale.
func TestToolsCallInvalidParams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t, 0, 5*time.Second)
		r.handshake()
		tests := []struct{ params, why string }{
			{``, "params is missing"},
			{`,"params":[1]`, "params is not an object"},
			{`,"params":{}`, "params.name is missing"},
			{`,"params":{"arguments":{}}`, "params.name is missing"},
			{`,"params":{"name":5}`, "params.name is not a string"},
			{`,"params":{"name":null}`, "params.name is not a string"},
			{`,"params":{"name":["t"]}`, "params.name is not a string"},
			{`,"params":{"name":""}`, "params.name is empty"},
		}
		for i, tt := range tests {
			id := fmt.Sprint(100 + i)
			r.agent.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call"` + tt.params + `}`)
			code, msg, _ := wireError(t, r.agent.nth(id, 1))
			if code != -32602 || !strings.Contains(msg, "tools/call needs params.name, a string") || !strings.Contains(msg, tt.why) {
				t.Errorf("params %s: code %d %q, want -32602 naming params.name and %q", tt.params, code, msg, tt.why)
			}
		}
		r.proc(1).quiet(t)

		// Before tools/list the agent holds no revision: a name not in the
		// catalog is catalog_stale, as before.
		r.agent.send(`{"jsonrpc":"2.0","id":200,"method":"tools/call","params":{"name":"nope"}}`)
		code, _, ref := wireError(t, r.agent.nth("200", 1))
		if code != control.CatalogStale.Code() || ref.Error != control.CatalogStale || ref.Tool != "nope" {
			t.Errorf("unknown tool: code %d %+v, want catalog_stale", code, ref)
		}
		// A good call still goes through.
		r.agent.send(`{"jsonrpc":"2.0","id":201,"method":"tools/call","params":{"name":"t"}}`)
		call := r.proc(1).next(t)
		r.proc(1).write(`{"jsonrpc":"2.0","id":` + string(mcpwire.GetPath(call, "id")) + `,"result":{"content":[]}}`)
		if got := r.agent.nth("201", 1); mcpwire.GetPath(got, "result") == nil {
			t.Errorf("good call answered %.300s", got)
		}
	})
}

// TestRequestMetaInvalid: a request whose _meta names the 2026-07-28
// protocol (or later) must carry the client's capabilities there, as an
// object, and client info, when present, as an object; otherwise it is
// -32602 and reaches neither the server nor the gate. A request of the
// legacy era (no protocol version in _meta, or an older one) is not checked,
// and neither is ping, which the gateway answers itself.
func TestRequestMetaInvalid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t, 0, 5*time.Second)
		r.handshake()
		const pv = `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`
		bad := []struct{ meta, why string }{
			{`{` + pv + `}`, `has no "io.modelcontextprotocol/clientCapabilities"`},
			{`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":null}`, `"io.modelcontextprotocol/clientCapabilities" must be an object`},
			{`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":[]}`, `"io.modelcontextprotocol/clientCapabilities" must be an object`},
			{`{"io.modelcontextprotocol/protocolVersion":"2027-01-01","io.modelcontextprotocol/clientCapabilities":"all"}`, `must be an object`},
			{`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":"me"}`, `"io.modelcontextprotocol/clientInfo" must be an object`},
		}
		for i, tt := range bad {
			for j, method := range []string{"tools/call", "tools/list"} {
				id := fmt.Sprint(100 + 10*i + j)
				r.agent.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":{"name":"t","_meta":` + tt.meta + `}}`)
				code, msg, _ := wireError(t, r.agent.nth(id, 1))
				if code != -32602 || !strings.Contains(msg, tt.why) {
					t.Errorf("%s with _meta %s: code %d %q, want -32602 and %q", method, tt.meta, code, msg, tt.why)
				}
			}
		}
		r.proc(1).quiet(t)
		if st := r.sess.Status(); st.InFlight != 0 {
			t.Errorf("%d requests in flight after the refusals, want none", st.InFlight)
		}

		// Fine: complete modern _meta, legacy or absent protocol version, ping.
		good := []string{
			`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"a","version":"1"}}`,
			`{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}`,
			`{"progressToken":1}`,
		}
		for i, meta := range good {
			id := fmt.Sprint(200 + i)
			r.agent.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"t","_meta":` + meta + `}}`)
			call := r.proc(1).next(t)
			r.proc(1).write(`{"jsonrpc":"2.0","id":` + string(mcpwire.GetPath(call, "id")) + `,"result":{"content":[]}}`)
			if got := r.agent.nth(id, 1); mcpwire.GetPath(got, "result") == nil {
				t.Errorf("call with _meta %s answered %.300s, want its result", meta, got)
			}
		}
		r.agent.send(`{"jsonrpc":"2.0","id":300,"method":"ping","params":{"_meta":{` + pv + `}}}`)
		if got := r.agent.nth("300", 1); mcpwire.GetPath(got, "result") == nil {
			t.Errorf("ping answered %.300s, want a result", got)
		}
	})
}

// TestEndOfInputDrains: when the agent's input ends with EndOfInput (the
// shim saw the agent close its stdin, and keeps the connection open), the
// run goes on until the requests sent before are answered, and their
// answers reach the agent; an end of the connection, without EndOfInput or
// during the drain (the agent or its shim is gone), ends the run at once,
// refusing what is in flight.
func TestEndOfInputDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t, 0, 5*time.Second)
		r.handshake()
		r.agent.send(`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"t"}}`)
		r.agent.send(control.EndOfInput)
		call := r.proc(1).next(t)
		synctest.Wait()
		select {
		case err := <-r.served:
			t.Fatalf("Serve returned (%v) with a call in flight after EndOfInput", err)
		default:
		}
		r.proc(1).write(`{"jsonrpc":"2.0","id":` + string(mcpwire.GetPath(call, "id")) + `,"result":{"content":[{"type":"text","text":"late"}]}}`)
		if got := r.agent.nth("10", 1); !strings.Contains(string(got), "late") {
			t.Errorf("call answered %.300s, want the server's result", got)
		}
		select {
		case err := <-r.served:
			r.served <- err // for the cleanup
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return once nothing was in flight")
		}
		if st := r.sess.Status(); st.State != StateEnded {
			t.Errorf("session %s after the drain, want ended", st.State)
		}

		// Without EndOfInput: the agent is gone, the run ends at once.
		r2 := newScriptRig(t, 0, 5*time.Second)
		r2.handshake()
		r2.agent.send(`{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"t"}}`)
		r2.proc(1).next(t)
		r2.agent.inW.Close()
		select {
		case err := <-r2.served:
			r2.served <- err
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return at the end of the input without EndOfInput")
		}
		if code, _, ref := wireError(t, r2.agent.nth("20", 1)); code == 0 || ref == nil || ref.Error != control.EpochEnded {
			t.Errorf("call in flight when the agent left: code %d %+v, want epoch_ended", code, ref)
		}

		// The shim dies during the drain: the run ends at once too.
		r3 := newScriptRig(t, 0, 5*time.Second)
		r3.handshake()
		r3.agent.send(`{"jsonrpc":"2.0","id":25,"method":"tools/call","params":{"name":"t"}}`)
		r3.proc(1).next(t)
		r3.agent.send(control.EndOfInput)
		synctest.Wait()
		select {
		case err := <-r3.served:
			t.Fatalf("Serve returned (%v) while draining", err)
		default:
		}
		r3.agent.inW.Close()
		select {
		case err := <-r3.served:
			r3.served <- err
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return when the connection ended during the drain")
		}
		if st := r3.sess.Status(); st.State != StateEnded {
			t.Errorf("session %s after the agent left during the drain, want ended", st.State)
		}
	})
}

// TestEndOfInputDrainBounded: the drain after EndOfInput lasts at most
// DrainTimeout; what is still unanswered then is refused as the run ends.
func TestEndOfInputDrainBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t, 0, 5*time.Second)
		r.sess.opts.DrainTimeout = 200 * time.Millisecond
		r.handshake()
		r.agent.send(`{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"name":"t"}}`)
		r.proc(1).next(t) // never answered
		r.agent.send(control.EndOfInput)
		select {
		case err := <-r.served:
			r.served <- err
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return after the drain timeout")
		}
		code, _, ref := wireError(t, r.agent.nth("30", 1))
		if code == 0 || ref == nil || ref.Error != control.EpochEnded {
			t.Errorf("call unanswered at the drain timeout: code %d %+v, want epoch_ended", code, ref)
		}
	})
}

// TestDiesMidAnswer: a process that dies while writing an answer (its last
// line has no newline) ends its epoch: the call gets epoch_ended, not
// invalid_response, and the half line is a diagnostic, also when the exit is
// seen before the end of the output.
func TestDiesMidAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t, 0, 5*time.Second)
		r.handshake()
		r.agent.send(`{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"t"}}`)
		call := r.proc(1).next(t)
		go func() {
			_, _ = r.proc(1).outW.Write([]byte(`{"jsonrpc":"2.0","id":` + string(mcpwire.GetPath(call, "id")) + `,"result":{"content":[{"type":"text","text":"cut sh`))
		}()
		synctest.Wait() // the half line is read, waiting for its end
		r.proc(1).exit()
		code, _, ref := wireError(t, r.agent.nth("50", 1))
		if code == 0 || ref == nil || ref.Error != control.EpochEnded {
			t.Errorf("call when the process died mid-answer: code %d %+v, want epoch_ended", code, ref)
		}
		r.proc(1).outW.Close()
		synctest.Wait()
		if diags := r.sess.Status().Diagnostics; !slices.ContainsFunc(diags, func(d string) bool { return strings.Contains(d, "ended in the middle of a message") }) {
			t.Errorf("diagnostics %q do not keep the half answer", diags)
		}
	})
}

// TestSecondInitializeRefused: once the agent's handshake completed, another
// initialize is -32600 and never reaches the server, which would otherwise
// renegotiate behind the session's back; the session goes on.
func TestSecondInitializeRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t, 0, 5*time.Second)
		r.handshake()
		r.agent.send(`{"jsonrpc":"2.0","id":"again","method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"a","version":"2"}}}`)
		if code, msg, _ := wireError(t, r.agent.nth(`"again"`, 1)); code != -32600 || !strings.Contains(msg, "already initialized") {
			t.Errorf("second initialize: code %d %q, want -32600 saying it is already initialized", code, msg)
		}
		// As a notification (no id): nothing to answer, and never forwarded.
		r.agent.send(`{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"a","version":"3"}}}`)
		r.proc(1).quiet(t)

		// Sent right after the first, before its answer: refused too.
		r2 := newScriptRig(t, 0, 5*time.Second)
		r2.agent.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}` + "\n" +
			`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
		if got := r2.agent.nth("1", 1); mcpwire.GetPath(got, "result") == nil {
			t.Errorf("first initialize answered %.300s", got)
		}
		if code, _, _ := wireError(t, r2.agent.nth("2", 1)); code != -32600 {
			t.Errorf("initialize piped after the first: code %d, want -32600", code)
		}

		r.agent.send(`{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"t"}}`)
		call := r.proc(1).next(t)
		r.proc(1).write(`{"jsonrpc":"2.0","id":` + string(mcpwire.GetPath(call, "id")) + `,"result":{"content":[]}}`)
		if got := r.agent.nth("40", 1); mcpwire.GetPath(got, "result") == nil {
			t.Errorf("call after the refused initialize answered %.300s", got)
		}
	})
}

// TestAgentBatchRefused: a JSON-RPC batch from the agent gets one array
// with a -32600 error for each request in it, by id (JSON-RPC 2.0 section
// 6); a batch of notifications gets nothing; an empty one a single error
// with id null; none of it reaches the server.
func TestAgentBatchRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t, 0, 5*time.Second)
		r.handshake()
		r.agent.send(`[{"jsonrpc":"2.0","id":"b1","method":"ping"},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x"}},{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}},{"id":8}]`)
		r.agent.send(`[{"jsonrpc":"2.0","method":"notifications/progress"}]`)
		r.agent.send(`[]`)
		r.agent.send(`{"jsonrpc":"2.0","id":"after","method":"ping"}`)
		r.agent.nth(`"after"`, 1)
		r.proc(1).quiet(t)
		lines := r.agent.all()
		var arrays, nulls int
		for _, l := range lines {
			switch {
			case len(l) > 0 && l[0] == '[':
				arrays++
				var got []struct {
					ID    json.RawMessage `json:"id"`
					Error struct{ Code int }
				}
				if err := json.Unmarshal(l, &got); err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, g := range got {
					if g.Error.Code != -32600 {
						t.Errorf("batch answer %s: code %d, want -32600", g.ID, g.Error.Code)
					}
					ids = append(ids, string(g.ID))
				}
				if want := []string{`"b1"`, `7`, `8`}; !slices.Equal(ids, want) {
					t.Errorf("batch answered ids %v, want %v", ids, want)
				}
			case string(mcpwire.GetPath(l, "id")) == "null":
				nulls++
			}
		}
		if arrays != 1 || nulls != 1 {
			t.Errorf("%d array answers and %d answers with id null, want 1 and 1 (the empty batch):\n%s", arrays, nulls, lines)
		}
	})
}

// TestDuplicateIDInFlight: a request whose id equals that of a request of
// the agent still in flight is refused with -32600 and that id, and the
// first request goes on: its answer comes back once. Ids compare as
// written: 60 and "60" differ. Once answered, an id may be used again.
func TestDuplicateIDInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newScriptRig(t, 0, 5*time.Second)
		r.handshake()

		r.agent.send(`{"jsonrpc":"2.0","id":60,"method":"tools/call","params":{"name":"t","arguments":{"first":true}}}`)
		first := r.proc(1).next(t)
		for _, dup := range []string{
			`{"jsonrpc":"2.0","id":60,"method":"tools/call","params":{"name":"t","arguments":{"second":true}}}`,
			`{"jsonrpc":"2.0","id":60,"method":"ping"}`,
			`{"jsonrpc":"2.0","method":"tools/list","id": 60 }`,
		} {
			n := len(r.agent.answers("60"))
			r.agent.send(dup)
			code, msg, _ := wireError(t, r.agent.nth("60", n+1))
			if code != -32600 || !strings.Contains(msg, "request id 60 is already in use by a request in flight") {
				t.Errorf("%s: code %d %q, want -32600 naming id 60", dup, code, msg)
			}
		}
		r.proc(1).quiet(t)

		// "60" is another id.
		r.agent.send(`{"jsonrpc":"2.0","id":"60","method":"tools/call","params":{"name":"t"}}`)
		other := r.proc(1).next(t)
		r.proc(1).write(`{"jsonrpc":"2.0","id":` + string(mcpwire.GetPath(other, "id")) + `,"result":{"content":[{"type":"text","text":"string"}]}}`)
		if got := r.agent.nth(`"60"`, 1); mcpwire.GetPath(got, "result") == nil {
			t.Errorf(`call "60" answered %.300s`, got)
		}

		// The first call's answer reaches the agent once, with its id.
		r.proc(1).write(`{"jsonrpc":"2.0","id":` + string(mcpwire.GetPath(first, "id")) + `,"result":{"content":[{"type":"text","text":"first"}]}}`)
		got := r.agent.nth("60", 4)
		if !strings.Contains(string(got), `"text":"first"`) {
			t.Errorf("call 60 answered %.300s, want its result", got)
		}
		if n := len(r.agent.answers("60")); n != 4 {
			t.Errorf("id 60 answered %d times, want 3 refusals and 1 result", n)
		}

		// Answered: the id is free again.
		r.agent.send(`{"jsonrpc":"2.0","id":60,"method":"ping"}`)
		if got := r.agent.nth("60", 5); mcpwire.GetPath(got, "result") == nil {
			t.Errorf("ping 60 after the answer: %.300s", got)
		}
	})
}

// TestDuplicateIDWhileHeld: requests held at the closed gate (the first
// launch, here) are in flight too.
func TestDuplicateIDWhileHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var releaseOnce sync.Once
		defer releaseOnce.Do(func() { close(release) }) // before the bubble's end waits for Serve
		var a *rig
		a = newBubble(t, func(o *Options) {
			o.Launch = func(ctx context.Context) (*Epoch, error) {
				<-release
				return a.launch(ctx)
			}
		})
		a.agent.send(`{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
		a.agent.send(`{"jsonrpc":"2.0","id":"i","method":"ping"}`)
		code, msg, _ := wireError(t, a.agent.nth(`"i"`, 1))
		if code != -32600 || !strings.Contains(msg, `request id "i" is already in use`) {
			t.Errorf("ping reusing the held initialize's id: code %d %q, want -32600", code, msg)
		}
		releaseOnce.Do(func() { close(release) })
		if got := a.agent.nth(`"i"`, 2); mcpwire.GetPath(got, "result", "serverInfo") == nil {
			t.Errorf("initialize answered %.300s, want its result", got)
		}
	})
}

// TestHeldMessagesAreBounded: while the first process launches, an agent
// that sends more than maxHeld messages gets the extra requests refused at
// once (hold_timeout, naming the limit) instead of piling up held
// goroutines; the held ones are served in order once the launch completes.
func TestHeldMessagesAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{launchDelay: 500 * time.Millisecond})
		defer r.close()
		r.agent.request(1_000_000, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "test", "version": "1"}})
		for i := int64(1); i <= maxHeld; i++ {
			r.agent.request(i, "ping-me-later", nil) // held: unknown methods pass the gate like any request
		}
		code, ref := refusal(t, r.agent.wait(maxHeld, 5*time.Second))
		if code != control.HoldTimeout.Code() || ref == nil || !strings.Contains(ref.Reason, "1000 messages") {
			t.Fatalf("request %d: code %d %+v, want hold_timeout naming the limit", maxHeld, code, ref)
		}
		if _, ok := r.agent.response(1); ok {
			t.Fatal("a held request was answered before the launch completed")
		}
		if _, ref := refusal(t, r.agent.wait(1_000_000, 10*time.Second)); ref != nil {
			t.Fatalf("initialize refused: %+v", ref)
		}
		r.agent.wait(maxHeld-1, 10*time.Second) // the held ones go, in order, once launched
	})
}

// TestShutdownNotHeldByAgentThatDoesNotRead: an agent whose input ended and
// that no longer reads its output (a full pipe) cannot hold the end of its
// run: writes get a deadline once the run ends, and the server is stopped.
func TestShutdownNotHeldByAgentThatDoesNotRead(t *testing.T) {
	// Not in a synctest bubble: the writes that wait behind the blocked
	// one wait on a mutex, which keeps a bubble's clock (and the write
	// deadline) from moving.
	defer func(d time.Duration) { agentWriteGrace = d }(agentWriteGrace)
	agentWriteGrace = 200 * time.Millisecond
	proc := newScriptServer("E1", false)
	changed := make(chan struct{}, 1)
	sess := New(Options{
		RunID: "RUN", Label: "script",
		Launch:  func(context.Context) (*Epoch, error) { return &Epoch{ID: "E1", Proc: proc}, nil },
		Catalog: storeOutsideBubble(t), Policy: func(string) config.Policy { return policyAllow },
		StartupTimeout: 5 * time.Second, DrainTimeout: 300 * time.Millisecond,
		OnChange: func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	inR, inW := io.Pipe()
	mine, theirs := net.Pipe() // unbuffered: a write waits for a reader
	defer mine.Close()
	served := make(chan error, 1)
	go func() { served <- sess.Serve(context.Background(), inR, theirs) }()
	defer inW.Close()
	send := func(line string) {
		t.Helper()
		if _, err := inW.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	out := bufio.NewReader(mine)
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
	if _, err := out.ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	timeout := time.After(5 * time.Second)
	for st := sess.Status(); st.State != StateReady || st.CatalogRevision == 0; st = sess.Status() {
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("session %s, want ready", st.State)
		}
	}
	// From here on the agent reads nothing: the answer to 9 blocks the
	// writer, 10 is still unanswered when the drain times out, and its
	// refusal must not wait behind 9 for ever.
	send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t"}}`)
	call := proc.await(t)
	send(`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"t"}}`)
	proc.await(t)
	proc.write(`{"jsonrpc":"2.0","id":` + string(mcpwire.GetPath(call, "id")) + `,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 1<<20) + `"}]}}`)
	send(control.EndOfInput)
	select {
	case <-proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the server was not stopped: the end of the run waits on a write to an agent that does not read")
	}
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}

// storeOutsideBubble is tempCatalogs for a test outside a synctest bubble:
// a refresh of the run may still write the store after Serve returned, so
// its removal at the end is best-effort.
func storeOutsideBubble(t *testing.T) *catalog.Store {
	t.Helper()
	dir, err := os.MkdirTemp("", "gateway-catalog-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cats, err := catalog.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cats
}
