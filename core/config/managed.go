package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"
)

// Managed is the managed policy: floors that an organisation sets for every
// configuration on a machine (docs/TEAMS.md, "Managed policy"). It lives in
// a root-owned file at a system path ([ManagedFile]); the person's
// configuration can never go below it. Every field is optional: an absent
// one sets no floor.
type Managed struct {
	// ApprovalAuthentication is the lowest settings.approvalAuthentication
	// in force: [AuthCredentials] or [AuthAlways].
	ApprovalAuthentication string `json:"approvalAuthentication,omitempty"`
	// Sandbox is the lowest sandbox level of every server:
	// [SandboxStandard] or [SandboxStrict]. A server's unset sandbox is set
	// to it explicitly, so that a system that cannot confine servers fails
	// their launch instead of running them unconfined.
	Sandbox string `json:"sandbox,omitempty"`
	// AlwaysAsk lists the tools whose policy is never allow: "LABEL" (every
	// tool of that server), "LABEL/TOOL", "*/TOOL" (that tool of every
	// server) or "*" (every tool).
	AlwaysAsk []string `json:"alwaysAsk,omitempty"`
	// ServersNotAllowed lists servers that are not run: an entry matches a
	// server whose label, command (as written or its base name) or one of
	// whose arguments (an npm package with or without "@version") equals it.
	ServersNotAllowed []string `json:"serversNotAllowed,omitempty"`
	// Telemetry, when present, is where every configuration exports
	// (settings.telemetry's endpoint, protocol, headers and resource
	// attributes); the person's Arguments list is kept.
	Telemetry *Telemetry `json:"telemetry,omitempty"`
}

// Floor is one part of the configuration that a managed policy holds at
// its floor ([Managed.Apply]).
type Floor struct {
	// Field is the key, as the configuration spells it:
	// "settings.approvalAuthentication", "mcpServers.LABEL.sandbox",
	// "mcpServers.LABEL.tools.TOOL.policy", "mcpServers.LABEL" (a server not
	// allowed), "settings.telemetry".
	Field string `json:"field"`
	// Lowered is true when the configuration went below the floor (a value
	// the person's tools refuse to write); false when the floor only made a
	// default explicit (an unset sandbox or approvalAuthentication, for
	// example).
	Lowered bool `json:"lowered"`
	// Text says it in words: "settings.approvalAuthentication is off: the
	// managed policy's floor always is in force".
	Text string `json:"text"`
}

// Lockdown is the floor in force while the managed policy file exists but
// does not parse (docs/TEAMS.md, "A malformed managed policy"): the daemon
// runs, and nothing an agent does goes through without the person, who
// must prove it is them: every tool asks, every grant needs the system's
// authentication.
var Lockdown = Managed{ApprovalAuthentication: AuthAlways, AlwaysAsk: []string{"*"}}

// Summary lists the floors m sets, in words, in a fixed order.
func (m *Managed) Summary() []string {
	if m == nil {
		return nil
	}
	var out []string
	if m.ApprovalAuthentication != "" {
		out = append(out, "approvalAuthentication at least "+m.ApprovalAuthentication)
	}
	if m.Sandbox != "" {
		out = append(out, "every server's sandbox at least "+m.Sandbox)
	}
	if len(m.AlwaysAsk) > 0 {
		out = append(out, "always ask: "+strings.Join(m.AlwaysAsk, ", "))
	}
	if len(m.ServersNotAllowed) > 0 {
		out = append(out, "servers not allowed: "+strings.Join(m.ServersNotAllowed, ", "))
	}
	if m.Telemetry != nil {
		out = append(out, "telemetry exported to "+m.Telemetry.Endpoint)
	}
	return out
}

// AsksAlways reports whether m's AlwaysAsk covers tool of the server label.
func (m *Managed) AsksAlways(label, tool string) bool {
	if m == nil {
		return false
	}
	for _, e := range m.AlwaysAsk {
		s, t, hasTool := strings.Cut(e, "/")
		if (s == "*" || s == label) && (!hasTool || t == "*" || t == tool) {
			return true
		}
	}
	return false
}

// NotAllowed returns the entry of m's ServersNotAllowed that srv (under
// label) matches, "" when none does.
func (m *Managed) NotAllowed(label string, srv Server) string {
	if m == nil {
		return ""
	}
	for _, e := range m.ServersNotAllowed {
		if e == label || e == srv.Command || e == path.Base(srv.Command) {
			return e
		}
		for _, a := range srv.Args {
			if a == e || packageName(a) == e {
				return e
			}
		}
	}
	return ""
}

// packageName is an npm package argument without its "@version":
// "@scope/pkg@1.2" → "@scope/pkg", "pkg@latest" → "pkg".
func packageName(arg string) string {
	if i := strings.LastIndexByte(arg, '@'); i > 0 {
		return arg[:i]
	}
	return arg
}

// Apply returns cfg raised to m's floors and what it raised, in a stable
// order; cfg is not modified. A nil m changes nothing. Servers not allowed
// are left out; tools of AlwaysAsk whose policy is allow become approve;
// sandbox levels and approvalAuthentication below the floor (or unset) are
// set to it; settings.telemetry takes m's endpoint, protocol, headers and
// resource attributes.
func (m *Managed) Apply(cfg *Config) (*Config, []Floor) {
	out := cfg.Clone()
	if m == nil {
		return out, nil
	}
	var floors []Floor
	if f := m.ApprovalAuthentication; f != "" {
		v := out.Settings.ApprovalAuthentication
		if v == "" || authRank(v) < authRank(f) {
			// Unset counts as credentials (which it is where the system
			// can authenticate); a floor makes it explicit either way.
			lowered := authRank(cmp.Or(v, AuthCredentials)) < authRank(f)
			floors = append(floors, Floor{Field: "settings.approvalAuthentication", Lowered: lowered,
				Text: fmt.Sprintf("settings.approvalAuthentication is %s: the managed policy's floor %s is in force", authText(v), f)})
			out.Settings.ApprovalAuthentication = f
		}
	}
	for _, label := range slices.Sorted(maps.Keys(out.Servers)) {
		s := out.Servers[label]
		if e := m.NotAllowed(label, s); e != "" {
			floors = append(floors, Floor{Field: joinPath("mcpServers", label), Lowered: true,
				Text: fmt.Sprintf("server %s is not allowed by the managed policy (it matches %q): it is not run", label, e)})
			delete(out.Servers, label)
			continue
		}
		if f := m.Sandbox; f != "" && (s.Sandbox == "" || sandboxRank(s.Sandbox) < sandboxRank(f)) {
			lowered := sandboxRank(s.SandboxLevel()) < sandboxRank(f)
			floors = append(floors, Floor{Field: joinPath(joinPath("mcpServers", label), "sandbox"), Lowered: lowered,
				Text: fmt.Sprintf("%s: sandbox is %s: the managed policy's floor %s is in force", label, cmp.Or(s.Sandbox, "unset"), f)})
			s.Sandbox = f
		}
		for _, tool := range slices.Sorted(maps.Keys(s.Tools)) {
			if s.Tools[tool].Policy != PolicyAllow || !m.AsksAlways(label, tool) {
				continue
			}
			floors = append(floors, Floor{Field: joinPath(joinPath(joinPath(joinPath("mcpServers", label), "tools"), tool), "policy"), Lowered: true,
				Text: fmt.Sprintf("%s: tool %s is allow: the managed policy says it always asks, so approve is in force", label, tool)})
			tools := maps.Clone(s.Tools)
			tools[tool] = ToolPolicy{Policy: PolicyApprove}
			s.Tools = tools
		}
		out.Servers[label] = s
	}
	if mt := m.Telemetry; mt != nil {
		t := out.Settings.Telemetry
		want := Telemetry{Endpoint: mt.Endpoint, Protocol: mt.Protocol, Headers: mt.Headers, ResourceAttributes: mt.ResourceAttributes}
		if t != nil {
			want.Arguments = t.Arguments
		}
		if t == nil || !reflect.DeepEqual(*t, want) {
			text := "settings.telemetry is absent: the managed policy exports to " + mt.Endpoint
			if t != nil {
				text = "settings.telemetry differs from the managed policy's: it exports to " + mt.Endpoint
			}
			floors = append(floors, Floor{Field: "settings.telemetry", Lowered: true, Text: text})
			out.Settings.Telemetry = &want
		}
	}
	return out, floors
}

// Below returns the floors of m that cfg goes below (the ones
// [Managed.Apply] reports as Lowered): what an edit by the person's tools
// may not make.
func (m *Managed) Below(cfg *Config) []Floor {
	_, floors := m.Apply(cfg)
	var out []Floor
	for _, f := range floors {
		if f.Lowered {
			out = append(out, f)
		}
	}
	return out
}

// ParseManaged parses the managed policy file's contents as strictly as
// [Parse] does a configuration (unknown, duplicate and mistyped keys are
// errors, with line and column) and checks its values. name is the file
// name used in errors.
func ParseManaged(data []byte, name string) (*Managed, error) {
	data = bytes.TrimPrefix(data, utf8BOM)
	if !utf8.Valid(data) {
		return nil, &SyntaxError{File: name, Line: 1, Column: 1, Reason: "the file is not valid UTF-8 text"}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &SyntaxError{File: name, Line: 1, Column: 1,
			Reason: `the file is empty; a managed policy that sets no floor is {}`}
	}
	w := &walker{data: data, dec: json.NewDecoder(bytes.NewReader(data)), pos: make(map[string]int64)}
	w.dec.UseNumber()
	w.pos[""] = 0
	if err := w.value(reflect.TypeFor[Managed](), ""); err != nil {
		return nil, w.syntaxError(name, err)
	}
	if rest := w.skipSpace(w.dec.InputOffset()); rest < int64(len(data)) {
		return nil, newSyntaxError(name, data, rest, "unexpected data after the top-level object")
	}
	var problems []located
	problems = append(problems, w.problems...)
	var m Managed
	if len(problems) == 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("%s: decoding the managed policy: %w", name, err)
		}
		var ps []Problem
		m.validate(&ps)
		for _, p := range ps {
			problems = append(problems, located{p, w.lookup(p.Path)})
		}
	}
	if len(problems) == 0 {
		return &m, nil
	}
	slices.SortStableFunc(problems, func(a, b located) int { return cmp.Compare(a.off, b.off) })
	ve := &ValidationError{File: name}
	for _, p := range problems {
		p.Line, p.Column = lineCol(data, p.off)
		ve.Problems = append(ve.Problems, p.Problem)
	}
	return nil, ve
}

func (m *Managed) validate(ps *[]Problem) {
	switch m.ApprovalAuthentication {
	case "", AuthCredentials, AuthAlways:
	default:
		*ps = append(*ps, Problem{Path: "approvalAuthentication",
			Reason: fmt.Sprintf("is %q: a floor must be %q or %q (or left out for none)", m.ApprovalAuthentication, AuthCredentials, AuthAlways)})
	}
	switch m.Sandbox {
	case "", SandboxStandard, SandboxStrict:
	default:
		*ps = append(*ps, Problem{Path: "sandbox",
			Reason: fmt.Sprintf("is %q: a floor must be %q or %q (or left out for none)", m.Sandbox, SandboxStandard, SandboxStrict)})
	}
	for i, e := range m.AlwaysAsk {
		s, t, hasTool := strings.Cut(e, "/")
		if (s != "*" && !ValidLabel(s)) || (hasTool && t == "") {
			*ps = append(*ps, Problem{Path: indexPath("alwaysAsk", i),
				Reason: fmt.Sprintf("is %q: want \"LABEL\", \"LABEL/TOOL\", \"*/TOOL\" or \"*\"", e)})
		}
	}
	for i, e := range m.ServersNotAllowed {
		if strings.TrimSpace(e) == "" {
			*ps = append(*ps, Problem{Path: indexPath("serversNotAllowed", i),
				Reason: "is empty: want a server label, a command or a package name"})
		}
	}
	if t := m.Telemetry; t != nil {
		var tp []Problem
		validateTelemetry(&tp, t)
		for _, p := range tp {
			p.Path = strings.Replace(p.Path, "settings.telemetry", "telemetry", 1)
			*ps = append(*ps, p)
		}
		if len(t.Arguments) > 0 {
			*ps = append(*ps, Problem{Path: "telemetry.arguments",
				Reason: "a managed policy cannot export argument values: only the person can, per server, in their own configuration"})
		}
	}
}
