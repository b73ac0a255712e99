package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// forgedMeta is a _meta an agent could send to pass for Portcullis: its
// credentials key twice (a server's JSON parser may keep the last), a
// reserved name written with escapes, and a key of its own that must stay.
const forgedMeta = `{"dev.portcullis/credentials":{"api":"FORGED-1"},"progressToken":"tok",` +
	`"dev.portcullis\/credentials":{"api":"FORGED-2"},"\u0064ev.portcullis/grant":"FORGED-3","dev.portcullis/credentials":{"api":"FORGED-4"}}`

// reservedKeys returns the names in the _meta of line (params._meta, or
// result._meta for an answer) that Portcullis reserves, decoded.
func reservedKeys(t *testing.T, line json.RawMessage) []string {
	t.Helper()
	meta := mcpwire.GetPath(line, "params", "_meta")
	if meta == nil {
		meta = mcpwire.GetPath(line, "result", "_meta")
	}
	if meta == nil {
		return nil
	}
	var out []string
	dec := json.NewDecoder(bytes.NewReader(meta))
	if _, err := dec.Token(); err != nil {
		t.Fatalf("_meta %s: %v", meta, err)
	}
	for dec.More() {
		k, _ := dec.Token()
		if s, _ := k.(string); strings.HasPrefix(s, reservedPrefix) {
			out = append(out, s)
		}
		var v json.RawMessage
		_ = dec.Decode(&v)
	}
	return out
}

// TestReservedMetaNeverReachesTheServer: an agent that sends members of
// _meta under "dev.portcullis/" names — on an allowed tools/call of a
// server without any credential scope, on another request, on a
// notification — gets none of them to the server; its other _meta members
// go on; the removal is recorded once for the run.
func TestReservedMetaNeverReachesTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startBubble(t, true, nil)
		defer r.close()
		r.handshake()
		r.agent.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{},"_meta":` + forgedMeta + `}}`)
		mustResult(t, r.agent.wait(1, 5*time.Second))
		r.agent.send(`{"jsonrpc":"2.0","id":2,"method":"resources/list","params":{"_meta":` + forgedMeta + `}}`)
		r.agent.send(`{"jsonrpc":"2.0","method":"notifications/roots/list_changed","params":{"_meta":` + forgedMeta + `}}`)
		p := r.proc(1)
		waitFor(t, "the request and the notification reach the server", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			n := 0
			for _, l := range p.wire {
				if m := methodOf(l); m == "resources/list" || m == "notifications/roots/list_changed" {
					n++
				}
			}
			return n == 2
		})
		p.mu.Lock()
		wire := append([]json.RawMessage(nil), p.wire...)
		p.mu.Unlock()
		seen := 0
		for _, l := range wire {
			if bytes.Contains(l, []byte("FORGED")) || len(reservedKeys(t, l)) > 0 {
				t.Errorf("the server received a reserved _meta member: %s", l)
			}
			switch methodOf(l) {
			case "tools/call", "resources/list", "notifications/roots/list_changed":
				seen++
				if tok := mcpwire.GetPath(l, "params", "_meta", "progressToken"); string(tok) != `"tok"` {
					t.Errorf("the agent's own _meta member was not kept: %s", l)
				}
			}
		}
		if seen != 3 {
			t.Errorf("the server received %d of the 3 messages: %s", seen, wire)
		}
		var events []audit.ReservedMetaRemoved
		for _, e := range r.audit.entries() {
			if e.Type == audit.TypeReservedMetaRemoved {
				events = append(events, e.Fields.(audit.ReservedMetaRemoved))
			}
		}
		if len(events) != 1 {
			t.Fatalf("%d reserved_meta_removed events, want one per run: %+v", len(events), events)
		}
		want := []string{"dev.portcullis/credentials", "dev.portcullis/credentials", "dev.portcullis/grant", "dev.portcullis/credentials"}
		if e := events[0]; e.AgentRun != "RUN" || e.Method != "tools/call" || strings.Join(e.Keys, ",") != strings.Join(want, ",") {
			t.Errorf("event %+v, want run RUN, method tools/call, keys %v", e, want)
		}
	})
}

// TestForgedCredentialsNeverPassForPortcullis: on a server with a meta
// credential scope, a forged credential never reaches it: an allowed call
// goes without one, an approved call carries Portcullis's, once.
func TestForgedCredentialsNeverPassForPortcullis(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{transcript: true})
		defer r.close()
		r.handshake()
		r.agent.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"n":1},"_meta":` + forgedMeta + `}}`)
		mustResult(t, r.agent.wait(1, 5*time.Second))
		r.agent.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write","arguments":{"n":2},"_meta":` + forgedMeta + `}}`)
		decide(t, r, r.pendingFor(5*time.Second).ID, authz.ApproveRun)
		mustResult(t, r.agent.wait(2, 5*time.Second))
		calls := r.launcher.received()
		if len(calls) != 2 {
			t.Fatalf("the server received %d calls, want 2", len(calls))
		}
		if calls[0].Tool != toolRead || calls[0].Creds != nil {
			t.Errorf("the allowed call reached the server with credentials %s", calls[0].Creds)
		}
		if calls[1].Tool != toolWrite || calls[1].Cred != testSecret {
			t.Errorf("the approved call carried %q, want Portcullis's secret", calls[1].Cred)
		}
		p := r.proc(1)
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, l := range p.wire {
			if bytes.Contains(l, []byte("FORGED")) {
				t.Errorf("the server received a forged member: %s", l)
			}
			if methodOf(l) == "tools/call" {
				if keys := reservedKeys(t, l); len(keys) > 1 {
					t.Errorf("the call carries %d reserved members (%v): only Portcullis's one may be there", len(keys), keys)
				}
			}
		}
	})
}
