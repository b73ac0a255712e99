package ui

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/textsafe"
)

// cardFact is one "label: value" line of the approval card.
type cardFact struct {
	Label, Value string
}

// cardChange is one catalog change on the card, with its severity for the
// colour of its badge.
type cardChange struct {
	Severity catalog.Severity
	Text     string
}

// cardView is the approval card laid out for the window: every text the
// window shows for an authz.Card, from the pure function cardModel.
type cardView struct {
	Title          string     // the server label, as the heading
	Reason         string     // why the person is asked
	Facts          []cardFact // agent, server, epoch, identity (command, executable, entry), catalog revision
	Disk           []string   // identity digests that changed on disk
	CatalogHeading string     // "Catalog changes, revision 12 → 13"; "" without changes
	Changes        []cardChange
	Call           string     // the call that raised the request; "" for a launch
	Defaults       []string   // what omitted arguments will be
	Tools          []toolTick // the tools "Approve for this run" may cover: proposed ones first
	Credentials    string     // the credential scope; "" when none
	// Stale is set for the card of a call refused as authorization_stale:
	// StaleNote says so, and the window offers to allow the new code for
	// the run (no "Approve once").
	Stale     bool
	StaleNote string
}

// toolTick is one tool check box of the card: ticked as proposed (the
// called tool, or what the person chose for the previous epoch), locked
// for the called tool (a run approval approves the call that waits), and
// marked "new" or "changed" from the catalog diff.
type toolTick struct {
	Name   string
	Label  string // Name as the window shows it: escaped, flagged (textsafe.Name)
	Ticked bool   // as proposed, before the person changes anything
	Locked bool
	Mark   string // "new", "changed" or ""
}

// cardModel lays out card for the approval window. Secrets never appear:
// credentials are named by scope only (as on authz.Card.Lines).
func cardModel(c authz.Card) cardView {
	v := cardView{Title: c.ServerLabel, Reason: c.Reason}
	agent := c.AgentExe
	if agent == "" {
		agent = "unknown agent"
	}
	if c.AgentPID != 0 {
		agent += fmt.Sprintf(" (pid %d)", c.AgentPID)
	}
	v.Facts = append(v.Facts, cardFact{"Agent", agent}, cardFact{"Agent run", c.AgentRun}, cardFact{"Server", c.ServerLabel})
	cur := authz.EpochText(c.CurrentEpoch)
	if c.PreviousEpoch != "" && c.PreviousEpoch != c.CurrentEpoch {
		v.Facts = append(v.Facts, cardFact{"Epoch", c.PreviousEpoch + " →\n" + cur + " (new code)"})
	} else {
		v.Facts = append(v.Facts, cardFact{"Epoch", cur})
	}
	if c.Identity != "" {
		v.Facts = append(v.Facts, cardFact{"Launch", "new execution identity " + identity.ShortDigest(c.Identity) + ", with credentials"})
	}
	if len(c.LaunchCommand) > 0 {
		v.Facts = append(v.Facts, cardFact{"Command", authz.CommandText(c.LaunchCommand)})
	}
	if c.Executable != "" {
		v.Facts = append(v.Facts, cardFact{"Executable", c.Executable + "\nsha256 " + identity.ShortDigest(c.ExecutableDigest)})
	}
	if c.Entry != "" {
		v.Facts = append(v.Facts, cardFact{"Entry", c.Entry + "\nsha256 " + identity.ShortDigest(c.EntryDigest)})
	}
	if c.CatalogRevision != 0 && len(c.CatalogChanges) == 0 {
		v.Facts = append(v.Facts, cardFact{"Catalog", fmt.Sprintf("revision %d", c.CatalogRevision)})
	}
	for _, ch := range c.IdentityChanges {
		v.Disk = append(v.Disk, diskLine(ch))
	}
	if len(c.CatalogChanges) > 0 {
		v.CatalogHeading = fmt.Sprintf("Catalog changes, revision %d → %d", c.ApprovedRevision, c.CatalogRevision)
		cs := slices.Clone(c.CatalogChanges)
		slices.SortStableFunc(cs, func(a, b catalog.Change) int { return severityRank(b.Severity) - severityRank(a.Severity) })
		for _, ch := range cs {
			v.Changes = append(v.Changes, cardChange{Severity: ch.Severity, Text: ch.Summary})
		}
	}
	if c.Tool != "" {
		args := strings.TrimSpace(string(c.Arguments))
		if args == "" || args == "null" {
			args = "{}"
		}
		v.Call = c.Tool + " " + args
		for _, k := range slices.Sorted(mapKeys(c.Defaults)) {
			b, _ := json.Marshal(c.Defaults[k])
			v.Defaults = append(v.Defaults, fmt.Sprintf("%s omitted: will be %s (default)", k, b))
		}
	}
	if r := c.ServerRequest; r != nil {
		v.Call = r.Method + "\n" + strings.Join(r.Asks, "\n") // what the server asks, as it wrote it
	}
	for _, t := range c.Offered() {
		v.Tools = append(v.Tools, toolTick{Name: t, Ticked: slices.Contains(c.ToolScope, t) || t == c.Tool,
			Locked: t == c.Tool && c.Identity == "", Mark: c.ToolMark(t)})
	}
	if c.Stale {
		v.Stale = true
		v.StaleNote = "This call was refused already (authorization_stale): the agent prepared it for the old code. " +
			"Allowing the new code for this run lets the agent's next calls of the ticked tools go; nothing runs now."
	}
	if len(c.CredentialScope) > 0 {
		v.Credentials = strings.Join(c.CredentialScope, ", ") + " — " + authz.CredentialWhere(c)
	}
	return safeView(v, c.Offered())
}

// safeView escapes what a server may have written into the texts of v
// (tool names, catalog changes, diagnostics; textsafe.Block keeps the
// lines the card breaks itself) and labels each tool among offered.
func safeView(v cardView, offered []string) cardView {
	v.Title, v.Reason, v.Call, v.Credentials = textsafe.Line(v.Title), textsafe.Block(v.Reason), textsafe.Block(v.Call), textsafe.Line(v.Credentials)
	for i := range v.Facts {
		v.Facts[i].Value = textsafe.Block(v.Facts[i].Value)
	}
	for i := range v.Disk {
		v.Disk[i] = textsafe.Block(v.Disk[i])
	}
	for i := range v.Changes {
		v.Changes[i].Text = textsafe.Line(v.Changes[i].Text)
	}
	for i := range v.Defaults {
		v.Defaults[i] = textsafe.Line(v.Defaults[i])
	}
	for i := range v.Tools {
		v.Tools[i].Label = textsafe.Name(v.Tools[i].Name, offered)
	}
	return v
}

func mapKeys(m map[string]any) func(func(string) bool) {
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

// diskLine words one identity digest that changed on disk: what and where
// on the first line, old → new digest on the second.
func diskLine(ch identity.Change) string {
	what := ch.Field
	switch {
	case ch.Field == "resolvedExecutable":
		what = "executable"
	case ch.Field == "entry":
		what = "entry file"
	case ch.Field == "wrappers":
		what = "wrapper"
	case strings.HasPrefix(ch.Field, "extra:"):
		what = "watched path"
	}
	line := what
	if ch.Path != "" {
		line += " " + ch.Path
	}
	return fmt.Sprintf("%s\n  %s → %s", line, identity.ShortDigest(ch.Old), identity.ShortDigest(ch.New))
}

// countdownText tells how long the person has left to decide.
func countdownText(now, deadline time.Time) string {
	left := deadline.Sub(now)
	if left <= 0 {
		return "Time is up: the request is being denied (approval_timeout)."
	}
	secs := int((left + time.Second - 1) / time.Second) // round up: never show 0:00 early
	return fmt.Sprintf("Answer within %d:%02d, or it is denied. Escape or closing the window denies it too.", secs/60, secs%60)
}

// queueText is the position of the request shown among those waiting.
func queueText(i, n int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf("%d of %d", i+1, n)
}
