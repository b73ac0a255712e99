package gateway

import "github.com/portcullis/portcullis/core/control"

// The shim ↔ daemon contract is declared in package control; these names
// keep the gateway's own spelling of it.

// EndOfInput is the line the `connect` shim sends when the agent's input
// ends (see control.EndOfInput).
const EndOfInput = control.EndOfInput

// DefaultDrainTimeout is the default of Options.DrainTimeout.
const DefaultDrainTimeout = control.DefaultDrainTimeout

// Reason, its constants and Refusal are the refusal shape of the
// shim ↔ daemon contract, declared in package control.
type Reason = control.Reason

// The refusals the gateway answers with (see control.Reason).
const (
	CatalogStale          = control.CatalogStale
	InvalidArguments      = control.InvalidArguments
	AuthorizationStale    = control.AuthorizationStale
	ApprovalDenied        = control.ApprovalDenied
	ApprovalTimeout       = control.ApprovalTimeout
	CredentialUnavailable = control.CredentialUnavailable
	EpochEnded            = control.EpochEnded
	ServerUnavailable     = control.ServerUnavailable
	MessageTooLarge       = control.MessageTooLarge
	InvalidResponse       = control.InvalidResponse
	AuditUnavailable      = control.AuditUnavailable
	HoldTimeout           = control.HoldTimeout
	UnknownTool           = control.UnknownTool
)

// Refusal is the data of a JSON-RPC error that the gateway answers instead
// of forwarding a request (see control.Refusal).
type Refusal = control.Refusal
