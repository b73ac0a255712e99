package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/internal/atomicfile"
)

// auditedConfigFile is the copy, in the state directory, of the last
// configuration file the audit log has a record of: at start the daemon
// records what changed since (edits made while no daemon ran).
const auditedConfigFile = "config.audited.json"

// recordConfig appends a config_changed event for the configuration data
// (parsed as cur) against the last one recorded, when they differ, and
// keeps data as the last recorded. atStart marks the check at daemon start.
// A configuration the log has no record of yet is recorded whole.
//
// The copy kept is also what the daemon splits config.json against at its
// next start (trustAtStart): the last configuration in force on the record.
func (d *Daemon) recordConfig(data []byte, cur *config.Config, atStart bool) {
	_ = d.recordConfigBy(data, cur, atStart, "")
}

// recordConfigBy is recordConfig for a change made by the person's tools:
// by names who ("app", "cli (pid N)"; "" for an edit of the file). Its
// error says the event could not be written.
func (d *Daemon) recordConfigBy(data []byte, cur *config.Config, atStart bool, by string) error {
	d.mu.Lock()
	open := d.auditW != nil
	d.mu.Unlock()
	if !open {
		return nil // the start, once the log is open, records it
	}
	kept := filepath.Join(d.opts.Dirs.State, auditedConfigFile)
	prevData, err := os.ReadFile(kept)
	if err == nil && string(prevData) == string(data) {
		return nil
	}
	var prev *config.Config
	if err == nil {
		prev, _ = config.Parse(prevData, kept) // unreadable: recorded whole
	}
	sum := sha256.Sum256(data)
	d.mu.Lock()
	w, al := d.auditW, d.audit
	d.mu.Unlock()
	ev, err := w.Append(context.Background(), audit.TypeConfigChanged, audit.ConfigChanged{
		File: d.opts.Dirs.ConfigFile(), Digest: "sha256:" + hex.EncodeToString(sum[:]),
		Changes: configChanges(prev, cur), AtStart: atStart, By: by})
	if err != nil {
		d.log.Error("audit log write failed", "type", audit.TypeConfigChanged, "err", err)
		return err // not recorded: tried again at the next change or start
	}
	if err := atomicfile.Write(kept, data, 0o600); err != nil {
		d.log.Warn("keeping the audited configuration", "file", kept, "err", err)
	}
	d.keepRecord(ev, al.Segment(), data)
	return nil
}

// configChanges says in words what changed between two configurations that
// bears on what agents may do: servers added or removed, a server's command
// (the program; arguments and environment are named, never quoted: they may
// hold secrets), working directory, watched paths and restart mode, tool
// policies (old → new, "approve" when unset), credential scopes a server
// receives, credential scopes and how they are injected, settings (audit
// signing on its own line, "settings: auditSigning true → false"). Empty
// when nothing such changed.
func configChanges(old, cur *config.Config) []string {
	if old == nil {
		old = &config.Config{}
	}
	out := []string{}
	eachKey(old.Servers, cur.Servers, func(label string, o config.Server, had bool, n config.Server, has bool) {
		switch {
		case !had:
			out = append(out, fmt.Sprintf("%s: server added (%s)", label, n.Command))
			for _, tool := range slices.Sorted(maps.Keys(n.Tools)) {
				if p := n.Policy(tool); p != config.PolicyApprove {
					out = append(out, fmt.Sprintf("%s: tool %s %s", label, tool, p))
				}
			}
			return
		case !has:
			out = append(out, label+": server removed")
			return
		}
		if o.Command != n.Command {
			out = append(out, fmt.Sprintf("%s: command %s → %s", label, o.Command, n.Command))
		}
		if !slices.Equal(o.Args, n.Args) {
			out = append(out, label+": arguments changed")
		}
		if !maps.Equal(o.Env, n.Env) {
			var names []string
			eachKey(o.Env, n.Env, func(k, a string, had bool, b string, has bool) {
				if a != b || had != has {
					names = append(names, k)
				}
			})
			out = append(out, fmt.Sprintf("%s: environment changed (%s)", label, strings.Join(names, ", ")))
		}
		if o.Cwd != n.Cwd {
			out = append(out, fmt.Sprintf("%s: working directory %s → %s", label, orNone(o.Cwd), orNone(n.Cwd)))
		}
		if o.RestartMode() != n.RestartMode() {
			out = append(out, fmt.Sprintf("%s: restart %s → %s", label, o.RestartMode(), n.RestartMode()))
		}
		for _, tool := range union(slices.Collect(maps.Keys(o.Tools)), slices.Collect(maps.Keys(n.Tools))) {
			if a, b := o.Policy(tool), n.Policy(tool); a != b {
				out = append(out, fmt.Sprintf("%s: tool %s %s → %s", label, tool, a, b))
			}
		}
		if a, b := strings.Join(o.Credentials, ","), strings.Join(n.Credentials, ","); a != b {
			out = append(out, fmt.Sprintf("%s: credentials [%s] → [%s]", label, a, b))
		}
		if a, b := strings.Join(o.Watch, ","), strings.Join(n.Watch, ","); a != b {
			out = append(out, fmt.Sprintf("%s: watch [%s] → [%s]", label, a, b))
		}
		if a, b := strings.Join(o.Ignore, ","), strings.Join(n.Ignore, ","); a != b {
			out = append(out, fmt.Sprintf("%s: ignore [%s] → [%s]", label, a, b))
		}
	})
	eachKey(old.Credentials, cur.Credentials, func(scope string, o config.Credential, had bool, n config.Credential, has bool) {
		switch {
		case !had:
			out = append(out, fmt.Sprintf("credential %s added (%s)", scope, credentialText(n)))
		case !has:
			out = append(out, fmt.Sprintf("credential %s removed", scope))
		case o != n:
			out = append(out, fmt.Sprintf("credential %s: %s → %s", scope, credentialText(o), credentialText(n)))
		}
	})
	if a, b := settingsText(old.Settings), settingsText(cur.Settings); a != b {
		out = append(out, fmt.Sprintf("settings: %s → %s", a, b))
	}
	if a, b := old.Settings.AuditSigningOn(), cur.Settings.AuditSigningOn(); a != b {
		out = append(out, fmt.Sprintf("settings: auditSigning %t → %t", a, b))
	}
	return out
}

// eachKey calls fn for every key of old or cur, sorted, with its values in
// both and whether each map has it.
func eachKey[V any](old, cur map[string]V, fn func(k string, o V, had bool, n V, has bool)) {
	for _, k := range union(slices.Collect(maps.Keys(old)), slices.Collect(maps.Keys(cur))) {
		o, had := old[k]
		n, has := cur[k]
		fn(k, o, had, n, has)
	}
}

func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func credentialText(c config.Credential) string {
	s := c.Inject
	if c.EnvVar != "" {
		s += " $" + c.EnvVar
	}
	if c.AskEveryUse {
		s += ", asked on every use"
	}
	return s
}

func settingsText(s config.Settings) string {
	return fmt.Sprintf("approval timeout %s, hold timeout %s, max message %d bytes",
		s.ApprovalTimeoutOrDefault(), s.HoldTimeoutOrDefault(), s.MaxMessageOrDefault())
}

// configData returns the configuration in force and the bytes it was parsed
// from (nil, nil before any file loaded).
func (d *Daemon) configData() (*config.Config, []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cfgData == nil {
		return nil, nil
	}
	return d.cfg, d.cfgData
}
