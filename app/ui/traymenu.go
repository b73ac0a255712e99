package ui

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/ids"
)

// TrayState is what the menu-bar icon shows.
type TrayState int

// The tray states, each with its icon from package assets. An approval
// waiting wins over a failed server: it has a deadline, and the person can
// answer it now.
const (
	TrayReady    TrayState = iota // every agent run ready, or none running
	TrayApproval                  // an approval request waits for the person
	TrayFailed                    // a server of an agent run failed or crash-loops
)

// String names the state for logs and tests.
func (s TrayState) String() string {
	switch s {
	case TrayApproval:
		return "approval"
	case TrayFailed:
		return "failed"
	}
	return "ready"
}

// trayStateOf is the icon state for a status report and the number of
// pending approval requests. An audit log that cannot be written shows as
// failed: every tool call is refused meanwhile.
func trayStateOf(rep daemon.StatusReport, pending int) TrayState {
	if pending > 0 {
		return TrayApproval
	}
	if rep.Audit.Error != "" || rep.Audit.Tampered != "" {
		return TrayFailed
	}
	for _, r := range rep.Runs {
		if r.State == gateway.StateFailed || r.State == gateway.StateCrashLooping {
			return TrayFailed
		}
	}
	return TrayReady
}

// entryKind says what a tray menu entry does when clicked.
type entryKind int

const (
	entryInfo      entryKind = iota // a line of text, disabled
	entrySeparator                  // a separator
	entryApprovals                  // opens the approval window
	entryRestart                    // restarts every agent run of Server
	entryPrefs                      // opens Preferences
	entryAudit                      // opens the audit viewer
	entryLogin                      // toggles launch at login
	entryRecent                     // a recent decision: says what became of Request
	entryQuit                       // stops every server and quits
)

// menuEntry is one entry of the tray menu as the pure menu model gives it;
// buildMenu turns entries into Fyne menu items.
type menuEntry struct {
	Kind     entryKind
	Label    string
	Server   string // entryRestart: the server label
	Request  string // entryRecent: the request
	Disabled bool
	Checked  bool
}

// loginState is what the tray knows about launch at login.
type loginState struct {
	Available bool // a login item implementation exists on this system
	Enabled   bool
}

// menuModel lays out the tray menu for a status report, the pending
// approval requests, the launch-at-login state and the requests resolved
// lately (newest first): one line per agent run (label, state, short epoch,
// catalog revision), the approvals entry, one Restart entry per server
// label with a live run, the recent decisions, Preferences, Audit log,
// Launch at login, Quit.
func menuModel(rep daemon.StatusReport, pending []authz.Request, login loginState, recent []decided) []menuEntry {
	waiting := map[string]bool{} // agent run → an approval request waits
	for _, r := range pending {
		waiting[r.Card.AgentRun] = true
	}
	var out []menuEntry
	sep := menuEntry{Kind: entrySeparator}
	if rep.ConfigError != "" {
		out = append(out, menuEntry{Kind: entryInfo, Label: "Configuration file missing or invalid: the last good one is in force", Disabled: true})
	}
	if rep.Audit.Error != "" {
		out = append(out, menuEntry{Kind: entryInfo, Label: "Audit log cannot be written: tool calls are refused", Disabled: true})
	}
	if p := rep.PendingChange; p != nil {
		out = append(out, menuEntry{Kind: entryInfo, Label: fmt.Sprintf("config.json change %s widens trust: not in force until confirmed (portcullis changes)", p.ID), Disabled: true})
	}
	if rep.Audit.Tampered != "" {
		out = append(out, menuEntry{Kind: entryInfo, Label: "Audit log tampered with: no approvals until `portcullis audit acknowledge`", Disabled: true})
	}
	if len(rep.Runs) == 0 {
		label := "No agent connected"
		if len(rep.Servers) == 0 {
			label = "No servers configured"
		}
		out = append(out, menuEntry{Kind: entryInfo, Label: label, Disabled: true})
	}
	var labels []string
	for _, r := range rep.Runs {
		out = append(out, menuEntry{Kind: entryInfo, Label: runLine(r, waiting[r.Run], countLabel(rep.Runs, r.Label) > 1), Disabled: true})
		if !slices.Contains(labels, r.Label) {
			labels = append(labels, r.Label)
		}
	}
	out = append(out, sep, menuEntry{Kind: entryApprovals, Label: approvalsLine(len(pending)), Disabled: len(pending) == 0})
	slices.Sort(labels)
	for _, l := range labels {
		out = append(out, menuEntry{Kind: entryRestart, Label: "Restart " + l, Server: l})
	}
	if len(recent) > 0 {
		out = append(out, sep, menuEntry{Kind: entryInfo, Label: "Recent decisions", Disabled: true})
		for _, d := range recent {
			out = append(out, menuEntry{Kind: entryRecent, Label: d.menuLine(), Request: d.ID})
		}
	}
	out = append(out, sep,
		menuEntry{Kind: entryPrefs, Label: "Preferences…"},
		menuEntry{Kind: entryAudit, Label: "Audit log…"},
		menuEntry{Kind: entryLogin, Label: loginLabel(login), Checked: login.Enabled, Disabled: !login.Available},
		sep,
		menuEntry{Kind: entryQuit, Label: "Quit Portcullis"},
	)
	return out
}

func countLabel(runs []gateway.Status, label string) int {
	n := 0
	for _, r := range runs {
		if r.Label == label {
			n++
		}
	}
	return n
}

// runLine is the menu line of one agent run:
//
//	inventory-local — ready · epoch 7GZP1S2X · catalog r13
//
// withAgent adds the agent's executable name and pid, to tell apart several
// runs of one server.
func runLine(r gateway.Status, waiting, withAgent bool) string {
	line := r.Label
	if withAgent {
		agent := filepath.Base(r.Agent.Exe)
		if r.Agent.Exe == "" {
			agent = "agent"
		}
		line += fmt.Sprintf(" (%s %d)", agent, r.Agent.PID)
	}
	line += " — " + stateText(r.State, waiting)
	if r.Epoch != "" {
		line += " · epoch " + ids.EpochID(r.Epoch).Short()
	}
	if r.CatalogRevision != 0 {
		line += fmt.Sprintf(" · catalog r%d", r.CatalogRevision)
	}
	return line
}

// stateText words a run's state for the menu. A run that waits for a
// person's decision says so whatever its state.
func stateText(s gateway.State, waiting bool) string {
	if waiting {
		return "waiting for approval"
	}
	switch s {
	case gateway.StateStarting:
		return "starting"
	case gateway.StateIdentityPending:
		return "identity pending"
	case gateway.StateCatalogPending:
		return "fetching tools"
	case gateway.StateReady:
		return "ready"
	case gateway.StateRestarting:
		return "restarting"
	case gateway.StateCrashLooping:
		return "crash-looping"
	case gateway.StateFailed:
		return "failed"
	case gateway.StateEnded:
		return "ended"
	}
	return string(s)
}

// approvalsLine is the label of the approvals entry.
func approvalsLine(n int) string {
	if n == 0 {
		return "No approvals waiting"
	}
	return fmt.Sprintf("Approvals (%d)…", n)
}

// loginLabel is the launch-at-login entry: a check mark shows it on, and the
// label says off, since system trays draw no box for an unchecked item.
func loginLabel(l loginState) string {
	if l.Available && !l.Enabled {
		return "Launch at login (off)"
	}
	return "Launch at login"
}
