package ui

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/textsafe"
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
// failed: every tool call is refused meanwhile; so does a daemon service
// that stopped (degraded: a stopped build watcher misses rebuilds).
func trayStateOf(rep daemon.StatusReport, pending int) TrayState {
	if pending > 0 {
		return TrayApproval
	}
	if rep.Audit.Error != "" || rep.Audit.Tampered != "" || len(rep.Degraded) > 0 {
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
	entryServer                     // a configured server: opens its page in Preferences
	entryQuit                       // stops every server and quits
)

// menuEntry is one entry of the tray menu as the pure menu model gives it;
// buildMenu turns entries into Fyne menu items.
type menuEntry struct {
	Kind     entryKind
	Label    string
	Server   string // entryRestart, entryServer: the server label
	Icon     bool   // entryLogin: draw an empty check box (the entry is off)
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
		waiting[string(r.Card.AgentRun)] = true
	}
	var out []menuEntry
	sep := menuEntry{Kind: entrySeparator}
	if rep.ConfigError != "" {
		out = append(out, menuEntry{Kind: entryInfo, Label: "Configuration file missing or invalid: the last good one is in force", Disabled: true})
	}
	if rep.Audit.Error != "" {
		out = append(out, menuEntry{Kind: entryInfo, Label: "Audit log cannot be written: tool calls are refused", Disabled: true})
	}
	for _, f := range rep.Degraded {
		out = append(out, menuEntry{Kind: entryInfo, Label: "Degraded: the " + f.Service + " stopped and is being restarted (portcullis status)", Disabled: true})
	}
	if p := rep.PendingChange; p != nil {
		out = append(out, menuEntry{Kind: entryInfo, Label: fmt.Sprintf("config.json change %s widens trust: not in force until confirmed (portcullis changes)", p.ID), Disabled: true})
	}
	if rep.Audit.Tampered != "" {
		out = append(out, menuEntry{Kind: entryInfo, Label: "Audit log tampered with: no approvals until `portcullis audit acknowledge`", Disabled: true})
	}
	var labels []string // configured servers, then labels only runs know (the configuration is invalid)
	for _, sv := range rep.Servers {
		labels = append(labels, sv.Label)
	}
	for _, r := range rep.Runs {
		if !slices.Contains(labels, r.Label) {
			labels = append(labels, r.Label)
		}
	}
	slices.Sort(labels)
	if len(labels) == 0 {
		out = append(out, menuEntry{Kind: entryInfo, Label: "No servers configured", Disabled: true})
	}
	var live []string
	for _, l := range labels {
		out = append(out, menuEntry{Kind: entryServer, Label: serverLine(l, rep, waiting), Server: l})
		if slices.ContainsFunc(rep.Runs, func(r gateway.Status) bool { return r.Label == l }) {
			live = append(live, l)
		}
	}
	labels = live
	out = append(out, sep, menuEntry{Kind: entryApprovals, Label: approvalsLine(len(pending)), Disabled: len(pending) == 0})
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
		menuEntry{Kind: entryLogin, Label: "Launch at login", Checked: login.Enabled, Icon: login.Available && !login.Enabled, Disabled: !login.Available},
		sep,
		menuEntry{Kind: entryQuit, Label: "Quit Portcullis"},
	)
	// Labels hold what servers wrote (a failure's reason, a tool's name),
	// escaped where each label is composed: data, never terminal or layout
	// control. Controls, which leaves escaped text as it is, is the net.
	for i := range out {
		out[i].Label = strings.ReplaceAll(textsafe.Controls(out[i].Label), "\n", " ")
	}
	return out
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
		line += " · epoch " + r.Epoch.Short()
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

// serverLine is the menu line of a configured server: idle (no agent run),
// running with its runs (one run: its state, short epoch and catalog
// revision), waiting for approval, or failed with the reason (a live run's,
// or that of the last run that ended):
//
//	notes — idle
//	notes — ready · epoch 7GZP1S2X · catalog r13
//	notes — running, 3 runs
//	notes — failed: exited with status 1
func serverLine(label string, rep daemon.StatusReport, waiting map[string]bool) string {
	var runs []gateway.Status
	for _, r := range rep.Runs {
		if r.Label == label {
			runs = append(runs, r)
		}
	}
	for _, r := range runs {
		if r.State == gateway.StateFailed || r.State == gateway.StateCrashLooping {
			return label + " — " + failedText(r)
		}
	}
	for _, r := range runs {
		if waiting[string(r.Run)] && len(runs) == 1 {
			return runLine(r, true, false)
		}
		if waiting[string(r.Run)] {
			return label + " — waiting for approval" + runsText(len(runs))
		}
	}
	switch len(runs) {
	case 0:
		for _, r := range slices.Backward(rep.Ended) {
			if r.Label == label {
				if r.State == gateway.StateFailed || r.State == gateway.StateCrashLooping {
					return label + " — " + failedText(r)
				}
				break
			}
		}
		return label + " — idle"
	case 1:
		return runLine(runs[0], false, false)
	}
	return fmt.Sprintf("%s — running, %d runs", label, len(runs))
}

// runsText is ", N runs" for more than one run.
func runsText(n int) string {
	if n > 1 {
		return fmt.Sprintf(", %d runs", n)
	}
	return ""
}

// failedText is "failed: reason" (crash-looping likewise), the reason cut
// to fit a menu line.
func failedText(r gateway.Status) string {
	t := stateText(r.State, false)
	why := r.Reason
	if why == "" && r.Exit != nil {
		why = r.Exit.String()
	}
	if why == "" {
		return t
	}
	if rs := []rune(why); len(rs) > 70 {
		why = string(rs[:69]) + "…"
	}
	return t + ": " + textsafe.Line(why)
}
