package app

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// cmdDoc is what `portcullis help CMD` says of a command beyond its usage
// lines: what it does, examples, and its exit codes when they are not the
// common ones (exitCommon).
type cmdDoc struct {
	what     string
	examples []string
	exits    string
}

// exitCommon are the exit codes of every command unless its doc says more.
const exitCommon = "0 done; 1 it failed (the reason is printed); 2 a mistake in the command line (printed with the fix)."

// docs holds each command and subcommand `portcullis help` knows, by the
// words that name it.
var docs = map[string]cmdDoc{
	"daemon": {
		what:     "Runs the Portcullis daemon in the foreground, without the menu-bar window: it supervises the configured servers, holds calls for approval and writes the audit log. `portcullis connect` starts one in the background when none runs, so you rarely need this; use it on a machine without a graphical session. Stop it with Ctrl+C (agent runs connected then end).",
		examples: []string{"portcullis daemon"},
	},
	"connect": {
		what:     "The stdio command an agent runs instead of the server itself: it reaches the daemon (starting one if none runs), which launches the server of LABEL for this agent run and stands between the two. `portcullis install` writes it into the agent's configuration for you.",
		examples: []string{"portcullis connect notes", `claude mcp add notes -- portcullis connect notes`},
	},
	"servers": {
		what:     "Manages the servers Portcullis can launch (config.json). `portcullis help servers SUB` shows one subcommand.",
		examples: []string{"portcullis servers list", "portcullis servers add notes --cwd ~/src/notes -- node dist/server.js"},
	},
	"servers list": {
		what:     "Lists the configured servers: label, command, working directory, watched paths, credential scopes.",
		examples: []string{"portcullis servers list", "portcullis servers list --json"},
	},
	"servers show": {
		what:     "Prints one server's entry of config.json, as JSON.",
		examples: []string{"portcullis servers show notes"},
	},
	"servers add": {
		what: "Registers a server under LABEL: its command after --, where it runs and what identifies its code. Nothing starts now: the daemon launches it for each agent run that connects. " +
			"Refuses (exit 2) an entry script it can tell will not be found where the server runs, unless --force. " +
			"--sampling, --elicitation and --roots set what becomes of the server's requests to the agent (allow, approve: a card for the person, or deny); allowing sampling or elicitation widens trust and is held, like any such change, until you confirm it. " +
			"Data is not code: files the server writes where its code is (a ledger, a database, logs) start no new epoch when they are no source file of its package, or, in a --watch directory, when its .gitignore, the usual ignores or an --ignore PATTERN mark them, unless they are code (a source file, an executable, a #! script).",
		examples: []string{
			"portcullis servers add notes --cwd ~/src/notes -- node dist/server.js",
			"portcullis servers add ledger --cwd ~/src/ledger --watch . --ignore 'data/**' -- python3 server.py",
			"portcullis servers add inv --watch ~/src/inv/bin -- ~/src/inv/bin/inventory",
			"portcullis servers add fs -- npx -y @modelcontextprotocol/server-filesystem ~/docs",
			"portcullis servers add notes --sampling deny --elicitation approve -- node dist/server.js",
		},
	},
	"servers edit": {
		what: "Changes what its flags name in a server's entry and keeps everything else: tool policies, credential scopes and the fields not named. A new command goes after --. " +
			"Runs already connected get the change at their server's next launch. " +
			"--sampling, --elicitation and --roots change the policy of the server's requests to the agent; allow where it was approve or deny widens trust.",
		examples: []string{
			"portcullis servers edit notes --cwd ~/src/notes",
			"portcullis servers edit notes --env LOG_LEVEL=debug --unset-env OLD_FLAG",
			"portcullis servers edit notes -- node dist/main.js",
			"portcullis servers edit notes --sampling allow",
			"portcullis servers edit ledger --ignore 'data/**' --ignore '*.sqlite'",
		},
	},
	"servers remove": {
		what:     "Removes a server from config.json. Agent runs already connected keep their server until they end; the credential scopes it used stay defined.",
		examples: []string{"portcullis servers remove notes"},
	},
	"servers policy": {
		what:     "Sets one tool's policy: allow (no approval), approve (a person approves, once per agent run and server process; the default) or deny (hidden from agents and refused). In force at once, for runs already connected too. Allowing widens trust: with a daemon running, only the person at a terminal of their own may do it (not a pipe, not a server's or an agent's process).",
		examples: []string{"portcullis servers policy notes notes_read allow", "portcullis servers policy notes notes_delete deny"},
	},
	"servers cred": {
		what:     "Gives a server a credential scope (defined with portcullis creds set) or takes it away. A person approves before a call carries it.",
		examples: []string{"portcullis servers cred notes add notes-token", "portcullis servers cred notes remove notes-token"},
	},
	"status": {
		what:     "Shows the daemon and, per agent run, the server's state (identity pending, catalog ready, ready…), its execution epoch, process and what was measured of its code; then the servers that failed, with the line of their output that names the cause.",
		examples: []string{"portcullis status", "portcullis status --json"},
	},
	"doctor": {
		what:     "Says which daemon a command run in this environment (an agent's `portcullis connect` too) reaches and why: the socket's place and what decided it (the uid's runtime directory, the passwd home, or PORTCULLIS_HOME), whether a daemon answers there or holds the state directory while listening elsewhere, the session bus (keychain) a daemon started from here would use, and what of this environment it would not get.",
		examples: []string{"portcullis doctor", "env -i HOME=$HOME PATH=/usr/bin portcullis doctor"},
	},
	"restart": {
		what:     "Replaces the server process of every agent run of LABEL: a new execution epoch, so the approvals given to the old one no longer apply. It waits for each new epoch to answer (a launch that waits for approval of its credentials waits for the person) and exits 1 naming the cause when a launch fails; the old epoch then keeps serving. With no agent run connected there is nothing to restart; the next agent that connects starts the server.",
		examples: []string{"portcullis restart notes"},
	},
	"stop": {
		what:     "Stops the daemon: every server is stopped, and the calls agents have in flight are answered epoch_ended (a connected agent gets a daemon again at its next call). Only the person stops it, at a terminal of their own (not a pipe, not a supervised server's or an agent's process); the stop is recorded in the audit log.",
		examples: []string{"portcullis stop"},
	},
	"approvals": {
		what:     "Lists the approval requests waiting for a person, each with its card: the agent run, the call and its arguments, what changed since the last approval (the tools, the measured files, and the files of the server's source tree with their added and removed lines), and what approving it would cover. --diff prints the diff of each changed source file. --standing lists the standing approvals instead (approve --code), which portcullis revoke ends.",
		examples: []string{"portcullis approvals", "portcullis approvals --diff", "portcullis approvals --json", "portcullis approvals --standing"},
	},
	"approve": {
		what: "Approves a waiting request, from a terminal (a supervised server or the agent cannot): for the agent run, the tools the card proposes (by default the called tool), or with --once only the call shown. " +
			"The grant ends with the run or with the server's epoch.",
		examples: []string{"portcullis approve apr_01J…", "portcullis approve apr_01J… --once", "portcullis approve apr_01J… --tools notes_write,notes_tag"},
	},
	"revoke": {
		what: "Ends a standing approval (approve --code: this code, for every run of the agent program): later runs are asked again. " +
			"It narrows trust, so it needs no terminal and no authentication. portcullis approvals --standing lists them; each ends by itself when the server's code changes.",
		examples: []string{"portcullis approvals --standing", "portcullis revoke apr_01J…"},
	},
	"deny": {
		what:     "Denies a waiting request, from a terminal: the agent is told the person refused.",
		examples: []string{"portcullis deny apr_01J…"},
	},
	"changes": {
		what:     "Shows a change to config.json that widens trust and was not made through the running daemon (written while no daemon ran, by any program or a portcullis command, or edited directly) (a new credential, a tool allowed…): it is held, not in force, until you confirm it; reject sets the file back to the configuration in force.",
		examples: []string{"portcullis changes", "portcullis changes confirm chg-1", "portcullis changes reject chg-1"},
	},
	"creds": {
		what:     "Manages credential scopes: a secret kept in the system's credential store (macOS Keychain, the Secret Service on Linux), injected into a server only after a person approves. `portcullis help credentials` explains more.",
		examples: []string{"printf %s \"$TOKEN\" | portcullis creds set notes-token --env NOTES_TOKEN", "portcullis creds list"},
	},
	"creds set": {
		what:     "Creates or replaces a credential scope; the secret is read from stdin (a terminal asks for it without echo). Then give it to a server with portcullis servers cred LABEL add SCOPE.",
		examples: []string{"printf %s \"$TOKEN\" | portcullis creds set notes-token --env NOTES_TOKEN", "portcullis creds set api --meta --ask-every-use"},
	},
	"creds list": {
		what:     "Lists the credential scopes with how each is injected, the servers using it and whether the store holds its secret; never a value.",
		examples: []string{"portcullis creds list"},
	},
	"creds remove": {
		what:     "Deletes a credential scope and its secret. Refused while a server still uses it.",
		examples: []string{"portcullis creds remove notes-token"},
	},
	"catalog": {
		what:     "The catalog revisions recorded for a server (what its tools/list advertised, each time it changed) and their classified diffs.",
		examples: []string{"portcullis catalog show notes", "portcullis catalog diff notes"},
	},
	"catalog show": {
		what:     "Prints a catalog revision of LABEL (the latest, or REV): each tool with its annotations, input schema and policy.",
		examples: []string{"portcullis catalog show notes", "portcullis catalog show notes 3 --json"},
	},
	"catalog diff": {
		what:     "Prints the classified diff between two catalog revisions (default: the last two): added, removed and changed tools, each change with its severity.",
		examples: []string{"portcullis catalog diff notes", "portcullis catalog diff notes 2 5"},
	},
	"audit": {
		what:     "The hash-chained audit log: every launch, epoch, catalog revision, call, approval and refusal. `portcullis help audit` below explains signing and seals.",
		examples: []string{"portcullis audit tail -f", "portcullis audit verify --key PCVK1-…"},
	},
	"audit tail": {
		what:     "Prints the last events of the audit log, one line each.",
		examples: []string{"portcullis audit tail", "portcullis audit tail -n 100 -f"},
	},
	"audit verify": {
		what:     "Checks the audit log: the hash chain, the signatures, and with --key every forward-secure seal from the first.",
		examples: []string{"portcullis audit verify", "portcullis audit verify --key PCVK1-…"},
		exits:    "0 everything checked holds; 1 a problem was found (printed: which event, which kind); 3 the chain holds but signatures or seals could not be checked (the reason is printed); 2 a mistake in the command line.",
	},
	"audit setup-keys": {
		what:     "Seals the audit log with a key that evolves forward, and prints the verification key once: keep it outside this computer. The daemon must be running.",
		examples: []string{"portcullis audit setup-keys"},
	},
	"audit acknowledge": {
		what:     "After the daemon found the audit log's file swapped or deleted (log_tampered), approvals stop until you have looked: this acknowledges it and lets them resume. Only the person, at a terminal of their own (not a pipe, not a server's or an agent's process).",
		examples: []string{"portcullis audit acknowledge"},
	},
	"audit rotate-key": {
		what: "For a data directory whose signed audit log lost its key (the daemon then refuses to start, saying so): moves the log aside, so that the next start begins a new log signed with a new key. " +
			"The old log stays verifiable with audit verify --dir (its chain, its seals with your verification key, its signatures with the old key if found). Run it with no daemon running, at your terminal.",
		examples: []string{"portcullis audit rotate-key", "portcullis audit verify --dir ~/.local/state/portcullis/audit.rotated-20261201T190400Z"},
	},
	"audit sessions": {
		what:     "One line per agent run: who connected, to which server, when, and how it ended.",
		examples: []string{"portcullis audit sessions", "portcullis audit sessions --server notes -n 10"},
	},
	"audit activity": {
		what:     "The calls, decisions and epoch changes, grouped by agent run.",
		examples: []string{"portcullis audit activity --run 01J…", "portcullis audit activity --server notes --json"},
	},
	"install": {
		what: "Routes an agent's stdio MCP servers through Portcullis: adds each to Portcullis and rewrites the agent's entry to `portcullis connect LABEL`, after a backup. Secret-looking env values move to the credential store unless --plain-env names them. " +
			"Running it again changes nothing.",
		examples: []string{"portcullis install claude-code --dry-run", "portcullis install cursor --scope project --servers notes,fs"},
	},
	"uninstall": {
		what:     "Gives the agent its servers back as they were before install, from the record install kept.",
		examples: []string{"portcullis uninstall claude-code"},
	},
	"import": {
		what:     "Adds the agent's stdio servers to Portcullis without changing the agent's configuration.",
		examples: []string{"portcullis import claude-desktop --dry-run"},
	},
	"version": {
		what:     "Prints the version, which build this is (the menu-bar app or the headless build) and the platform.",
		examples: []string{"portcullis version"},
	},
}

// help prints, on stdout, the help of the command args names (`help CMD
// [SUB…]`, `CMD [SUB…] --help`): its usage lines, what it does, its flags
// with their meaning and default, examples and exit codes; for a topic
// (`help audit`), the topic's text too; the whole usage for `help help`.
func (a *App) help(args []string) error {
	cmd := args[0]
	if cmd == "help" || wantsHelp(args[:1]) {
		fmt.Fprint(a.Stdout, usage)
		return nil
	}
	topic, isTopic := topics[cmd]
	if !slices.Contains(commands, cmd) && !isTopic {
		return usagef("unknown command %q (portcullis help lists the commands and topics)", cmd)
	}
	if !slices.Contains(commands, cmd) {
		fmt.Fprint(a.Stdout, topic)
		return nil
	}
	path := commandPath(args)
	writeCommandHelp(a.Stdout, path)
	if isTopic && path == cmd {
		fmt.Fprintf(a.Stdout, "\n%s", topic)
	}
	return nil
}

// commandPath returns the longest command of docs that args start with,
// ignoring flags (servers add LABEL --cwd D → "servers add").
func commandPath(args []string) string {
	var words []string
	for _, w := range args {
		if w == "--" {
			break
		}
		if !strings.HasPrefix(w, "-") {
			words = append(words, w)
		}
	}
	for n := len(words); n > 1; n-- {
		if p := strings.Join(words[:n], " "); docs[p].what != "" {
			return p
		}
	}
	return words[0]
}

// writeCommandHelp writes the help of the command path names.
func writeCommandHelp(w io.Writer, path string) {
	cmd, sub, _ := strings.Cut(path, " ")
	fmt.Fprintf(w, "Usage:\n%s\n", subUsage(commandUsage(cmd), sub))
	d := docs[path]
	if d.what != "" {
		fmt.Fprintf(w, "\n%s\n", wrap(d.what, 78, ""))
	}
	if mk, ok := commandFlags[path]; ok {
		var flags []*flag.Flag
		mk().VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
		if len(flags) > 0 {
			fmt.Fprintf(w, "\nFlags:\n")
			for _, f := range flags {
				name, usage := flag.UnquoteUsage(f)
				head := "  -" + f.Name
				if len(f.Name) > 1 {
					head = "  --" + f.Name
				}
				if name != "" {
					head += " " + name
				}
				if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
					usage += " (default " + f.DefValue + ")"
				}
				fmt.Fprintf(w, "%s\n%s\n", head, wrap(usage, 78, "      "))
			}
		}
	}
	if len(d.examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, e := range d.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	exits := d.exits
	if exits == "" {
		exits = exitCommon
	}
	fmt.Fprintf(w, "\nExit codes: %s\n\nRun 'portcullis help' for every command and topic.\n", exits)
}

// subUsage keeps, of a command's usage lines, the ones about sub: the
// first line, the line naming sub and the more indented lines continuing
// it; all of them when sub is "" or no line names it.
func subUsage(lines, sub string) string {
	lines = strings.TrimSuffix(lines, "\n")
	if sub == "" {
		return lines
	}
	all := strings.Split(lines, "\n")
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	keep := all[:1]
	at := -1 // the indentation of the kept line being continued
	for _, l := range all[1:] {
		switch f := strings.Fields(l); {
		case at >= 0 && indent(l) > at:
			keep = append(keep, l)
		case len(f) > 0 && (f[0] == sub || strings.Contains(f[0], sub+"|") || strings.Contains(f[0], "|"+sub)):
			keep, at = append(keep, l), indent(l)
		default:
			at = -1
		}
	}
	if len(keep) == 1 {
		return lines
	}
	return strings.Join(keep, "\n")
}

// wrap breaks text into lines of at most width runes (longer words stay
// whole), each starting with indent.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(text) {
		if len([]rune(line))+1+len([]rune(word)) > width && strings.TrimSpace(line) != "" {
			b.WriteString(line + "\n")
			line = indent
		}
		if strings.TrimSpace(line) != "" {
			line += " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}

// commandUsage returns the lines of the main usage text about cmd: the line
// that names `portcullis CMD` and the indented lines that continue it; ""
// if no line names it.
func commandUsage(cmd string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(usage, "\n") {
		switch {
		case strings.HasPrefix(line, "  portcullis"):
			if in {
				return b.String()
			}
			fields := strings.Fields(line)
			for i := 0; i+1 < len(fields) && !in; i++ {
				in = fields[i] == "portcullis" && fields[i+1] == cmd
			}
		case in && !strings.HasPrefix(line, "   "):
			return b.String()
		}
		if in {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// topics are the texts of `portcullis help TOPIC` that are not a command's.
var topics = map[string]string{
	"config": `The configuration: config.json in the data directory (portcullis status prints its path;
PORTCULLIS_HOME moves the data directory). Edit it with portcullis servers add|edit|remove|policy|cred
and portcullis creds; the daemon reads it again when it changes. An invalid file is refused with its
line and column, and the daemon keeps running the last good copy (config.json.last-good). A change
made to the file by hand (or by any program) that widens trust — a new credential, a tool allowed, a
server's command — is held until you confirm it: portcullis changes.
`,
	"policies": `Tool policies, per server and tool (portcullis servers policy LABEL TOOL POLICY):
  allow    the call goes through; it is audited.
  approve  the default: the first call waits until a person approves it (the window, or portcullis
           approve); the grant covers that agent run and that execution epoch, and ends when the server's
           code changes (a rebuild, a restart, a worker swapped behind the pipe).
  deny     the tool is hidden from the agent's tools/list and its calls are refused.
A tool the server adds later gets approve until you set otherwise.
`,
	"credentials": `Credential scopes: a secret in the system's credential store (macOS Keychain; on Linux the Secret
Service, e.g. gnome-keyring), never in config.json. portcullis creds set SCOPE --env VAR injects it into
the server's environment at launch; --meta into each tools/call's _meta. A server receives a scope only
after a person approved it for the agent run and epoch (--ask-every-use: for each call). portcullis
install moves secret-looking env values of an agent's servers into scopes. On Linux, any program
running as you can read the Secret Service; Portcullis keeps the secrets out of the servers'
environments and output, not out of reach of your own uid.
`,
	"agents": `Agents: any MCP client that launches stdio servers. portcullis install AGENT rewrites its
configuration so that each server runs as portcullis connect LABEL (agents: claude-desktop,
claude-code, cursor, vscode, gemini-cli, codex); uninstall gives the servers back. When a rebuild changes the tools,
Portcullis sends notifications/tools/list_changed; a call that needs a person's approval waits for it
(the agent's own tool-call timeout must be longer than Portcullis's approval timeout). A refused call
gets a JSON-RPC error whose message says what happened and what the model can do next.
`,
	"audit": `Signing and seals. Every event of the audit log is hash-chained to the one before it, so an edit
in the middle breaks the chain. That alone does not stop a program running as you from rewriting the
whole file and recomputing the chain, so two more layers exist:
  - Signing (settings.auditSigning, on by default): each event carries an HMAC with a key kept in the
    credential store. When the store cannot be used (no Secret Service running, a locked keychain), the
    log is not signed, status says so in one line, and the chain is still written; signing starts at the
    first daemon start where the store works. On Linux any program of your uid can read that key.
  - Seals (portcullis audit setup-keys): the log is sealed every 15 minutes and at each stop with a key
    that evolves forward and forgets its past, and you keep the verification key outside the machine.
    portcullis audit verify --key KEY then proves every sealed event, even against code that stole the
    current key. This is what makes the log provable on a machine you do not fully trust.
portcullis audit verify exits 0 when all it checked holds, 1 when it found a problem, 3 when signatures
or seals could not be checked.
`,
}
