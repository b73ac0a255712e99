// Package config loads, validates and saves Portcullis's configuration file: the
// list of MCP servers Portcullis supervises, the credential scopes they may use and a
// few daemon settings.
//
// The file is JSON (RFC 8259) shaped like the "mcpServers" block that agents such as
// Claude Desktop, Claude Code and Cursor already use, extended with Portcullis's own
// keys:
//
//	{"mcpServers":{"inventory-local":{"command":"node","args":["dist/server.js"],
//	   "cwd":"/Users/dev/inventory","env":{"LOG_LEVEL":"debug"},
//	   "credentials":["inventory-api-staging"],"watch":["dist","package-lock.json"],
//	   "restart":"on-change","tools":{"inventory_lookup":{"policy":"allow"}}}},
//	 "credentials":{"inventory-api-staging":{"inject":"env","envVar":"INVENTORY_TOKEN"}}}
//
// Reading is strict: unknown keys (compared case-sensitively), duplicate keys, wrong
// types, null values and data after the top-level object are errors, reported with the
// file name, line and column of the offending key or value. Secret values never appear
// in this file: a credential entry names a scope whose secret lives in the system
// keychain.
package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Policy is the authorization policy of one tool (docs/DESIGN.md, "Authorization
// and credentials"): [PolicyAllow], [PolicyApprove] or [PolicyDeny]. The
// configuration file spells it as a JSON string.
type Policy string

// Policy values for [ToolPolicy.Policy].
const (
	// PolicyAllow lets calls to the tool through without approval.
	PolicyAllow Policy = "allow"
	// PolicyApprove requires a person's approval for the agent run and epoch. It is
	// the default for tools the configuration does not mention.
	PolicyApprove Policy = "approve"
	// PolicyDeny hides the tool from the agent and refuses calls to it.
	PolicyDeny Policy = "deny"
)

// Restart values for [Server.Restart].
const (
	// RestartOnChange replaces the server process when a watched path changes. It is
	// the default when Restart is empty.
	RestartOnChange = "on-change"
	// RestartManual reports changes to watched paths but restarts only on request.
	RestartManual = "manual"
)

// Inject values for [Credential.Inject].
const (
	// InjectEnv puts the secret into the environment of an approved server process,
	// under [Credential.EnvVar].
	InjectEnv = "env"
	// InjectMeta puts the secret into params._meta of each approved tools/call.
	InjectMeta = "meta"
)

// Defaults applied when the corresponding setting is zero (absent from the file).
const (
	// DefaultApprovalTimeout is how long an approval request waits for a person
	// before the call is refused with approval_timeout.
	DefaultApprovalTimeout = 2 * time.Minute
	// DefaultHoldTimeout is how long a tools/call is held while a server is in the
	// identity-pending state before it is refused.
	DefaultHoldTimeout = 30 * time.Second
	// DefaultStartupTimeout is how long a server process may take to answer its
	// first request after launch.
	DefaultStartupTimeout = 30 * time.Second
)

var (
	// ErrInvalid matches every *SyntaxError and *ValidationError (errors.Is), for
	// callers that only need to know the file is unusable.
	ErrInvalid = errors.New("invalid configuration")
	// ErrExists is returned by [Config.AddServer] when the label is already taken.
	ErrExists = errors.New("server already exists")
	// ErrNotFound is returned by [Config.RemoveServer] when no server has the label.
	ErrNotFound = errors.New("server not found")
)

// Config is the whole configuration file.
type Config struct {
	// Servers maps a server label (see [ValidLabel]) to how to launch it.
	Servers map[string]Server `json:"mcpServers"`
	// Credentials maps a credential scope name (same syntax as a label) to how its
	// secret is injected. The secret itself is in the keychain, never here.
	Credentials map[string]Credential `json:"credentials,omitempty"`
	// Settings holds daemon-wide settings; every field has a default.
	Settings Settings `json:"settings,omitzero"`
}

// Server describes one stdio MCP server and the rules Portcullis applies to it.
type Server struct {
	// Command is the executable, resolved through PATH at launch. Required.
	Command string `json:"command"`
	// Args are the arguments after Command.
	Args []string `json:"args,omitempty"`
	// Cwd is the absolute working directory of the process; empty means the
	// daemon's own. Relative Watch paths are relative to it.
	Cwd string `json:"cwd,omitempty"`
	// Env holds extra environment variables (name → value) for the process. It must
	// not set the variable of a credential the server uses.
	Env map[string]string `json:"env,omitempty"`
	// Credentials lists the credential scopes (keys of [Config.Credentials]) the
	// server may receive after approval.
	Credentials []string `json:"credentials,omitempty"`
	// Watch lists files or directories whose change means a new build; relative
	// paths are relative to Cwd, which must then be set.
	Watch []string `json:"watch,omitempty"`
	// Ignore lists patterns (gitignore syntax, relative to each watched
	// directory) of files the server writes at run time, beside the
	// trees' own .gitignore files and the usual ignores (docs/DESIGN.md,
	// "Data is not code"): data, not code, so a write there starts no
	// build. A pattern never leaves out code (a source file, an
	// executable, a "#!" script, the entry). Adding one narrows what is
	// measured: it widens trust.
	Ignore []string `json:"ignore,omitempty"`
	// Restart is [RestartOnChange] (the default when empty) or [RestartManual].
	Restart string `json:"restart,omitempty"`
	// Tools maps a tool name to its policy; tools not listed get [PolicyApprove].
	Tools map[string]ToolPolicy `json:"tools,omitempty"`
	// ServerRequests maps a kind of request the server sends the agent
	// ([RequestSampling], [RequestElicitation], [RequestRoots]) to its
	// policy; kinds not listed get their default (see [Server.RequestPolicy]).
	ServerRequests map[string]Policy `json:"serverRequests,omitempty"`
	// StartupTimeout overrides [DefaultStartupTimeout] for this server when
	// non-zero. Written in the file as a Go duration string such as "45s".
	StartupTimeout Duration `json:"startupTimeout,omitzero"`
	// SessionBus passes the daemon's D-Bus session bus address to the
	// server. Without it the server gets none (docs/DESIGN.md, "Processes":
	// a server's environment is its own): the Secret Service, which holds
	// every credential, answers on that bus. Turning it on widens trust.
	SessionBus bool `json:"sessionBus,omitempty"`
	// Sandbox confines the server (docs/DESIGN.md, "Processes"):
	// [SandboxOff], [SandboxStandard] (the data, configuration and runtime
	// directories and the session bus's socket hidden from it; Linux: user
	// and mount namespaces) or [SandboxStrict] (standard and no network).
	// Empty is standard where the system can confine servers, off (and
	// status says why) where it cannot; a level set explicitly that the
	// system cannot provide fails the launch. Lowering it widens trust
	// (empty counts as standard).
	Sandbox string `json:"sandbox,omitempty"`
	// Write lists the absolute paths the server may write in its sandbox
	// besides its working directory, /tmp and its runtime's caches (the
	// person's home is otherwise read-only to it; docs/DESIGN.md,
	// "Processes"). Adding one widens trust.
	Write []string `json:"write,omitempty"`
}

// Sandbox levels of [Server.Sandbox].
const (
	SandboxOff      = "off"
	SandboxStandard = "standard"
	SandboxStrict   = "strict"
)

// SandboxLevel is the server's sandbox level with the default filled in:
// [SandboxStandard] when empty (which the daemon lowers to off, saying so,
// on a system without a sandbox).
func (s Server) SandboxLevel() string {
	if s.Sandbox == "" {
		return SandboxStandard
	}
	return s.Sandbox
}

// ToolPolicy is the per-tool authorization policy of a server.
type ToolPolicy struct {
	// Policy is [PolicyAllow], [PolicyApprove] or [PolicyDeny].
	Policy Policy `json:"policy"`
}

// Credential describes how the secret of one credential scope reaches a server.
type Credential struct {
	// Inject is [InjectEnv] or [InjectMeta].
	Inject string `json:"inject"`
	// EnvVar is the environment variable name for [InjectEnv]; required there and
	// forbidden for [InjectMeta].
	EnvVar string `json:"envVar,omitempty"`
	// AskEveryUse demands a person's approval for every use, not once per run:
	// every tools/call of a server that has the credential (whose tool's
	// policy is "approve"), and for [InjectEnv] also every launch of its
	// process, even of a build approved before.
	AskEveryUse bool `json:"askEveryUse,omitempty"`
}

// Settings holds daemon-wide settings. A zero field means "use the default".
type Settings struct {
	// ApprovalTimeout overrides [DefaultApprovalTimeout] when non-zero.
	ApprovalTimeout Duration `json:"approvalTimeout,omitzero"`
	// HoldTimeout overrides [DefaultHoldTimeout] when non-zero.
	HoldTimeout Duration `json:"holdTimeout,omitzero"`
	// MaxMessageBytes overrides [DefaultMaxMessageBytes], the largest
	// JSON-RPC message (one line) accepted from an agent or a server, in
	// bytes, when non-zero. A longer message fails only its own request
	// with message_too_large. Between [MinMaxMessageBytes] and
	// [MaxMaxMessageBytes].
	MaxMessageBytes int `json:"maxMessageBytes,omitzero"`
	// AuditSigning turns the HMAC signature of audit events on (true, and
	// the default when absent) or off (false); see [Settings.AuditSigningOn].
	// Turning it off never weakens the log silently: the daemon records a
	// signed signing_disabled event, after which events carry no signature,
	// and `portcullis audit verify` reports from which event on.
	AuditSigning *bool `json:"auditSigning,omitempty"`
	// ApprovalAuthentication says when the operating system's own
	// authentication (polkit on Linux, LocalAuthentication on macOS) must
	// succeed before a grant is issued: [AuthOff], [AuthCredentials],
	// [AuthCLI] or [AuthAlways]. Absent ("") means [AuthCLI] where the
	// system's mechanism is available and off where it is not; a value set
	// explicitly is kept even when the mechanism is missing (approvals it
	// covers are then refused).
	ApprovalAuthentication string `json:"approvalAuthentication,omitempty"`
	// AuditDurability is [DurabilityStrict] (every audit event is synced to
	// the disk before the action it records) or [DurabilityAuthority] (the
	// default when absent: authority events are, records of allow-policy
	// calls and completions are group-committed within 10 ms); see the
	// audit package's Durability for what each can lose.
	AuditDurability string `json:"auditDurability,omitempty"`
	// Telemetry, when present, sends what the audit log records (spans,
	// log records and metrics, never a secret nor, unless Arguments names
	// the server, argument values) to an OpenTelemetry collector over
	// OTLP. Absent: the standard OTEL_EXPORTER_OTLP_* variables of the
	// daemon's own environment, and nothing when they are unset either.
	Telemetry *Telemetry `json:"telemetry,omitempty"`
}

// Telemetry is settings.telemetry: where the daemon exports OpenTelemetry
// data (docs/CONFIGURATION.md, "Telemetry").
type Telemetry struct {
	// Endpoint is the collector's base URL (http or https): for
	// http/protobuf the signal paths /v1/traces, /v1/logs and /v1/metrics
	// are added to it; for grpc its host and port are dialled.
	Endpoint string `json:"endpoint"`
	// Protocol is [ProtocolHTTP] (the default when empty) or [ProtocolGRPC].
	Protocol string `json:"protocol,omitempty"`
	// Headers are sent with every export (a collector's token).
	Headers map[string]string `json:"headers,omitempty"`
	// ResourceAttributes are added to the resource that names this
	// machine's Portcullis (team, host group…).
	ResourceAttributes map[string]string `json:"resourceAttributes,omitempty"`
	// Arguments lists the server labels whose calls' argument values are
	// exported (as the span attribute portcullis.tool.arguments); no
	// other server's are.
	Arguments []string `json:"arguments,omitempty"`
}

// Values of Telemetry.Protocol, as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Values of Settings.AuditDurability.
const (
	DurabilityStrict    = "strict"
	DurabilityAuthority = "authority"
)

// Values of Settings.ApprovalAuthentication.
const (
	AuthOff         = "off"         // no OS authentication
	AuthCredentials = "credentials" // for grants that carry a credential scope
	// AuthCLI: for every decision made with the portcullis command (an
	// approval of any card, a trust-widening change made or confirmed), and
	// for window approvals of a card that carries a credential scope. The
	// default where the system can authenticate.
	AuthCLI    = "cli"
	AuthAlways = "always" // for every grant
)

// AuditSigningOn reports whether the audit log is to be signed: AuditSigning,
// or true when it is absent.
func (s Settings) AuditSigningOn() bool { return s.AuditSigning == nil || *s.AuditSigning }

// Message size limits, in bytes.
const (
	DefaultMaxMessageBytes = 32 << 20
	MinMaxMessageBytes     = 1 << 20
	MaxMaxMessageBytes     = 1 << 30
)

// MaxMessageOrDefault is the message size limit in force, in bytes.
func (s Settings) MaxMessageOrDefault() int {
	if s.MaxMessageBytes == 0 {
		return DefaultMaxMessageBytes
	}
	return s.MaxMessageBytes
}

// Duration is a time.Duration written in JSON as a Go duration string ("30s",
// "1m30s"; see time.ParseDuration). Numbers are not accepted, so that a bare 30 is
// never mistaken for nanoseconds or seconds.
type Duration time.Duration

// MarshalText encodes d as time.Duration.String does ("1m30s").
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.String()), nil
}

// String returns d as time.Duration.String does ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalText parses a Go duration string. It returns an error for anything
// time.ParseDuration rejects.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("want a duration such as \"30s\" or \"2m\", got %q", b)
	}
	*d = Duration(v)
	return nil
}

// ApprovalTimeoutOrDefault returns ApprovalTimeout, or [DefaultApprovalTimeout] when
// it is zero.
func (s Settings) ApprovalTimeoutOrDefault() time.Duration {
	return orDefault(s.ApprovalTimeout, DefaultApprovalTimeout)
}

// HoldTimeoutOrDefault returns HoldTimeout, or [DefaultHoldTimeout] when it is zero.
func (s Settings) HoldTimeoutOrDefault() time.Duration {
	return orDefault(s.HoldTimeout, DefaultHoldTimeout)
}

// StartupTimeoutOrDefault returns StartupTimeout, or [DefaultStartupTimeout] when it
// is zero.
func (s Server) StartupTimeoutOrDefault() time.Duration {
	return orDefault(s.StartupTimeout, DefaultStartupTimeout)
}

func orDefault(d Duration, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return time.Duration(d)
}

// Policy returns the policy for the named tool: the configured one, or
// [PolicyApprove] when the tool is not listed or its policy is empty.
func (s Server) Policy(tool string) Policy {
	if p := s.Tools[tool].Policy; p != "" {
		return p
	}
	return PolicyApprove
}

// Kinds of the requests a server sends the agent (MCP client features),
// the keys of [Server.ServerRequests].
const (
	// RequestSampling is sampling/createMessage: the server asks the
	// agent's model for a completion (default [PolicyApprove]).
	RequestSampling = "sampling"
	// RequestElicitation is elicitation/create: the server asks the person,
	// through the agent, for information (default [PolicyApprove]).
	RequestElicitation = "elicitation"
	// RequestRoots is roots/list: the server asks which folders the agent
	// works in (default [PolicyAllow]).
	RequestRoots = "roots"
)

// RequestKinds are the kinds of [Server.ServerRequests], in order.
var RequestKinds = []string{RequestSampling, RequestElicitation, RequestRoots}

// RequestPolicy returns the policy for the server's requests of kind (one
// of [RequestKinds]): the configured one, else [PolicyAllow] for
// [RequestRoots] and [PolicyApprove] for the others (and for an unknown
// kind).
func (s Server) RequestPolicy(kind string) Policy {
	if p := s.ServerRequests[kind]; p != "" {
		return p
	}
	if kind == RequestRoots {
		return PolicyAllow
	}
	return PolicyApprove
}

// RestartMode returns Restart, or [RestartOnChange] when it is empty.
func (s Server) RestartMode() string {
	if s.Restart == "" {
		return RestartOnChange
	}
	return s.Restart
}

// AddServer adds s under label. It returns an error wrapping [ErrExists] if the label
// is taken, or a *ValidationError if the label or the server is invalid (for example
// a credential scope that c does not define). c is unchanged on error.
func (c *Config) AddServer(label string, s Server) error {
	if _, ok := c.Servers[label]; ok {
		return fmt.Errorf("adding server %q: %w", label, ErrExists)
	}
	next := *c
	next.Servers = maps.Clone(c.Servers)
	if next.Servers == nil {
		next.Servers = make(map[string]Server)
	}
	next.Servers[label] = s
	var problems []Problem
	validateServer(&problems, &next, label, s)
	if len(problems) > 0 {
		return &ValidationError{Problems: problems}
	}
	c.Servers = next.Servers
	return nil
}

// RemoveServer deletes the server with the given label. It returns an error wrapping
// [ErrNotFound] if there is none. Credential scopes stay defined.
func (c *Config) RemoveServer(label string) error {
	if _, ok := c.Servers[label]; !ok {
		return fmt.Errorf("removing server %q: %w", label, ErrNotFound)
	}
	delete(c.Servers, label)
	return nil
}

// ProposedWrite returns the server's arguments that name existing
// directories (absolute, or relative to its cwd; "--flag=DIR" too), as
// absolute paths, leaving out / and the person's home: what `servers add`
// and `install` propose as its write paths ([Server.Write]), since what a
// server is given as a directory to work in (a filesystem server's roots,
// a repository, a database's folder) it likely writes.
func ProposedWrite(s Server) []string {
	home, _ := os.UserHomeDir()
	var out []string
	for _, a := range s.Args {
		if strings.HasPrefix(a, "-") {
			_, v, ok := strings.Cut(a, "=")
			if !ok {
				continue
			}
			a = v
		}
		p := a
		if !filepath.IsAbs(p) {
			if s.Cwd == "" || (!strings.ContainsRune(p, filepath.Separator) && p != ".") {
				continue
			}
			p = filepath.Join(s.Cwd, p)
		}
		p = filepath.Clean(p)
		if p == "/" || p == home {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.IsDir() && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
