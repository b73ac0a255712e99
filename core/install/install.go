// Package install routes an AI agent's local MCP servers through Portcullis
// (docs/DESIGN.md, "Command line": `portcullis install claude-desktop|claude-code|cursor|vscode|gemini-cli|codex`).
//
// [Install] reads the agent's configuration file (see [Locate] for where each agent
// keeps it), imports every stdio server entry into Portcullis's configuration
// (core/config) under a stable label, moves environment values that look like
// secrets ([Secret]) into a [SecretStore] as credential scopes, and rewrites the
// entry to launch `portcullis connect LABEL`. Remote entries (HTTP, SSE) and entries
// already routed through Portcullis are left alone. [Import] does the same without
// touching the agent's file; [Uninstall] puts the original entries back.
//
// Edits are splices into the original bytes: the rest of the file — other keys, key
// order, whitespace and, in VS Code's JSON with comments, comments — is kept byte
// for byte. Every write is preceded by a timestamped backup next to the file
// ([BackupSuffix]) and is atomic (temporary file, fsync, rename, same mode).
// Running Install twice changes nothing the second time. What Uninstall needs is
// kept in an install record under Portcullis's state directory ([RecordDir]), never
// with a secret value in it.
package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/tailscale/hujson"
)

var (
	// ErrNoFile matches a *MissingFileError: the agent has no configuration file
	// where [Locate] looked.
	ErrNoFile = errors.New("agent configuration file not found")
	// ErrSyntax matches a *SyntaxError: the agent's file is not valid JSON.
	ErrSyntax = errors.New("agent configuration file is not valid JSON")
	// ErrNotInstalled is returned by [Uninstall] when Portcullis has no record of
	// installing into the file.
	ErrNotInstalled = errors.New("not installed")
	// ErrNoEntry is returned when Options.Servers names an entry the file lacks.
	ErrNoEntry = errors.New("no such server entry")
	// ErrNoStore is returned by [Uninstall] with RestoreSecrets but no SecretStore.
	ErrNoStore = errors.New("no secret store")
	// ErrSecretStore is returned when the secret store did not keep a secret
	// (Set failed, or Get returned a different value); nothing was rewritten.
	ErrSecretStore = errors.New("secret store failed")
)

// MissingFileError says that the agent's file does not exist. It matches
// [ErrNoFile].
type MissingFileError struct {
	Agent Agent
	// Path is where the file was expected.
	Path string
	// Op is "install", "import" or "uninstall".
	Op string
	// Scope is the scope that selected the file.
	Scope Scope
}

// Error returns "no Claude Desktop config at PATH; nothing to install", and for
// the user file of an agent that also has project files, where to look instead.
func (e *MissingFileError) Error() string {
	msg := fmt.Sprintf("no %s config at %s; nothing to %s", e.Agent.Name(), e.Path, e.Op)
	if f := projectFile(e.Agent); f != "" && e.Scope == ScopeUser {
		msg += fmt.Sprintf(" (for a project's %s, run portcullis %s %s --scope project in the project directory)", f, e.Op, e.Agent)
	}
	return msg
}

// Is reports whether target is [ErrNoFile].
func (e *MissingFileError) Is(target error) bool { return target == ErrNoFile }

// SyntaxError says that the agent's file is not valid JSON (RFC 8259; for VS Code,
// JSON with comments and trailing commas). The file was not changed. It matches
// [ErrSyntax].
type SyntaxError struct {
	File string
	// Line and Column locate the error, both from 1; Column counts characters.
	Line, Column int
	Reason       string
	// Format is the file's syntax ([TOML] for Codex).
	Format Format
}

// Error returns "FILE:LINE:COL: not valid JSON: REASON; the file was not changed".
func (e *SyntaxError) Error() string {
	kind := "JSON"
	if e.Format == TOML {
		kind = "TOML"
	}
	return fmt.Sprintf("%s:%d:%d: not valid %s: %s; the file was not changed", e.File, e.Line, e.Column, kind, e.Reason)
}

// Is reports whether target is [ErrSyntax].
func (e *SyntaxError) Is(target error) bool { return target == ErrSyntax }

// Options configures [Install], [Import] and [Uninstall].
type Options struct {
	// Target is the agent file (see [Locate]).
	Target Target
	// ConfigFile is Portcullis's configuration file (paths.Dirs.ConfigFile); it is
	// created if missing.
	ConfigFile string
	// Save, when not nil, saves the edited configuration instead of
	// config.Save to ConfigFile (the CLI: through a running daemon, so that
	// the change is the person's and not held as an edit from outside).
	Save func(*config.Config) error
	// StateDir is Portcullis's state directory; install records go in
	// StateDir/[RecordDir].
	StateDir string
	// Exe is the absolute path agents launch Portcullis by (see
	// [ResolveExecutable]).
	Exe string
	// Servers, when not empty, limits the work to the entries with these names.
	Servers []string
	// PlainEnv names environment variables that are not secrets even if [Secret]
	// says they look like one.
	PlainEnv []string
	// Store receives moved secrets. When nil, entries with secrets in their env
	// are left unchanged (and reported): a secret is never dropped without being
	// stored.
	Store SecretStore
	// DryRun computes and reports every change (Report.AgentDiff, ConfigDiff) but
	// writes nothing and stores no secret.
	DryRun bool
	// RestoreSecrets (Uninstall only) puts moved secrets back into the agent's
	// file, read from Store; without it their env members are left out.
	RestoreSecrets bool
	// Home, when not empty, is the PORTCULLIS_HOME this Portcullis runs with: each
	// rewritten entry sets it in its "env", so that `portcullis connect` finds the
	// same data directory when the agent launches it.
	Home string
	// Now returns the current time, for backup names; nil means time.Now.
	Now func() time.Time
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Options) log() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Action says what happened to one entry.
type Action string

const (
	// ActionInstalled: imported and rewritten to run `portcullis connect LABEL`.
	ActionInstalled Action = "installed"
	// ActionImported: imported into Portcullis's configuration; the agent's file
	// is unchanged ([Import]).
	ActionImported Action = "imported"
	// ActionAlready: the entry already runs `portcullis connect LABEL`.
	ActionAlready Action = "already-installed"
	// ActionRemote: an HTTP or SSE server, which Portcullis does not proxy.
	ActionRemote Action = "remote"
	// ActionSkipped: left unchanged for the reason given.
	ActionSkipped Action = "skipped"
	// ActionRestored: [Uninstall] put the original entry back.
	ActionRestored Action = "restored"
)

// MovedSecret is one environment value that became a credential scope.
type MovedSecret struct {
	// EnvVar is the variable's name.
	EnvVar string
	// Scope is the credential scope that holds the value (config.Credential with
	// inject "env" and the same EnvVar).
	Scope string
	// Masked is the value as Portcullis shows it ([Mask]).
	Masked string
	// Why is the reason [Secret] gave; for Uninstall, what happened to it.
	Why string
}

// EntryReport is what happened to one server entry.
type EntryReport struct {
	// Where is the entry's place in the file (`mcpServers.github`,
	// `projects["/src/app"].mcpServers.github`).
	Where string
	// Name is the entry's name in the agent's file.
	Name string
	// Label is the Portcullis server label it runs as (or already ran as).
	Label string
	// Action is what happened.
	Action Action
	// Reason explains a skip, a remote entry, or how the label was chosen.
	Reason string
	// NewServer is true when the label was added to Portcullis's configuration,
	// false when an identical server was already there under it.
	NewServer bool
	// Secrets lists the env values moved to (or, for Uninstall, restored from)
	// credential scopes.
	Secrets []MovedSecret
	// Kept lists the agent-side keys left in the agent's entry ("type",
	// "disabled"…).
	Kept []string
	// Notes are other things a person should know about this entry.
	Notes []string
	// Warnings are things about this entry that will likely not work as is.
	Warnings []string
}

// Report is the result of [Install], [Import] or [Uninstall].
type Report struct {
	// Op is "install", "import" or "uninstall".
	Op string
	// Target is the agent file.
	Target Target
	// DryRun is true when nothing was written.
	DryRun bool
	// Entries lists every server entry of the file, in file order.
	Entries []EntryReport
	// AgentChanged and ConfigChanged say whether the agent's file and Portcullis's
	// configuration were (or, in a dry run, would be) changed.
	AgentChanged, ConfigChanged bool
	// AgentDiff and ConfigDiff are unified diffs of the changes, secrets masked.
	AgentDiff, ConfigDiff string
	// Backup is the backup written before the agent's file was changed.
	Backup string
	// ConfigFile is Portcullis's configuration file.
	ConfigFile string
	// Warnings are things that went wrong without stopping the command.
	Warnings []string
	// Home is Options.Home: the PORTCULLIS_HOME rewritten entries set.
	Home string
}

// Install routes the target's stdio servers through Portcullis: see the package
// documentation. It returns a *MissingFileError or a *SyntaxError (the file
// untouched) when the file cannot be used, an error wrapping [ErrNoEntry] for an
// unknown name in Options.Servers, config.ErrInvalid when Portcullis's
// configuration is broken, or an error wrapping [ErrSecretStore] or [ErrChanged].
// Errors that happen before the first write leave every file as it was.
func Install(opts Options) (*Report, error) { return run(opts, "install") }

// Import imports the target's stdio servers (and their secrets, when
// Options.Store is set) into Portcullis's configuration without changing the
// agent's file. Errors are those of [Install].
func Import(opts Options) (*Report, error) { return run(opts, "import") }

// plan is the analysis of one installable entry.
type plan struct {
	e       entry
	server  config.Server     // without credentials
	secrets map[string]string // env var → value, moved to the store
	rep     EntryReport
	// relative is the command when it is a relative path with no cwd to
	// resolve it against.
	relative string
}

func run(opts Options, op string) (*Report, error) {
	t := opts.Target
	rep := &Report{Op: op, Target: t, DryRun: opts.DryRun, ConfigFile: opts.ConfigFile, Home: opts.Home}
	path, data, mode, err := readFile(t.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &MissingFileError{Agent: t.Agent, Path: t.Path, Op: op, Scope: t.Scope}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the %s config: %w", t.Agent.Name(), err)
	}
	t.Path = path
	doc, err := parseDocument(t, data)
	if err != nil {
		return nil, err
	}
	cfgBefore, err := os.ReadFile(opts.ConfigFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading Portcullis's configuration: %w", err)
	}
	cfg, err := config.LoadForEdit(opts.ConfigFile)
	if err != nil {
		return nil, err
	}
	cfgLoaded, err := config.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	entries := doc.entries()
	if err := checkSelection(entries, opts.Servers, t.Path); err != nil {
		return nil, err
	}
	recPath := recordPath(opts.StateDir, t.Agent, t.Path)
	rec, err := loadRecord(recPath, t.Agent, t.Path)
	if err != nil {
		return nil, err
	}

	pending := map[string]string{} // credential scope → secret, to store
	var edits []edit
	var newRecords []recordEntry
	var masks []string
	for _, e := range entries {
		masks = append(masks, doc.envSecrets(e)...)
		if len(opts.Servers) > 0 && !slices.Contains(opts.Servers, e.name) {
			continue
		}
		p, ok := analyze(doc, e, &opts, cfg)
		if !ok {
			rep.Entries = append(rep.Entries, p.rep)
			continue
		}
		label, secrets, err := addServer(cfg, &p, opts.Store, pending)
		if err != nil {
			p.rep.Action, p.rep.Reason = ActionSkipped, err.Error()
			rep.Entries = append(rep.Entries, p.rep)
			continue
		}
		p.rep.Label, p.rep.Secrets = label, secrets
		p.rep.Action = ActionImported
		if p.relative != "" {
			p.rep.Warnings = append(p.rep.Warnings, fmt.Sprintf("the command %s is a relative path and the entry has no cwd: the daemon would resolve it against its own working directory, which may be anywhere, so launches will likely fail with \"command not found\". It is kept as is; make it an absolute path in the agent's entry first, or replace the server afterwards: portcullis servers remove %s, then portcullis servers add %s -- /absolute/path/to/%s …",
				p.relative, label, label, filepath.Base(p.relative)))
		}
		if prev, ok := rec.find(e.path); ok {
			if note := leftOutNote(prev, p.secrets, op); note != "" {
				p.rep.Notes = append(p.rep.Notes, note)
			}
		}
		if op == "install" {
			var env map[string]string
			if opts.Home != "" {
				env = map[string]string{paths.EnvHome: opts.Home}
			}
			text, err := doc.rewrite(e, opts.Exe, label, env)
			if err != nil {
				p.rep.Action, p.rep.Reason = ActionSkipped, "cannot rewrite the entry: "+err.Error()
				rep.Entries = append(rep.Entries, p.rep)
				continue
			}
			template, offsets, exact, err := doc.strip(e, p.secrets)
			if err != nil {
				p.rep.Action, p.rep.Reason = ActionSkipped, "cannot record the entry: "+err.Error()
				rep.Entries = append(rep.Entries, p.rep)
				continue
			}
			re := recordEntry{Path: e.path, Label: label, Command: opts.Exe, Original: template, InstalledAt: opts.now().UTC()}
			for _, s := range secrets {
				off, inEntry := offsets[s.EnvVar]
				if !inEntry { // it came from the envFile, which stays as it is
					p.rep.Notes = append(p.rep.Notes, fmt.Sprintf("%s still holds %s; remove it there once the server works through Portcullis", "the envFile", s.EnvVar))
					continue
				}
				re.Secrets = append(re.Secrets, recordSecret{EnvVar: s.EnvVar, Scope: s.Scope, Offset: off, Reencoded: !exact[s.EnvVar]})
			}
			newRecords = append(newRecords, re)
			edits = append(edits, edit{e.start, e.end, text})
			p.rep.Action = ActionInstalled
		} else if len(secrets) > 0 {
			p.rep.Notes = append(p.rep.Notes, "the agent's file still holds the secret values; `portcullis install` removes them")
		}
		rep.Entries = append(rep.Entries, p.rep)
	}

	newData := data
	if len(edits) > 0 {
		newData = apply(data, edits)
		if err := doc.check(newData, edits); err != nil {
			return nil, fmt.Errorf("internal error: the rewritten file would not parse (%v); nothing was written", err)
		}
	}
	cfgAfter, err := config.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	rep.AgentChanged = !bytes.Equal(newData, data)
	rep.ConfigChanged = !bytes.Equal(cfgAfter, cfgLoaded)
	if opts.DryRun {
		rep.AgentDiff = maskText(editDiff(t.Path, t.Path+" (after "+op+")", data, edits), masks)
		if rep.ConfigChanged {
			rep.ConfigDiff = unifiedDiff(opts.ConfigFile, opts.ConfigFile+" (after "+op+")", string(cfgBefore), string(cfgAfter))
		}
		return rep, nil
	}

	if err := storeSecrets(opts.Store, pending); err != nil {
		return nil, err
	}
	if rep.ConfigChanged {
		if err := os.MkdirAll(filepath.Dir(opts.ConfigFile), 0o700); err != nil {
			return nil, fmt.Errorf("creating Portcullis's configuration directory: %w", err)
		}
		save := func(c *config.Config) error { return config.Save(opts.ConfigFile, c) }
		if opts.Save != nil {
			save = opts.Save
		}
		if err := save(cfg); err != nil {
			return nil, err
		}
		opts.log().Debug("configuration saved", "file", opts.ConfigFile)
	}
	if !rep.AgentChanged {
		return rep, nil
	}
	// The record first: if the agent's file is then written, uninstall can undo it.
	for _, re := range newRecords {
		rec.put(re)
	}
	if err := rec.save(recPath); err != nil {
		return nil, err
	}
	backup, err := replaceFile(t.Path, data, newData, mode, opts.now())
	rep.Backup = backup
	if err != nil {
		return rep, err
	}
	for i := range rec.Entries {
		if rec.Entries[i].Backup == "" {
			rec.Entries[i].Backup = backup
		}
	}
	if slices.ContainsFunc(newRecords, func(r recordEntry) bool { return len(r.Secrets) > 0 }) {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("the backup %s still holds the moved secrets in plain text (mode 0600); delete it once the servers work through Portcullis", backup))
	}
	if err := rec.save(recPath); err != nil {
		rep.Warnings = append(rep.Warnings, err.Error())
	}
	opts.log().Debug("agent file rewritten", "file", t.Path, "backup", backup)
	return rep, nil
}

// leftOutNote says that an earlier uninstall put the entry back without some
// secrets that are still not in it (found holds those that are), so op does not
// bring them back; "" when there are none.
func leftOutNote(re recordEntry, found map[string]string, op string) string {
	var parts []string
	for _, s := range re.Secrets {
		if _, back := found[s.EnvVar]; slices.Contains(re.LeftOut, s.EnvVar) && !back {
			parts = append(parts, fmt.Sprintf("%s (credential scope %s)", s.EnvVar, s.Scope))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	note := fmt.Sprintf("portcullis uninstall left %s out of this entry on %s, so this %s does not carry it",
		strings.Join(parts, ", "), re.UninstalledAt.Format("2006-01-02 15:04 MST"), op)
	if op == "install" {
		note += "; a later uninstall gives back the entry as it is now, without it"
	}
	return note
}

// checkSelection fails when names lists an entry the file lacks.
func checkSelection(entries []entry, names []string, file string) error {
	have := map[string]bool{}
	for _, e := range entries {
		have[e.name] = true
	}
	for _, n := range names {
		if !have[n] {
			return fmt.Errorf("%q in %s (it has: %s): %w", n, file, strings.Join(slices.Sorted(maps.Keys(have)), ", "), ErrNoEntry)
		}
	}
	return nil
}

// checkSyntax checks that data still parses in t's format.
func checkSyntax(t Target, data []byte) error {
	if t.Format == JSON && !json.Valid(data) {
		return errors.New("invalid JSON")
	}
	_, err := hujson.Parse(bytes.Clone(data))
	return err
}

// remoteTypes are "type" values of entries that reach a server over the network.
var remoteTypes = map[string]bool{"http": true, "sse": true, "streamable-http": true, "streamableHttp": true, "ws": true, "websocket": true}

// envSecrets returns the env values of e that look like secrets, for masking.
func (d *document) envSecrets(e entry) []string {
	fields, err := d.fields(e)
	if err != nil {
		return nil
	}
	var env map[string]any
	if json.Unmarshal(fields["env"], &env) != nil {
		return nil
	}
	var out []string
	for k, v := range env {
		if s, ok := v.(string); ok {
			if yes, _ := Secret(k, s); yes {
				out = append(out, s)
			}
		}
	}
	return out
}

// analyze decides what to do with one entry. It returns ok=false with the report
// filled when the entry is not imported.
func analyze(d *document, e entry, opts *Options, cfg *config.Config) (plan, bool) {
	p := plan{e: e, rep: EntryReport{Where: e.where(), Name: e.name}}
	skip := func(format string, args ...any) (plan, bool) {
		p.rep.Action, p.rep.Reason = ActionSkipped, fmt.Sprintf(format, args...)
		return p, false
	}
	fields, err := d.fields(e)
	if err != nil {
		return skip("%v", err)
	}
	str := func(key string) (string, error) {
		raw, ok := fields[key]
		if !ok {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%q is not a string", key)
		}
		return s, nil
	}
	typ, err := str("type")
	if err != nil {
		return skip("%v", err)
	}
	_, hasURL := fields["url"]
	_, hasHTTPURL := fields["httpUrl"] // Gemini CLI's streamable HTTP entries
	if hasURL || hasHTTPURL || remoteTypes[typ] {
		p.rep.Action = ActionRemote
		p.rep.Reason = "remote server"
		if typ != "" {
			p.rep.Reason += " (type " + typ + ")"
		}
		p.rep.Reason += "; Portcullis supervises stdio servers only"
		return p, false
	}
	cmd, err := str("command")
	if err != nil {
		return skip("%v", err)
	}
	if strings.TrimSpace(cmd) == "" {
		return skip(`no "command"`)
	}
	if typ != "" && typ != "stdio" {
		return skip("type %q is not a stdio server", typ)
	}
	args, err := stringList(fields["args"])
	if err != nil {
		return skip("%v", err)
	}
	if routed(cmd, args, opts.Exe) {
		p.rep.Action, p.rep.Label = ActionAlready, args[1]
		p.rep.Reason = "portcullis connect " + args[1]
		if _, ok := cfg.Servers[args[1]]; !ok {
			p.rep.Notes = append(p.rep.Notes, fmt.Sprintf("Portcullis's configuration has no server %q; add it with `portcullis servers add`", args[1]))
		}
		var env map[string]any
		_ = json.Unmarshal(fields["env"], &env)
		switch home, _ := env[paths.EnvHome].(string); {
		case home == opts.Home:
		case home == "":
			p.rep.Warnings = append(p.rep.Warnings, fmt.Sprintf("it runs without %s, so it reaches the default Portcullis data directory, not this one (%s); add \"env\": {\"%s\": \"%s\"} to the entry to change that",
				paths.EnvHome, opts.Home, paths.EnvHome, opts.Home))
		case opts.Home == "":
			p.rep.Warnings = append(p.rep.Warnings, fmt.Sprintf("it runs with %s=%s, not the default data directory this command uses; remove it from the entry's \"env\" to change that", paths.EnvHome, home))
		default:
			p.rep.Warnings = append(p.rep.Warnings, fmt.Sprintf("it runs with %s=%s, not this one (%s); change it in the entry's \"env\" to reach this one", paths.EnvHome, home, opts.Home))
		}
		return p, false
	}
	t := d.target
	if cmd, err = t.expand(cmd, e.projectDir); err != nil {
		return skip("command: %v", err)
	}
	for i := range args {
		if args[i], err = t.expand(args[i], e.projectDir); err != nil {
			return skip("args[%d]: %v", i, err)
		}
	}
	baseDir := e.projectDir
	if baseDir == "" {
		baseDir = filepath.Dir(t.Path)
	}
	env := map[string]string{}
	if raw, ok := fields["envFile"]; ok {
		var f string
		if json.Unmarshal(raw, &f) != nil {
			return skip(`"envFile" is not a string`)
		}
		if f, err = t.expand(f, e.projectDir); err != nil {
			return skip("envFile: %v", err)
		}
		if !filepath.IsAbs(f) {
			f = filepath.Join(baseDir, f)
		}
		vars, err := readEnvFile(f)
		if err != nil {
			return skip("envFile: %v", err)
		}
		maps.Copy(env, vars)
		p.rep.Notes = append(p.rep.Notes, fmt.Sprintf("envFile %s read (%d variables); later changes to it are not seen", f, len(vars)))
	}
	if raw, ok := fields["env"]; ok {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return skip(`"env" is not an object`)
		}
		for k, v := range m {
			s, err := scalar(v)
			if err != nil {
				return skip("env.%s: %v", k, err)
			}
			if s, err = t.expand(s, e.projectDir); err != nil {
				return skip("env.%s: %v", k, err)
			}
			env[k] = s
		}
	}
	cwd, err := str("cwd")
	if err != nil {
		return skip("%v", err)
	}
	if cwd, err = t.expand(cwd, e.projectDir); err != nil {
		return skip("cwd: %v", err)
	}
	switch {
	case cwd != "" && !filepath.IsAbs(cwd):
		cwd = filepath.Join(baseDir, cwd)
	case cwd == "":
		cwd = e.projectDir
	}
	if strings.ContainsRune(cmd, '/') && !filepath.IsAbs(cmd) && cwd == "" {
		// The agent resolves it against whatever directory it runs in; so would
		// the daemon. Neither is known here: keep it, and say so (run adds
		// the warning once the label is known).
		p.relative = cmd
	}
	for k := range fields {
		if !slices.Contains(launchKeys, k) && k != "type" {
			p.rep.Kept = append(p.rep.Kept, k)
		}
	}
	slices.Sort(p.rep.Kept)
	if dis, ok := fields["disabled"]; ok && string(dis) == "true" || string(fields["enabled"]) == "false" { // Codex: enabled = false
		p.rep.Notes = append(p.rep.Notes, "the agent has this entry disabled; it stays disabled there")
	}

	p.secrets = map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if slices.Contains(opts.PlainEnv, k) {
			continue
		}
		if yes, why := Secret(k, env[k]); yes {
			p.secrets[k] = env[k]
			p.rep.Secrets = append(p.rep.Secrets, MovedSecret{EnvVar: k, Masked: Mask(env[k]), Why: why})
			delete(env, k)
		}
	}
	if len(p.secrets) > 0 && opts.Store == nil {
		names := slices.Sorted(maps.Keys(p.secrets))
		return skip("env %s looks like a secret and there is no secret store to keep it in (if it is not a secret, pass --plain-env %s)",
			strings.Join(names, ", "), strings.Join(names, ","))
	}
	if len(env) == 0 {
		env = nil
	}
	p.server = config.Server{Command: cmd, Args: args, Cwd: cwd, Env: env}
	return p, true
}

// routed reports whether the command line already runs `portcullis connect LABEL`.
func routed(cmd string, args []string, exe string) bool {
	base := filepath.Base(cmd)
	return (cmd == exe || base == "portcullis" || base == "Portcullis") && len(args) >= 2 && args[0] == "connect"
}

// stringList decodes a JSON array of strings; numbers and booleans are taken as
// written. A missing value is an empty list.
func stringList(raw json.RawMessage) ([]string, error) {
	if raw == nil {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, errors.New(`"args" is not an array`)
	}
	out := make([]string, 0, len(list))
	for i, r := range list {
		s, err := scalar(r)
		if err != nil {
			return nil, fmt.Errorf("args[%d]: %v", i, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// scalar decodes a string, or takes a number or boolean as written.
func scalar(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err == nil {
		switch v.(type) {
		case float64, bool:
			return string(raw), nil
		}
	}
	return "", errors.New("not a string")
}

// expand replaces the variables the agent would expand at launch and Portcullis
// can know now: ${userHome} and ${workspaceFolder} for VS Code and Cursor. Any
// other ${…} is an error: only the agent can expand it.
func (t Target) expand(s, projectDir string) (string, error) {
	var out strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			out.WriteString(s)
			return out.String(), nil
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			out.WriteString(s)
			return out.String(), nil
		}
		name := s[i+2 : i+j]
		var val string
		switch {
		case (t.Agent == VSCode || t.Agent == Cursor) && name == "userHome" && t.Home != "":
			val = t.Home
		case (t.Agent == VSCode || t.Agent == Cursor) && name == "workspaceFolder" && projectDir != "":
			val = projectDir
		default:
			return "", fmt.Errorf("uses ${%s}, which only %s can expand when it launches the server", name, t.Agent.Name())
		}
		out.WriteString(s[:i])
		out.WriteString(val)
		s = s[i+j+1:]
	}
}

// readEnvFile reads a dotenv file: NAME=VALUE lines, blank lines and # comments
// ignored, an optional "export " prefix, values optionally in single or double
// quotes (double quotes understand \n, \" and \\).
func readEnvFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !config.ValidEnvName(k) {
			return nil, fmt.Errorf("%s:%d: want NAME=VALUE", path, n+1)
		}
		v = strings.TrimSpace(v)
		switch {
		case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
			v = strings.NewReplacer(`\n`, "\n", `\"`, `"`, `\\`, `\`).Replace(v[1 : len(v)-1])
		case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
			v = v[1 : len(v)-1]
		default:
			if i := strings.Index(v, " #"); i >= 0 {
				v = strings.TrimSpace(v[:i])
			}
		}
		out[k] = v
	}
	return out, nil
}

// addServer finds the label for p's server and adds it, with credential scopes
// for its secrets, to cfg unless an identical server is already there. New
// secrets go into pending (scope → value). It returns the label and the moved
// secrets with their scopes.
func addServer(cfg *config.Config, p *plan, store SecretStore, pending map[string]string) (string, []MovedSecret, error) {
	lookup := func(scope string) (string, bool) {
		if v, ok := pending[scope]; ok {
			return v, true
		}
		if store == nil {
			return "", false
		}
		b, err := store.Get(scope)
		return string(b), err == nil
	}
	base := SanitizeLabel(p.e.name)
	var label string
	for i := 1; ; i++ {
		label = withSuffix(base, i)
		existing, ok := cfg.Servers[label]
		if !ok {
			break
		}
		if scopes, same := sameServer(cfg, existing, p.server, p.secrets, lookup); same {
			p.rep.NewServer = false
			p.rep.Reason = fmt.Sprintf("the same server is already in Portcullis's configuration as %q", label)
			return label, withScopes(p.rep.Secrets, scopes), nil
		}
		if i == 1 {
			p.rep.Notes = append(p.rep.Notes, fmt.Sprintf("Portcullis already has a different server labelled %q", base))
		}
	}
	s := p.server
	if len(s.Write) == 0 {
		if s.Write = config.ProposedWrite(s); len(s.Write) > 0 {
			p.rep.Notes = append(p.rep.Notes, fmt.Sprintf("write paths %s (directories among its arguments): in its sandbox %q writes only these, its cwd, /tmp and its caches; other paths: portcullis servers edit %s --write PATH", strings.Join(s.Write, ", "), label, label))
		}
	}
	scopes := map[string]string{}
	added := []string{}
	for _, v := range slices.Sorted(maps.Keys(p.secrets)) {
		sbase := SanitizeLabel(label + "." + strings.ToLower(v))
		var scope string
		for i := 1; ; i++ {
			scope = withSuffix(sbase, i)
			if _, taken := cfg.Credentials[scope]; !taken {
				if _, taken := pending[scope]; !taken {
					break
				}
			}
		}
		if cfg.Credentials == nil {
			cfg.Credentials = map[string]config.Credential{}
		}
		cfg.Credentials[scope] = config.Credential{Inject: config.InjectEnv, EnvVar: v}
		added = append(added, scope)
		scopes[v] = scope
		s.Credentials = append(s.Credentials, scope)
	}
	if err := cfg.AddServer(label, s); err != nil {
		for _, sc := range added {
			delete(cfg.Credentials, sc)
		}
		//lint:ignore ST1005 the sentence starts with the product's name
		return "", nil, fmt.Errorf("Portcullis cannot take this server: %w", err)
	}
	for v, sc := range scopes {
		pending[sc] = p.secrets[v]
	}
	p.rep.NewServer = true
	return label, withScopes(p.rep.Secrets, scopes), nil
}

func withScopes(secrets []MovedSecret, scopes map[string]string) []MovedSecret {
	out := slices.Clone(secrets)
	for i := range out {
		out[i].Scope = scopes[out[i].EnvVar]
	}
	return out
}

// sameServer reports whether existing launches the same process as s with the
// same secrets: command, args, cwd and plain env equal, and its env-injected
// credentials cover exactly the secret variables with equal values. It returns
// the credential scope of each secret variable.
func sameServer(cfg *config.Config, existing, s config.Server, secrets map[string]string, lookup func(string) (string, bool)) (map[string]string, bool) {
	if existing.Command != s.Command || !slices.Equal(existing.Args, s.Args) || existing.Cwd != s.Cwd ||
		!maps.Equal(existing.Env, s.Env) {
		return nil, false
	}
	scopes := map[string]string{}
	for _, sc := range existing.Credentials {
		c := cfg.Credentials[sc]
		if c.Inject == config.InjectEnv {
			scopes[c.EnvVar] = sc
		}
	}
	if len(scopes) != len(secrets) {
		return nil, false
	}
	for v, val := range secrets {
		sc, ok := scopes[v]
		if !ok {
			return nil, false
		}
		if got, ok := lookup(sc); !ok || got != val {
			return nil, false
		}
	}
	return scopes, true
}

// SanitizeLabel turns an agent's entry name into a valid Portcullis label
// (config.ValidLabel): characters other than ASCII letters, digits, '.', '_' and
// '-' become '-' (runs collapsed), leading characters that are not letters or
// digits and trailing '-', '.' and '_' are dropped, and the result is cut to 64
// bytes. An empty result becomes "server". Valid labels are returned unchanged.
func SanitizeLabel(name string) string {
	if config.ValidLabel(name) {
		return name
	}
	var b []byte
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			c = '-'
		}
		if c == '-' && len(b) > 0 && b[len(b)-1] == '-' {
			continue
		}
		b = append(b, c)
	}
	s := strings.TrimLeft(string(b), "-._")
	if len(s) > 64 {
		s = s[:64]
	}
	s = strings.TrimRight(s, "-._")
	if s == "" {
		return "server"
	}
	return s
}

// withSuffix returns base for i == 1, else base cut to fit and "-i".
func withSuffix(base string, i int) string {
	if i == 1 {
		return base
	}
	suf := fmt.Sprintf("-%d", i)
	if len(base)+len(suf) > 64 {
		base = strings.TrimRight(base[:64-len(suf)], "-._")
	}
	return base + suf
}

// storeSecrets stores each pending secret and reads it back.
func storeSecrets(store SecretStore, pending map[string]string) error {
	for _, scope := range slices.Sorted(maps.Keys(pending)) {
		if store == nil {
			return fmt.Errorf("credential scope %s: %w: no secret store", scope, ErrSecretStore)
		}
		if err := store.Set(scope, []byte(pending[scope])); err != nil {
			return fmt.Errorf("storing credential scope %s: %w: %v; nothing was rewritten", scope, ErrSecretStore, err)
		}
		got, err := store.Get(scope)
		if err != nil || string(got) != pending[scope] {
			return fmt.Errorf("credential scope %s: %w: the stored value could not be read back; nothing was rewritten", scope, ErrSecretStore)
		}
	}
	return nil
}

// maskText replaces every secret in text with its [Mask]: always where it stands
// as a whole JSON string ("…"), and, for secrets of at least minEmbedded
// characters, also where it is embedded in other text (as written, and as
// escaped inside a JSON string). A short secret is never replaced inside other
// words: that would garble unrelated text and, by the pattern of what changed,
// reveal the secret.
func maskText(text string, secrets []string) string {
	const minEmbedded = 8
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		if s == "" {
			continue
		}
		lit := string(hujson.String(s))
		text = strings.ReplaceAll(text, lit, string(hujson.String(Mask(s))))
		if len(s) < minEmbedded {
			continue
		}
		text = strings.ReplaceAll(text, s, Mask(s))
		if inner := lit[1 : len(lit)-1]; inner != s {
			text = strings.ReplaceAll(text, inner, Mask(s))
		}
	}
	return text
}
