package audit

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/portcullis/portcullis/core/ids"
)

// Genesis is the prev value of the first event of a log: "sha256:" followed
// by 64 zeros.
const Genesis = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// Event types written by Portcullis. Each has a fields struct of the same
// name (TypeToolCalled ↔ ToolCalled); Append accepts any type name made of
// lower-case letters, digits and underscores.
const (
	TypeServerStarted     = "server_started"
	TypeBuildDetected     = "build_detected"
	TypeServerReplaced    = "server_replaced"
	TypeServerExited      = "server_exited"
	TypeCatalogRevised    = "catalog_revised"
	TypeRunStarted        = "run_started"
	TypeRunEnded          = "run_ended"
	TypeApprovalRequested = "approval_requested"
	TypeApprovalGranted   = "approval_granted"
	TypeApprovalDenied    = "approval_denied"
	TypeApprovalWithdrawn = "approval_withdrawn"
	TypeToolCalled        = "tool_called"
	TypeToolCompleted     = "tool_completed"
	// TypeAuthorizationDenied is what logs before call_refused recorded
	// refusals as; readers still accept it (see CallRefused).
	TypeAuthorizationDenied = "authorization_denied"
	// TypeCallRefused: a request of the agent was answered with a refusal
	// instead of reaching the server (CallRefused), including epoch_ended
	// for a call still held or unsent when its epoch ended.
	TypeCallRefused = "call_refused"
	// TypeCatalogPresented: a tools/list answer reached the agent
	// (CatalogPresented).
	TypeCatalogPresented = "catalog_presented"
	// TypeListChangedSent: notifications/tools/list_changed was sent to
	// the agent (ListChangedSent).
	TypeListChangedSent = "list_changed_sent"
	TypeConfigChanged   = "config_changed"
	TypeLogResumed      = "log_resumed"
	// TypeDecisionRefused: a decision or a change that widens trust came
	// from a process that is not the person (see DecisionRefused).
	TypeDecisionRefused = "decision_refused"
	// TypePersonAction: the person did something that needs them and is
	// not a decision of a request (stopping the daemon, putting secrets
	// back into an agent's configuration); see PersonAction.
	TypePersonAction = "person_action"
	// TypeLogRecovered is written by the Log itself after a torn tail.
	TypeLogRecovered = "log_recovered"
	// TypeSigningEnabled is written by the Log itself, signed, when signing
	// starts after unsigned events: at Open with a key, or by
	// Log.EnableSigning. Append refuses it.
	TypeSigningEnabled = "signing_enabled"
	// TypeSigningDisabled is written by the Log itself, signed, when
	// Log.DisableSigning turns signing off; the events after it carry no
	// signature until a signing_enabled. Append refuses it.
	TypeSigningDisabled = "signing_disabled"
	// TypeLogSealed is written by the Log itself: a forward-secure seal
	// (LogSealed). Append refuses it.
	TypeLogSealed = "log_sealed"
	// TypeLogTampered is written by the Log itself, in a new file, when a
	// file it writes was replaced or deleted under it, or by the daemon
	// when the log no longer holds the last seal (LogTampered). Append
	// refuses it.
	TypeLogTampered = "log_tampered"
	// TypeLogTamperAcknowledged is written by the Log itself when the
	// person acknowledged a log_tampered event (LogTamperAcknowledged).
	// Append refuses it.
	TypeLogTamperAcknowledged = "log_tamper_acknowledged"
	// TypeUnrequestedAnswer: a server answered an id that was never sent
	// to it (UnrequestedAnswer); the answer was not delivered.
	TypeUnrequestedAnswer = "unrequested_answer"
	// TypeServerRequest: a server's request to the agent (sampling,
	// elicitation, roots) was passed or refused (ServerRequest).
	TypeServerRequest = "server_request"
	// TypeReservedMetaRemoved: the agent sent members of _meta whose names
	// Portcullis reserves ("dev.portcullis/…"); they were removed before
	// the server saw the message. Written once per agent run, for the
	// first such message (ReservedMetaRemoved).
	TypeReservedMetaRemoved = "reserved_meta_removed"
)

// Event is one decoded line of the log.
//
// Fields is the canonical (RFC 8785) JSON object of the type-specific
// members, exactly as hashed; decode it with DecodeFields. Prev and Hash are
// "sha256:<64 hex>"; Sig is "hmac-sha256:<64 hex>" or empty for an unsigned
// event. TS is in UTC with nanoseconds as written.
type Event struct {
	Seq    uint64          `json:"seq"`
	TS     time.Time       `json:"ts"`
	Type   string          `json:"type"`
	Fields json.RawMessage `json:"fields"`
	Prev   string          `json:"prev"`
	Hash   string          `json:"hash"`
	Sig    string          `json:"sig,omitempty"`
}

// DecodeFields unmarshals e.Fields into v (typically a pointer to the struct
// matching e.Type, such as *ToolCalled).
func (e Event) DecodeFields(v any) error {
	if err := json.Unmarshal(e.Fields, v); err != nil {
		return fmt.Errorf("audit: decoding fields of %s event %d: %w", e.Type, e.Seq, err)
	}
	return nil
}

// Agent identifies the agent behind an agent run: the client's self-reported
// name and version (from the MCP handshake, informative only) and what the
// kernel reported for the shim's peer process.
type Agent struct {
	Name       string `json:"name,omitempty"`
	Version    string `json:"version,omitempty"`
	Executable string `json:"executable,omitempty"`
	PID        int    `json:"pid,omitempty"`
}

// DiffSummary counts and names what changed between two catalog revisions.
type DiffSummary struct {
	Added   []string `json:"added,omitempty"`   // tool names
	Removed []string `json:"removed,omitempty"` // tool names
	Changed []string `json:"changed,omitempty"` // tool names whose contract changed
}

// ServerStarted is the fields of a server_started event. Execution is the
// execution record captured at launch (DESIGN "Execution identity").
type ServerStarted struct {
	ServerLabel string          `json:"serverLabel"`
	AgentRun    ids.RunID       `json:"agentRun,omitempty"`
	Epoch       ids.EpochID     `json:"epoch"`
	PID         int             `json:"pid,omitempty"`
	Execution   json.RawMessage `json:"execution,omitempty"`
}

// BuildDetected is the fields of a build_detected event: artifacts changed on
// disk while Epoch keeps running.
type BuildDetected struct {
	ServerLabel string      `json:"serverLabel"`
	Epoch       ids.EpochID `json:"epoch,omitempty"`
	Paths       []string    `json:"paths,omitempty"`
	Digests     []string    `json:"digests,omitempty"` // names of changed digests
}

// ServerReplaced is the fields of a server_replaced event.
type ServerReplaced struct {
	ServerLabel string      `json:"serverLabel"`
	AgentRun    ids.RunID   `json:"agentRun,omitempty"`
	OldEpoch    ids.EpochID `json:"oldEpoch"`
	NewEpoch    ids.EpochID `json:"newEpoch"`
	Reason      string      `json:"reason,omitempty"`
	// Cause is "observed" when the supervisor saw the process tree change
	// behind the same pipe (a watcher swapping its worker, an exec); then
	// OldIdentity and NewIdentity are the processes that could answer
	// before and after (identity.Observed lists).
	Cause       string          `json:"cause,omitempty"`
	OldIdentity json.RawMessage `json:"oldIdentity,omitempty"`
	NewIdentity json.RawMessage `json:"newIdentity,omitempty"`
}

// ServerExited is the fields of a server_exited event. ExitCode is -1 when the
// process was ended by Signal.
type ServerExited struct {
	ServerLabel string      `json:"serverLabel"`
	AgentRun    ids.RunID   `json:"agentRun,omitempty"`
	Epoch       ids.EpochID `json:"epoch"`
	PID         int         `json:"pid,omitempty"`
	ExitCode    int         `json:"exitCode"`
	Signal      string      `json:"signal,omitempty"`
}

// CatalogRevised is the fields of a catalog_revised event. Digest is the
// catalog digest ("sha256:…") of Revision.
type CatalogRevised struct {
	ServerLabel string      `json:"serverLabel"`
	AgentRun    ids.RunID   `json:"agentRun,omitempty"`
	Epoch       ids.EpochID `json:"epoch,omitempty"`
	Revision    uint64      `json:"revision"`
	Digest      string      `json:"digest"`
	Diff        DiffSummary `json:"diff"`
}

// RunStarted is the fields of a run_started event (one agent connection).
type RunStarted struct {
	AgentRun    ids.RunID `json:"agentRun"`
	ServerLabel string    `json:"serverLabel"`
	Agent       Agent     `json:"agent"`
	// Continues is set when the run continues one the agent's shim had with
	// a daemon that went away (it reconnected): what the shim said of it.
	Continues *RunContinued `json:"continues,omitempty"`
}

// RunContinued is what run_started records of the run a reconnecting shim
// continues: AgentRun and DaemonPID as that shim's previous daemon gave
// them, Why the connection ended, as the shim saw it, and PreviousLogHead
// the last event the log held when this daemon opened it (what the
// daemon before it left), when known. The shim's word, not checked: the
// previous daemon is gone.
type RunContinued struct {
	AgentRun        ids.RunID `json:"agentRun"`
	DaemonPID       int       `json:"daemonPid,omitempty"`
	Why             string    `json:"why"`
	PreviousLogHead *LogHead  `json:"previousLogHead,omitempty"`
}

// RunEnded is the fields of a run_ended event.
type RunEnded struct {
	AgentRun    ids.RunID `json:"agentRun"`
	ServerLabel string    `json:"serverLabel"`
	Reason      string    `json:"reason,omitempty"`
}

// ApprovalRequested is the fields of an approval_requested event. Epoch is
// the execution epoch the request is for; a request to launch a server with
// credentials, made before its process exists, has no epoch but the
// execution identity digest it would approve (Identity).
type ApprovalRequested struct {
	Request         ids.RequestID `json:"request"`
	AgentRun        ids.RunID     `json:"agentRun"`
	ServerLabel     string        `json:"serverLabel"`
	Epoch           ids.EpochID   `json:"epoch,omitempty"`
	Identity        string        `json:"identity,omitempty"`
	CatalogRevision uint64        `json:"catalogRevision,omitempty"`
	ToolScope       []string      `json:"toolScope,omitempty"`
	CredentialScope []string      `json:"credentialScope,omitempty"`
	Reason          string        `json:"reason,omitempty"`
	// OtherTools are the tools the card offered unticked (ToolScope is
	// what it proposed). Stale marks the card raised with an
	// authorization_stale refusal: its call was refused already, by the
	// gateway, not by a person.
	OtherTools []string `json:"otherTools,omitempty"`
	Stale      bool     `json:"stale,omitempty"`
	// ServerRequest is the kind of server request (sampling, elicitation,
	// roots) the card is about, for a request of the server to the agent.
	ServerRequest string `json:"serverRequest,omitempty"`
	// ToolContracts is the contract of each tool the card showed: tool
	// name → the tool's digest in CatalogRevision (the catalog's tool
	// digest, "sha256:<hex>").
	ToolContracts map[string]string `json:"toolContracts,omitempty"`
	// AlsoRuns are the other agent runs the card decides (runs of the same
	// agent program whose new epochs run the same code), each with its
	// epoch; AgentRun and Epoch are the card's first.
	AlsoRuns []RunEpoch `json:"alsoRuns,omitempty"`
}

// RunEpoch is one agent run and the epoch a card asks about for it.
type RunEpoch struct {
	AgentRun ids.RunID   `json:"agentRun"`
	Epoch    ids.EpochID `json:"epoch,omitempty"`
}

// Channels of Decider.Channel: where the person decided.
const (
	ChannelWindow = "window" // the approval window (or Preferences) of the app, in the daemon's process
	ChannelCLI    = "cli"    // a portcullis command, through the control socket
)

// Authentication values of Decider.Authentication other than the name of
// the operating system's mechanism ("polkit", "LocalAuthentication").
const (
	// AuthNotAsked: the mode in force did not ask the operating system for
	// this decision (settings.approvalAuthentication off, or a mode that
	// does not cover it: credentials for a decision that bears on none, cli
	// for a window approval without credentials).
	AuthNotAsked = "not_asked"
)

// Decider is who made a decision that grants or widens trust, as the
// daemon knew it when it acted: Channel (ChannelWindow, ChannelCLI); the
// deciding process, its executable and its ancestry (pids from the process
// up to the root) as the kernel reported them, in the shape of
// DecisionRefused and PersonAction; Authentication, the mechanism that
// authenticated the person ("polkit", "LocalAuthentication") or
// AuthNotAsked; AuthenticationMode, settings.approvalAuthentication as in
// force ("off", "credentials", "cli", "always"); for the window, Input, where
// the press behind the decision came from ("device", or "unknown" when the
// system cannot tell and the OS authenticated the person), and
// InputDevice, the name of the device the display server reported. Events
// written before these fields existed lack them.
type Decider struct {
	Channel            string `json:"channel,omitempty"`
	PID                int    `json:"pid,omitempty"`
	Executable         string `json:"executable,omitempty"`
	Ancestry           []int  `json:"ancestry,omitempty"`
	Authentication     string `json:"authentication,omitempty"`
	AuthenticationMode string `json:"authenticationMode,omitempty"`
	Input              string `json:"input,omitempty"`
	InputDevice        string `json:"inputDevice,omitempty"`
}

// ApprovalGranted is the fields of an approval_granted event. ExpiresWhen is
// "agent-run-ends" or "once". Epoch and Identity as in ApprovalRequested.
// The Decider's fields (channel, pid, executable, ancestry, authentication)
// say who approved.
type ApprovalGranted struct {
	Decider
	Request ids.RequestID `json:"request"`
	// Grant is the id of the grant made (authz.Grant.ID), as the
	// tool_called events of the calls it lets through name it.
	Grant           ids.GrantID `json:"grant,omitempty"`
	AgentRun        ids.RunID   `json:"agentRun"`
	ServerLabel     string      `json:"serverLabel"`
	Epoch           ids.EpochID `json:"epoch,omitempty"`
	Identity        string      `json:"identity,omitempty"`
	ToolScope       []string    `json:"toolScope,omitempty"`
	CredentialScope []string    `json:"credentialScope,omitempty"`
	ExpiresWhen     string      `json:"expiresWhen"`
	// ServerRequest is the kind of server request the grant lets through
	// on its epoch (it covers no tool then).
	ServerRequest string `json:"serverRequest,omitempty"`
	// ToolContracts binds each tool of ToolScope to the contract its card
	// showed (tool name → tool digest): the grant covers a tool only while
	// the server offers it with that contract or one that differs without
	// widening what a call may do (docs/DESIGN.md, "Authorization and
	// credentials").
	ToolContracts map[string]string `json:"toolContracts,omitempty"`
}

// ApprovalDenied is the fields of an approval_denied event. Reason is
// "denied" (by the person), "timeout" or "audit_unavailable"; By is who
// decided ("cli", "app", "timeout"…). Stale is set when the request was
// raised with an authorization_stale refusal: denying it refused no call
// (that call was refused already, by the gateway).
type ApprovalDenied struct {
	Request     ids.RequestID `json:"request"`
	AgentRun    ids.RunID     `json:"agentRun"`
	ServerLabel string        `json:"serverLabel"`
	Epoch       ids.EpochID   `json:"epoch,omitempty"`
	Identity    string        `json:"identity,omitempty"`
	Reason      string        `json:"reason,omitempty"`
	By          string        `json:"by,omitempty"`
	Stale       bool          `json:"stale,omitempty"`
}

// ApprovalWithdrawn is the fields of an approval_withdrawn event: a request
// nobody decided was withdrawn by Portcullis (its epoch ended, the agent
// run ended, its call was cancelled or its tool's policy changed); Reason
// says which.
type ApprovalWithdrawn struct {
	Request     ids.RequestID `json:"request"`
	AgentRun    ids.RunID     `json:"agentRun"`
	ServerLabel string        `json:"serverLabel"`
	Epoch       ids.EpochID   `json:"epoch,omitempty"`
	Identity    string        `json:"identity,omitempty"`
	Tool        string        `json:"tool,omitempty"`
	Reason      string        `json:"reason"`
}

// DecisionRefused is the fields of a decision_refused event: a process
// asked for What (an approval, a denial, a change that widens trust) and was
// refused because the kernel's view of its ancestry shows that it is not the
// person: it descends from the daemon (a supervised server's tree, or a
// process that left it), carries an epoch's mark, descends from the agent
// of an agent run, or its ancestry could not be read. Refusal is that kind
// ("supervised", "marked", "agent", "unverified"), Reason the sentence the
// process was answered with. Ancestry lists the pids from the process up to
// the root, as read.
type DecisionRefused struct {
	What        string        `json:"what"`
	Request     ids.RequestID `json:"request,omitempty"`
	PID         int           `json:"pid"`
	Executable  string        `json:"executable,omitempty"`
	Refusal     string        `json:"refusal"`
	Reason      string        `json:"reason"`
	ServerLabel string        `json:"serverLabel,omitempty"` // the server whose tree it belongs to, when known
	AgentRun    ids.RunID     `json:"agentRun,omitempty"`    // the run whose agent it descends from, for "agent"
	Ancestry    []int         `json:"ancestry,omitempty"`
}

// PersonAction is the fields of a person_action event: What the person
// did, from which process (PID, Executable) and its ancestry as the
// kernel reported it when the daemon checked that it was the person's.
type PersonAction struct {
	What       string `json:"what"`
	PID        int    `json:"pid"`
	Executable string `json:"executable,omitempty"`
	Ancestry   []int  `json:"ancestry,omitempty"`
}

// ToolCalled is the fields of a tool_called event, the intent written before a
// call is forwarded. Arguments appear only as ArgsDigest and ArgKeys (see
// ArgsSummary). Decision says why the call may go ahead: "allow" (policy) or
// "grant" (with Grant naming the grant, made by the approval_granted event
// of the same Grant).
type ToolCalled struct {
	Call            ids.CallID  `json:"call"`
	AgentRun        ids.RunID   `json:"agentRun"`
	ServerLabel     string      `json:"serverLabel"`
	Epoch           ids.EpochID `json:"epoch"`
	CatalogRevision uint64      `json:"catalogRevision"`
	Tool            string      `json:"tool"`
	ArgsDigest      string      `json:"argsDigest"`
	ArgKeys         []string    `json:"argKeys"`
	Decision        string      `json:"decision"`
	Grant           ids.GrantID `json:"grant,omitempty"`
	CredentialScope []string    `json:"credentialScope,omitempty"`
}

// ToolCompleted is the fields of a tool_completed event. Outcome is "ok",
// "error" (isError result), "rpc_error", "epoch_ended" or "cancelled";
// DurationMS is milliseconds from forwarding to the response.
type ToolCompleted struct {
	Call        ids.CallID  `json:"call"`
	AgentRun    ids.RunID   `json:"agentRun"`
	ServerLabel string      `json:"serverLabel"`
	Epoch       ids.EpochID `json:"epoch"`
	Tool        string      `json:"tool"`
	Outcome     string      `json:"outcome"`
	DurationMS  float64     `json:"durationMs"`
	Error       string      `json:"error,omitempty"`
	// LateAnswer: the answer came from an epoch that had already ended
	// (the agent was told epoch_ended); it was recorded, never forwarded.
	LateAnswer bool `json:"lateAnswer,omitempty"`
	// AnsweredBy, on a late answer that came from code other than its
	// epoch's (the supervisor saw who wrote it), names that code: the
	// epoch the supervisor minted for it, the process and what it runs.
	AnsweredBy *Answerer `json:"answeredBy,omitempty"`
}

// Answerer is the code that answered a call: the epoch it runs as, its
// pid, executable and script with their digests.
type Answerer struct {
	Epoch        ids.EpochID `json:"epoch"`
	PID          int         `json:"pid"`
	Exe          string      `json:"exe"`
	SHA256       string      `json:"sha256,omitempty"`
	Script       string      `json:"script,omitempty"`
	ScriptSHA256 string      `json:"scriptSha256,omitempty"`
}

// AuthorizationDenied is the fields of an authorization_denied event: a call
// refused before forwarding. Reason is the refusal code sent to the agent
// (authorization_stale, catalog_stale, invalid_arguments, approval_denied,
// approval_timeout, epoch_ended, server_unavailable, audit_unavailable).
type AuthorizationDenied struct {
	Call            ids.CallID  `json:"call,omitempty"`
	AgentRun        ids.RunID   `json:"agentRun"`
	ServerLabel     string      `json:"serverLabel"`
	Tool            string      `json:"tool,omitempty"`
	Reason          string      `json:"reason"`
	ApprovedEpoch   ids.EpochID `json:"approvedEpoch,omitempty"`
	CurrentEpoch    ids.EpochID `json:"currentEpoch,omitempty"`
	CatalogRevision uint64      `json:"catalogRevision,omitempty"`
}

// CallRefused is the fields of a call_refused event: a request of the agent
// answered with a refusal instead of reaching the server. Kind is the
// refusal's name as the agent received it in error.data.error
// (authorization_stale, catalog_stale, invalid_arguments, unknown_tool,
// approval_denied, approval_timeout, credential_unavailable, epoch_ended,
// hold_timeout, server_unavailable, audit_unavailable…); Reason its
// reason; Request the approval request raised with it, if any. Call is the
// call's ULID when its tool_called intent was written before the refusal.
type CallRefused struct {
	Call            ids.CallID    `json:"call,omitempty"`
	AgentRun        ids.RunID     `json:"agentRun"`
	ServerLabel     string        `json:"serverLabel"`
	Method          string        `json:"method,omitempty"` // the refused request's method; empty for a tools/call that names its Tool
	Tool            string        `json:"tool,omitempty"`
	Kind            string        `json:"kind"`
	Reason          string        `json:"reason,omitempty"`
	Epoch           ids.EpochID   `json:"epoch,omitempty"` // the epoch the request was sent to, for epoch_ended
	ApprovedEpoch   ids.EpochID   `json:"approvedEpoch,omitempty"`
	CurrentEpoch    ids.EpochID   `json:"currentEpoch,omitempty"`
	CatalogRevision uint64        `json:"catalogRevision,omitempty"`
	Request         ids.RequestID `json:"request,omitempty"`
}

// CatalogPresented is the fields of a catalog_presented event: the agent
// received a tools/list answer describing catalog revision Revision (its
// digest Digest) of epoch Epoch. Tools counts the tools it was shown (the
// person's policy hides denied ones). PassedThrough is set when no
// revision could be fetched and the server's own answer was passed on
// (Revision and Digest are then empty).
type CatalogPresented struct {
	AgentRun      ids.RunID   `json:"agentRun"`
	ServerLabel   string      `json:"serverLabel"`
	Epoch         ids.EpochID `json:"epoch"`
	Revision      uint64      `json:"revision,omitempty"`
	Digest        string      `json:"digest,omitempty"`
	Tools         int         `json:"tools"`
	PassedThrough bool        `json:"passedThrough,omitempty"`
}

// ListChangedSent is the fields of a list_changed_sent event: the agent
// was sent Method (notifications/tools/list_changed, or another list's)
// while epoch Epoch with catalog revision Revision answers; Reason says
// why (a new epoch, a new revision, a policy change); Subscription is the
// agent's subscriptions/listen id in the 2026-07-28 era.
type ListChangedSent struct {
	AgentRun     ids.RunID   `json:"agentRun"`
	ServerLabel  string      `json:"serverLabel"`
	Epoch        ids.EpochID `json:"epoch"`
	Revision     uint64      `json:"revision,omitempty"`
	Method       string      `json:"method"`
	Reason       string      `json:"reason,omitempty"`
	Subscription string      `json:"subscription,omitempty"`
}

// UnrequestedAnswer is the fields of an unrequested_answer event: the
// process of Epoch wrote an answer whose id names no request sent to it —
// one reserved for a call that still waits (for approval, for the audit
// log) or one never minted. The answer reached no one. ID is the id as the
// server wrote it (at most 64 bytes), Digest the SHA-256 of the whole
// answer, Reason which of the two it was.
type UnrequestedAnswer struct {
	ServerLabel string      `json:"serverLabel"`
	AgentRun    ids.RunID   `json:"agentRun,omitempty"`
	Epoch       ids.EpochID `json:"epoch"`
	ID          string      `json:"id"`
	Digest      string      `json:"digest"`
	Reason      string      `json:"reason"`
}

// ReservedMetaRemoved is the fields of a reserved_meta_removed event: the
// agent of AgentRun sent Method with members of _meta under the names
// Portcullis reserves for what it adds itself ("dev.portcullis/…", such as
// the "meta" credentials it injects); Keys are the names removed from that
// first message (at most 16, each at most 128 bytes). Later messages of the
// run are stripped the same way without another event.
type ReservedMetaRemoved struct {
	AgentRun    ids.RunID `json:"agentRun"`
	ServerLabel string    `json:"serverLabel"`
	Method      string    `json:"method,omitempty"` // "" for the agent's answer to a server request
	Keys        []string  `json:"keys"`
}

// ServerRequest is the fields of a server_request event, written before a
// server's request to the agent is passed on: Method as the server sent
// it, Kind its kind (sampling, elicitation, roots; "" for another method),
// Decision why it went or did not: "allow" (policy), "grant" (Grant names
// the approval request whose grant covers it, for its epoch), "unchecked"
// (no authority), "denied" (policy or person), "timeout", or "refused"
// (too many waiting; Reason says so).
type ServerRequest struct {
	AgentRun    ids.RunID     `json:"agentRun"`
	ServerLabel string        `json:"serverLabel"`
	Epoch       ids.EpochID   `json:"epoch"`
	Method      string        `json:"method"`
	Kind        string        `json:"kind,omitempty"`
	Decision    string        `json:"decision"`
	Grant       ids.RequestID `json:"grant,omitempty"`
	Reason      string        `json:"reason,omitempty"`
}

// ConfigChanged is the fields of a config_changed event, written when the
// daemon loads a configuration file that differs from the one in force:
// Digest is the SHA-256 of the file loaded; Changes says in words what
// changed that bears on what agents may do (servers added or removed, their
// command, tool policies with the old and new value, credential scopes and
// how they are injected, settings), for example
// "pub: tool publish_preview approve → allow".
// AtStart marks changes the daemon found when it started, made while no
// daemon ran; the first record of a log (nothing recorded before) lists the
// whole configuration as added. By names who made a change through the
// daemon ("app", "cli (pid N)"); absent for an edit of the file itself.
type ConfigChanged struct {
	File    string   `json:"file"`
	Digest  string   `json:"digest"`
	Changes []string `json:"changes"`
	AtStart bool     `json:"atStart,omitempty"`
	By      string   `json:"by,omitempty"`
}

// LogResumed is the fields of a log_resumed event, written by the daemon as
// the first event after writes to the log failed (a full disk): Failure is
// the error that stopped them. Calls were refused meanwhile
// (audit_unavailable), so no call is missing from the log.
type LogResumed struct {
	Failure string `json:"failure"`
}

// LogRecovered is the fields of a log_recovered event, written by Open or
// Recover after a torn tail: Length bytes starting at byte Offset of File,
// whose SHA-256 is Digest, are not an event and were left as they were. After
// is the sequence number of the last whole event before them; HeadSeq is the
// sequence number head.json recorded as committed when the tail was found
// (HeadSeq > After means committed events were lost, which a crash cannot
// cause). Complete says the bytes hold a newline: whole lines that are not
// events, which a crash cannot write either (a torn write ends inside its
// last line); Verify reports such a region as an edit.
type LogRecovered struct {
	File     string `json:"file"`
	Offset   int64  `json:"offset"`
	Length   int64  `json:"length"`
	Digest   string `json:"digest"`
	After    uint64 `json:"after"`
	HeadSeq  uint64 `json:"headSeq"`
	Complete bool   `json:"complete,omitempty"`
}

// SigningEnabled is the fields of a signing_enabled event, written (signed) by
// Open when a key is given and the last event is unsigned or is
// signing_disabled, and by Log.EnableSigning. UnsignedThrough is the sequence
// number of the event before it: the last unsigned one, or the
// signing_disabled that no event followed.
type SigningEnabled struct {
	UnsignedThrough uint64 `json:"unsignedThrough"`
}

// SigningDisabled is the fields of a signing_disabled event, written (signed,
// with the key that signed the events before it) by Log.DisableSigning.
// Reason says in words why signing stopped, such as "settings.auditSigning is
// false".
type SigningDisabled struct {
	Reason string `json:"reason"`
}

// ArgsSummary returns what the audit log records of a tool call's arguments:
// digest is "sha256:<hex>" of their RFC 8785 canonical form and keys the
// sorted top-level member names (nil when args is not an object). Empty args
// are treated as {} (MCP: omitted arguments). Arguments that are not valid
// JSON are digested as raw bytes and have no keys.
func ArgsSummary(args json.RawMessage) (digest string, keys []string) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	if isCanonical(args) {
		// What agents usually send (sorted members, no whitespace): its
		// canonical form is itself, and one pass reads its member names.
		return sha256Text(args), topKeys(args)
	}
	canon, err := jcs.Transform(args)
	if err != nil {
		return sha256Text(args), nil
	}
	var obj map[string]json.RawMessage
	if canon[0] == '{' && json.Unmarshal(canon, &obj) == nil {
		keys = make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
	}
	return sha256Text(canon), keys
}

func sha256Text(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// canonicalFields turns the caller's fields into the canonical JSON object
// stored in an event.
func canonicalFields(fields any) ([]byte, error) {
	var raw []byte
	switch v := fields.(type) {
	case nil:
		return []byte(`{}`), nil
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		if canon, ok := canonicalFast(fields); ok {
			if len(canon) > maxFieldsBytes {
				return nil, fmt.Errorf("%w: fields are %d bytes, more than %d", ErrInvalid, len(canon), maxFieldsBytes)
			}
			return canon, nil
		}
		var err error
		if raw, err = json.Marshal(fields); err != nil {
			return nil, fmt.Errorf("%w: encoding fields: %v", ErrInvalid, err)
		}
	}
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return []byte(`{}`), nil
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: canonicalising fields: %v", ErrInvalid, err)
	}
	if canon[0] != '{' {
		return nil, fmt.Errorf("%w: fields must be a JSON object", ErrInvalid)
	}
	if len(canon) > maxFieldsBytes {
		return nil, fmt.Errorf("%w: fields are %d bytes, more than %d", ErrInvalid, len(canon), maxFieldsBytes)
	}
	return canon, nil
}

const maxFieldsBytes = 4 << 20

func validType(t string) bool {
	if t == "" || len(t) > 64 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

const (
	hashPrefix = "sha256:"
	sigPrefix  = "hmac-sha256:"
	hashLen    = len(hashPrefix) + 64
	sigLen     = len(sigPrefix) + 64
	hashMember = `,"hash":"`
	sigMember  = `,"sig":"`
	tsLayout   = time.RFC3339Nano
)

// encoder builds lines; it is owned by one goroutine.
type encoder struct {
	mac hash.Hash // nil when unsigned
	h   hash.Hash
	sum []byte
	in  []byte // what is hashed or signed, reused (hash.Hash.Write of a string's bytes would copy them to the heap)
}

func newEncoder(key []byte) *encoder {
	e := &encoder{h: sha256.New()}
	if key != nil {
		e.mac = hmac.New(sha256.New, key)
	}
	return e
}

// appendLine appends the stored line (with newline) of the event to dst and
// returns it with the event's hash and signature.
func (e *encoder) appendLine(dst []byte, seq uint64, ts time.Time, typ string, fields []byte, prev string) (out []byte, hashText, sig string) {
	start := len(dst)
	dst = append(dst, `{"fields":`...)
	dst = append(dst, fields...)
	dst = append(dst, `,"prev":"`...)
	dst = append(dst, prev...)
	dst = append(dst, `","seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"ts":"`...)
	dst = ts.UTC().AppendFormat(dst, tsLayout)
	dst = append(dst, `","type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, '"')
	hashText = e.hash(prev, dst[start:])
	dst = append(dst, hashMember...)
	dst = append(dst, hashText...)
	dst = append(dst, '"')
	if e.mac != nil {
		sig = e.sign(hashText)
		dst = append(dst, sigMember...)
		dst = append(dst, sig...)
		dst = append(dst, '"')
	}
	dst = append(dst, "}\n"...)
	return dst, hashText, sig
}

// hash computes the event hash from prev and the canonical body without its
// closing brace (open).
func (e *encoder) hash(prev string, open []byte) string {
	e.sumOf(prev, open)
	var t [hashLen]byte
	copy(t[:], hashPrefix)
	hex.Encode(t[len(hashPrefix):], e.sum)
	return string(t[:])
}

// sumOf sets e.sum to the SHA-256 of prev, open and a closing brace.
func (e *encoder) sumOf(prev string, open []byte) {
	e.h.Reset()
	e.in = append(e.in[:0], prev...)
	e.h.Write(e.in)
	e.h.Write(open)
	e.h.Write(closeBrace)
	e.sum = e.h.Sum(e.sum[:0])
}

var closeBrace = []byte{'}'}

// hashIs reports whether the event hash of prev and open is want, without
// building the hash's text (Verify asks this of every line).
func (e *encoder) hashIs(prev string, open []byte, want string) bool {
	e.sumOf(prev, open)
	return hexIs(e.sum, want, hashPrefix)
}

// signatureIs reports, in constant time, whether sig is the signature of
// hashText.
func (e *encoder) signatureIs(hashText, sig string) bool {
	e.macOf(hashText)
	var got [sigLen]byte
	copy(got[:], sigPrefix)
	hex.Encode(got[len(sigPrefix):], e.sum)
	return len(sig) == sigLen && hmac.Equal(got[:], []byte(sig))
}

// hexIs reports whether text is prefix followed by the lower-case hex of sum.
func hexIs(sum []byte, text, prefix string) bool {
	if len(text) != len(prefix)+2*len(sum) || text[:len(prefix)] != prefix {
		return false
	}
	t := text[len(prefix):]
	for i, c := range sum {
		if t[2*i] != lowerHex[c>>4] || t[2*i+1] != lowerHex[c&0xf] {
			return false
		}
	}
	return true
}

func (e *encoder) sign(hashText string) string {
	e.macOf(hashText)
	var t [sigLen]byte
	copy(t[:], sigPrefix)
	hex.Encode(t[len(sigPrefix):], e.sum)
	return string(t[:])
}

// macOf sets e.sum to the HMAC of hashText.
func (e *encoder) macOf(hashText string) {
	e.mac.Reset()
	e.in = append(e.in[:0], hashText...)
	e.mac.Write(e.in)
	e.sum = e.mac.Sum(e.sum[:0])
}

// line is a parsed stored line. Its byte slices alias the input.
type line struct {
	open   []byte // canonical body without the closing brace
	fields []byte
	prev   string
	seq    uint64
	ts     []byte
	typ    string
	hash   string
	sig    string
}

var errMalformed = errors.New("malformed line")

// parseLine splits a stored line (without its newline) into its parts. It
// checks the fixed layout written by encoder.appendLine but not the hash, and
// not that fields is valid canonical JSON (see checkCanonical).
func parseLine(b []byte) (line, error) {
	var l line
	n := len(b)
	if n < 2 || b[n-1] != '}' {
		return l, errMalformed
	}
	end := n - 1
	if end >= len(sigMember)+sigLen+1 && b[end-1] == '"' &&
		bytes.HasPrefix(b[end-1-sigLen-len(sigMember):], []byte(sigMember+sigPrefix)) {
		s := end - 1 - sigLen
		l.sig = string(b[s : end-1])
		end = s - len(sigMember)
	}
	s := end - 1 - hashLen
	if s < len(hashMember) || b[end-1] != '"' || !bytes.HasPrefix(b[s-len(hashMember):], []byte(hashMember+hashPrefix)) {
		return l, errMalformed
	}
	l.hash = string(b[s : end-1])
	if !isHexText(l.hash, hashPrefix) || l.sig != "" && !isHexText(l.sig, sigPrefix) {
		return l, errMalformed
	}
	l.open = b[:s-len(hashMember)]
	o := l.open
	const head = `{"fields":`
	if !bytes.HasPrefix(o, []byte(head)) {
		return l, errMalformed
	}
	i := bytes.LastIndex(o, []byte(`,"prev":"`))
	if i < len(head)+2 {
		return l, errMalformed
	}
	l.fields = o[len(head):i]
	if l.fields[0] != '{' || l.fields[len(l.fields)-1] != '}' {
		return l, errMalformed
	}
	r := o[i+len(`,"prev":"`):]
	if len(r) < hashLen {
		return l, errMalformed
	}
	l.prev = string(r[:hashLen])
	if !isHexText(l.prev, hashPrefix) {
		return l, errMalformed
	}
	r = r[hashLen:]
	if !bytes.HasPrefix(r, []byte(`","seq":`)) {
		return l, errMalformed
	}
	r = r[len(`","seq":`):]
	j := 0
	for j < len(r) && r[j] >= '0' && r[j] <= '9' {
		j++
	}
	if j == 0 || j > 1 && r[0] == '0' {
		return l, errMalformed
	}
	seq, err := strconv.ParseUint(string(r[:j]), 10, 64)
	if err != nil || seq == 0 {
		return l, errMalformed
	}
	l.seq = seq
	r = r[j:]
	if !bytes.HasPrefix(r, []byte(`,"ts":"`)) {
		return l, errMalformed
	}
	r = r[len(`,"ts":"`):]
	j = bytes.IndexByte(r, '"')
	if j < 0 {
		return l, errMalformed
	}
	l.ts = r[:j]
	r = r[j:]
	if !bytes.HasPrefix(r, []byte(`","type":"`)) {
		return l, errMalformed
	}
	r = r[len(`","type":"`):]
	if len(r) < 2 || r[len(r)-1] != '"' {
		return l, errMalformed
	}
	l.typ = string(r[:len(r)-1])
	if !validType(l.typ) {
		return l, errMalformed
	}
	return l, nil
}

func isHexText(s, prefix string) bool {
	if len(s) != len(prefix)+64 || s[:len(prefix)] != prefix {
		return false
	}
	// A table and the OR of its answers: no branch per character, which
	// Verify runs three times per line.
	var bad byte
	for i := len(prefix); i < len(s); i++ {
		bad |= notLowerHex[s[i]]
	}
	return bad == 0
}

// notLowerHex is 1 for every byte that is not 0-9 or a-f.
var notLowerHex = func() (t [256]byte) {
	for i := range t {
		if !(i >= '0' && i <= '9' || i >= 'a' && i <= 'f') {
			t[i] = 1
		}
	}
	return t
}()

// event converts a parsed line into an Event, copying what it keeps.
func (l line) event() (Event, error) {
	ts, err := time.Parse(time.RFC3339Nano, string(l.ts))
	if err != nil {
		return Event{}, fmt.Errorf("%w: ts %q", errMalformed, l.ts)
	}
	return Event{
		Seq:    l.seq,
		TS:     ts.UTC(),
		Type:   l.typ,
		Fields: bytes.Clone(l.fields),
		Prev:   l.prev,
		Hash:   l.hash,
		Sig:    l.sig,
	}, nil
}
