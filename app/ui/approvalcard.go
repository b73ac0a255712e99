package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/textsafe"
)

// cardFact is one "label: value" line of the card's Details.
type cardFact struct {
	Label, Value string
}

// cardArg is one argument of the call on the card: as the agent sent it,
// or (Default) omitted by the agent and taking the schema's default.
type cardArg struct {
	Name, Value string
	Default     bool
}

// cardChange is one catalog change on the card, with its severity for the
// colour of its badge.
type cardChange struct {
	Severity catalog.Severity
	Text     string
}

// diskChange is one identity digest that changed on disk: what and where,
// then old → new. Badge says how it was seen when not on disk: an
// environment variable, code a process was observed running, the ignore
// patterns of the configuration ("" for a file on disk).
type diskChange struct {
	What, Change string
	Badge        string
}

// changeBadge is the badge of a change's kind, padded like "ON DISK    ".
func changeBadge(field string) string {
	switch field {
	case "environment":
		return "ENVIRONMENT"
	case "observed":
		return "OBSERVED   "
	case "ignore":
		return "CONFIG     "
	}
	return "ON DISK    "
}

// legendEntry explains one severity badge of the diff.
type legendEntry struct {
	Severity catalog.Severity
	Meaning  string
}

// cardView is the approval card laid out for the window, in the order a
// person decides: one sentence (who wants to do what, where, and why now),
// the arguments, the scope, what changed, and last the Details (epochs,
// digests, pids). Every text comes from the pure function cardModel.
type cardView struct {
	Sentence string    // "Claude Code wants to run `notes_write` on notes — new code since you last approved"
	Args     []cardArg // the call's arguments, then the defaults omitted ones take; nil for a launch
	NoArgs   bool      // the call has no arguments at all
	// Request is, for a server's request to the agent (sampling,
	// elicitation), its method then what it asks, escaped.
	Request []string

	Tools       []toolTick // the tools "Approve for this run" may cover: proposed ones first
	Credentials string     // the credential scope; "" when none
	// Stale is set for the card of a call refused as authorization_stale:
	// StaleNote says so, and the window offers to allow the new code for
	// the run (no "Approve once").
	Stale     bool
	StaleNote string

	Disk           []diskChange // identity digests that changed on disk
	CatalogHeading string       // "Tools changed, catalog revision 12 → 13"; "" without changes
	Changes        []cardChange // most severe first
	Legend         []legendEntry

	Details []cardFact
}

// toolTick is one tool check box of the card: ticked as proposed (the
// called tool, or what the person chose for the previous epoch), locked
// for the called tool (a run approval approves the call that waits), and
// marked "new" or "changed" from the catalog diff.
type toolTick struct {
	Name   string
	Label  string // Name as the window shows it: escaped, flagged when it mixes scripts or looks like another (textsafe.Name)
	Ticked bool   // as proposed, before the person changes anything
	Locked bool
	Mark   string // "new", "changed" or ""
}

// cardModel lays out card for the approval window. Secrets never appear:
// credentials are named by scope only (as on authz.Card.Lines).
func cardModel(c authz.Card) cardView {
	v := cardView{Sentence: sentence(c)}
	if c.Tool != "" {
		v.Args, v.NoArgs = callArgs(c.Arguments, c.Defaults)
	}
	if r := c.ServerRequest; r != nil {
		v.Request = append(v.Request, textsafe.Line(r.Method))
		for _, l := range r.Asks {
			v.Request = append(v.Request, textsafe.Line(l))
		}
	}
	offered := c.Offered()
	for _, t := range offered {
		v.Tools = append(v.Tools, toolTick{Name: t, Label: textsafe.Name(t, offered), Ticked: slices.Contains(c.ToolScope, t) || t == c.Tool,
			Locked: t == c.Tool && c.Identity == "", Mark: c.ToolMark(t)})
	}
	if c.Stale {
		v.Stale = true
		v.StaleNote = "The agent's call was refused already: it was prepared for the old code. " +
			"Allowing the new code lets the agent's next calls of the ticked tools go; nothing runs now."
	}
	if len(c.CredentialScope) > 0 {
		v.Credentials = "Credentials: " + strings.Join(c.CredentialScope, ", ") + " — " + authz.CredentialWhere(c)
	}

	v.Disk = diskLines(c.IdentityChanges)
	if len(c.CatalogChanges) > 0 {
		v.CatalogHeading = fmt.Sprintf("Tools changed (catalog revision %d → %d)", c.ApprovedRevision, c.CatalogRevision)
		cs := slices.Clone(c.CatalogChanges)
		slices.SortStableFunc(cs, func(a, b catalog.Change) int { return severityRank(b.Severity) - severityRank(a.Severity) })
		for _, ch := range cs {
			v.Changes = append(v.Changes, cardChange{Severity: ch.Severity, Text: textsafe.Line(ch.Summary)})
			if !slices.ContainsFunc(v.Legend, func(l legendEntry) bool { return l.Severity == ch.Severity }) {
				v.Legend = append(v.Legend, legendEntry{ch.Severity, severityMeaning(ch.Severity)})
			}
		}
	}
	v.Details = details(c)
	return v
}

// sentence is the card's first line: who wants to do what, where, and why
// the person is asked now. Its subject is always "An agent", named by its
// pid; the name the agent gave itself (clientInfo) is its claim, data like
// a server's text: quoted and escaped (textsafe.Quote), never the subject,
// so that a name such as "Claude Code wants to read notes.txt on" cannot
// make the sentence read as another.
func sentence(c authz.Card) string {
	who := agentName(c, "An agent")
	server := textsafe.Line(c.ServerLabel)
	var what string
	switch {
	case c.Identity != "":
		what = fmt.Sprintf("wants to start %s with %s", server, strings.Join(c.CredentialScope, ", "))
	case c.Tool != "":
		what = fmt.Sprintf("wants to run `%s` on %s", textsafe.Line(c.Tool), server)
	case c.ServerRequest != nil:
		return fmt.Sprintf("%s asks %s: %s — %s", server, agentName(c, "the agent"), textsafe.Line(c.ServerRequest.Method), why(c))
	default:
		what = "wants to use " + server
	}
	return who + " " + what + " — " + why(c)
}

// why says in a few words why the card is shown now, from the card's own
// fields (the recorded reason is in the Details).
func why(c authz.Card) string {
	newEpoch := c.PreviousEpoch != "" && c.PreviousEpoch != c.CurrentEpoch
	switch {
	case c.Identity != "" && c.AskEveryUse:
		return "its credentials ask for approval at every use"
	case c.Identity != "" && c.PreviousEpoch != "":
		return "new code since you last approved it with them"
	case c.Identity != "":
		return "code you have not approved with them yet"
	case c.Stale && newEpoch && len(c.IdentityChanges) == 0:
		return "a new process since you last approved; its call was refused"
	case c.Stale:
		return "new code since you last approved; its call was refused"
	case c.AskEveryUse:
		return "its credentials ask for approval at every use"
	case c.Rewritten:
		return "the server rewrote the tool since you approved it"
	case c.StandingEnded != "":
		return "new code since you approved its code for every run of " + textsafe.Line(agentProgram(c))
	case newEpoch && len(c.IdentityChanges) == 0:
		return "a new process (no measured file changed) since you last approved"
	case newEpoch:
		return "new code since you last approved"
	case c.PreviousEpoch != "":
		return "not covered by what you approved for this run"
	}
	return "first use in this agent run"
}

// maxAgentName bounds, in runes, the agent's name in the card's sentence.
const maxAgentName = 40

// agentName is how the card's sentence names the agent: noun ("An
// agent"), its pid, and the name it gave itself as a quotation: "An agent
// (pid N) calling itself “name”".
func agentName(c authz.Card, noun string) string {
	who := noun
	if c.AgentPID != 0 {
		who = fmt.Sprintf("%s (pid %d)", noun, c.AgentPID)
	}
	if name := strings.TrimSpace(c.AgentName); name != "" {
		who += " calling itself " + textsafe.Quote(name, maxAgentName)
	}
	return who
}

// callArgs lists the call's arguments (top-level members, compact JSON
// values, sorted) and the defaults omitted ones take. noArgs is true when
// the call has neither. Arguments that are not a JSON object are shown
// whole, under no name.
func callArgs(raw json.RawMessage, defaults map[string]any) (out []cardArg, noArgs bool) {
	raw = bytes.TrimSpace(raw)
	var obj map[string]json.RawMessage
	switch {
	case len(raw) == 0 || string(raw) == "null":
	case json.Unmarshal(raw, &obj) != nil:
		out = append(out, cardArg{Value: textsafe.Line(string(raw))})
	default:
		for _, k := range slices.Sorted(mapKeys(obj)) {
			var b bytes.Buffer
			if json.Compact(&b, obj[k]) != nil {
				b.Write(obj[k])
			}
			out = append(out, cardArg{Name: textsafe.Line(k), Value: textsafe.Line(b.String())})
		}
	}
	for _, k := range slices.Sorted(mapKeys(defaults)) {
		b, _ := json.Marshal(defaults[k])
		out = append(out, cardArg{Name: textsafe.Line(k), Value: textsafe.Line(string(b)), Default: true})
	}
	return out, len(out) == 0
}

// details are the facts folded under "Details": the agent as the kernel
// knows it, the run, the epochs and digests (abbreviated as everywhere,
// ids' Short and identity.ShortDigest), the launch command and the reason
// as recorded.
func details(c authz.Card) []cardFact {
	var out []cardFact
	agent := "unknown executable"
	if c.AgentExe != "" {
		agent = c.AgentExe
	}
	if c.AgentPID != 0 {
		agent += fmt.Sprintf(", pid %d", c.AgentPID)
	}
	if c.AgentName != "" {
		agent = fmt.Sprintf("calls itself %s (its clientInfo, not verified)\n%s", textsafe.Quote(c.AgentName, 0), agent)
	}
	out = append(out, cardFact{"Agent", agent}, cardFact{"Agent run", c.AgentRun.Short()}, cardFact{"Server", textsafe.Line(c.ServerLabel)})
	cur := shortEpoch(c.CurrentEpoch)
	switch {
	case c.PreviousEpoch != "" && c.PreviousEpoch != c.CurrentEpoch && c.Identity == "" && len(c.IdentityChanges) == 0:
		out = append(out, cardFact{"Epoch", shortEpoch(c.PreviousEpoch) + " → " + cur + " (new process)"})
	case c.PreviousEpoch != "" && c.PreviousEpoch != c.CurrentEpoch:
		out = append(out, cardFact{"Epoch", shortEpoch(c.PreviousEpoch) + " → " + cur + " (new code)"})
	default:
		out = append(out, cardFact{"Epoch", cur})
	}
	if c.Identity != "" {
		out = append(out, cardFact{"Identity", "sha256 " + identity.ShortDigest(c.Identity) + " (execution identity to approve with credentials)"})
	}
	if len(c.LaunchCommand) > 0 {
		out = append(out, cardFact{"Command", textsafe.Line(authz.CommandText(c.LaunchCommand))})
	}
	if c.Executable != "" {
		out = append(out, cardFact{"Executable", textsafe.Line(c.Executable) + "\nsha256 " + identity.ShortDigest(c.ExecutableDigest)})
	}
	if c.Entry != "" {
		out = append(out, cardFact{"Entry", textsafe.Line(c.Entry) + "\nsha256 " + identity.ShortDigest(c.EntryDigest)})
	}
	for _, m := range c.Measured {
		out = append(out, cardFact{"Measured", textsafe.Line(m)})
	}
	switch {
	case len(c.CatalogChanges) > 0:
		out = append(out, cardFact{"Catalog", fmt.Sprintf("revision %d → %d", c.ApprovedRevision, c.CatalogRevision)})
	case c.CatalogRevision != 0:
		out = append(out, cardFact{"Catalog", fmt.Sprintf("revision %d", c.CatalogRevision)})
	}
	if c.ArgsDigest != "" {
		out = append(out, cardFact{"Arguments", "sha256 " + identity.ShortDigest(c.ArgsDigest)})
	}
	if c.Reason != "" {
		out = append(out, cardFact{"Recorded reason", textsafe.Line(c.Reason)})
	}
	return out
}

// shortEpoch abbreviates an epoch as everywhere else (ids' Short).
func shortEpoch(e ids.EpochID) string {
	if e == "" {
		return authz.EpochText(e)
	}
	return e.Short()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func severityRank(s catalog.Severity) int {
	switch s {
	case catalog.Authority:
		return 3
	case catalog.Contract:
		return 2
	case catalog.Cosmetic:
		return 1
	}
	return 0
}

// severityMeaning is the legend of a severity badge.
func severityMeaning(s catalog.Severity) string {
	switch s {
	case catalog.Authority:
		return "the tools may now do or reach more"
	case catalog.Contract:
		return "what a call must send or gets back changed"
	case catalog.Cosmetic:
		return "wording or looks only"
	}
	return "a change"
}

// diskLines words the identity changes on disk, one line each, except that
// an executable that is also the entry file (a compiled server, a shebang
// script) or a wrapper (a shell script) is one line, "executable and entry
// file PATH", when the changes are the same file with the same digests
// (authz.FoldSameFile): identical lines told the person nothing more.
func diskLines(changes []identity.Change) []diskChange {
	var out []diskChange
	for _, ch := range authz.FoldSameFile(changes) {
		out = append(out, diskLine(ch))
	}
	return out
}

// diskLine words one identity digest that changed on disk: what and where
// ("executable and entry file /srv/publish" for a compiled server), then
// old → new digest.
func diskLine(ch authz.FileChange) diskChange {
	what := ch.What(func(field string) string {
		if field == "entry" {
			return "entry file"
		}
		return authz.FieldWord(field)
	})
	return diskChange{What: textsafe.Line(what), Change: textsafe.Line(authz.ChangeValues(ch.Change)), Badge: changeBadge(ch.Field)}
}

// countdownText tells how long the person has left to decide, short
// enough to sit beside the buttons.
func countdownText(now, deadline time.Time) string {
	left := deadline.Sub(now)
	if left <= 0 {
		return "Time is up: denying"
	}
	secs := int((left + time.Second - 1) / time.Second) // round up: never show 0:00 early
	return fmt.Sprintf("Denied in %d:%02d · Esc denies", secs/60, secs%60)
}

// queueText is the position of the request shown among those waiting.
func queueText(i, n int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf("%d of %d", i+1, n)
}

// titleBarPixels is what a window manager's title bar takes of the screen's
// work area, in pixels: the window's content must fit below it.
const titleBarPixels = 40
