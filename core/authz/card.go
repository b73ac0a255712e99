package authz

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
)

// Card is what the approval window and `portcullis approvals` show: the
// facts a person decides on (docs/DESIGN.md, "Authorization and credentials").
//
// Identity is set on a request to launch a new execution identity with env
// credentials (the digest of the measured identity); such a request grants
// no tools, and LaunchCommand, Executable, ExecutableDigest, Entry and
// EntryDigest say which code that digest measured. CurrentEpoch is empty
// until the process has started (a launch request comes before its epoch).
// Tool and Arguments describe the call that raised the request, ArgsDigest
// identifies those arguments (the audit log's argsDigest): a grant approved
// once covers that call only, not another call of the tool. Defaults are the
// values that omitted arguments will take.
//
// The tool scope a card proposes is what the person saw ticked (docs/DESIGN.md,
// "Authorization and credentials"; see Authority.Propose): ToolScope is
// what "Approve for this run" grants unless the person changes the ticks:
// the called tool only on the first card of a run, and after a rebuild the
// scope the person chose for the previous epoch, minus the tools the new
// code lost. OtherTools are the other tools that need approval in the
// current catalog revision: shown unticked, granted only when the person
// ticks them (`approve --tools`, `--all`). NewTools are the tools the
// revision added since the one last approved (never pre-ticked), and
// ChangedTools those whose contract or authority changed: both are marked
// on the card.
//
// Stale is set on the card raised with an authorization_stale refusal: its
// call was refused already, so the card offers to allow the new code for
// this run (or deny), never to approve that call once.
type Card struct {
	Reason        string      `json:"reason"`
	AgentRun      ids.RunID   `json:"agentRun"`
	AgentExe      string      `json:"agentExe,omitempty"`
	AgentName     string      `json:"agentName,omitempty"` // the clientInfo title or name the agent sent: its own claim, for display only
	AgentPID      int         `json:"agentPid,omitempty"`
	ServerLabel   string      `json:"serverLabel"`
	PreviousEpoch ids.EpochID `json:"previousEpoch,omitempty"` // the epoch last approved for this run
	// StandingEnded names the standing approval (approve --code) of this
	// server and agent program that this card's code ended: the card is
	// shown because the code changed since then (set by Raise).
	StandingEnded    ids.RequestID `json:"standingEnded,omitempty"`
	CurrentEpoch     ids.EpochID   `json:"currentEpoch,omitempty"` // "" before the process has started
	Identity         string        `json:"identity,omitempty"`
	LaunchCommand    []string      `json:"launchCommand,omitempty"`
	Executable       string        `json:"executable,omitempty"`
	ExecutableDigest string        `json:"executableDigest,omitempty"`
	Entry            string        `json:"entry,omitempty"` // the script or file run, when not the executable itself
	EntryDigest      string        `json:"entryDigest,omitempty"`
	// Measured lists, beside the executable and the entry, what else the
	// identity covers: each watched path, the lockfile, the entry's
	// package — "watched dist (sha256 ab12…)".
	Measured         []string          `json:"measured,omitempty"`
	IdentityChanges  []identity.Change `json:"identityChanges,omitempty"`
	ApprovedRevision uint64            `json:"approvedRevision,omitempty"`
	CatalogRevision  uint64            `json:"catalogRevision,omitempty"`
	CatalogChanges   []catalog.Change  `json:"catalogChanges,omitempty"`
	// ToolContracts is the contract of each tool the card shows, as the
	// catalog revision in force offered it: tool name → its digest
	// (catalog.Tool.Digest). A grant made from the card covers each tool
	// with the contract the card showed (Grant.Contracts).
	ToolContracts map[string]string `json:"toolContracts,omitempty"`
	// Rewritten is set when the called tool is asked for again because
	// the server rewrote it within the epoch beyond the contract a grant
	// covered (CatalogChanges then start with the tool's diff from that
	// contract).
	Rewritten       bool            `json:"rewritten,omitempty"`
	Tool            string          `json:"tool,omitempty"`
	Arguments       json.RawMessage `json:"arguments,omitempty"`
	ArgsDigest      string          `json:"argsDigest,omitempty"`
	Defaults        map[string]any  `json:"defaults,omitempty"`
	ToolScope       []string        `json:"toolScope,omitempty"`
	OtherTools      []string        `json:"otherTools,omitempty"`
	NewTools        []string        `json:"newTools,omitempty"`
	ChangedTools    []string        `json:"changedTools,omitempty"`
	Stale           bool            `json:"stale,omitempty"`
	CredentialScope []string        `json:"credentialScope,omitempty"`
	AskEveryUse     bool            `json:"askEveryUse,omitempty"`
	// ServerRequest is set on the card of a request the server sent the
	// agent (sampling, elicitation), held for the person; such a card
	// grants no tools.
	ServerRequest *ServerRequest `json:"serverRequest,omitempty"`
	// Code is the measured identity of the code the card's epoch runs
	// (IdentityDigest of its execution record; for a launch card, the
	// Identity it launches): cards of several runs fold into one only
	// when it is the same, and so are the identity changes they show
	// (which include code a process was observed to run).
	Code string `json:"code,omitempty"`
	// AlsoRuns are the other agent runs this card decides: runs of the
	// same agent program on the same server whose epochs run the same
	// code and catalog revision, each with its own epoch and call (see
	// Runs). A decision makes one grant per run and epoch; a run the
	// person leaves out stays held on a card of its own.
	AlsoRuns []RunCall `json:"alsoRuns,omitempty"`
}

// RunCall is one agent run a card decides: the run, its agent's pid and
// name, the epoch it approved before and the one it runs now, and the
// call that waits (none for a launch).
type RunCall struct {
	AgentRun      ids.RunID       `json:"agentRun"`
	AgentPID      int             `json:"agentPid,omitempty"`
	AgentName     string          `json:"agentName,omitempty"`
	PreviousEpoch ids.EpochID     `json:"previousEpoch,omitempty"`
	CurrentEpoch  ids.EpochID     `json:"currentEpoch,omitempty"`
	Tool          string          `json:"tool,omitempty"`
	Arguments     json.RawMessage `json:"arguments,omitempty"`
	ArgsDigest    string          `json:"argsDigest,omitempty"`
}

// Runs lists every run the card decides: its own (AgentRun…) first, then
// AlsoRuns.
func (c Card) Runs() []RunCall {
	own := RunCall{AgentRun: c.AgentRun, AgentPID: c.AgentPID, AgentName: c.AgentName, PreviousEpoch: c.PreviousEpoch,
		CurrentEpoch: c.CurrentEpoch, Tool: c.Tool, Arguments: c.Arguments, ArgsDigest: c.ArgsDigest}
	return append([]RunCall{own}, c.AlsoRuns...)
}

// RunNames lists the agent runs the card decides, its own first.
func (c Card) RunNames() []ids.RunID {
	var out []ids.RunID
	for _, r := range c.Runs() {
		out = append(out, r.AgentRun)
	}
	return out
}

// Shows reports whether the card shows the call of run with tool and
// arguments of digest args.
func (c Card) Shows(run ids.RunID, tool, args string) bool {
	return slices.ContainsFunc(c.Runs(), func(r RunCall) bool {
		return r.AgentRun == run && r.Tool == tool && r.ArgsDigest == args
	})
}

// Run returns the part of the card about run.
func (c Card) Run(run ids.RunID) (RunCall, bool) {
	for _, r := range c.Runs() {
		if r.AgentRun == run {
			return r, true
		}
	}
	return RunCall{}, false
}

// withRuns is the card deciding runs (not empty): the first becomes the
// card's own run, the others its AlsoRuns.
func (c Card) withRuns(runs []RunCall) Card {
	r := runs[0]
	c.AgentRun, c.AgentPID, c.AgentName, c.PreviousEpoch, c.CurrentEpoch = r.AgentRun, r.AgentPID, r.AgentName, r.PreviousEpoch, r.CurrentEpoch
	c.Tool, c.Arguments, c.ArgsDigest = r.Tool, r.Arguments, r.ArgsDigest
	c.AlsoRuns = slices.Clone(runs[1:])
	return c
}

// foldable reports whether card n, raised for one run, may be decided by
// pending card x: the same server, the same agent program (the executable
// the kernel reports, never the name the agent claims), the same code and
// catalog revision, the same changes shown, the same credentials, neither
// a card that asks on every use, a server request, a rewritten tool or a
// stale call, and n's run not already on x.
func foldable(x, n Card) bool {
	if x.Code == "" || x.Code != n.Code || x.ServerLabel != n.ServerLabel || x.AgentExe == "" || x.AgentExe != n.AgentExe ||
		x.Identity != n.Identity || x.CatalogRevision != n.CatalogRevision || x.ApprovedRevision != n.ApprovedRevision ||
		x.AskEveryUse || n.AskEveryUse || x.ServerRequest != nil || n.ServerRequest != nil ||
		x.Stale != n.Stale || x.Rewritten || n.Rewritten || len(n.AlsoRuns) > 0 ||
		!slices.Equal(x.CredentialScope, n.CredentialScope) || !reflect.DeepEqual(x.IdentityChanges, n.IdentityChanges) ||
		!reflect.DeepEqual(x.CatalogChanges, n.CatalogChanges) {
		return false
	}
	for t, d := range n.ToolContracts {
		if o, ok := x.ToolContracts[t]; ok && o != d {
			return false
		}
	}
	_, on := x.Run(n.AgentRun)
	return !on
}

// ServerRequest is a request from a server to the agent, as its card shows
// it: Kind is config.RequestSampling, RequestElicitation or RequestRoots,
// Method the JSON-RPC method, Asks what the server asks the agent's model
// or the person, in lines as the server wrote them (display escapes them).
type ServerRequest struct {
	Kind   string   `json:"kind"`
	Method string   `json:"method"`
	Asks   []string `json:"asks,omitempty"`
}

// Offered is every tool the card lets the person tick: ToolScope, then
// OtherTools, then the called tool if neither holds it.
func (c Card) Offered() []string {
	out := slices.Concat(c.ToolScope, c.OtherTools)
	if c.Tool != "" && !slices.Contains(out, c.Tool) {
		out = append(out, c.Tool)
	}
	return out
}

// ToolMark is how a card marks tool beside its name: "new" (the revision
// added it), "changed" (its contract or authority changed), or "".
func (c Card) ToolMark(tool string) string {
	switch {
	case slices.Contains(c.NewTools, tool):
		return "new"
	case slices.Contains(c.ChangedTools, tool):
		return "changed"
	}
	return ""
}

// markedTools is tools with their marks, for the text card.
func (c Card) markedTools(tools []string) string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t
		if m := c.ToolMark(t); m != "" {
			out[i] += " (" + m + ")"
		}
	}
	return strings.Join(out, ", ")
}

// IdentityDigest is the digest that identity approvals bind to: the
// measured digests of a record (executable, runtime, interpreter, entry,
// lockfile, wrappers, watched paths), its ignore patterns and the
// environment variables that change what runs, not its epoch, pid or start
// time.
func IdentityDigest(r identity.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exe %s\nruntime %s\nentry %s\nlock %s\n", r.ResolvedExecutable.SHA256, r.Runtime, r.EntryDigest, r.LockfileDigest)
	if r.Interpreter != nil {
		fmt.Fprintf(&b, "interp %s\n", r.Interpreter.SHA256)
	}
	for _, w := range r.Wrappers {
		fmt.Fprintf(&b, "wrap %s %s\n", w.Path, w.SHA256)
	}
	if r.Package != nil {
		fmt.Fprintf(&b, "package %s %s\n", r.Package.Dir, r.Package.SHA256)
	}
	keys := make([]string, 0, len(r.ExtraDigests))
	for k := range r.ExtraDigests {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "extra %s %s\n", k, r.ExtraDigests[k])
	}
	for _, p := range r.Ignore {
		fmt.Fprintf(&b, "ignore %q\n", p)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Environment)) {
		fmt.Fprintf(&b, "env %s %q\n", k, r.Environment[k])
	}
	return identity.DigestPrefix + sha256Hex(b.String())
}

// maxNameShown bounds, in runes, the agent's name on a card's lines.
const maxNameShown = 64

// Lines renders the card as text lines, most important first, for the
// command line and the approval window. Secrets never appear on a card:
// credentials are named by scope only.
func (c Card) Lines() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	add("%s", c.Reason)
	agent := c.AgentExe
	if agent == "" {
		agent = "unknown agent"
	}
	add("Agent: %s (pid %d), run %s", agent, c.AgentPID, c.AgentRun)
	if name := strings.TrimSpace(c.AgentName); name != "" {
		// The agent's claim, quoted (Go syntax: its quotes and controls
		// escaped) and never the subject of a line.
		if r := []rune(name); len(r) > maxNameShown {
			name = string(r[:maxNameShown]) + "…"
		}
		add("Agent calls itself %q (its clientInfo, not verified)", name)
	}
	add("Server: %s", c.ServerLabel)
	cur := EpochText(c.CurrentEpoch)
	switch {
	case c.PreviousEpoch != "" && c.PreviousEpoch != c.CurrentEpoch && len(c.IdentityChanges) == 0:
		add("Epoch: %s → %s (new process)", c.PreviousEpoch, cur)
	case c.PreviousEpoch != "" && c.PreviousEpoch != c.CurrentEpoch:
		add("Epoch: %s → %s (new code)", c.PreviousEpoch, cur)
	default:
		add("Epoch: %s", cur)
	}
	if len(c.LaunchCommand) > 0 {
		add("Command: %s", CommandText(c.LaunchCommand))
	}
	if c.Executable != "" {
		add("Executable: %s (sha256 %s)", c.Executable, identity.ShortDigest(c.ExecutableDigest))
	}
	if c.Entry != "" {
		add("Entry: %s (sha256 %s)", c.Entry, identity.ShortDigest(c.EntryDigest))
	}
	for _, m := range c.Measured {
		add("Measured: %s", m)
	}
	if c.Identity != "" {
		add("Identity digest: %s", identity.ShortDigest(c.Identity))
	}
	for _, ch := range FoldSameFile(c.IdentityChanges) {
		add("  %s: %s (%s)", ChangeKind(ch.Field), ChangeSubject(ch), ChangeValues(ch.Change))
		for _, f := range ch.Files {
			add("    changed file: %s", f)
		}
	}
	if len(c.CatalogChanges) > 0 {
		add("Catalog: revision %d → %d", c.ApprovedRevision, c.CatalogRevision)
		d := catalog.Diff{From: c.ApprovedRevision, To: c.CatalogRevision, Changes: c.CatalogChanges}
		for _, l := range strings.Split(strings.TrimRight(d.Text(), "\n"), "\n") {
			if l != "" {
				add("  %s", l)
			}
		}
	}
	if c.Tool != "" {
		args := string(c.Arguments)
		if args == "" {
			args = "{}"
		}
		add("Call: %s %s", c.Tool, args)
		keys := make([]string, 0, len(c.Defaults))
		for k := range c.Defaults {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v, _ := json.Marshal(c.Defaults[k])
			add("  omitted %s will be %s (default)", k, v)
		}
	}
	if len(c.AlsoRuns) > 0 {
		add("Decides %d runs of this agent program, each on its own epoch of the same code (one grant per run; leave a run out with --skip-run):", len(c.AlsoRuns)+1)
		for _, r := range c.Runs() {
			line := fmt.Sprintf("  run %s (pid %d), epoch %s", r.AgentRun, r.AgentPID, EpochText(r.CurrentEpoch))
			if r.Tool != "" {
				args := string(r.Arguments)
				if args == "" {
					args = "{}"
				}
				line += fmt.Sprintf(", call %s %s", r.Tool, args)
			}
			add("%s", line)
		}
	}
	if r := c.ServerRequest; r != nil {
		add("Server request: %s (%s), from epoch %s", r.Method, r.Kind, cur)
		for _, l := range r.Asks {
			add("  %s", l)
		}
	}
	if c.Stale {
		add("This call was refused already (authorization_stale): approving allows the new code for this run; nothing runs now")
	}
	if len(c.ToolScope) > 0 {
		add("Tools proposed: %s", c.markedTools(c.ToolScope))
	}
	if len(c.OtherTools) > 0 {
		add("Not proposed (add with --tools or --all): %s", c.markedTools(c.OtherTools))
	}
	if len(c.CredentialScope) > 0 {
		add("Credentials: %s — %s", strings.Join(c.CredentialScope, ", "), CredentialWhere(c))
	}
	return out
}

// CredentialWhere says how the card's credentials reach the server: in the
// environment of the process a launch card approves, in params._meta of the
// call a call card approves; and whether they are asked for on every use.
func CredentialWhere(c Card) string {
	where := "in this call's params._meta"
	if c.Identity != "" {
		where = "in the environment of this launch"
	}
	if c.AskEveryUse {
		where += ", asked on every use"
	}
	return where
}

// CommandText joins a command line for display, quoting the words that hold
// spaces, quotes or other characters a shell would read differently.
func CommandText(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w == "" || strings.ContainsAny(w, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			w = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
		out[i] = w
	}
	return strings.Join(out, " ")
}

// EpochText is an epoch as a person reads it: the epoch ID, or "not started
// yet" before the process has started (a launch waiting for approval).
func EpochText(epoch ids.EpochID) string {
	if epoch == "" {
		return "not started yet"
	}
	return string(epoch)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// FileChange is one file's identity change, as a person reads it: a file
// measured under several fields (a compiled server or a shebang script is
// its own entry; a shell script is its own wrapper too) is one change, and
// Also lists the other fields it stands for, "entry" then "wrappers".
type FileChange struct {
	identity.Change
	Also []string
}

// FoldSameFile folds, into the executable's change, the entry and wrapper
// changes that repeat it: the same path with the same old and new digests.
// Anything that differs (another path, other digests) stays a change of its
// own, so that nothing measured is hidden.
func FoldSameFile(changes []identity.Change) []FileChange {
	exe := slices.IndexFunc(changes, func(c identity.Change) bool { return c.Field == "resolvedExecutable" && c.Path != "" })
	same := func(c identity.Change) bool {
		e := changes[exe]
		return (c.Field == "entry" || c.Field == "wrappers") && c.Path == e.Path && c.Old == e.Old && c.New == e.New
	}
	out := make([]FileChange, 0, len(changes))
	var also []string
	for _, c := range changes {
		if exe >= 0 && same(c) {
			if !slices.Contains(also, c.Field) {
				also = append(also, c.Field)
			}
			continue
		}
		out = append(out, FileChange{Change: c})
	}
	if len(also) > 0 {
		slices.Sort(also) // "entry" before "wrappers"
		i := slices.IndexFunc(out, func(c FileChange) bool { return c.Field == "resolvedExecutable" })
		out[i].Also = also
	}
	return out
}

// ChangeSubject names, for a person, what an identity change is about: "the
// entry /srv/notes/server.js", "the watched path dist", "the runtime",
// "the executable and entry /srv/publish" for a file folded by FoldSameFile.
func ChangeSubject(ch FileChange) string { return "the " + ch.What(FieldWord) }

// What words the change with word for each field: "executable and entry
// /srv/publish", "wrapper /p/run.sh", "runtime".
func (ch FileChange) What(word func(field string) string) string {
	words := []string{word(ch.Field)}
	for _, f := range ch.Also {
		words = append(words, word(f))
	}
	what := words[0]
	if n := len(words); n > 1 {
		what = strings.Join(words[:n-1], ", ") + " and " + words[n-1]
	}
	if ch.Path != "" {
		what += " " + ch.Path
	}
	return what
}

// ChangeKind says how an identity change was seen: "changed on disk" for a
// measured file, "changed environment" for a variable that changes what
// runs, "observed running" for code a process of the server was seen to
// run, "changed configuration" for the ignore patterns.
func ChangeKind(field string) string {
	switch field {
	case "environment":
		return "changed environment"
	case "observed":
		return "observed running"
	case "ignore":
		return "changed configuration"
	}
	return "changed on disk"
}

// ChangeValues words a change's old and new values: digests shortened
// ("ab12… → cd34…", "none" for an absent file), an environment
// variable's values ("unset → /x"), ignore patterns ("none → data/**").
func ChangeValues(ch identity.Change) string {
	switch ch.Field {
	case "environment":
		val := func(v string) string {
			if v == "" {
				return "unset"
			}
			return v
		}
		return val(ch.Old) + " → " + val(ch.New)
	case "ignore":
		val := func(v string) string {
			if v == "" {
				return "none"
			}
			return v
		}
		return val(ch.Old) + " → " + val(ch.New)
	}
	return identity.ShortDigest(ch.Old) + " → " + identity.ShortDigest(ch.New)
}

// FieldWord is a person's word for an identity.Change field:
// "resolvedExecutable" is "executable", "wrappers" "wrapper", "extra:<path>"
// "watched path" (the path is the change's Path); an unknown field is itself.
func FieldWord(field string) string {
	if w, ok := map[string]string{
		"resolvedExecutable": "executable",
		"runtime":            "runtime",
		"interpreter":        "interpreter",
		"entry":              "entry",
		"lockfile":           "lockfile",
		"wrappers":           "wrapper",
		"package":            "package",
		"environment":        "variable",
		"observed":           "file",
		"ignore":             "ignore patterns",
	}[field]; ok {
		return w
	}
	if strings.HasPrefix(field, "extra:") {
		return "watched path"
	}
	return field
}

// MeasuredParts words what a record measured beside its executable and
// entry, for Card.Measured: the watched paths, the lockfile and the entry's
// package, each with its digest.
func MeasuredParts(rec identity.Record) []string {
	var out []string
	paths := make([]string, 0, len(rec.ExtraDigests))
	for p := range rec.ExtraDigests {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		out = append(out, fmt.Sprintf("watched path %s (sha256 %s)", p, identity.ShortDigest(rec.ExtraDigests[p])))
	}
	if rec.Lockfile != "" {
		out = append(out, fmt.Sprintf("lockfile %s (sha256 %s)", rec.Lockfile, identity.ShortDigest(rec.LockfileDigest)))
	}
	if p := rec.Package; p != nil {
		n := fmt.Sprintf("%d files", p.Files)
		if p.Files == 1 {
			n = "1 file"
		}
		out = append(out, fmt.Sprintf("package %s: %s, %s (sha256 %s)", p.Dir, p.Measured, n, identity.ShortDigest(p.SHA256)))
	}
	if len(rec.Ignore) > 0 {
		out = append(out, fmt.Sprintf("ignored as data unless code: %s", strings.Join(rec.Ignore, ", ")))
	}
	for _, k := range slices.Sorted(maps.Keys(rec.Environment)) {
		out = append(out, fmt.Sprintf("environment %s=%s", k, rec.Environment[k]))
	}
	return out
}
