package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/install"
	"github.com/portcullis/portcullis/core/textsafe"
	"github.com/portcullis/portcullis/platform/spawn"
)

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// readConfig loads the configuration to show it: the one a running daemon
// has in force (saying on stderr when a change to the file waits for
// confirmation, which is then not shown); with no daemon, as loadConfig,
// except that while config.json is missing and its last good copy exists
// (what a daemon would put in force), it shows the copy and says so on
// stderr.
func (a *App) readConfig() (*config.Config, error) {
	if data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpConfig}, 5*time.Second); err == nil {
		var st daemon.ConfigState
		if json.Unmarshal(data, &st) == nil && st.Error == "" {
			if cfg, err := config.Parse(st.Config, st.File); err == nil {
				if p := st.Pending; p != nil {
					fmt.Fprintf(a.Stderr, "portcullis: showing the configuration in force; change %s to %s waits for your confirmation and is not shown (%s): see portcullis changes\n",
						p.ID, p.File, heldSummary(p))
				}
				return cfg, nil
			}
		}
	}
	cfg, err := a.loadConfig()
	if !errors.Is(err, config.ErrMissingWithBackup) {
		return cfg, err
	}
	for _, p := range config.LastGoodPaths(a.Dirs.ConfigFile()) {
		if c, lerr := config.Load(p); lerr == nil {
			fmt.Fprintf(a.Stderr, "portcullis: %s is missing; showing its last good copy %s (what a daemon runs now). Restore it with: cp %s %s\n",
				a.Dirs.ConfigFile(), p, p, a.Dirs.ConfigFile())
			return c, nil
		}
	}
	return nil, err
}

func (a *App) loadConfig() (*config.Config, error) {
	cfg, err := config.LoadForEdit(a.Dirs.ConfigFile())
	if errors.Is(err, config.ErrMissingWithBackup) {
		return nil, err
	}
	if err != nil {
		return nil, configError(err, againCommand)
	}
	return cfg, nil
}

// editConfig applies change to the configuration and saves it. While a
// daemon runs, the daemon makes the change (control.OpConfigEdit): change
// edits the configuration in force, the daemon checks that the person asks
// (not a supervised server or the agent), records it with who made it and
// puts it in force at once; nothing is written here. While a change made
// to the file from outside waits for confirmation, edits are refused (an
// edit would bury it). With no daemon, the file is written here: the daemon
// cannot tell then who wrote it, so what in it widens trust waits for
// confirmation when the daemon starts, which a note on stderr says.
func (a *App) editConfig(change func(*config.Config) error) (*config.Config, error) {
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpConfig}, 5*time.Second)
	if errors.Is(err, control.ErrNoDaemon) {
		return a.editConfigFile(change)
	}
	if err != nil {
		return nil, err
	}
	var st daemon.ConfigState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("reading the daemon's configuration: %w", err)
	}
	if st.Pending != nil {
		return nil, fmt.Errorf("change %s to %s, %s, waits for your confirmation (%s): see it with portcullis changes, then confirm or reject it before editing; nothing was changed",
			st.Pending.ID, st.Pending.File, madeBy(st.Pending), heldSummary(st.Pending))
	}
	if st.Error != "" {
		return nil, fmt.Errorf("%s is not in force as it is on disk: %s; nothing was changed", st.File, st.Error)
	}
	cfg, err := config.Parse(st.Config, st.File)
	if err != nil {
		return nil, fmt.Errorf("reading the daemon's configuration: %w", err)
	}
	if cfg.Servers == nil {
		cfg.Servers = map[string]config.Server{}
	}
	if err := change(cfg); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The daemon refuses it too; refused here, no one is asked to
	// authenticate a change that cannot be made.
	if m := config.ReadManaged(); len(m.Policy.Below(cfg)) > 0 {
		return nil, m.Explain(m.Policy.Below(cfg))
	}
	b, err := config.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	timeout := 30 * time.Second
	if applied, err := config.Parse(st.Config, st.File); err == nil {
		if _, held := config.SplitTrust(applied, cfg); len(held) > 0 {
			undo, err := a.authAgentFor("this change is made", func(st daemon.StatusReport) bool {
				return daemon.ChangeNeedsAuthentication(st.Authentication.Mode, held)
			})
			if err != nil {
				return nil, err
			}
			if undo != nil {
				defer undo()
				timeout = authTimeout
			}
		}
	}
	if _, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpConfigEdit, Config: b, Base: st.Digest}, timeout); err != nil {
		return nil, err
	}
	return cfg, nil
}

// editConfigFile is editConfig with no daemon running.
func (a *App) editConfigFile(change func(*config.Config) error) (*config.Config, error) {
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	before := cfg.Clone()
	// The edit starts from the file raised to the managed policy's floors,
	// as the daemon would have it in force.
	m := config.ReadManaged()
	cfg, _ = m.Apply(cfg)
	if cfg.Servers == nil {
		cfg.Servers = map[string]config.Server{}
	}
	if err := change(cfg); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if below := m.Policy.Below(cfg); len(below) > 0 {
		return nil, m.Explain(below)
	}
	if err := a.Dirs.Ensure(); err != nil {
		return nil, err
	}
	if err := config.Save(a.Dirs.ConfigFile(), cfg); err != nil {
		return nil, err
	}
	a.offline = true
	if _, held := config.SplitTrust(before, cfg); len(held) > 0 {
		var what []string
		for _, w := range held {
			what = append(what, w.Text)
		}
		fmt.Fprintf(a.Stderr, "note: no daemon is running, so %s was written directly and nothing of it is in force yet. It widens trust (%s): "+
			"the daemon cannot tell who wrote the file, so when it starts it holds that until you confirm it (portcullis changes, then portcullis changes confirm ID); "+
			"only a first start, on a data directory no daemon used before, takes the file as it is\n",
			a.Dirs.ConfigFile(), strings.Join(what, "; "))
	}
	return cfg, nil
}

// madeBy says who made a pending change, as far as the daemon knows: one
// found when it started was written while no daemon ran, by a portcullis
// command (servers, creds, install) as well as by an editor or an agent's
// shell; one found while it ran was written to the file directly, not
// through the daemon.
func madeBy(p *daemon.PendingChange) string {
	if p.AtStart {
		return "written while no daemon ran (by a portcullis command, an editor or any program: the daemon cannot tell which)"
	}
	return "written to the file directly, not through the running daemon (by an editor or any program)"
}

// count is n with the noun that agrees with it: "1 file", "2 files".
func count[N ~int | ~int64 | ~uint64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func heldSummary(p *daemon.PendingChange) string {
	var what []string
	for _, w := range p.Held {
		what = append(what, w.Text)
	}
	return strings.Join(what, "; ")
}

func (a *App) runServers(args []string) error {
	if len(args) == 0 {
		return usagef("servers needs a subcommand: list, show, add, edit, remove, policy or cred")
	}
	switch args[0] {
	case "list":
		return a.serversList(args[1:])
	case "show":
		return a.serversShow(args[1:])
	case "add":
		return a.serversAdd(args[1:])
	case "edit":
		return a.serversEdit(args[1:])
	case "remove":
		return a.serversRemove(args[1:])
	case "policy":
		return a.serversPolicy(args[1:])
	case "cred":
		return a.serversCred(args[1:])
	}
	return usagef("unknown servers subcommand %q (list, show, add, edit, remove, policy, cred)", args[0])
}

func (a *App) serversList(args []string) error {
	fs, asJSON := jsonFlags("servers list", "print the servers as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := a.readConfig()
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(a.Stdout, cfg.Servers)
	}
	if len(cfg.Servers) == 0 {
		fmt.Fprintf(a.Stdout, "No servers configured in %s.\nAdd one with: portcullis servers add LABEL -- COMMAND ARGS…\n", a.Dirs.ConfigFile())
		return nil
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LABEL\tRESTART\tCOMMAND")
	for _, label := range sortedKeys(cfg.Servers) {
		s := cfg.Servers[label]
		fmt.Fprintf(tw, "%s\t%s\t%s\n", label, s.RestartMode(), authz.CommandText(append([]string{s.Command}, s.Args...)))
	}
	return tw.Flush()
}

func (a *App) serversShow(args []string) error {
	if len(args) != 1 {
		return usagef("servers show needs exactly one label")
	}
	cfg, err := a.readConfig()
	if err != nil {
		return err
	}
	s, ok := cfg.Servers[args[0]]
	if !ok {
		return fmt.Errorf("no server labelled %q in %s", args[0], a.Dirs.ConfigFile())
	}
	return writeJSON(a.Stdout, map[string]config.Server{args[0]: s})
}

func (a *App) serversAdd(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usagef("servers add needs a label first: servers add LABEL [flags] -- COMMAND ARGS…")
	}
	label := args[0]
	o := serversAddFlags()
	fs, cwd, restart, force := o.fs, o.cwd, o.restart, o.force
	sessionBus, sandbox := o.sessionBus, o.sandbox
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	env, creds, watch := o.env, o.creds, o.watch
	cmd := fs.Args()
	if len(cmd) == 0 {
		return usagef("servers add %s: the server's command is missing after --", label)
	}
	if !slices.Contains(args, "--") {
		// Without --, flags after the command would silently become its
		// arguments.
		for _, w := range cmd[1:] {
			if name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "="); strings.HasPrefix(w, "-") && fs.Lookup(name) != nil {
				return usagef("servers add %s: %s comes after the command, so it would be passed to the server; put Portcullis's flags before -- and the command after it", label, w)
			}
		}
	}
	s := config.Server{Command: cmd[0], Args: cmd[1:], Restart: *restart, Credentials: creds, Watch: watch, Ignore: o.ignore, SessionBus: *sessionBus, Sandbox: *sandbox}
	if err := setServerRequests("servers add "+label, &s, o.requests); err != nil {
		return err
	}
	if *cwd != "" {
		abs, err := filepath.Abs(*cwd)
		if err != nil {
			return err
		}
		if info, err := os.Stat(abs); err != nil || !info.IsDir() {
			return fmt.Errorf("servers add %s: --cwd %s is not an existing directory", label, abs)
		}
		s.Cwd = abs
	}
	if !*force {
		if err := entryNotFound("servers add "+label, s); err != nil {
			return err
		}
	}
	notes, err := resolvePaths(&s, *cwd != "")
	if err != nil {
		return err
	}
	if s.Write, err = absPaths("servers add "+label, o.write); err != nil {
		return err
	}
	if len(o.write) == 0 {
		// What the server is given as a directory to work in (a
		// filesystem server's roots, a repository) it likely writes.
		if s.Write = config.ProposedWrite(s); len(s.Write) > 0 {
			notes = append(notes, fmt.Sprintf("Write paths: %s (directories among its arguments); in its sandbox the server writes only these, its cwd, /tmp and its caches. Other paths: portcullis servers edit %s --write PATH.", strings.Join(s.Write, ", "), label))
		}
	}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return usagef("--env %q: want NAME=VALUE", kv)
		}
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		s.Env[k] = v
		if secret, why := install.Secret(k, v); secret {
			fmt.Fprintf(a.Stderr, "warning: %s looks like a secret (%s) and would be stored in plain text in %s;\n  keep it in the keychain instead: portcullis creds set %s-%s --env %s (secret on stdin), then --cred %s-%s\n",
				k, why, a.Dirs.ConfigFile(), label, strings.ToLower(k), k, label, strings.ToLower(k))
		}
	}
	if _, err := a.editConfig(func(cfg *config.Config) error { return cfg.AddServer(label, s) }); err != nil {
		if errors.Is(err, config.ErrExists) {
			return fmt.Errorf("%w: change it with `portcullis servers edit %s`, or remove it first with `portcullis servers remove %s`", err, label, label)
		}
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(a.Stdout, n)
	}
	for _, w := range launchWarnings(s) {
		fmt.Fprintf(a.Stderr, "warning: %s\n", w)
	}
	if n := identityNote(label, s); n != "" {
		fmt.Fprintln(a.Stdout, n)
	}
	for _, l := range identity.KnownLaunchers(s.Command, s.Args) {
		fmt.Fprintf(a.Stdout, "note: %s %s.\n  Portcullis: %s.\n", l.Name, l.Effect, l.Handling)
	}
	fmt.Fprintf(a.Stdout, "Added %s. Agents reach it with: portcullis connect %s\n", label, label)
	return nil
}

// setServerRequests sets in s the policies of its requests to the agent
// that flags (serverRequestFlags) name; a policy other than allow, approve
// or deny is a usage error naming the flag. A policy equal to the default
// is stored all the same: the entry says what the person chose.
func setServerRequests(cmd string, s *config.Server, flags map[string]*string) error {
	for _, kind := range config.RequestKinds {
		v := *flags[kind]
		if v == "" {
			continue
		}
		switch p := config.Policy(v); p {
		case config.PolicyAllow, config.PolicyApprove, config.PolicyDeny:
			if s.ServerRequests == nil {
				s.ServerRequests = map[string]config.Policy{}
			}
			s.ServerRequests[kind] = p
		default:
			return usagef("%s: --%s %q: want allow, approve or deny", cmd, kind, v)
		}
	}
	return nil
}

// anySet reports whether one of flags was given a value.
func anySet(flags map[string]*string) bool {
	for _, v := range flags {
		if *v != "" {
			return true
		}
	}
	return false
}

// resolvePaths makes the paths of a new server independent of the directory
// the daemon happens to run in (the shim may start it anywhere): a command
// holding a slash that is relative is resolved against the server's cwd when
// one was given, else the current directory; watch paths are relative to
// cwd in the configuration, so without --cwd a relative one is resolved
// against the current directory. A bare command name stays a PATH lookup.
// It returns one line per resolved path for the person.
func resolvePaths(s *config.Server, haveCwd bool) ([]string, error) {
	base, against := s.Cwd, "--cwd"
	if !haveCwd {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("resolving relative paths: %w", err)
		}
		base, against = wd, "the current directory"
	}
	var notes []string
	if strings.ContainsRune(s.Command, '/') && !filepath.IsAbs(s.Command) {
		abs := filepath.Join(base, s.Command)
		notes = append(notes, fmt.Sprintf("Command %s is relative: stored as %s (resolved against %s), so it works wherever the daemon runs.", s.Command, abs, against))
		s.Command = abs
	}
	if !haveCwd {
		for i, w := range s.Watch {
			if w != "" && !filepath.IsAbs(w) {
				abs := filepath.Join(base, w)
				notes = append(notes, fmt.Sprintf("Watch path %s is relative and there is no --cwd: stored as %s (resolved against the current directory).", w, abs))
				s.Watch[i] = abs
			}
		}
	}
	return notes, nil
}

// absPaths returns the --write paths as absolute, cleaned paths; "/" is a
// usage error (name the directories the server writes).
func absPaths(what string, ps []string) ([]string, error) {
	var out []string
	for _, p := range ps {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		if abs == "/" {
			return nil, usagef("%s: --write / would let the server write everything; name the directories it writes", what)
		}
		if !slices.Contains(out, abs) {
			out = append(out, abs)
		}
	}
	return out, nil
}

// entryNotFound returns a usage error (exit 2) when the server's command
// line names an entry script that the server will not find where it runs:
// a relative script (node server.mjs) without --cwd is looked up in the
// daemon's working directory, which may be anywhere. The error says the
// fix. nil when it cannot tell (a command built later is only warned about).
func entryNotFound(what string, s config.Server) error {
	entry := identity.EntryArg(s.Command, s.Args)
	if entry == "" || filepath.IsAbs(entry) || s.Cwd != "" {
		return nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil
	}
	fix := fmt.Sprintf("add --cwd DIR naming the directory that holds %s, or give its absolute path", entry)
	if fi, err := os.Stat(filepath.Join(wd, entry)); err == nil && fi.Mode().IsRegular() {
		fix = "add --cwd " + authz.CommandText([]string{wd}) + " (where " + entry + " is), or give its absolute path"
	}
	return usagef("%s: %s runs the script %s, a relative path, and without --cwd the server runs in the daemon's working directory, where it will not be found; %s (--force saves it as it is); nothing was saved", what, filepath.Base(s.Command), entry, fix)
}

// launchWarnings are what looks wrong with a server's command line now,
// without refusing it (a build may not have happened yet).
func launchWarnings(s config.Server) []string {
	var out []string
	env := os.Environ()
	if p, ok := s.Env["PATH"]; ok {
		env = append(env, "PATH="+p)
	}
	found, err := identity.LookPath(s.Command, s.Cwd, env)
	if err != nil {
		if strings.ContainsRune(s.Command, '/') {
			out = append(out, fmt.Sprintf("%v; the server cannot start until it does", err))
		} else {
			out = append(out, fmt.Sprintf("%s is not in this shell's PATH; the daemon looks it up in its own PATH at each launch", s.Command))
		}
	} else if !strings.ContainsRune(s.Command, '/') && s.Env["PATH"] == "" {
		// A daemon that an agent's `portcullis connect` starts has the
		// system's PATH only, never the shell's (nvm, pyenv, ~/go/bin).
		sys := []string{"PATH=" + strings.Join(spawn.SystemPath, string(os.PathListSeparator))}
		if _, err := identity.LookPath(s.Command, s.Cwd, sys); err != nil {
			out = append(out, fmt.Sprintf("%s is found in this shell's PATH (%s) but not in the system's (%s), which is all a daemon started by an agent has; give the absolute path: portcullis servers edit LABEL -- %s …",
				s.Command, found, strings.Join(spawn.SystemPath, ":"), found))
		}
	}
	if s.Cwd == "" {
		for _, arg := range s.Args {
			if arg == "" || strings.HasPrefix(arg, "-") || filepath.IsAbs(arg) {
				continue
			}
			if _, err := os.Stat(arg); err == nil {
				wd, _ := os.Getwd()
				out = append(out, fmt.Sprintf("argument %s names a file here, but without --cwd the server runs in the daemon's working directory, which may be anywhere; use an absolute path, or remove the server and add it again with --cwd %s", arg, authz.CommandText([]string{wd})))
				break
			}
		}
	}
	return out
}

// identityNote says, for a server with no watched paths that is run by a
// runtime from an entry file (node dist/server.js, python server.py) or
// through a wrapper (a shell script, npx), that only the files Portcullis
// measures identify its code: a change to a module the entry imports, or to
// the program a wrapper runs, is not new code to Portcullis (no new epoch,
// and env credentials reach it without a new approval) unless a watched path
// covers it. "" when the server has watched paths, is a binary that is its
// own entry, or cannot be measured now.
func identityNote(label string, s config.Server) string {
	if len(s.Watch) > 0 {
		return ""
	}
	env := os.Environ()
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*identity.DefaultVersionTimeout)
	defer cancel()
	rec, err := identity.NewMeasurer(nil).Measure(ctx, identity.MeasureSpec{Label: label, Command: s.Command, Args: s.Args, Dir: s.Cwd, Env: env})
	if err != nil {
		return ""
	}
	// A known launcher's script (nodemon server.js, npx pkg from its
	// cache) is the entry, measured with its package: not a wrapper's
	// unmeasured program.
	launched := rec.Entry != "" && rec.Entry != rec.ResolvedExecutable.Path &&
		!slices.ContainsFunc(rec.Wrappers, func(w identity.FileDigest) bool { return w.Path == rec.Entry })
	if len(rec.Wrappers) > 0 && !launched {
		// A wrapper (a shell script, sh -c, npx…) runs a program that
		// Portcullis does not measure.
		var names []string
		for _, w := range rec.Wrappers {
			names = append(names, w.Path)
		}
		return fmt.Sprintf("note: %s starts through a wrapper (%s): the program the wrapper runs is not measured, so a\n"+
			"  change to it starts no new epoch and env credentials reach it without a new approval.\n"+
			"  Run the program itself, or watch it: portcullis servers edit %s --watch PATH",
			label, strings.Join(names, ", "), label)
	}
	if rec.Entry == "" || rec.Entry == rec.ResolvedExecutable.Path {
		return ""
	}
	if p := rec.Package; p != nil {
		return fmt.Sprintf("note: Portcullis identifies the code of %s by its entry and its package %s (measured: %s, %s):\n"+
			"  an edit there is new code, a new epoch. A module imported from outside it is not measured;\n"+
			"  to measure paths of your choosing instead: portcullis servers edit %s --watch PATH",
			label, p.Dir, p.Measured, count(p.Files, "file", "files"), label)
	}
	measured := "only " + rec.Entry + " identifies"
	if rec.Lockfile != "" {
		measured = "only " + rec.Entry + " and " + rec.Lockfile + " identify"
	}
	return fmt.Sprintf("note: %s the code of %s (besides %s): a change to a file the entry imports is not\n"+
		"  noticed, so it starts no new epoch and env credentials reach it without a new approval.\n"+
		"  Watch the source or build output too: portcullis servers edit %s --watch %s",
		measured, label, filepath.Base(rec.ResolvedExecutable.Path), label, authz.CommandText([]string{filepath.Dir(rec.Entry)}))
}

// serversPolicy sets the per-tool policy of a server: allow (no approval),
// approve (the default: a person approves per agent run and epoch) or deny
// (hidden from the agent and refused).
func (a *App) serversPolicy(args []string) error {
	if len(args) != 3 {
		return usagef("servers policy needs LABEL TOOL allow|approve|deny (allow: no approval; approve: a person approves, once per agent run and server process; deny: hidden from the agent and refused)")
	}
	label, tool, policy := args[0], args[1], args[2]
	if _, err := a.editConfig(func(cfg *config.Config) error {
		srv, ok := cfg.Servers[label]
		if !ok {
			return fmt.Errorf("no server labelled %q in %s", label, a.Dirs.ConfigFile())
		}
		if srv.Tools == nil {
			srv.Tools = map[string]config.ToolPolicy{}
		}
		srv.Tools[tool] = config.ToolPolicy{Policy: config.Policy(policy)}
		cfg.Servers[label] = srv
		return nil
	}); err != nil {
		return err
	}
	a.warnUnknownTool(label, tool)
	what := map[config.Policy]string{
		config.PolicyAllow:   "calls need no approval",
		config.PolicyApprove: "calls need a person's approval, unless given already for the agent run and server process",
		config.PolicyDeny:    "hidden from agents and refused",
	}[config.Policy(policy)]
	// A running daemon reads the file again before each tool call and
	// tells agents whose tool list changed (core/daemon, fresh).
	if a.offline {
		// Written to the file: a daemon that starts puts it in force, or
		// holds it when it widens trust (the note editConfigFile printed).
		fmt.Fprintf(a.Stdout, "%s of %s: %s (%s), written to %s; no daemon is running, so nothing is in force until one starts.\n", tool, label, policy, what, a.Dirs.ConfigFile())
		return nil
	}
	fmt.Fprintf(a.Stdout, "%s of %s: %s (%s); in force at once, for agent runs already connected too.\n", tool, label, policy, what)
	return nil
}

// warnUnknownTool warns, on its own line, when tool is not in the latest
// stored catalog revision of label (a typo would otherwise pass silently),
// or says that there is no catalog to check against yet.
func (a *App) warnUnknownTool(label, tool string) {
	store, err := a.openCatalogs()
	if err != nil {
		return
	}
	cur, ok := store.Current(label)
	switch {
	case !ok:
		fmt.Fprintf(a.Stderr, "note: no catalog of %s is stored yet (one is recorded once an agent connects), so %q could not be checked against its tools\n", label, tool)
	case !slices.Contains(cur.Names(), tool):
		has := "it has no tools"
		if names := cur.Names(); len(names) > 0 {
			has = "it has: " + strings.Join(names, ", ")
		}
		fmt.Fprintf(a.Stderr, "warning: %s offers no tool %q in its latest catalog revision %d (%s); the policy is stored and takes effect if the server offers that tool later\n",
			label, tool, cur.Revision, has)
	}
}

// serversCred adds a credential scope to a server or removes one from it:
//
//	portcullis servers cred LABEL add|remove SCOPE
//
// The scope itself (its secret and how it is injected) is managed with
// `portcullis creds set|remove`.
func (a *App) serversCred(args []string) error {
	const synopsis = "servers cred LABEL add|remove SCOPE"
	if len(args) != 3 || (args[1] != "add" && args[1] != "remove") {
		return usagef("servers cred needs %s", synopsis)
	}
	label, op, scope := args[0], args[1], args[2]
	var srv config.Server
	unchanged := false
	cfg, err := a.editConfig(func(cfg *config.Config) error {
		var ok bool
		srv, ok = cfg.Servers[label]
		if !ok {
			return fmt.Errorf("no server labelled %q in %s", label, a.Dirs.ConfigFile())
		}
		has := slices.Contains(srv.Credentials, scope)
		switch {
		case op == "add" && has:
			unchanged = true
			return nil
		case op == "add":
			if _, defined := cfg.Credentials[scope]; !defined {
				return fmt.Errorf("no credential scope %s in %s: create it first with portcullis creds set %s --env VAR (or --meta), secret on stdin; nothing was changed", scope, a.Dirs.ConfigFile(), scope)
			}
			srv.Credentials = append(slices.Clone(srv.Credentials), scope)
		case !has:
			return fmt.Errorf("%s does not use credential scope %s (it uses: %s); nothing was changed", label, scope, orDash(strings.Join(srv.Credentials, ", ")))
		default:
			srv.Credentials = slices.DeleteFunc(slices.Clone(srv.Credentials), func(c string) bool { return c == scope })
			if len(srv.Credentials) == 0 {
				srv.Credentials = nil
			}
		}
		cfg.Servers[label] = srv
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("servers cred %s %s %s: the configuration would be invalid, nothing was changed: %w", label, op, scope, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if unchanged {
		fmt.Fprintf(a.Stdout, "%s already uses credential scope %s; nothing changed.\n", label, scope)
		return nil
	}
	if op == "add" {
		fmt.Fprintf(a.Stdout, "%s now uses credential scope %s (%s).\n", label, scope, describeCredential(cfg.Credentials[scope]))
		if n := identityNote(label, srv); n != "" && cfg.Credentials[scope].Inject == config.InjectEnv {
			fmt.Fprintln(a.Stdout, n)
		}
	} else {
		fmt.Fprintf(a.Stdout, "%s no longer uses credential scope %s; its secret stays in the credential store (portcullis creds remove %s deletes it).\n", label, scope, scope)
	}
	fmt.Fprintf(a.Stdout, "Agent runs that connect from now on see the change; a run already connected sees an env credential change at its server's next launch (portcullis restart %s), a meta credential change only after the agent reconnects.\n", label)
	return nil
}

// serversEdit changes what its flags name in a server's entry and keeps
// everything else (tool policies, credentials, the fields not named):
//
//	portcullis servers edit LABEL [--cwd D] [--env K=V]… [--unset-env K]… [--watch P]… [--no-watch] [--ignore P]… [--no-ignore] [--restart W] [-- CMD ARGS…]
func (a *App) serversEdit(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usagef("servers edit needs a label first: servers edit LABEL [flags] [-- COMMAND ARGS…]")
	}
	label := args[0]
	o := serversEditFlags()
	fs, cwd, noCwd, restart, noWatch, force := o.fs, o.cwd, o.noCwd, o.restart, o.noWatch, o.force
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	env, unset, watch := o.env, o.unset, o.watch
	cmd := fs.Args()
	if len(cmd) > 0 && !slices.Contains(args, "--") {
		return usagef("servers edit %s: a new command goes after --: servers edit %s [flags] -- COMMAND ARGS…", label, label)
	}
	if *cwd != "" && *noCwd {
		return usagef("servers edit %s: --cwd and --no-cwd contradict each other", label)
	}
	if len(watch) > 0 && *noWatch {
		return usagef("servers edit %s: --watch and --no-watch contradict each other", label)
	}
	if len(o.ignore) > 0 && *o.noIgnore {
		return usagef("servers edit %s: --ignore and --no-ignore contradict each other", label)
	}
	if *o.bus && *o.noBus {
		return usagef("servers edit %s: --session-bus and --no-session-bus contradict each other", label)
	}
	if len(o.write) > 0 && *o.noWrite {
		return usagef("servers edit %s: --write and --no-write contradict each other", label)
	}
	newWrite, err := absPaths("servers edit "+label, o.write)
	if err != nil {
		return err
	}
	if len(cmd) == 0 && *cwd == "" && !*noCwd && *restart == "" && !*noWatch && len(env) == 0 && len(unset) == 0 && len(watch) == 0 &&
		len(o.ignore) == 0 && !*o.noIgnore &&
		*o.sandbox == "" && !*o.bus && !*o.noBus && !anySet(o.requests) && len(o.write) == 0 && !*o.noWrite {
		return usagef("servers edit %s: nothing to change; name what changes (see portcullis servers edit --help)", label)
	}
	newCwd := ""
	if *cwd != "" {
		abs, err := filepath.Abs(*cwd)
		if err != nil {
			return err
		}
		if info, err := os.Stat(abs); err != nil || !info.IsDir() {
			return fmt.Errorf("servers edit %s: --cwd %s is not an existing directory; nothing was changed", label, abs)
		}
		newCwd = abs
	}
	setEnv := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usagef("--env %q: want NAME=VALUE", kv)
		}
		setEnv[k] = v
	}
	var (
		before, after config.Server
		notes         []string
	)
	_, err = a.editConfig(func(cfg *config.Config) error {
		srv, ok := cfg.Servers[label]
		if !ok {
			return fmt.Errorf("no server labelled %q in %s; nothing was changed (portcullis servers list shows the labels)", label, a.Dirs.ConfigFile())
		}
		before = srv
		s := srv
		s.Args, s.Watch, s.Env = slices.Clone(srv.Args), slices.Clone(srv.Watch), maps.Clone(srv.Env)
		if len(cmd) > 0 {
			s.Command, s.Args = cmd[0], cmd[1:]
		}
		switch {
		case newCwd != "":
			s.Cwd = newCwd
		case *noCwd:
			s.Cwd = ""
		}
		if *restart != "" {
			s.Restart = *restart
		}
		if *o.sandbox != "" {
			s.Sandbox = *o.sandbox
		}
		switch {
		case len(newWrite) > 0:
			s.Write = newWrite
		case *o.noWrite:
			s.Write = nil
		}
		s.ServerRequests = maps.Clone(srv.ServerRequests)
		if err := setServerRequests("servers edit "+label, &s, o.requests); err != nil {
			return err
		}
		switch {
		case *o.bus:
			s.SessionBus = true
		case *o.noBus:
			s.SessionBus = false
		}
		switch {
		case len(watch) > 0:
			s.Watch = slices.Clone(watch)
		case *noWatch:
			s.Watch = nil
		}
		switch {
		case len(o.ignore) > 0:
			s.Ignore = slices.Clone(o.ignore)
		case *o.noIgnore:
			s.Ignore = nil
		}
		for _, k := range unset {
			if _, ok := s.Env[k]; !ok {
				return fmt.Errorf("servers edit %s: its environment has no %s to remove (it has: %s); nothing was changed", label, k, orDash(strings.Join(slices.Sorted(maps.Keys(s.Env)), ", ")))
			}
			delete(s.Env, k)
		}
		for k, v := range setEnv {
			if s.Env == nil {
				s.Env = map[string]string{}
			}
			s.Env[k] = v
		}
		if len(s.Env) == 0 {
			s.Env = nil
		}
		if !*force {
			if err := entryNotFound("servers edit "+label, s); err != nil {
				return err
			}
		}
		var err error
		if notes, err = resolvePaths(&s, s.Cwd != ""); err != nil {
			return err
		}
		cfg.Servers[label] = s
		after = s
		return nil
	})
	if err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(a.Stdout, n)
	}
	for k, v := range setEnv {
		if secret, why := install.Secret(k, v); secret {
			fmt.Fprintf(a.Stderr, "warning: %s looks like a secret (%s) and is stored in plain text in %s;\n  keep it in the keychain instead: portcullis creds set %s-%s --env %s (secret on stdin), then portcullis servers cred %s add %s-%s\n",
				k, why, a.Dirs.ConfigFile(), label, strings.ToLower(k), k, label, label, strings.ToLower(k))
		}
	}
	for _, w := range launchWarnings(after) {
		fmt.Fprintf(a.Stderr, "warning: %s\n", w)
	}
	changed := serverChanges(before, after)
	if len(changed) == 0 {
		fmt.Fprintf(a.Stdout, "%s is already so; nothing changed.\n", label)
		return nil
	}
	fmt.Fprintf(a.Stdout, "Changed %s:\n", label)
	for _, c := range changed {
		fmt.Fprintf(a.Stdout, "  %s\n", c)
	}
	fmt.Fprintf(a.Stdout, "Kept: %d tool polic%s, credential scopes %s.\n", len(after.Tools), map[bool]string{true: "y", false: "ies"}[len(after.Tools) == 1], orDash(strings.Join(after.Credentials, ", ")))
	fmt.Fprintf(a.Stdout, "Agent runs that connect from now on get it; a run already connected gets it at its server's next launch (portcullis restart %s).\n", label)
	return nil
}

// serverChanges lists, one line each, what differs between two entries of
// a server in the fields servers edit changes (env values are not shown:
// they may be secrets).
func serverChanges(before, after config.Server) []string {
	var out []string
	if cmdB, cmdA := append([]string{before.Command}, before.Args...), append([]string{after.Command}, after.Args...); !slices.Equal(cmdB, cmdA) {
		out = append(out, fmt.Sprintf("command: %s → %s", authz.CommandText(cmdB), authz.CommandText(cmdA)))
	}
	if before.Cwd != after.Cwd {
		out = append(out, fmt.Sprintf("cwd: %s → %s", orDash(before.Cwd), orDash(after.Cwd)))
	}
	if !slices.Equal(before.Watch, after.Watch) {
		out = append(out, fmt.Sprintf("watch: %s → %s", orDash(strings.Join(before.Watch, ", ")), orDash(strings.Join(after.Watch, ", "))))
	}
	if !slices.Equal(before.Ignore, after.Ignore) {
		out = append(out, fmt.Sprintf("ignore: %s → %s", orDash(strings.Join(before.Ignore, ", ")), orDash(strings.Join(after.Ignore, ", "))))
	}
	if before.Restart != after.Restart {
		out = append(out, fmt.Sprintf("restart: %s → %s", orDash(before.Restart), orDash(after.Restart)))
	}
	if before.SandboxLevel() != after.SandboxLevel() {
		out = append(out, fmt.Sprintf("sandbox: %s → %s", before.SandboxLevel(), after.SandboxLevel()))
	}
	if !slices.Equal(before.Write, after.Write) {
		out = append(out, fmt.Sprintf("write: %s → %s", orDash(strings.Join(before.Write, ", ")), orDash(strings.Join(after.Write, ", "))))
	}
	if before.SessionBus != after.SessionBus {
		out = append(out, fmt.Sprintf("session bus: %v → %v", before.SessionBus, after.SessionBus))
	}
	for _, kind := range config.RequestKinds {
		if b, a := before.RequestPolicy(kind), after.RequestPolicy(kind); b != a {
			out = append(out, fmt.Sprintf("%s requests: %s → %s", kind, b, a))
		}
	}
	var envChanges []string
	for _, k := range slices.Sorted(maps.Keys(before.Env)) {
		if v, ok := after.Env[k]; !ok {
			envChanges = append(envChanges, "-"+k)
		} else if v != before.Env[k] {
			envChanges = append(envChanges, "~"+k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(after.Env)) {
		if _, ok := before.Env[k]; !ok {
			envChanges = append(envChanges, "+"+k)
		}
	}
	if len(envChanges) > 0 {
		out = append(out, "env: "+strings.Join(envChanges, " ")+" (+ added, ~ changed, - removed)")
	}
	return out
}

func (a *App) serversRemove(args []string) error {
	if len(args) != 1 {
		return usagef("servers remove needs exactly one label")
	}
	if _, err := a.editConfig(func(cfg *config.Config) error { return cfg.RemoveServer(args[0]) }); err != nil {
		return err
	}
	fmt.Fprintf(a.Stdout, "Removed %s. Agent runs already connected keep their server until they end.\n", args[0])
	return nil
}

func (a *App) runStatus(args []string) error {
	fs, asJSON := jsonFlags("status", "print the status as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpStatus}, 5*time.Second)
	if err != nil {
		if errors.Is(err, control.ErrNoDaemon) {
			if *asJSON {
				_ = writeJSON(a.Stdout, map[string]any{"running": false, "socket": a.Dirs.Socket()})
			} else {
				fmt.Fprintf(a.Stdout, "Portcullis daemon: not running (no answer on %s).\nStart it with `portcullis` (menu-bar app) or `portcullis daemon`.\n", a.Dirs.Socket())
			}
			return errExit1
		}
		return err
	}
	var rep daemon.StatusReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("reading the daemon's status: %w", err)
	}
	if *asJSON {
		return writeJSON(a.Stdout, rep)
	}
	writeStatus(a.Stdout, rep)
	return nil
}

func writeJSON(w interface{ Write([]byte) (int, error) }, v any) error {
	// A list or a map with nothing in it is [] or {}, never null.
	switch rv := reflect.ValueOf(v); {
	case rv.Kind() == reflect.Slice && rv.IsNil():
		v = reflect.MakeSlice(rv.Type(), 0, 0).Interface()
	case rv.Kind() == reflect.Map && rv.IsNil():
		v = reflect.MakeMap(rv.Type()).Interface()
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(textsafe.JSON(b), '\n')) // the same values, no raw control characters
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// telemetryLine says where the OpenTelemetry export goes and how it fares.
func telemetryLine(t daemon.TelemetryStatus) string {
	if t.Error != "" {
		return "Telemetry: not exported: " + t.Error
	}
	line := fmt.Sprintf("Telemetry: exported to %s; %d sent, %d dropped", t.Destination, t.Exported, t.Dropped)
	if t.LastError != "" {
		line += " (last error: " + t.LastError + ")"
	}
	return line
}

// writeManaged says what the managed policy sets, and what of config.json
// it overrides.
func writeManaged(w interface{ Write([]byte) (int, error) }, m daemon.ManagedStatus) {
	switch {
	case m.Ignored != "":
		fmt.Fprintf(w, "Managed policy: %s is IGNORED, no floor is set: %s (it must be owned by root and writable by root alone, as every directory above it)\n", m.File, textsafe.Line(m.Ignored))
		return
	case m.Error != "":
		fmt.Fprintf(w, "Managed policy: %s is MALFORMED; until it is fixed every tool asks and approvals need the system's authentication:\n  %s\n", m.File, textsafe.Line(m.Error))
	default:
		fmt.Fprintf(w, "Managed policy (%s): %s\n", m.File, strings.Join(m.Floors, "; "))
	}
	for _, f := range m.Overridden {
		fmt.Fprintf(w, "  managed   %s\n", textsafe.Line(f.Text))
	}
}

// writeStatus prints the status report for a person.
func writeStatus(w interface{ Write([]byte) (int, error) }, rep daemon.StatusReport) {
	fmt.Fprintf(w, "Portcullis daemon: running (pid %d, socket %s)\n", rep.PID, rep.Socket)
	if len(rep.Withheld) > 0 {
		fmt.Fprintf(w, "Withheld from servers (not in their fixed base; a server's configuration env can give one): %s\n", strings.Join(rep.Withheld, " "))
	}
	if rep.ConfigError != "" {
		fmt.Fprintf(w, "Configuration file is missing or invalid; the last good one is in force:\n  %s\n", rep.ConfigError)
	}
	if rep.PendingChange != nil {
		writePending(w, rep.PendingChange)
	}
	for _, f := range rep.Degraded {
		fmt.Fprintf(w, "Degraded: the daemon's %s stopped (%d times in a row, last at %s) and is restarted at %s:\n  %s\n",
			f.Service, f.Stops, f.Last.Local().Format(time.TimeOnly), f.Restart.Local().Format(time.TimeOnly), textsafe.Line(f.Error))
	}
	if rep.Audit.Error != "" {
		fmt.Fprintf(w, "Audit log cannot be written: every tool call is refused (audit_unavailable) until it can:\n  %s\n", rep.Audit.Error)
	}
	if rep.Audit.Tampered != "" {
		fmt.Fprintf(w, "Audit log TAMPERED WITH: no approval is asked until you run `portcullis audit acknowledge`:\n  %s\n", rep.Audit.Tampered)
	}
	if rep.Audit.SealError != "" {
		fmt.Fprintf(w, "Audit sealing failed:\n  %s\n", rep.Audit.SealError)
	}
	switch {
	case rep.Audit.SigningError != "":
		fmt.Fprintf(w, "Audit signing does not follow the settings:\n  %s\n", rep.Audit.SigningError)
	case !rep.Audit.Signed && rep.Audit.Note != "":
		fmt.Fprintf(w, "Audit: not signed, %s; hash-chained all the same (portcullis help audit; the whole reason: status --json)\n", shortAuditNote(rep.Audit.Note))
	}
	fmt.Fprintln(w, authLine(rep.Authentication))
	writeStanding(w, rep, false)
	if m := rep.Managed; m != nil {
		writeManaged(w, *m)
	}
	if t := rep.Telemetry; t != nil {
		fmt.Fprintln(w, telemetryLine(*t))
	}
	if len(rep.Servers) == 0 {
		fmt.Fprintf(w, "No servers configured in %s.\n", rep.ConfigFile)
	}
	var idle []string
	for _, s := range rep.Servers {
		if s.Runs == 0 {
			idle = append(idle, textsafe.Line(s.Label))
		}
	}
	if len(idle) > 0 {
		fmt.Fprintf(w, "Configured, no agent connected: %s (their commands: portcullis servers list)\n", strings.Join(idle, ", "))
	}
	if len(rep.Runs) == 0 {
		fmt.Fprintln(w, "No agent runs.")
	}
	for _, r := range rep.Runs {
		writeRun(w, r)
		for _, q := range rep.Approvals {
			if q.Card.AgentRun != r.Run {
				continue
			}
			what := textsafe.Name(q.Card.Tool, nil)
			if q.Card.Tool == "" {
				what = "credentials " + strings.Join(q.Card.CredentialScope, ", ") + " at launch"
			}
			fmt.Fprintf(w, "  waiting   for a person: %s (%s), expires %s — see portcullis approvals\n", q.ID, what, q.Deadline.Local().Format("15:04:05"))
		}
	}
	if len(rep.Ended) > 0 {
		fmt.Fprintln(w, "\nRecently ended:")
		for _, r := range rep.Ended {
			writeRun(w, r)
		}
	}
	if len(rep.Checks) > 0 {
		fmt.Fprintln(w, "\nHealth checks (runs that only connected and listed):")
		for _, c := range rep.Checks {
			fmt.Fprintln(w, checkLine(c))
		}
	}
}

// checkLine is one server's line of health checks in `portcullis status`.
func checkLine(c daemon.CheckSummary) string {
	line := fmt.Sprintf("  %s  %d", c.Label, c.Count)
	if c.Count == 1 {
		line += " check"
	} else {
		line += " checks"
	}
	if at := c.Last.EndedAt; at != nil {
		line += ", last at " + at.Local().Format("15:04:05")
	}
	if c.Last.Agent.Exe != "" {
		line += " by " + c.Last.Agent.Exe
	}
	return line
}

// shortAuditNote is the first clause of why the audit log is not signed
// (the daemon's note, which goes on with the error and what to do): one
// line for status; `portcullis help audit` explains the rest.
func shortAuditNote(note string) string {
	note = strings.TrimPrefix(note, "the audit log is not signed: ")
	if i := strings.Index(note, ";"); i > 0 {
		note = note[:i]
	}
	// A short parenthesis names a setting; a long one holds an error.
	if i := strings.Index(note, " ("); i > 0 && len(note)-i > 40 {
		note = note[:i]
	}
	return strings.TrimRight(note, " ,.")
}

func writeRun(w interface{ Write([]byte) (int, error) }, r gateway.Status) {
	fmt.Fprintf(w, "\n%s  run %s  %s\n", r.Label, r.Run, r.State)
	if r.Reason != "" {
		fmt.Fprintf(w, "  reason    %s\n", textsafe.Line(r.Reason))
	}
	if r.Agent.Exe != "" || r.Agent.PID != 0 {
		fmt.Fprintf(w, "  agent     %s (pid %d, shim pid %d)\n", textsafe.Line(r.Agent.Exe), r.Agent.PID, r.Agent.ShimPID)
	}
	if r.Epoch != "" {
		fmt.Fprintf(w, "  epoch     %s  pid %d  (%d launched in this run)\n", r.Epoch, r.PID, r.Epochs)
	}
	if r.CatalogRevision != 0 {
		switch r.AgentRevision {
		case 0:
			fmt.Fprintf(w, "  catalog   revision %d (the agent has not listed the tools yet)\n", r.CatalogRevision)
		case r.CatalogRevision:
			fmt.Fprintf(w, "  catalog   revision %d (the agent listed this one)\n", r.CatalogRevision)
		default:
			fmt.Fprintf(w, "  catalog   revision %d (the agent last listed revision %d)\n", r.CatalogRevision, r.AgentRevision)
		}
	}
	if r.Build != "" {
		fmt.Fprintf(w, "  build     %s\n", textsafe.Line(r.Build))
	}
	label := "warning  "
	if r.State == gateway.StateEnded {
		label = "earlier  " // its warnings were true while it ran, not now
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "  %s %s\n", label, textsafe.Line(warn))
	}
	for _, wd := range r.Withdrawn[max(0, len(r.Withdrawn)-5):] {
		what := textsafe.Name(wd.Tool, nil)
		if what == "" {
			what = "launch"
		}
		fmt.Fprintf(w, "  withdrawn %s (%s) at %s: %s\n", wd.Request, what, wd.At.Local().Format("15:04:05"), textsafe.Line(wd.Reason))
	}
	if rec := r.Record; rec != nil {
		fmt.Fprintf(w, "  command   %s\n", textsafe.Line(authz.CommandText(rec.LaunchCommand)))
		fmt.Fprintf(w, "  exe       %s  %s\n", rec.ResolvedExecutable.SHA256, textsafe.Line(rec.ResolvedExecutable.Path))
		if rec.Runtime != "" {
			fmt.Fprintf(w, "  runtime   %s\n", textsafe.Line(rec.Runtime))
		}
		if rec.EntryDigest != "" {
			fmt.Fprintf(w, "  entry     %s  %s\n", rec.EntryDigest, textsafe.Line(rec.Entry))
		}
		if rec.LockfileDigest != "" {
			fmt.Fprintf(w, "  lockfile  %s  %s\n", rec.LockfileDigest, textsafe.Line(rec.Lockfile))
		}
		for _, p := range sortedKeys(rec.ExtraDigests) {
			fmt.Fprintf(w, "  watched   %s  %s\n", rec.ExtraDigests[p], textsafe.Line(p))
		}
		for _, o := range rec.Observed {
			fmt.Fprintf(w, "  observed  pid %d  %s\n", o.PID, textsafe.Line(o.Exe))
		}
		if r.Sandbox != "" {
			fmt.Fprintf(w, "  sandbox   %s\n", r.Sandbox)
		} else {
			fmt.Fprintln(w, "  sandbox   off")
		}
		if r.Cgroup != "" {
			fmt.Fprintf(w, "  cgroup    %s\n", r.Cgroup)
		}
	}
	if r.Exit != nil {
		fmt.Fprintf(w, "  exited    %s\n", textsafe.Line(r.Exit.String()))
	}
	if le := r.LastExit; le != nil && le.Epoch != r.Epoch {
		fmt.Fprintf(w, "  previous  epoch %s (pid %d) %s\n", le.Epoch, le.PID, textsafe.Line(le.Exit.String()))
		if c := causeLine(le.Exit.StderrTail); c != "" {
			fmt.Fprintf(w, "  cause     %s\n", textsafe.Line(c))
		}
		for _, l := range le.Exit.StderrTail[max(0, len(le.Exit.StderrTail)-5):] {
			fmt.Fprintf(w, "    %s\n", textsafe.Line(l))
		}
	}
	if n := len(r.StderrTail); n > 0 {
		failed := r.Exit != nil || r.State == gateway.StateFailed || r.State == gateway.StateCrashLooping
		if c := causeLine(r.StderrTail); c != "" && failed {
			fmt.Fprintf(w, "  cause     %s\n", textsafe.Line(c))
		}
		fmt.Fprintln(w, "  stderr (last lines):")
		for _, l := range r.StderrTail[max(0, n-5):] {
			fmt.Fprintf(w, "    %s\n", textsafe.Line(l))
		}
	}
	for _, d := range r.Diagnostics {
		fmt.Fprintf(w, "  stdout noise: %s\n", textsafe.Line(d))
	}
}

// runChanges shows the change made to config.json while no daemon ran or
// directly to the file,
// whose widening parts wait for the person, or confirms or rejects it:
//
//	portcullis changes [--json]
//	portcullis changes confirm|reject ID
//
// Deciding runs only at a terminal (as approve and deny do) and goes through
// the daemon, which checks that the person asks.
func (a *App) runChanges(args []string) error {
	if len(args) > 0 && (args[0] == "confirm" || args[0] == "reject") {
		if len(args) != 2 || strings.HasPrefix(args[1], "-") {
			return usagef("changes %s needs exactly one change ID (portcullis changes lists it)", args[0])
		}
		choice := control.ChoiceConfirm
		if args[0] == "reject" {
			choice = control.ChoiceReject
		}
		if err := a.atTerminal("changes "+args[0], args[1]); err != nil {
			return err
		}
		timeout := 30 * time.Second
		if choice == control.ChoiceConfirm {
			undo, err := a.authAgentFor("change "+args[1]+" is confirmed", func(st daemon.StatusReport) bool {
				return st.PendingChange != nil && st.PendingChange.ID == args[1] && daemon.ChangeNeedsAuthentication(st.Authentication.Mode, st.PendingChange.Held)
			})
			if err != nil {
				return err
			}
			if undo != nil {
				defer undo()
				timeout = authTimeout
			}
		}
		if _, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpChangeDecide, Request: args[1], Choice: choice}, timeout); err != nil {
			if errors.Is(err, control.ErrNoDaemon) {
				return fmt.Errorf("%w: changes are held and decided by the daemon; start it (portcullis daemon, or the menu-bar app) and run portcullis changes", control.ErrNoDaemon)
			}
			return err
		}
		if choice == control.ChoiceConfirm {
			fmt.Fprintf(a.Stdout, "Confirmed %s: config.json is in force as it is on disk.\n", args[1])
		} else {
			fmt.Fprintf(a.Stdout, "Rejected %s: config.json is set back to the configuration in force.\n", args[1])
		}
		return nil
	}
	fs, asJSON := jsonFlags("changes", "print the held changes as a JSON list ([] when none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unknown changes subcommand %q (confirm ID, reject ID)", fs.Arg(0))
	}
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpConfig}, 5*time.Second)
	if errors.Is(err, control.ErrNoDaemon) {
		return fmt.Errorf("%w: it checks config.json when it starts and holds what widens trust; start it and run portcullis changes again", control.ErrNoDaemon)
	}
	if err != nil {
		return err
	}
	var st daemon.ConfigState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("reading the daemon's configuration: %w", err)
	}
	if *asJSON {
		// A list, as every --json list: [] when nothing waits (the daemon
		// holds one change at most).
		held := []*daemon.PendingChange{}
		if st.Pending != nil {
			held = append(held, st.Pending)
		}
		return writeJSON(a.Stdout, held)
	}
	if st.Pending == nil {
		fmt.Fprintf(a.Stdout, "No change to %s waits for confirmation: it is in force as it is.\n", st.File)
		return nil
	}
	writePending(a.Stdout, st.Pending)
	return nil
}

// writePending prints a pending change for a person.
func writePending(w interface{ Write([]byte) (int, error) }, p *daemon.PendingChange) {
	when := "since " + p.Since.Local().Format("15:04:05")
	if p.AtStart {
		when = "found when the daemon started"
	}
	fmt.Fprintf(w, "Change %s to %s (%s), %s, widens trust and is not in force:\n", p.ID, p.File, when, madeBy(p))
	for _, h := range p.Held {
		fmt.Fprintf(w, "  %s\n", h.Text)
	}
	if p.LogTampered {
		fmt.Fprintf(w, "The daemon started with its audit log or run record missing (log_tampered): the configuration you last confirmed is in force, whatever %s says.\n", p.File)
	}
	fmt.Fprintf(w, "The rest of the file is in force. Confirm it: portcullis changes confirm %s\n  or set the file back: portcullis changes reject %s\n", p.ID, p.ID)
}
