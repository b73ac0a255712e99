package app

import (
	"flag"
	"io"

	"github.com/portcullis/portcullis/core/config"
)

// The flags of every command are defined here, each with what it means, so
// that `portcullis CMD --help` prints them from the same FlagSet the
// command parses (help_test.go checks that every command's flags are
// described and that no command defines flags elsewhere).

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// commandFlags maps a command (as `portcullis help` names it) to the
// function that builds its flags.
var commandFlags = map[string]func() *flag.FlagSet{
	"daemon":       func() *flag.FlagSet { return newFlags("daemon") },
	"connect":      func() *flag.FlagSet { return newFlags("connect") },
	"status":       func() *flag.FlagSet { fs, _ := jsonFlags("status", "print the status as JSON"); return fs },
	"doctor":       func() *flag.FlagSet { fs, _ := jsonFlags("doctor", "print the findings as JSON"); return fs },
	"approvals":    func() *flag.FlagSet { return approvalsFlags().fs },
	"approve":      func() *flag.FlagSet { return decideFlags("approve").fs },
	"deny":         func() *flag.FlagSet { return decideFlags("deny").fs },
	"changes":      func() *flag.FlagSet { fs, _ := jsonFlags("changes", "print the held change as JSON"); return fs },
	"servers list": func() *flag.FlagSet { fs, _ := jsonFlags("servers list", "print the servers as JSON"); return fs },
	"servers add":  func() *flag.FlagSet { return serversAddFlags().fs },
	"servers edit": func() *flag.FlagSet { return serversEditFlags().fs },
	"creds set":    func() *flag.FlagSet { return credsSetFlags().fs },
	"creds list":   func() *flag.FlagSet { fs, _ := jsonFlags("creds list", "print the scopes as JSON"); return fs },
	"catalog show": func() *flag.FlagSet {
		fs, _ := jsonFlags("catalog show", "print the catalog revision as JSON")
		return fs
	},
	"catalog diff": func() *flag.FlagSet {
		fs, _ := jsonFlags("catalog diff", "print the classified diff as JSON")
		return fs
	},
	"audit tail":        func() *flag.FlagSet { return auditTailFlags().fs },
	"audit verify":      func() *flag.FlagSet { return auditVerifyFlags().fs },
	"audit sessions":    func() *flag.FlagSet { return auditFilterFlagSet("audit sessions").fs },
	"audit activity":    func() *flag.FlagSet { return auditFilterFlagSet("audit activity").fs },
	"audit setup-keys":  func() *flag.FlagSet { return auditSetupKeysFlags().fs },
	"audit acknowledge": func() *flag.FlagSet { return newFlags("audit acknowledge") },
	"audit rotate-key":  func() *flag.FlagSet { return newFlags("audit rotate-key") },
	"install":           func() *flag.FlagSet { return installFlags("install").fs },
	"uninstall":         func() *flag.FlagSet { return installFlags("uninstall").fs },
	"import":            func() *flag.FlagSet { return installFlags("import").fs },
}

// jsonFlags is the flag set of a command whose one flag is --json.
func jsonFlags(name, what string) (*flag.FlagSet, *bool) {
	fs := newFlags(name)
	return fs, fs.Bool("json", false, what)
}

type approvalsOpts struct {
	fs                   *flag.FlagSet
	json, diff, standing *bool
}

func approvalsFlags() approvalsOpts {
	fs, asJSON := jsonFlags("approvals", "print the pending requests (with --standing: the standing approvals) as JSON")
	return approvalsOpts{fs, asJSON, fs.Bool("diff", false, "show, under each card, the diff of every source file changed since the code you last approved on that server"),
		fs.Bool("standing", false, "list the standing approvals (approve --code: this code, for every run of the agent program) instead; portcullis revoke ID ends one")}
}

type decideOpts struct {
	fs    *flag.FlagSet
	once  *bool
	tools *string
	all   *bool
	code  *bool
	skip  *multiFlag
}

func decideFlags(name string) decideOpts {
	fs := newFlags(name)
	// deny parses the same flags, to refuse them with a clear message;
	// its help says they are approve's.
	only := ""
	if name == "deny" {
		only = "(approve only, refused by deny) "
	}
	o := decideOpts{
		fs:    fs,
		once:  fs.Bool("once", false, only+"approve the one call shown only, not the tools for the rest of the agent run"),
		tools: fs.String("tools", "", only+"`a,b` approve the called tool and these tools of the card for the agent run"),
		all:   fs.Bool("all", false, only+"approve every tool the card shows for the agent run"),
		code:  fs.Bool("code", false, only+"approve as for the agent run, and this code for every run of the same agent program: a later run whose server runs this very code is granted these tools without asking; new code asks again"),
	}
	o.skip = &multiFlag{}
	fs.Var(o.skip, "skip-run", "`RUN` leave this agent run of a card of several runs out of the decision: its call stays held on a card of its own (repeatable)")
	return o
}

type serversAddOpts struct {
	fs                    *flag.FlagSet
	cwd, restart, sandbox *string
	force, sessionBus     *bool
	env, creds, watch     multiFlag
	ignore, write         multiFlag
	requests              map[string]*string // --sampling, --elicitation, --roots
}

// writeUsage describes --write of servers add and edit.
const writeUsage = "`PATH` a directory (or file) the server may write in its sandbox, besides its --cwd, /tmp and its runtime's caches (~/.npm, ~/.cache): the rest of your home is read-only to it; your shell's start-up files and PATH directories stay read-only even inside it. Adding one widens trust and is held until you confirm it"

// ignoreUsage describes --ignore of servers add and edit.
const ignoreUsage = "`PATTERN` files the server writes at run time in its --watch directories (a ledger, a database, uploads), in .gitignore syntax relative to each of them: data, so writing them starts no new epoch. The tree's .gitignore files and the usual ignores (*.log, __pycache__, node_modules/.cache, editor swap files, sqlite journals) apply already, and without --watch only the package's source files are measured anyway; a pattern never leaves out code (a source file, an executable, a #! script, the entry). Adding one to a configured server widens trust and is held until you confirm it"

func serversAddFlags() *serversAddOpts {
	o := &serversAddOpts{fs: newFlags("servers add")}
	fs := o.fs
	o.cwd = fs.String("cwd", "", "`DIR` the server runs in; relative paths of the command and of --watch resolve against it (default: the daemon's working directory, which may be anywhere)")
	o.restart = fs.String("restart", "", "`WHEN` a watched change takes effect: on-change (default: a new process once the build settles) or manual (portcullis restart LABEL)")
	o.force = fs.Bool("force", false, "save the server even when its entry script will not be found where it runs")
	o.sessionBus = fs.Bool("session-bus", false, "give the server the session bus, where the Secret Service answers (a widening change)")
	o.sandbox = fs.String("sandbox", "", sandboxUsage)
	fs.Var(&o.env, "env", "`NAME=VALUE` set in the server's environment, stored in plain text in config.json (repeatable; secrets belong in --cred)")
	fs.Var(&o.creds, "cred", "`SCOPE` a credential scope (portcullis creds set) the server receives once a person approves (repeatable)")
	fs.Var(&o.watch, "watch", "`PATH` a file or directory of the server's code or build output: a change there is new code, a new epoch (repeatable; default: the entry's package)")
	fs.Var(&o.ignore, "ignore", ignoreUsage+" (repeatable)")
	fs.Var(&o.write, "write", writeUsage+" (repeatable; default: the existing directories among the server's arguments, which servers add shows)")
	o.requests = serverRequestFlags(fs)
	return o
}

// serverRequestFlags defines --sampling, --elicitation and --roots, the
// policies of the requests a server sends the agent (serverRequests), and
// returns them by kind (config.RequestKinds).
func serverRequestFlags(fs *flag.FlagSet) map[string]*string {
	what := map[string]string{
		config.RequestSampling:    "the server's sampling requests (it asks the agent's model for a completion): allow, approve (the default: a card shows what it asks) or deny; allow widens trust",
		config.RequestElicitation: "the server's elicitation requests (it asks you, through the agent, for information): allow, approve (the default: a card shows what it asks) or deny; allow widens trust",
		config.RequestRoots:       "the server's roots requests (it asks which folders the agent works in): allow (the default), approve or deny",
	}
	out := map[string]*string{}
	for _, kind := range config.RequestKinds {
		out[kind] = fs.String(kind, "", "`POLICY` "+what[kind])
	}
	return out
}

// sandboxUsage describes --sandbox of servers add and edit.
const sandboxUsage = "`LEVEL` standard (the default where the system can; Linux: bubblewrap: Portcullis's directories, the session bus and the display hidden from the server, your home read-only but for its --cwd and --write paths), strict (standard and no network) or off"

type serversEditOpts struct {
	fs                                *flag.FlagSet
	cwd, restart, sandbox             *string
	noCwd, noWatch, force, bus, noBus *bool
	noIgnore, noWrite                 *bool
	env, unset, watch, ignore, write  multiFlag
	requests                          map[string]*string // --sampling, --elicitation, --roots
}

func serversEditFlags() *serversEditOpts {
	o := &serversEditOpts{fs: newFlags("servers edit")}
	fs := o.fs
	o.cwd = fs.String("cwd", "", "`DIR` the server runs in from now on (relative paths of a new command and of --watch resolve against it)")
	o.noCwd = fs.Bool("no-cwd", false, "run the server in the daemon's working directory again")
	o.restart = fs.String("restart", "", "`WHEN` a watched change takes effect: on-change or manual")
	o.noWatch = fs.Bool("no-watch", false, "watch no path: the entry's package identifies the code again")
	o.force = fs.Bool("force", false, "save the change even when the entry script will not be found where the server runs")
	o.sandbox = fs.String("sandbox", "", sandboxUsage)
	o.bus = fs.Bool("session-bus", false, "give the server the session bus, where the Secret Service answers (a widening change)")
	o.noBus = fs.Bool("no-session-bus", false, "take the session bus away from the server again")
	fs.Var(&o.env, "env", "`NAME=VALUE` set (or replace) one variable of the server's environment; the others stay (repeatable)")
	fs.Var(&o.unset, "unset-env", "`NAME` remove one variable from the server's environment (repeatable)")
	fs.Var(&o.watch, "watch", "`PATH` the watched paths: given once or more, they replace the whole list (repeatable)")
	fs.Var(&o.ignore, "ignore", ignoreUsage+"; given once or more, they replace the server's whole list (repeatable)")
	o.noIgnore = fs.Bool("no-ignore", false, "remove the server's own ignore patterns (the .gitignore files and the usual ignores still apply)")
	fs.Var(&o.write, "write", writeUsage+"; given once or more, they replace the server's whole list (repeatable)")
	o.noWrite = fs.Bool("no-write", false, "remove the server's write paths (it writes only its cwd, /tmp and its caches)")
	o.requests = serverRequestFlags(fs)
	return o
}

type credsSetOpts struct {
	fs        *flag.FlagSet
	env       *string
	meta, ask *bool
}

func credsSetFlags() credsSetOpts {
	fs := newFlags("creds set")
	return credsSetOpts{
		fs:   fs,
		env:  fs.String("env", "", "`VAR` inject the secret into the server's environment as VAR (a new scope needs --env or --meta)"),
		meta: fs.Bool("meta", false, "inject the secret into the _meta of each tools/call instead of the environment"),
		ask:  fs.Bool("ask-every-use", false, "a person approves every call that carries the secret, not once per agent run"),
	}
}

type auditTailOpts struct {
	fs             *flag.FlagSet
	asJSON, follow *bool
	n              *int
}

func auditTailFlags() auditTailOpts {
	fs := newFlags("audit tail")
	return auditTailOpts{
		fs:     fs,
		asJSON: fs.Bool("json", false, "print the events as JSON lines, as stored"),
		n:      fs.Int("n", 20, "`N` how many of the last events to print"),
		follow: fs.Bool("f", false, "keep printing events as they are written, until interrupted"),
	}
}

type auditVerifyOpts struct {
	fs       *flag.FlagSet
	asJSON   *bool
	key, dir *string
}

func auditVerifyFlags() auditVerifyOpts {
	fs := newFlags("audit verify")
	return auditVerifyOpts{
		fs:     fs,
		asJSON: fs.Bool("json", false, "print the result as JSON"),
		key:    fs.String("key", "", "`KEY` the verification key (PCVK1-…) from portcullis audit setup-keys: check every seal from the first"),
		dir:    fs.String("dir", "", "`DIR` verify the audit log in DIR (one that portcullis audit rotate-key moved aside) instead of the current one"),
	}
}

type auditFilterOpts struct {
	fs          *flag.FlagSet
	server, run *string
	n           *int
	asJSON      *bool
}

func auditFilterFlagSet(name string) auditFilterOpts {
	fs := newFlags(name)
	return auditFilterOpts{
		fs:     fs,
		server: fs.String("server", "", "`LABEL` only this server's"),
		run:    fs.String("run", "", "`RUN` only this agent run's (its ID or a prefix of it)"),
		n:      fs.Int("n", 0, "`N` only the last N (default: all)"),
		asJSON: fs.Bool("json", false, "print as JSON"),
	}
}

type auditSetupKeysOpts struct {
	fs    *flag.FlagSet
	force *bool
}

func auditSetupKeysFlags() auditSetupKeysOpts {
	fs := newFlags("audit setup-keys")
	return auditSetupKeysOpts{fs: fs, force: fs.Bool("force", false, "replace the sealing keys of a log sealed already (the old verification key then proves the log only up to now)")}
}

type installOpts struct {
	fs             *flag.FlagSet
	dryRun         *bool
	scope, servers *string
	plainEnv       *string // install and import
	restore        *bool   // uninstall
}

func installFlags(op string) installOpts {
	fs := newFlags(op)
	o := installOpts{
		fs:      fs,
		dryRun:  fs.Bool("dry-run", false, "print what would change, change nothing"),
		scope:   fs.String("scope", "user", "`SCOPE` which configuration of the agent: user (yours) or project (the one in the current directory)"),
		servers: fs.String("servers", "", "`a,b` only these of the agent's servers (default: every stdio server)"),
	}
	if op == "uninstall" {
		o.restore = fs.Bool("restore-secrets", false, "put the secrets moved to the keychain back into the agent's configuration, in plain text")
	} else {
		o.plainEnv = fs.String("plain-env", "", "`VAR,…` keep these env values in config.json even when they look like secrets (default: secret-looking values move to the keychain)")
	}
	return o
}
