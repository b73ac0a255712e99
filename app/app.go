// Package app is the one wiring point of Portcullis: it parses the command
// line, builds the subsystems from core and platform, and runs them — the
// menu-bar app (Fyne), the headless daemon, the `connect` shim and the CLI
// commands (docs/DESIGN.md, "Command line").
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/textsafe"
	"github.com/portcullis/portcullis/internal/connect"
	"github.com/portcullis/portcullis/platform"
)

// Version is the program's version, set at build time with
// -ldflags "-X github.com/portcullis/portcullis/app.Version=…".
var Version = "0.1.0-dev"

// App holds what every command needs: where data lives and where to write.
type App struct {
	Dirs   paths.Dirs
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer

	// offline is set by an edit of the configuration written to the file
	// with no daemon running (editConfigFile): nothing of it is in force
	// until a daemon starts.
	offline bool
}

// usageError is a mistake in the command line: the message is printed with
// a hint, and the exit code is 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

const usage = `Portcullis supervises local MCP servers for AI agents.

Usage:
  portcullis                         menu-bar app (daemon + UI)
  portcullis daemon                  the same daemon without UI
  portcullis connect LABEL           stdio shim an agent launches instead of the server
  portcullis servers list|show|add|edit|remove|policy|cred
                                     add LABEL [--cwd D] [--env K=V] [--cred SCOPE] [--watch P] [--ignore PATTERN]
                                         [--restart on-change|manual] [--force] [--session-bus] [--sandbox off|standard|strict]
                                         [--write PATH] [--sampling P] [--elicitation P] [--roots P] -- CMD ARGS…
                                     edit LABEL [--cwd D|--no-cwd] [--env K=V] [--unset-env K]
                                         [--watch P|--no-watch] [--ignore PATTERN|--no-ignore] [--restart W] [--sandbox L]
                                         [--session-bus|--no-session-bus] [--write PATH|--no-write] [--force]
                                         [--sampling P] [--elicitation P] [--roots P] [-- CMD ARGS…]
                                     policy LABEL TOOL allow|approve|deny
                                     cred LABEL add|remove SCOPE
  portcullis status [--json]         per agent run: label, state, epoch, pid, digests
  portcullis doctor [--json]         which daemon this environment reaches, and why
  portcullis creds set|list|remove   set SCOPE [--env VAR|--meta] [--ask-every-use]  (secret from stdin)
  portcullis approvals [--diff] [--json]
                                     pending approval requests, with their cards and the source files
                                         changed since the code you last approved (--diff: their lines)
  portcullis approve ID [--once] [--tools a,b | --all] [--code] [--skip-run RUN]
                                     approve for this agent run the tools the card proposes (--once: the call
                                         shown only; --tools: the called tool and these; --all: every tool shown;
                                         --code: also this code for every run of the agent program; --skip-run:
                                         leave a run of a card of several runs held)
  portcullis deny ID                 deny a pending approval request
  portcullis approvals --standing [--json]
                                     the standing approvals (approve --code) in force
  portcullis revoke ID               end a standing approval: later runs are asked again
  portcullis changes [--json] | confirm ID | reject ID
                                     a change to config.json not made through the daemon that widens trust,
                                     held until you confirm it (reject: the file is set back)
  portcullis restart LABEL           replace the server of every agent run of LABEL (new epoch)
  portcullis stop                    stop the daemon and every server (only at your own terminal)
  portcullis catalog show LABEL [REV] | diff LABEL [FROM TO]   [--json]
                                     catalog revisions and their classified diff
  portcullis audit tail [--json] [-n N] [-f] | verify [--key K] [--dir D] [--json] | setup-keys [--force]
                                     | acknowledge | rotate-key | sessions|activity [-n N] [--server L] [--run R] [--json]
                                     the hash-chained audit log
  portcullis install claude-desktop|claude-code|cursor|vscode|gemini-cli|codex [--dry-run] [--scope user|project]
                                         [--servers a,b] [--plain-env VAR,…]
                                     route that agent's stdio servers through Portcullis (backup first;
                                     secret-looking env values move to the keychain unless --plain-env)
  portcullis uninstall AGENT [--restore-secrets]
                                     give the agent its servers back
  portcullis import AGENT [--dry-run] [--scope user|project] [--servers a,b] [--plain-env VAR,…]
                                     add the agent's servers to Portcullis without changing its config
  portcullis version
  portcullis help [COMMAND [SUB] | TOPIC]
                                     a command's flags, examples and exit codes (or CMD --help);
                                     topics: config, policies, credentials, audit, agents

Data: PORTCULLIS_HOME overrides the data directory (see README).
`

// versionLine is what `portcullis version` prints: the version, which
// build this is (the menu-bar app, or the headless build without a window),
// and the platform.
func versionLine() string {
	kind := "menu-bar app"
	if headlessBuild {
		kind = "headless build: every command but no menu-bar window"
	}
	return fmt.Sprintf("portcullis %s (%s, %s/%s)", Version, kind, runtime.GOOS, runtime.GOARCH)
}

// Main runs the command in args (without the program name) and returns the
// process exit code.
func Main(args []string) int {
	a := &App{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	dirs, err := paths.Resolve()
	if err != nil && !needsNoDirs(args) {
		fmt.Fprintln(a.Stderr, "portcullis:", err)
		return 1
	}
	a.Dirs = dirs
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return a.main(ctx, args)
}

// main runs the command in args, prints its error if any, and returns the
// process exit code.
func (a *App) main(ctx context.Context, args []string) int {
	if len(args) > 0 && args[0] != "daemon" && args[0] != "connect" {
		// Commands print what servers wrote (tool names, descriptions,
		// diagnostics, errors): as data, never as terminal control. The
		// daemon's log is escaped by its handler; connect's output is the
		// agent's JSON-RPC.
		defer a.safeOutput()()
	}
	err := a.Run(ctx, args)
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(a.Stderr, "portcullis: %s\nRun 'portcullis help' for usage.\n", ue.msg)
		return 2
	case errors.Is(err, errExit1):
		return 1
	case errors.Is(err, errExit3):
		return 3
	default:
		fmt.Fprintln(a.Stderr, "portcullis:", err)
		return 1
	}
}

// safeOutput makes a.Stdout and a.Stderr escape what textsafe escapes
// until the returned function flushes them and puts them back.
func (a *App) safeOutput() func() {
	out, errw := a.Stdout, a.Stderr
	so, se := textsafe.NewWriter(out), textsafe.NewWriter(errw)
	a.Stdout, a.Stderr = so, se
	return func() {
		_ = so.Flush()
		_ = se.Flush()
		a.Stdout, a.Stderr = out, errw
	}
}

// errExit1 ends a command with exit code 1 after it printed its own message;
// errExit3 with exit code 3 (audit verify: signatures that could not be
// checked).
var (
	errExit1 = errors.New("exit 1")
	errExit3 = errors.New("exit 3")
)

// Run dispatches one command.
func (a *App) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return a.runTray(ctx)
	}
	cmd, rest := args[0], args[1:]
	if cmd == windowProcessArg && len(rest) == 0 {
		return a.runWindowProcess(ctx)
	}
	if cmd == "help" && len(rest) > 0 {
		return a.help(rest)
	}
	if slices.Contains(commands, cmd) && wantsHelp(rest) {
		return a.help(args)
	}
	err := a.dispatch(ctx, cmd, rest)
	if errors.Is(err, errHelp) { // a help flag wantsHelp did not see
		return a.help(args)
	}
	return err
}

// commands are the commands of Run; `CMD … --help` prints CMD's usage.
var commands = []string{"help", "daemon", "connect", "servers", "status", "doctor", "restart", "stop", "approvals", "approve", "deny", "revoke", "changes", "creds", "audit", "install", "uninstall", "import", "catalog", "version"}

func (a *App) dispatch(ctx context.Context, cmd string, rest []string) error {
	switch cmd {
	case "daemon":
		return a.runDaemon(ctx, rest)
	case "connect":
		return a.runConnect(ctx, rest)
	case "servers":
		return a.runServers(rest)
	case "status":
		return a.runStatus(rest)
	case "doctor":
		return a.runDoctor(rest)
	case "restart":
		return a.runRestart(rest)
	case "stop":
		return a.runStop(rest)
	case "approvals":
		return a.runApprovals(rest)
	case "revoke":
		return a.runRevoke(rest)
	case "approve":
		return a.runDecide(authz.ApproveRun, rest)
	case "deny":
		return a.runDecide(authz.Deny, rest)
	case "changes":
		return a.runChanges(rest)
	case "creds":
		return a.runCreds(rest)
	case "audit":
		return a.runAudit(ctx, rest)
	case "install":
		return a.runInstall(ctx, rest)
	case "uninstall":
		return a.runUninstall(ctx, rest)
	case "import":
		return a.runImport(ctx, rest)
	case "catalog":
		return a.runCatalog(rest)
	case "version", "--version":
		fmt.Fprintln(a.Stdout, versionLine())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(a.Stdout, usage)
		return nil
	}
	return usagef("unknown command %q", cmd)
}

// needsNoDirs reports whether args only ask for help or the version, which
// print without the data directory (a bad PORTCULLIS_HOME does not hide
// the usage that explains it).
func needsNoDirs(args []string) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0] {
	case "help", "-h", "--help", "-help", "version":
		return true
	}
	return slices.Contains(commands, args[0]) && wantsHelp(args[1:])
}

// wantsHelp reports whether args ask for help: -h or --help (or -help, --h,
// with or without =VALUE: what package flag takes for a help request)
// anywhere before "--", after which the words are a server's command.
func wantsHelp(args []string) bool {
	for _, w := range args {
		if w == "--" {
			return false
		}
		switch name, _, _ := strings.Cut(w, "="); name {
		case "-h", "--h", "-help", "--help":
			return true
		}
	}
	return false
}

func (a *App) logger(name string) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("PORTCULLIS_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: level})).With("component", name)
}

// errHelp is a help request package flag found; Run prints the command's
// usage for it (wantsHelp normally sees the request first).
var errHelp = errors.New("help requested")

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return errHelp
	} else if err != nil {
		return usagef("%s: %v", fs.Name(), err)
	}
	return nil
}

// newDaemon builds the daemon with this platform's implementations.
func (a *App) newDaemon(log *slog.Logger) (*daemon.Daemon, error) {
	store := platform.NewSecretStore()
	return daemon.New(daemon.Options{
		Dirs:    a.Dirs,
		Peers:   platform.Peers{},
		Procs:   platform.NewProcessInfo(),
		Sandbox: platform.NewSandbox,
		Cgroups: platform.NewCgroups(log),
		Secrets: store,
		// For settings.approvalAuthentication: polkit, LocalAuthentication.
		Authenticator: platform.NewAuthenticator(),
		// For settings.auditSigning of the configuration the daemon loads.
		AuditSigner: func(on bool) ([]byte, string, error) {
			key, note, err := daemon.AuditSigning(store, daemon.AuditDir(a.Dirs), on)
			if note != "" {
				log.Warn(note)
			}
			return key, note, err
		},
		Logger: log,
	})
}

func (a *App) runDaemon(ctx context.Context, args []string) error {
	fs := commandFlags["daemon"]()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("daemon takes no arguments")
	}
	log := a.logger("daemon")
	// Before the configuration and the audit key are read: a second
	// daemon says so, not a later failure of its own.
	lock, err := daemon.TakeLock(a.Dirs)
	if err != nil {
		return err
	}
	defer lock.Release()
	d, err := a.newDaemon(log)
	if err != nil {
		return configError(err, againDaemon)
	}
	return d.Serve(ctx)
}

// What to do once an invalid configuration file is fixed, per command.
const (
	againDaemon  = "start the daemon again"
	againCommand = "run the command again"
)

// configError words a configuration failure for a person: the file, the
// line and column, and what to do (again: "run the command again"…).
func configError(err error, again string) error {
	if errors.Is(err, config.ErrInvalid) {
		return fmt.Errorf("%w\nThe configuration file was not changed; fix it (or restore the .last-good copy beside it) and %s", err, again)
	}
	return err
}

func (a *App) runConnect(ctx context.Context, args []string) error {
	fs := commandFlags["connect"]()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("connect needs exactly one server label")
	}
	// This is the full program: a daemon it starts is itself.
	var daemon func() (string, error)
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err == nil {
		daemon = func() (string, error) { return exe, nil }
	}
	code := connect.Run(ctx, connect.Options{
		Dirs:   a.Dirs,
		Label:  fs.Arg(0),
		Daemon: daemon,
		Stdin:  a.Stdin,
		Stdout: a.Stdout,
		Stderr: a.Stderr,
	})
	if code != 0 {
		return errExit1
	}
	return nil
}
