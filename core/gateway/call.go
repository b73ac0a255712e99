package gateway

import (
	"encoding/json"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// toolCall is a tools/call of the agent as the gateway reads it, once, at
// the boundary (parseCall): authorization, validation, the audit log and the
// approval card take it as it is. The request's raw bytes (msg.Raw) still go
// to the server untouched, or with credentials injected into its _meta.
type toolCall struct {
	msg    *mcpwire.Message
	name   string          // params.name
	args   json.RawMessage // params.arguments as the agent wrote them; nil when absent
	digest string          // audit.ArgsSummary digest of args, as the audit log and cards record it
	keys   []string        // the sorted top-level names of args (audit.ArgsSummary)
	token  json.RawMessage // params._meta.progressToken, raw JSON; nil when none
	meta   json.RawMessage // params._meta; nil when absent
}

// parseCall reads the tools/call m. It returns what makes its params
// unusable instead ("" when they name a tool): params must be an object
// whose "name" is a non-empty string (MCP server/tools, CallToolRequest).
func parseCall(m *mcpwire.Message) (*toolCall, string) {
	params := m.Params
	switch {
	case params == nil:
		return nil, "params is missing"
	case params[0] != '{':
		return nil, "params is not an object"
	}
	raw := mcpwire.GetPath(params, "name")
	c := &toolCall{msg: m}
	switch {
	case raw == nil:
		return nil, "params.name is missing"
	case raw[0] != '"' || json.Unmarshal(raw, &c.name) != nil:
		return nil, "params.name is not a string"
	case c.name == "":
		return nil, "params.name is empty"
	}
	c.args = mcpwire.GetPath(params, "arguments")
	c.digest, c.keys = audit.ArgsSummary(c.args)
	c.meta = mcpwire.GetPath(params, "_meta")
	if c.meta != nil {
		c.token = mcpwire.GetPath(c.meta, "progressToken")
	}
	return c, ""
}

// authorization is what the authorization of a call decided: the call goes
// (decision and grant, for its tool_called event, and out, the message to
// forward, credentials injected), or it is refused, or it waits for a person
// to decide approval request wait (see awaitApproval).
type authorization struct {
	decision string      // decisionAllow, decisionGrant or decisionUnchecked
	grant    ids.GrantID // the grant used, "" when none
	out      []byte
	refusal  *control.Refusal
	wait     ids.RequestID
}

// refused is the authorization that refuses a call with r.
func refused(r *control.Refusal) authorization { return authorization{refusal: r} }
