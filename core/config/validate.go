package config

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The names are checked byte by byte rather than with package regexp: the
// front (`portcullis connect`) links this package, and compiling patterns
// at start-up, with regexp's own initialization, is about a millisecond of
// every agent connection (docs/BENCHMARKS.md).

// ValidLabel reports whether s is a valid server label or credential scope name: 1 to
// 64 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit.
func ValidLabel(s string) bool {
	if s == "" || len(s) > 64 || !isAlnum(s[0]) {
		return false
	}
	return allBytes(s[1:], func(c byte) bool { return isAlnum(c) || c == '.' || c == '_' || c == '-' })
}

// ValidEnvName reports whether s is a valid environment variable name: an ASCII
// letter or '_' followed by letters, digits or '_' (POSIX.1-2017 §8.1).
func ValidEnvName(s string) bool {
	if s == "" || !isLetter(s[0]) && s[0] != '_' {
		return false
	}
	return allBytes(s, func(c byte) bool { return isAlnum(c) || c == '_' })
}

// bare reports whether s is made only of ASCII letters, digits, '_' and '-'
// (and is not empty).
func bare(s string) bool {
	return s != "" && allBytes(s, func(c byte) bool { return isAlnum(c) || c == '_' || c == '-' })
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isAlnum(c byte) bool  { return isLetter(c) || '0' <= c && c <= '9' }

func allBytes(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

// Problem is one reason a configuration is invalid.
type Problem struct {
	// Path names the offending key or element, such as
	// "mcpServers.inventory.restart" or "mcpServers.inventory.watch[1]". A segment
	// that is not made of letters, digits, '_' and '-' is written quoted.
	Path string
	// Line and Column (both from 1; Column counts Unicode characters) locate the
	// key or element in the file; both are 0 when unknown, as for a Config built in
	// code.
	Line, Column int
	// Reason says what is wrong, in words a person can act on.
	Reason string
}

// String formats p as "LINE:COL: PATH: REASON", leaving out what is unknown.
func (p Problem) String() string { return p.format("") }

// format prefixes p with file and position as a compiler does: "FILE:LINE:COL: ".
func (p Problem) format(file string) string {
	var b strings.Builder
	loc := file
	if p.Line > 0 {
		if loc != "" {
			loc += ":"
		}
		loc += fmt.Sprintf("%d:%d", p.Line, p.Column)
	}
	if loc != "" {
		b.WriteString(loc)
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Reason)
	return b.String()
}

// ValidationError is returned when the file is well-formed JSON but does not
// describe a valid configuration: unknown, duplicate or mistyped keys, or values that
// break a rule of [Config.Validate]. It matches [ErrInvalid].
type ValidationError struct {
	// File is the name given to Parse or Load; empty for a Config built in code.
	File string
	// Problems lists every problem found, in file order when positions are known.
	Problems []Problem
}

// Error returns "FILE:LINE:COL: PATH: REASON" for a single problem; for several, a
// summary line followed by one such line per problem, each on its own line.
func (e *ValidationError) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0].format(e.File)
	}
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "%d problems in configuration", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n\t")
		b.WriteString(p.format(e.File))
	}
	return b.String()
}

// Is reports whether target is [ErrInvalid].
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// Validate checks every rule below and returns a *ValidationError listing all
// violations (Problems sorted by path), or nil:
//   - server labels and credential scope names match [ValidLabel];
//   - command is not empty; command, args, cwd and env contain no NUL byte;
//   - cwd, when set, is an absolute path; relative watch paths need a cwd;
//   - watch paths are not empty; restart is empty, "on-change" or "manual";
//   - tool names are not empty and each policy is "allow", "approve" or "deny";
//   - every credential a server lists is defined in credentials, at most once;
//   - inject is "env" (with a valid envVar) or "meta" (without envVar);
//   - env keys are valid names and do not set the envVar of a credential the server
//     uses; two credentials of one server do not share an envVar;
//   - durations are not negative;
//   - settings.approvalAuthentication is empty, "off", "credentials" or "always";
//   - settings.auditDurability is empty, "strict" or "authority";
//   - settings.telemetry, when present, has an http or https endpoint with
//     a host, a protocol that is empty, "http/protobuf" or "grpc", and
//     valid server labels in arguments.
func (c *Config) Validate() error {
	var problems []Problem
	for _, label := range sortedKeys(c.Servers) {
		validateServer(&problems, c, label, c.Servers[label])
	}
	for _, name := range sortedKeys(c.Credentials) {
		validateCredential(&problems, name, c.Credentials[name])
	}
	validateDuration(&problems, joinPath("settings", "approvalTimeout"), c.Settings.ApprovalTimeout)
	validateDuration(&problems, joinPath("settings", "holdTimeout"), c.Settings.HoldTimeout)
	if m := c.Settings.MaxMessageBytes; m != 0 && (m < MinMaxMessageBytes || m > MaxMaxMessageBytes) {
		problems = append(problems, Problem{Path: joinPath("settings", "maxMessageBytes"),
			Reason: fmt.Sprintf("must be between %d (1 MiB) and %d (1 GiB) bytes, or left out for the default %d (32 MiB)", MinMaxMessageBytes, MaxMaxMessageBytes, DefaultMaxMessageBytes)})
	}
	switch c.Settings.ApprovalAuthentication {
	case "", AuthOff, AuthCredentials, AuthCLI, AuthAlways:
	default:
		problems = append(problems, Problem{Path: joinPath("settings", "approvalAuthentication"),
			Reason: fmt.Sprintf("is %q: must be %q, %q, %q or %q (or left out for cli where the system can authenticate you)", c.Settings.ApprovalAuthentication, AuthOff, AuthCredentials, AuthCLI, AuthAlways)})
	}
	switch c.Settings.AuditDurability {
	case "", DurabilityStrict, DurabilityAuthority:
	default:
		problems = append(problems, Problem{Path: joinPath("settings", "auditDurability"),
			Reason: fmt.Sprintf("is %q: must be %q or %q (or left out for authority)", c.Settings.AuditDurability, DurabilityStrict, DurabilityAuthority)})
	}
	if t := c.Settings.Telemetry; t != nil {
		validateTelemetry(&problems, t)
	}
	if len(problems) == 0 {
		return nil
	}
	slices.SortStableFunc(problems, func(a, b Problem) int { return strings.Compare(a.Path, b.Path) })
	return &ValidationError{Problems: problems}
}

func validateServer(ps *[]Problem, c *Config, label string, s Server) {
	base := joinPath("mcpServers", label)
	add := func(path, format string, args ...any) {
		*ps = append(*ps, Problem{Path: path, Reason: fmt.Sprintf(format, args...)})
	}
	if !ValidLabel(label) {
		add(base, "server label %q is invalid: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", label)
	}
	if strings.TrimSpace(s.Command) == "" {
		add(joinPath(base, "command"), "command must not be empty")
	} else if strings.ContainsRune(s.Command, 0) {
		add(joinPath(base, "command"), "command must not contain a NUL character")
	}
	for i, a := range s.Args {
		if strings.ContainsRune(a, 0) {
			add(indexPath(joinPath(base, "args"), i), "argument must not contain a NUL character")
		}
	}
	if s.Cwd != "" && (!filepath.IsAbs(s.Cwd) || strings.ContainsRune(s.Cwd, 0)) {
		add(joinPath(base, "cwd"), "cwd must be an absolute path, not %q", s.Cwd)
	}
	for i, w := range s.Watch {
		p := indexPath(joinPath(base, "watch"), i)
		switch {
		case strings.TrimSpace(w) == "":
			add(p, "watch path must not be empty")
		case !filepath.IsAbs(w) && s.Cwd == "":
			add(p, "relative watch path %q needs a cwd to be relative to; set cwd or use an absolute path", w)
		}
	}
	for i, pat := range s.Ignore {
		p := indexPath(joinPath(base, "ignore"), i)
		switch {
		case strings.TrimSpace(pat) == "":
			add(p, "ignore pattern must not be empty")
		case strings.ContainsAny(pat, "\x00\n"):
			add(p, "ignore pattern must be one line without NUL characters")
		case strings.HasPrefix(pat, "!"):
			add(p, "ignore pattern %q: a negation (!) belongs in the tree's .gitignore; list only what to leave out", pat)
		}
	}
	switch s.Restart {
	case "", RestartOnChange, RestartManual:
	default:
		add(joinPath(base, "restart"), "restart must be %q or %q, not %q", RestartOnChange, RestartManual, s.Restart)
	}
	for _, tool := range sortedKeys(s.Tools) {
		p := joinPath(joinPath(base, "tools"), tool)
		if tool == "" {
			add(p, "tool name must not be empty")
		}
		switch pol := s.Tools[tool].Policy; pol {
		case PolicyAllow, PolicyApprove, PolicyDeny:
		default:
			add(joinPath(p, "policy"), "policy must be %q, %q or %q, not %q", PolicyAllow, PolicyApprove, PolicyDeny, pol)
		}
	}
	for _, kind := range sortedKeys(s.ServerRequests) {
		p := joinPath(joinPath(base, "serverRequests"), kind)
		if !slices.Contains(RequestKinds, kind) {
			add(p, "unknown kind of server request %q; the kinds are %s", kind, strings.Join(RequestKinds, ", "))
		}
		switch pol := s.ServerRequests[kind]; pol {
		case PolicyAllow, PolicyApprove, PolicyDeny:
		default:
			add(p, "policy must be %q, %q or %q, not %q", PolicyAllow, PolicyApprove, PolicyDeny, pol)
		}
	}
	// envVar → credential scope, for the env-injected credentials this server uses.
	credVars := make(map[string]string)
	seen := make(map[string]bool)
	for i, name := range s.Credentials {
		p := indexPath(joinPath(base, "credentials"), i)
		if seen[name] {
			add(p, "credential %q is listed twice", name)
			continue
		}
		seen[name] = true
		cred, ok := c.Credentials[name]
		if !ok {
			add(p, "credential %q is not defined under \"credentials\"", name)
			continue
		}
		if cred.Inject != InjectEnv || cred.EnvVar == "" {
			continue
		}
		if other, dup := credVars[cred.EnvVar]; dup {
			add(p, "credentials %q and %q both set %s", other, name, cred.EnvVar)
			continue
		}
		credVars[cred.EnvVar] = name
	}
	for _, k := range sortedKeys(s.Env) {
		p := joinPath(joinPath(base, "env"), k)
		if !ValidEnvName(k) {
			add(p, "environment variable name %q is invalid: use letters, digits and '_', not starting with a digit", k)
		}
		if name, ok := credVars[k]; ok {
			add(p, "env must not set %s: credential %q injects it from the keychain", k, name)
		}
		if k == "DBUS_SESSION_BUS_ADDRESS" {
			add(p, "env must not set %s: set \"sessionBus\": true to give the server the session bus", k)
		}
		if strings.ContainsRune(s.Env[k], 0) {
			add(p, "value must not contain a NUL character")
		}
	}
	switch s.Sandbox {
	case "", SandboxOff, SandboxStandard, SandboxStrict:
	default:
		add(joinPath(base, "sandbox"), "sandbox must be %q, %q or %q, not %q", SandboxOff, SandboxStandard, SandboxStrict, s.Sandbox)
	}
	for i, w := range s.Write {
		switch {
		case !filepath.IsAbs(w):
			add(fmt.Sprintf("%s[%d]", joinPath(base, "write"), i), "write path %q must be absolute", w)
		case strings.ContainsRune(w, 0):
			add(fmt.Sprintf("%s[%d]", joinPath(base, "write"), i), "write path must not contain a NUL character")
		case filepath.Clean(w) == "/":
			add(fmt.Sprintf("%s[%d]", joinPath(base, "write"), i), "write path must not be / (name the directories the server writes)")
		}
	}
	validateDuration(ps, joinPath(base, "startupTimeout"), s.StartupTimeout)
}

func validateCredential(ps *[]Problem, name string, cred Credential) {
	base := joinPath("credentials", name)
	add := func(path, format string, args ...any) {
		*ps = append(*ps, Problem{Path: path, Reason: fmt.Sprintf(format, args...)})
	}
	if !ValidLabel(name) {
		add(base, "credential scope name %q is invalid: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	switch cred.Inject {
	case InjectEnv:
		if cred.EnvVar == "" {
			add(joinPath(base, "envVar"), "inject \"env\" needs envVar, the variable to set")
		} else if !ValidEnvName(cred.EnvVar) {
			add(joinPath(base, "envVar"), "environment variable name %q is invalid: use letters, digits and '_', not starting with a digit", cred.EnvVar)
		}
	case InjectMeta:
		if cred.EnvVar != "" {
			add(joinPath(base, "envVar"), "envVar is not used with inject \"meta\"; remove it")
		}
	default:
		add(joinPath(base, "inject"), "inject must be %q or %q, not %q", InjectEnv, InjectMeta, cred.Inject)
	}
}

func validateDuration(ps *[]Problem, path string, d Duration) {
	if d < 0 {
		*ps = append(*ps, Problem{Path: path, Reason: fmt.Sprintf("duration must not be negative, got %s", d.String())})
	}
}

// joinPath appends key to the display path base, quoting the key unless it is
// made only of letters, digits, '_' and '-'.
func joinPath(base, key string) string {
	if !bare(key) {
		key = strconv.Quote(key)
	}
	if base == "" {
		return key
	}
	return base + "." + key
}

func indexPath(base string, i int) string { return base + "[" + strconv.Itoa(i) + "]" }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func validateTelemetry(ps *[]Problem, t *Telemetry) {
	at := func(key string) string { return joinPath(joinPath("settings", "telemetry"), key) }
	if u, err := url.Parse(t.Endpoint); t.Endpoint == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		*ps = append(*ps, Problem{Path: at("endpoint"),
			Reason: fmt.Sprintf("is %q: must be the collector's http:// or https:// URL with a host, such as \"http://127.0.0.1:4318\" (or leave settings.telemetry out to export nothing)", t.Endpoint)})
	}
	switch t.Protocol {
	case "", ProtocolHTTP, ProtocolGRPC:
	default:
		*ps = append(*ps, Problem{Path: at("protocol"),
			Reason: fmt.Sprintf("is %q: must be %q or %q (or left out for %s)", t.Protocol, ProtocolHTTP, ProtocolGRPC, ProtocolHTTP)})
	}
	for k := range t.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			*ps = append(*ps, Problem{Path: at("headers"), Reason: fmt.Sprintf("has the header name %q: a name has no spaces nor colons", k)})
		}
	}
	for i, label := range t.Arguments {
		if !ValidLabel(label) {
			*ps = append(*ps, Problem{Path: fmt.Sprintf("%s[%d]", at("arguments"), i), Reason: fmt.Sprintf("is %q: must be a server label", label)})
		}
	}
}
