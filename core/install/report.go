package install

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Write prints the report for a person: the file, one paragraph per entry, then
// the backup, the configuration, warnings, the diffs of a dry run, and what to do
// next.
func (r *Report) Write(w io.Writer) error {
	var b strings.Builder
	scope := ""
	if r.Target.Scope != "" {
		scope = " (" + string(r.Target.Scope) + ")"
	}
	fmt.Fprintf(&b, "%s%s: %s\n", r.Target.Agent.Name(), scope, r.Target.Path)
	if len(r.Entries) == 0 {
		fmt.Fprintf(&b, "  no MCP servers in it; nothing to %s\n", r.Op)
	}
	for _, e := range r.Entries {
		fmt.Fprintf(&b, "  %s: %s\n", e.Where, entrySummary(r, e))
		for _, s := range e.Secrets {
			switch {
			case r.Op == "uninstall":
				fmt.Fprintf(&b, "    secret %s: %s\n", s.EnvVar, s.Why)
			case e.Action == ActionSkipped:
				fmt.Fprintf(&b, "    looks like a secret: %s=%s (%s)\n", s.EnvVar, s.Masked, s.Why)
			default:
				fmt.Fprintf(&b, "    secret %s=%s (%s) → credential scope %s in the keychain\n", s.EnvVar, s.Masked, s.Why, s.Scope)
			}
		}
		if len(e.Kept) > 0 && e.Action == ActionInstalled {
			fmt.Fprintf(&b, "    kept in the agent's entry: %s\n", strings.Join(e.Kept, ", "))
		}
		for _, n := range e.Notes {
			fmt.Fprintf(&b, "    note: %s\n", n)
		}
		for _, w := range e.Warnings {
			fmt.Fprintf(&b, "    warning: %s\n", w)
		}
	}
	if r.Home != "" && r.Op == "install" && slices.ContainsFunc(r.Entries, func(e EntryReport) bool { return e.Action == ActionInstalled }) {
		fmt.Fprintf(&b, "PORTCULLIS_HOME is set: the rewritten entries set PORTCULLIS_HOME=%s in their \"env\", so that portcullis connect uses this data directory.\n", r.Home)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	if r.DryRun {
		b.WriteString("Dry run: nothing was written and no secret was stored.\n")
		if r.AgentDiff != "" {
			fmt.Fprintf(&b, "\nChanges to %s:\n%s", r.Target.Path, r.AgentDiff)
		}
		if r.ConfigDiff != "" {
			fmt.Fprintf(&b, "\nChanges to %s:\n%s", r.ConfigFile, r.ConfigDiff)
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	if r.Backup != "" {
		fmt.Fprintf(&b, "Backup of the previous file: %s\n", r.Backup)
	}
	if r.ConfigChanged {
		fmt.Fprintf(&b, "Portcullis configuration updated: %s\n", r.ConfigFile)
	}
	switch {
	case r.AgentChanged:
		fmt.Fprintf(&b, "Restart %s (or reload its MCP servers) to use the new commands.\n", r.Target.Agent.Name())
	case r.Op != "import" && !r.ConfigChanged:
		fmt.Fprintf(&b, "Nothing to change.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func entrySummary(r *Report, e EntryReport) string {
	verb := string(e.Action)
	if r.DryRun {
		switch e.Action {
		case ActionInstalled:
			verb = "would be installed"
		case ActionImported:
			verb = "would be imported"
		case ActionRestored:
			verb = "would be restored"
		}
	}
	switch e.Action {
	case ActionInstalled, ActionImported:
		s := fmt.Sprintf("%s as %q", verb, e.Label)
		if e.Action == ActionInstalled {
			s = fmt.Sprintf("%s: runs portcullis connect %s", verb, e.Label)
		}
		if e.NewServer {
			s += fmt.Sprintf(" (new server %q in Portcullis's configuration)", e.Label)
		} else if e.Reason != "" {
			s += " (" + e.Reason + ")"
		}
		return s
	case ActionAlready:
		return "already routed through Portcullis (" + e.Reason + ")"
	case ActionRemote:
		return "left alone: " + e.Reason
	case ActionSkipped:
		return "left alone: " + e.Reason
	case ActionRestored:
		if e.Reason != "" {
			return fmt.Sprintf("%s (%s)", verb, e.Reason)
		}
		return fmt.Sprintf("%s (was portcullis connect %s)", verb, e.Label)
	}
	return verb
}
