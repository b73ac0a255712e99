package gateway

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/control"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// messageOf returns the error.message of a refusal line, failing t when
// the line is no refusal of kind want.
func messageOf(t *testing.T, line json.RawMessage, want control.Reason) string {
	t.Helper()
	var we struct {
		Message string           `json:"message"`
		Data    *control.Refusal `json:"data"`
	}
	if err := json.Unmarshal(mcpwire.GetPath(line, "error"), &we); err != nil || we.Data == nil {
		t.Fatalf("not a refusal: %s", line)
	}
	if we.Data.Error != want {
		t.Fatalf("refused with %s, want %s: %s", we.Data.Error, want, we.Message)
	}
	if strings.Contains(we.Message, "refresh tool metadata") {
		t.Errorf("%s advises a step the agent cannot take: %s", want, we.Message)
	}
	return we.Message
}

// wantIn fails t for each part missing from msg.
func wantIn(t *testing.T, kind control.Reason, msg string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("%s message lacks %q:\n%s", kind, p, msg)
		}
	}
}

// refusedKinds lists the kinds of the call_refused events written so far.
func refusedKinds(r *rig) []string {
	var out []string
	for _, e := range r.audit.entries() {
		if f, ok := e.Fields.(audit.CallRefused); ok {
			out = append(out, f.Kind)
		}
	}
	return out
}

// TestRefusalMessagesAreActionable: Claude Code gives the model only
// error.message, so each refusal's message carries what the model needs:
// the problems and the current shape of the arguments, what changed in the
// tool, the approval request a person was asked, what to tell the person.
// Each refusal is recorded as call_refused with its kind.
func TestRefusalMessagesAreActionable(t *testing.T) {
	t.Run("invalid_arguments", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/list", nil)
			r.agent.wait(1, 5*time.Second)
			r.agent.request(2, "tools/call", map[string]any{"name": toolRead, "arguments": map[string]any{"n": "seven"}})
			msg := messageOf(t, r.agent.wait(2, 5*time.Second), control.InvalidArguments)
			wantIn(t, control.InvalidArguments, msg, "got string, want integer", `current arguments of "read": n (integer)`, "fix the arguments")
			r.agent.request(3, "tools/call", map[string]any{"name": toolWrite, "arguments": map[string]any{}})
			msg = messageOf(t, r.agent.wait(3, 5*time.Second), control.InvalidArguments)
			wantIn(t, control.InvalidArguments, msg, "missing property 'n'", `current arguments of "write": n (integer, required)`)
			if got := refusedKinds(r); strings.Join(got, ",") != "invalid_arguments,invalid_arguments" {
				t.Errorf("call_refused kinds %v", got)
			}
		})
	})

	t.Run("catalog_stale", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/list", nil)
			r.agent.wait(1, 5*time.Second)
			r.launcher.tools.Store(`{"tools":[` +
				`{"name":"write","description":"writes","inputSchema":{"type":"object","properties":{"n":{"type":"integer"},"reason":{"type":"string","enum":["fix","feature"],"default":"fix"}},"required":["n","reason"]}},` +
				`{"name":"read","description":"reads","inputSchema":{"type":"object","properties":{"n":{"type":"integer"}}},"annotations":{"readOnlyHint":true}}]}`)
			r.sess.Replace("rebuild")
			r.waitState(StateReady, 5*time.Second)
			r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
			msg := messageOf(t, r.agent.wait(2, 5*time.Second), control.CatalogStale)
			wantIn(t, control.CatalogStale, msg, `tool "write" changed`, "reason", `current arguments of "write": n (integer, required), reason (string, required, one of "fix"|"feature", default "fix")`, "form the call again")
		})
	})

	t.Run("unknown_tool and denied by policy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{policy: func(tool string) config.Policy {
				if tool == toolWrite {
					return config.PolicyDeny
				}
				return config.PolicyAllow
			}})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/list", nil)
			r.agent.wait(1, 5*time.Second)
			r.agent.request(2, "tools/call", callParams("nope", 2, ""))
			wantIn(t, control.UnknownTool, messageOf(t, r.agent.wait(2, 5*time.Second), control.UnknownTool), `no tool "nope"`, "the server offers: read")
			r.agent.request(3, "tools/call", callParams(toolWrite, 3, ""))
			wantIn(t, control.ApprovalDenied, messageOf(t, r.agent.wait(3, 5*time.Second), control.ApprovalDenied), "denied by the person's policy", "do not call this tool again; tell the person")
		})
	})

	t.Run("authorization_stale", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/list", nil)
			r.agent.wait(1, 5*time.Second)
			r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
			decide(t, r, r.pendingFor(5*time.Second).ID, authz.ApproveRun)
			mustResult(t, r.agent.wait(2, 5*time.Second))
			r.sess.Replace("rebuild")
			r.waitState(StateReady, 5*time.Second)
			r.agent.request(3, "tools/call", callParams(toolWrite, 3, ""))
			msg := messageOf(t, r.agent.wait(3, 5*time.Second), control.AuthorizationStale)
			id := r.pendingFor(5 * time.Second).ID
			wantIn(t, control.AuthorizationStale, msg, "code changed (execution epoch E1 → E2)", "approval request "+string(id), "call write again once they approve")
		})
	})

	t.Run("approval_denied", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
			id := r.pendingFor(5 * time.Second).ID
			decide(t, r, id, authz.Deny)
			wantIn(t, control.ApprovalDenied, messageOf(t, r.agent.wait(1, 5*time.Second), control.ApprovalDenied), "the person denied approval request "+string(id), "tell the person that write was not run because they denied it")
		})
	})

	t.Run("approval_timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{approvalTimeout: 30 * time.Millisecond})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
			msg := messageOf(t, r.agent.wait(1, 5*time.Second), control.ApprovalTimeout)
			wantIn(t, control.ApprovalTimeout, msg, "nobody answered approval request apr_", "tell the person that write on fake needs their approval in Portcullis")
			if got := refusedKinds(r); strings.Join(got, ",") != "approval_timeout" {
				t.Errorf("call_refused kinds %v, want [approval_timeout]", got)
			}
		})
	})

	t.Run("epoch_ended of a held call", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
			r.pendingFor(5 * time.Second)
			r.sess.Replace("rebuild")
			msg := messageOf(t, r.agent.wait(1, 5*time.Second), control.EpochEnded)
			wantIn(t, control.EpochEnded, msg, "before tools/call was sent to it; it was not sent", "call again")
			var ended []audit.CallRefused
			for _, e := range r.audit.entries() {
				if f, ok := e.Fields.(audit.CallRefused); ok && f.Kind == string(control.EpochEnded) {
					ended = append(ended, f)
				}
			}
			if len(ended) != 1 || ended[0].Tool != toolWrite || ended[0].Epoch != "E1" || ended[0].CurrentEpoch != "E2" {
				t.Errorf("call_refused epoch_ended events %+v, want one for write on E1 → E2", ended)
			}
		})
	})
	t.Run("credential_unavailable", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{secretCheck: func(string) error { return errors.New("nothing stored") }})
			defer r.close()
			r.handshake()
			r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
			wantIn(t, control.CredentialUnavailable, messageOf(t, r.agent.wait(1, 5*time.Second), control.CredentialUnavailable),
				`credential scope "api" cannot be had`, "ask the person to store the credential (portcullis creds set api)")
		})
	})

	t.Run("audit_unavailable", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{})
			defer r.close()
			r.handshake()
			r.audit.fail(errors.New("disk full"))
			r.agent.request(1, "tools/call", callParams(toolWrite, 1, ""))
			wantIn(t, control.AuditUnavailable, messageOf(t, r.agent.wait(1, 5*time.Second), control.AuditUnavailable),
				"disk full", "tell the person that Portcullis cannot write its audit log")
		})
	})

	t.Run("server_unavailable", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, rigOptions{launchFails: true})
			defer r.close()
			r.agent.request(1, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "x", "version": "1"}})
			wantIn(t, control.ServerUnavailable, messageOf(t, r.agent.wait(1, 5*time.Second), control.ServerUnavailable),
				"no such file", "ask the person to correct the command of fake")
			if got := refusedKinds(r); strings.Join(got, ",") != "server_unavailable" {
				t.Errorf("call_refused kinds %v, want [server_unavailable]", got)
			}
		})
	})
}

// TestTooLargeRefusalMessage: a request over the size limit is refused
// with message_too_large, saying what to do, and recorded.
func TestTooLargeRefusalMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, func(o *Options) { o.MaxMessage = 512 })
		b.handshake()
		b.agent.send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t","arguments":{"x":"` + strings.Repeat("a", 600) + `"}}}`)
		msg := messageOf(t, b.agent.answer("9"), control.MessageTooLarge)
		wantIn(t, control.MessageTooLarge, msg, "over the 512-byte limit; it was not sent", "send less data in one request")
		var kinds []string
		for _, e := range b.audit.entries() {
			if f, ok := e.Fields.(audit.CallRefused); ok {
				kinds = append(kinds, f.Kind+" "+f.Method)
			}
		}
		if strings.Join(kinds, ",") != "message_too_large tools/call" {
			t.Errorf("call_refused %v, want one message_too_large of tools/call", kinds)
		}
	})
}
