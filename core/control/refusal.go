package control

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// Reason is the machine-readable name of a refusal, carried as "error" in the
// JSON-RPC error's data (docs/DESIGN.md, "Error shapes"). Both the
// daemon's gateway and the `connect` shim answer the agent with refusals of
// this shape, so it is part of the contract between them.
type Reason string

// The refusals answered to agents. Each has its own JSON-RPC error code
// outside the range −32768…−32000 that JSON-RPC 2.0 (section 5.1) reserves,
// as MCP 2026-07-28 (basic/index, "Error codes") asks of new codes.
const (
	CatalogStale          Reason = "catalog_stale"
	InvalidArguments      Reason = "invalid_arguments"
	AuthorizationStale    Reason = "authorization_stale"
	ApprovalDenied        Reason = "approval_denied"
	ApprovalTimeout       Reason = "approval_timeout"
	CredentialUnavailable Reason = "credential_unavailable"
	EpochEnded            Reason = "epoch_ended"
	ServerUnavailable     Reason = "server_unavailable"
	MessageTooLarge       Reason = "message_too_large"
	InvalidResponse       Reason = "invalid_response"
	AuditUnavailable      Reason = "audit_unavailable"
	HoldTimeout           Reason = "hold_timeout"
	// TooManyRequests answers a server's request to the agent when too
	// many of its requests wait already.
	TooManyRequests Reason = "too_many_requests"
	// UnknownTool answers a tools/call naming a tool the current revision
	// does not have, when the agent already holds that revision. It uses
	// JSON-RPC's -32602 (Invalid params), as MCP's server/tools section
	// specifies for unknown tools.
	UnknownTool Reason = "unknown_tool"
)

// Code returns the JSON-RPC error code of r.
func (r Reason) Code() int {
	switch r {
	case UnknownTool:
		return -32602
	case CatalogStale:
		return -31010
	case InvalidArguments:
		return -31011
	case AuthorizationStale:
		return -31020
	case ApprovalDenied:
		return -31021
	case ApprovalTimeout:
		return -31022
	case CredentialUnavailable:
		return -31023
	case EpochEnded:
		return -31030
	case ServerUnavailable:
		return -31031
	case HoldTimeout:
		return -31032
	case TooManyRequests:
		return -31033
	case MessageTooLarge:
		return -31040
	case InvalidResponse:
		return -31041
	case AuditUnavailable:
		return -31050
	}
	return -31000
}

// Refusal is the data of a JSON-RPC error answered to the agent instead of
// forwarding its request. Error names the refusal; the other fields are set
// when they apply. Its JSON form is the object docs/DESIGN.md ("Error shapes") shows, for
// example
//
//	{"error":"authorization_stale","tool":"notes_write",
//	 "reason":"the server's code changed (execution epoch 01JQ… → 01JR…) since the person approved notes_write, …",
//	 "approvedEpoch":"01JQ…","currentEpoch":"01JR…","request":"apr_01JR…",
//	 "retry":"the person has been asked to approve the new code in Portcullis (approval request apr_01JR…); call notes_write again once they approve, …"}
type Refusal struct {
	Error         Reason      `json:"error"`
	Reason        string      `json:"reason"`
	Server        string      `json:"server,omitempty"`
	Tool          string      `json:"tool,omitempty"`
	Epoch         ids.EpochID `json:"epoch,omitempty"`         // the epoch the call was sent to
	ApprovedEpoch ids.EpochID `json:"approvedEpoch,omitempty"` // the epoch a grant was bound to
	CurrentEpoch  ids.EpochID `json:"currentEpoch,omitempty"`  // the epoch that would receive a new call
	// AgentRevision is the catalog revision the agent last fetched;
	// CurrentRevision the one in force.
	AgentRevision   uint64   `json:"agentRevision,omitempty"`
	CurrentRevision uint64   `json:"currentRevision,omitempty"`
	Problems        []string `json:"problems,omitempty"`
	ExitStatus      string   `json:"exitStatus,omitempty"`
	StderrTail      []string `json:"stderrTail,omitempty"`
	// Request is the approval request a person was asked to decide for
	// this call (authorization_stale, approval_timeout, approval_denied).
	Request ids.RequestID `json:"request,omitempty"`
	// Arguments is the current shape of the arguments a refused call got
	// wrong (invalid_arguments, catalog_stale): required names, and the
	// type, enum and default of the properties involved.
	Arguments *ArgumentShape `json:"arguments,omitempty"`
	Limit     int            `json:"limit,omitempty"` // bytes, for message_too_large
	Retry     string         `json:"retry,omitempty"` // what the agent should do next
}

// ArgumentShape is the current shape of a tool's arguments, as a refusal
// gives it: the names inputSchema requires, and the properties involved.
type ArgumentShape struct {
	Tool       string          `json:"tool"`
	Required   []string        `json:"required"`
	Properties []PropertyShape `json:"properties,omitempty"`
	Omitted    int             `json:"omitted,omitempty"` // properties of the schema left out
}

// PropertyShape is one property of an ArgumentShape: its JSON Schema type,
// allowed values (each as JSON) and default (JSON), when the schema says.
type PropertyShape struct {
	Name     string   `json:"name"`
	Type     string   `json:"type,omitempty"`
	Enum     []string `json:"enum,omitempty"`
	Default  string   `json:"default,omitempty"`
	Required bool     `json:"required,omitempty"`
}

// String renders a as one sentence, for example
//
//	current arguments of "publish": branch (string, required), target (string, one of "preview"|"production", default "preview")
func (a *ArgumentShape) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "current arguments of %q:", a.Tool)
	if len(a.Properties) == 0 {
		if len(a.Required) == 0 {
			b.WriteString(" none required")
		} else {
			b.WriteString(" required " + strings.Join(a.Required, ", "))
		}
	}
	for i, p := range a.Properties {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(" " + p.Name)
		var parts []string
		if p.Type != "" {
			parts = append(parts, p.Type)
		}
		if p.Required {
			parts = append(parts, "required")
		}
		if len(p.Enum) == 1 {
			parts = append(parts, "must be "+p.Enum[0])
		} else if len(p.Enum) > 1 {
			parts = append(parts, "one of "+strings.Join(p.Enum, "|"))
		}
		if p.Default != "" {
			parts = append(parts, "default "+p.Default)
		}
		if len(parts) > 0 {
			b.WriteString(" (" + strings.Join(parts, ", ") + ")")
		}
	}
	if a.Omitted > 0 {
		fmt.Fprintf(&b, ", and %d other optional properties", a.Omitted)
	}
	return b.String()
}

// Message is the human- and model-readable error message of r: agents
// such as Claude Code pass only this to the model, never the data, so it
// carries what the model needs to act: "error: reason", the problems in
// parentheses, the current shape of the arguments, then what to do next
// (Retry), each part after "; ".
func (r *Refusal) Message() string {
	msg := fmt.Sprintf("%s: %s", r.Error, r.Reason)
	if len(r.Problems) > 0 {
		msg += " (" + strings.Join(r.Problems, "; ") + ")"
	}
	if r.Arguments != nil {
		msg += "; " + r.Arguments.String()
	}
	if r.Retry != "" {
		msg += "; " + r.Retry
	}
	return msg
}

// Response encodes r as a JSON-RPC error response to id.
func (r *Refusal) Response(id json.RawMessage) []byte {
	return mcpwire.NewError(id, r.Error.Code(), r.Message(), r)
}
