package config

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Kinds of [Widening]: the changes of a configuration that give agents or
// servers more than the configuration in force (docs/DESIGN.md "Changes
// that widen trust": made by editing the configuration file, they are held
// until the person confirms them).
const (
	// WidenPolicy is a tool policy that lets more through: approve → allow,
	// deny → approve, deny → allow. A new server's tool set to allow is one
	// too (a server absent from the configuration counts as all approve).
	WidenPolicy = "policy"
	// WidenServerRequest is a policy of the server's requests to the agent
	// (serverRequests: sampling, elicitation, roots) that lets more
	// through, against the defaults for a new server or a kind not listed.
	WidenServerRequest = "server_request"
	// WidenCredential is a credential scope added to a server's list (a new
	// server that names scopes adds each of them).
	WidenCredential = "credential"
	// WidenLaunch is a change of the command, arguments, working directory,
	// environment or watched paths of a server that keeps credentials: the
	// secret would reach a program the person did not name.
	WidenLaunch = "launch"
	// WidenCredentialUse is a change of how the secret of a credential scope
	// that a server uses is injected (inject, envVar), or askEveryUse turned
	// off.
	WidenCredentialUse = "credential_use"
	// WidenAuditSigning is settings.auditSigning turned off.
	WidenAuditSigning = "audit_signing"
	// WidenApprovalAuthentication is settings.approvalAuthentication
	// lowered: always → credentials or off, credentials (or absent) → off.
	WidenApprovalAuthentication = "approval_authentication"
	// WidenAuditDurability is settings.auditDurability lowered from strict.
	WidenAuditDurability = "audit_durability"
	// WidenSessionBus is a server's sessionBus turned on (a new server
	// with it on too): the server reaches the Secret Service.
	WidenSessionBus = "session_bus"
	// WidenSandbox is a server's sandbox lowered (strict → standard →
	// off; unset counts as standard), a new server's below standard too.
	WidenSandbox = "sandbox"
	// WidenTelemetry is settings.telemetry sending to an endpoint that the
	// configuration in force does not name (telemetry turned on, or sent
	// elsewhere), or exporting the argument values of a server it did not:
	// data leaves the machine for a place the person did not choose.
	WidenTelemetry = "telemetry"
	// WidenWrite is a write path added to a server (a new server's too):
	// its sandbox lets it write there.
	WidenWrite = "write"
	// WidenIgnore is an ignore pattern added to a server that was
	// configured already: what the pattern matches is measured no more
	// (docs/DESIGN.md, "Data is not code").
	WidenIgnore = "ignore"
)

// Widening is one change, between the configuration in force and an edited
// one, that widens trust.
type Widening struct {
	// Kind is one of WidenPolicy, WidenCredential, WidenLaunch,
	// WidenCredentialUse, WidenAuditSigning, WidenApprovalAuthentication,
	// WidenAuditDurability, WidenSessionBus, WidenSandbox, WidenTelemetry,
	// WidenWrite, WidenIgnore.
	Kind string `json:"kind"`
	// Server is the server label the change is about ("" for credential
	// scope definitions and settings).
	Server string `json:"server,omitempty"`
	// Tool is the tool of a WidenPolicy change, the kind of request
	// (sampling, elicitation, roots) of a WidenServerRequest change.
	Tool string `json:"tool,omitempty"`
	// Scope is the credential scope of a WidenCredential or
	// WidenCredentialUse change.
	Scope string `json:"scope,omitempty"`
	// Text says the change in words, for a person: "echo: tool write
	// approve → allow". Arguments and environment values are named, never
	// quoted (they may hold secrets).
	Text string `json:"text"`
}

// SplitTrust compares edited, a configuration that arrived from outside
// (a file written by something other than the person's own tools), with
// applied, the configuration in force, and returns what may be put in force
// at once and what waits for the person: inForce is edited with every
// widening part put back as it is in applied (the parts that narrow or do
// not bear on trust apply at once), held lists the widening parts, in a
// stable order (servers by label, then credential scopes, then settings).
// held is empty when edited widens nothing; inForce is then a copy of
// edited. Neither argument is modified; applied may be nil (no
// configuration in force yet: nothing is held).
//
// What widens: see the Widen* kinds. Everything else applies at once:
// servers removed, credential scopes removed from a server or undefined,
// tool policies that narrow (allow → approve, * → deny), settings other than
// audit signing turned off, the launch of a server without credentials
// (a new launch is a new epoch: grants of the old one do not cover it).
//
// When putting the widening parts back leaves a configuration that does not
// validate (an unusual edit whose parts depend on each other), nothing of
// edited applies: inForce is a copy of applied and every widening part is
// held.
func SplitTrust(applied, edited *Config) (inForce *Config, held []Widening) {
	inForce = edited.Clone()
	if applied == nil {
		return inForce, nil
	}
	for _, label := range slices.Sorted(maps.Keys(edited.Servers)) {
		n := edited.Servers[label]
		o, had := applied.Servers[label]
		s := inForce.Servers[label]
		// Credential scopes the server did not have.
		var kept []string
		for _, scope := range n.Credentials {
			if had && slices.Contains(o.Credentials, scope) {
				kept = append(kept, scope)
				continue
			}
			held = append(held, Widening{Kind: WidenCredential, Server: label, Scope: scope,
				Text: fmt.Sprintf("%s: credential scope %s added", label, scope)})
		}
		s.Credentials = kept
		// Tool policies, against approve for a new server.
		tools := slices.Sorted(maps.Keys(n.Tools))
		if had {
			tools = union(tools, slices.Collect(maps.Keys(o.Tools)))
		}
		for _, tool := range tools {
			from, to := PolicyApprove, n.Policy(tool)
			if had {
				from = o.Policy(tool)
			}
			if policyRank(to) <= policyRank(from) {
				continue
			}
			held = append(held, Widening{Kind: WidenPolicy, Server: label, Tool: tool,
				Text: fmt.Sprintf("%s: tool %s %s → %s", label, tool, from, to)})
			if s.Tools == nil {
				s.Tools = map[string]ToolPolicy{}
			}
			if p, ok := o.Tools[tool]; had && ok {
				s.Tools[tool] = p
			} else {
				delete(s.Tools, tool)
			}
		}
		if len(s.Tools) == 0 {
			s.Tools = nil
		}
		// Policies of the server's requests to the agent, against the
		// defaults for a new server.
		for _, kind := range RequestKinds {
			from, to := Server{}.RequestPolicy(kind), n.RequestPolicy(kind)
			if had {
				from = o.RequestPolicy(kind)
			}
			if policyRank(to) <= policyRank(from) {
				continue
			}
			held = append(held, Widening{Kind: WidenServerRequest, Server: label, Tool: kind,
				Text: fmt.Sprintf("%s: %s requests to the agent %s → %s", label, kind, from, to)})
			if p, ok := o.ServerRequests[kind]; had && ok {
				s.ServerRequests[kind] = p
			} else {
				delete(s.ServerRequests, kind)
			}
		}
		if len(s.ServerRequests) == 0 {
			s.ServerRequests = nil
		}
		if n.SessionBus && !(had && o.SessionBus) {
			held = append(held, Widening{Kind: WidenSessionBus, Server: label,
				Text: fmt.Sprintf("%s: sessionBus false → true (the server reaches the session bus and the Secret Service on it)", label)})
			s.SessionBus = false
		}
		// The sandbox, against the default (standard) for a new server:
		// otherwise removing a server and adding it back would lower it.
		from, to := Server{}.SandboxLevel(), n.SandboxLevel()
		if had {
			from = o.SandboxLevel()
		}
		if sandboxRank(to) < sandboxRank(from) {
			held = append(held, Widening{Kind: WidenSandbox, Server: label,
				Text: fmt.Sprintf("%s: sandbox %s → %s", label, sandboxText(o, had), to)})
			s.Sandbox = ""
			if had {
				s.Sandbox = o.Sandbox
			}
		}
		// Write paths added: the sandbox lets the server write there.
		var addedW []string
		for _, w := range n.Write {
			if !(had && slices.Contains(o.Write, w)) {
				addedW = append(addedW, w)
			}
		}
		if len(addedW) > 0 {
			held = append(held, Widening{Kind: WidenWrite, Server: label,
				Text: fmt.Sprintf("%s: write paths added: %s (its sandbox lets it write there)", label, strings.Join(addedW, ", "))})
			s.Write = slices.DeleteFunc(slices.Clone(s.Write), func(w string) bool { return slices.Contains(addedW, w) })
			if len(s.Write) == 0 {
				s.Write = nil
			}
		}
		// Ignore patterns added: less is measured.
		if had {
			var added []string
			for _, p := range n.Ignore {
				if !slices.Contains(o.Ignore, p) {
					added = append(added, p)
				}
			}
			if len(added) > 0 {
				held = append(held, Widening{Kind: WidenIgnore, Server: label,
					Text: fmt.Sprintf("%s: ignore patterns added: %s (files they match are measured no more, unless they are code)", label, strings.Join(added, ", "))})
				s.Ignore = slices.DeleteFunc(slices.Clone(s.Ignore), func(p string) bool { return slices.Contains(added, p) })
				if len(s.Ignore) == 0 {
					s.Ignore = nil
				}
			}
		}
		// The launch of a server that keeps credentials.
		if len(s.Credentials) > 0 {
			if what := launchChanges(o, n); len(what) > 0 {
				held = append(held, Widening{Kind: WidenLaunch, Server: label,
					Text: fmt.Sprintf("%s: %s changed, and the server receives credentials %s", label, strings.Join(what, ", "), strings.Join(s.Credentials, ", "))})
				s.Command, s.Args, s.Cwd = o.Command, slices.Clone(o.Args), o.Cwd
				s.Env, s.Watch = maps.Clone(o.Env), slices.Clone(o.Watch)
			}
		}
		inForce.Servers[label] = s
	}
	for _, scope := range slices.Sorted(maps.Keys(edited.Credentials)) {
		n := edited.Credentials[scope]
		o, had := applied.Credentials[scope]
		if !had || !inForce.usesScope(scope) {
			continue
		}
		var what []string
		if o.Inject != n.Inject || o.EnvVar != n.EnvVar {
			what = append(what, fmt.Sprintf("injected %s → %s", credentialText(o), credentialText(n)))
		}
		if o.AskEveryUse && !n.AskEveryUse {
			what = append(what, "askEveryUse true → false")
		}
		if len(what) > 0 {
			held = append(held, Widening{Kind: WidenCredentialUse, Scope: scope,
				Text: fmt.Sprintf("credential %s: %s", scope, strings.Join(what, ", "))})
			inForce.Credentials[scope] = o
		}
	}
	if applied.Settings.AuditSigningOn() && !edited.Settings.AuditSigningOn() {
		held = append(held, Widening{Kind: WidenAuditSigning, Text: "settings: auditSigning true → false"})
		inForce.Settings.AuditSigning = applied.Settings.AuditSigning
	}
	if o, n := applied.Settings.ApprovalAuthentication, edited.Settings.ApprovalAuthentication; authRank(n) < authRank(o) {
		held = append(held, Widening{Kind: WidenApprovalAuthentication, Text: fmt.Sprintf("settings: approvalAuthentication %s → %s", authText(o), authText(n))})
		inForce.Settings.ApprovalAuthentication = o
	}
	if o, n := applied.Settings.AuditDurability, edited.Settings.AuditDurability; o == DurabilityStrict && n != DurabilityStrict {
		held = append(held, Widening{Kind: WidenAuditDurability, Text: fmt.Sprintf("settings: auditDurability strict → %s", cmp.Or(n, DurabilityAuthority))})
		inForce.Settings.AuditDurability = o
	}
	if w, ok := telemetryWidens(applied.Settings.Telemetry, edited.Settings.Telemetry); ok {
		held = append(held, w)
		inForce.Settings.Telemetry = applied.Settings.Telemetry.Clone()
	}
	if len(held) > 0 && inForce.Validate() != nil {
		return applied.Clone(), held
	}
	return inForce, held
}

// authRank orders values of settings.approvalAuthentication by how much
// they ask; absent counts as cli, its meaning where the system can
// authenticate.
func authRank(v string) int {
	switch v {
	case AuthOff:
		return 0
	case AuthCredentials:
		return 1
	case AuthAlways:
		return 3
	}
	return 2
}

func authText(v string) string {
	if v == "" {
		return "(absent: cli)"
	}
	return v
}

// sandboxText is the sandbox level a change lowers, for a person: a new
// server's default, or the level o had.
func sandboxText(o Server, had bool) string {
	switch {
	case !had:
		return "(new server: default standard)"
	case o.Sandbox == "":
		return "(default: standard)"
	}
	return o.Sandbox
}

// sandboxRank orders sandbox levels by how much they confine.
func sandboxRank(level string) int {
	switch level {
	case SandboxStrict:
		return 2
	case SandboxStandard:
		return 1
	}
	return 0
}

// policyRank orders policies by what they let through.
func policyRank(p Policy) int {
	switch p {
	case PolicyDeny:
		return 0
	case PolicyAllow:
		return 2
	}
	return 1
}

// launchChanges names the parts of how a server is launched that differ
// between o and n.
func launchChanges(o, n Server) []string {
	var what []string
	if o.Command != n.Command {
		what = append(what, fmt.Sprintf("command %s → %s", o.Command, n.Command))
	}
	if !slices.Equal(o.Args, n.Args) {
		what = append(what, "arguments")
	}
	if o.Cwd != n.Cwd {
		what = append(what, "working directory")
	}
	if !maps.Equal(o.Env, n.Env) {
		var names []string
		for _, k := range union(slices.Collect(maps.Keys(o.Env)), slices.Collect(maps.Keys(n.Env))) {
			a, had := o.Env[k]
			b, has := n.Env[k]
			if a != b || had != has {
				names = append(names, k)
			}
		}
		what = append(what, "environment ("+strings.Join(names, ", ")+")")
	}
	if !slices.Equal(o.Watch, n.Watch) {
		what = append(what, "watched paths")
	}
	return what
}

func (c *Config) usesScope(scope string) bool {
	for _, s := range c.Servers {
		if slices.Contains(s.Credentials, scope) {
			return true
		}
	}
	return false
}

func credentialText(c Credential) string {
	if c.EnvVar != "" {
		return c.Inject + " $" + c.EnvVar
	}
	return c.Inject
}

func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	out := *c
	out.Servers = nil
	if c.Servers != nil {
		out.Servers = make(map[string]Server, len(c.Servers))
	}
	for label, s := range c.Servers {
		s.Args = slices.Clone(s.Args)
		s.Env = maps.Clone(s.Env)
		s.Credentials = slices.Clone(s.Credentials)
		s.Watch = slices.Clone(s.Watch)
		s.Ignore = slices.Clone(s.Ignore)
		s.Tools = maps.Clone(s.Tools)
		s.ServerRequests = maps.Clone(s.ServerRequests)
		out.Servers[label] = s
	}
	out.Credentials = maps.Clone(c.Credentials)
	if c.Settings.AuditSigning != nil {
		v := *c.Settings.AuditSigning
		out.Settings.AuditSigning = &v
	}
	out.Settings.Telemetry = c.Settings.Telemetry.Clone()
	return &out
}

// Clone returns a deep copy of t (nil for nil).
func (t *Telemetry) Clone() *Telemetry {
	if t == nil {
		return nil
	}
	out := *t
	out.Headers = maps.Clone(t.Headers)
	out.ResourceAttributes = maps.Clone(t.ResourceAttributes)
	out.Arguments = slices.Clone(t.Arguments)
	return &out
}

// telemetryWidens reports whether edited sends telemetry somewhere applied
// does not (another endpoint or protocol), or the argument values of a
// server applied does not export. Turning telemetry off, or changing its
// headers or resource attributes, narrows nothing and widens nothing: it
// applies at once.
func telemetryWidens(applied, edited *Telemetry) (Widening, bool) {
	if edited == nil {
		return Widening{}, false
	}
	var what []string
	if applied == nil || applied.Endpoint != edited.Endpoint || cmp.Or(applied.Protocol, ProtocolHTTP) != cmp.Or(edited.Protocol, ProtocolHTTP) {
		what = append(what, fmt.Sprintf("export to %s (%s)", edited.Endpoint, cmp.Or(edited.Protocol, ProtocolHTTP)))
	}
	var had []string
	if applied != nil {
		had = applied.Arguments
	}
	for _, label := range edited.Arguments {
		if !slices.Contains(had, label) {
			what = append(what, "argument values of "+label)
		}
	}
	if len(what) == 0 {
		return Widening{}, false
	}
	return Widening{Kind: WidenTelemetry, Text: "settings: telemetry " + strings.Join(what, ", ")}, true
}
