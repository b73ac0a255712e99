package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
)

// Uninstall puts back the entries that [Install] rewrote in the target file, from
// the install record (see [RecordDir]). An entry is restored only if it still runs
// `portcullis connect LABEL` for its recorded label; one the person changed or
// removed since is left alone and reported. Secrets that install moved to the
// store are put back only with Options.RestoreSecrets (read from Options.Store);
// otherwise their env members are left out (and an "env" left empty by that
// too), the report says so, and the record keeps the entry so that a later
// Uninstall with RestoreSecrets puts them in — provided the entry is still what
// the first Uninstall wrote; if it is not, the report says which secrets are
// missing, which credential scopes hold them and which backup holds them in
// plain text. When nothing else in the file changed, the restored file equals the
// original byte for byte. Servers and credential scopes stay in Portcullis's
// configuration.
//
// Errors: a *MissingFileError, a *SyntaxError, an error wrapping
// [ErrNotInstalled] when there is no record for the file, [ErrNoStore] for
// RestoreSecrets without a store, [ErrChanged].
func Uninstall(opts Options) (*Report, error) {
	t := opts.Target
	rep := &Report{Op: "uninstall", Target: t, DryRun: opts.DryRun, ConfigFile: opts.ConfigFile}
	path, data, mode, err := readFile(t.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &MissingFileError{Agent: t.Agent, Path: t.Path, Op: "uninstall"}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the %s config: %w", t.Agent.Name(), err)
	}
	t.Path = path
	doc, err := parseDocument(t, data)
	if err != nil {
		return nil, err
	}
	recPath := recordPath(opts.StateDir, t.Agent, t.Path)
	rec, err := loadRecord(recPath, t.Agent, t.Path)
	if err != nil {
		return nil, err
	}
	if len(rec.Entries) == 0 {
		//lint:ignore ST1005 the sentence starts with the product's name
		return nil, fmt.Errorf("Portcullis has no record of installing into %s (looked for %s): %w", t.Path, recPath, ErrNotInstalled)
	}
	// The keychain is needed only when there is a secret to put back.
	if opts.RestoreSecrets && opts.Store == nil && slices.ContainsFunc(rec.Entries, func(e recordEntry) bool { return len(e.Secrets) > 0 }) {
		return nil, fmt.Errorf("--restore-secrets needs the system keychain: %w", ErrNoStore)
	}
	var edits []edit
	var masks []string
	var restored [][]string       // entries put back whole: out of the record
	leftOut := map[int][]string{} // record index → secrets left out of the restored entry
	for i, re := range rec.Entries {
		er := EntryReport{Where: entry{path: re.Path}.where(), Name: re.Path[len(re.Path)-1], Label: re.Label}
		if len(opts.Servers) > 0 && !slices.Contains(opts.Servers, er.Name) {
			continue
		}
		e, ok := doc.find(re.Path)
		if len(re.LeftOut) > 0 && !(ok && doc.runsLabel(e, re.Label, re.Command, opts.Exe)) {
			// An earlier uninstall put this entry back without some secrets.
			text, values := restoreLeftOut(&opts, doc, re, e, ok, &er, rep)
			if text != nil {
				for _, v := range values {
					masks = append(masks, string(v))
				}
				edits = append(edits, edit{e.start, e.end, text})
				restored = append(restored, re.Path)
			}
			rep.Entries = append(rep.Entries, er)
			continue
		}
		if !ok {
			er.Action, er.Reason = ActionSkipped, "the entry is no longer in the file; nothing to restore"
			rep.Entries = append(rep.Entries, er)
			continue
		}
		if !doc.runsLabel(e, re.Label, re.Command, opts.Exe) {
			er.Action, er.Reason = ActionSkipped, fmt.Sprintf("the entry changed since install (it no longer runs portcullis connect %s)", re.Label)
			rep.Entries = append(rep.Entries, er)
			continue
		}
		offsets := map[string]int{}
		values := map[string][]byte{}
		var missing []string
		for _, s := range re.Secrets {
			offsets[s.EnvVar] = s.Offset
			ms := MovedSecret{EnvVar: s.EnvVar, Scope: s.Scope}
			switch {
			case !opts.RestoreSecrets:
				ms.Why = fmt.Sprintf("left out: the secret stays in credential scope %s; run %s to put it back", s.Scope, restoreCommand(opts, er.Name))
				missing = append(missing, s.EnvVar)
			default:
				v, err := opts.Store.Get(s.Scope)
				if err != nil {
					ms.Why = fmt.Sprintf("left out: reading credential scope %s failed: %v; run %s again once the keychain can be read", s.Scope, err, restoreCommand(opts, er.Name))
					rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: %s was not restored", er.Where, s.EnvVar))
					missing = append(missing, s.EnvVar)
					break
				}
				values[s.EnvVar] = v
				masks = append(masks, string(v))
				ms.Masked = Mask(string(v))
				ms.Why = "restored from credential scope " + s.Scope
				if s.Reencoded {
					ms.Why += " (its escaping in the file differs from the original)"
				}
			}
			er.Secrets = append(er.Secrets, ms)
		}
		text, err := doc.restore(re.Original, offsets, values)
		if err != nil {
			er.Action, er.Reason = ActionSkipped, err.Error()
			rep.Entries = append(rep.Entries, er)
			continue
		}
		edits = append(edits, edit{e.start, e.end, text})
		if len(missing) > 0 {
			leftOut[i] = missing
		} else {
			restored = append(restored, re.Path)
		}
		er.Action = ActionRestored
		er.Notes = append(er.Notes, fmt.Sprintf("server %q stays in Portcullis's configuration", re.Label))
		rep.Entries = append(rep.Entries, er)
	}
	newData := apply(data, edits)
	if err := doc.check(newData, edits); err != nil {
		return nil, fmt.Errorf("the restored file would not parse (%v); nothing was written", err)
	}
	rep.AgentChanged = !bytes.Equal(newData, data)
	if opts.DryRun {
		rep.AgentDiff = maskText(editDiff(t.Path, t.Path+" (after uninstall)", data, edits), masks)
		return rep, nil
	}
	if len(leftOut) > 0 {
		// The record first, as install does: once the file is written, a later
		// uninstall --restore-secrets must find what it needs.
		now := opts.now().UTC()
		for i, names := range leftOut {
			rec.Entries[i].LeftOut = names
			rec.Entries[i].UninstalledAt = now
		}
		if err := rec.save(recPath); err != nil {
			return nil, fmt.Errorf("%w; nothing was written", err)
		}
	}
	if rep.AgentChanged {
		backup, err := replaceFile(t.Path, data, newData, mode, opts.now())
		rep.Backup = backup
		if err != nil {
			return rep, err
		}
	}
	for _, p := range restored {
		rec.remove(p)
	}
	if err := rec.save(recPath); err != nil {
		rep.Warnings = append(rep.Warnings, err.Error())
	}
	return rep, nil
}

// restoreLeftOut handles an entry that an earlier uninstall put back without
// the secrets in re.LeftOut (e is the entry now in the file, when found). With
// Options.RestoreSecrets, and when the entry is still exactly what that
// uninstall wrote, it returns the original entry with every secret put back
// (read from the store) and the values read; otherwise nil, with er saying why
// and where the secrets are.
func restoreLeftOut(opts *Options, doc *document, re recordEntry, e entry, found bool, er *EntryReport, rep *Report) ([]byte, map[string][]byte) {
	when := re.UninstalledAt.Format("2006-01-02 15:04 MST")
	var missing []recordSecret
	for _, s := range re.Secrets {
		if slices.Contains(re.LeftOut, s.EnvVar) {
			missing = append(missing, s)
		}
	}
	er.Action = ActionSkipped
	if !opts.RestoreSecrets {
		er.Reason = fmt.Sprintf("already restored by portcullis uninstall on %s, without its secrets", when)
		for _, s := range missing {
			er.Secrets = append(er.Secrets, MovedSecret{EnvVar: s.EnvVar, Scope: s.Scope,
				Why: fmt.Sprintf("left out: the secret stays in credential scope %s; run %s to put it back", s.Scope, restoreCommand(*opts, er.Name))})
		}
		return nil, nil
	}
	// by hand explains, for each missing secret, where the person finds it.
	byHand := func(reason string) ([]byte, map[string][]byte) {
		er.Reason = reason
		for _, s := range missing {
			why := fmt.Sprintf("not restored: credential scope %s still holds it (Portcullis never shows a secret)", s.Scope)
			if backupExists(re.Backup) {
				why += fmt.Sprintf("; the backup %s holds the original entry with its value in plain text: copy \"%s\" from there into the entry's \"env\"", re.Backup, s.EnvVar)
			} else if re.Backup != "" {
				why += fmt.Sprintf("; the backup %s that held it in plain text is gone", re.Backup)
			}
			er.Secrets = append(er.Secrets, MovedSecret{EnvVar: s.EnvVar, Scope: s.Scope, Why: why})
		}
		return nil, nil
	}
	if !found {
		return byHand(fmt.Sprintf("the entry is no longer in the file, so the secrets that portcullis uninstall left out on %s cannot be put back into it", when))
	}
	offsets := map[string]int{}
	values := map[string][]byte{}
	for _, s := range re.Secrets {
		offsets[s.EnvVar] = s.Offset
		v, err := opts.Store.Get(s.Scope)
		if err != nil {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: its secrets were not restored", er.Where))
			return byHand(fmt.Sprintf("reading credential scope %s failed: %v; run %s again once the keychain can be read", s.Scope, err, restoreCommand(*opts, er.Name)))
		}
		values[s.EnvVar] = v
	}
	kept := maps.Clone(values)
	for _, name := range re.LeftOut {
		delete(kept, name)
	}
	expected, err := doc.restore(re.Original, offsets, kept)
	if err != nil {
		return byHand(err.Error())
	}
	if !bytes.Equal(doc.data[e.start:e.end], expected) {
		return byHand(fmt.Sprintf("the entry changed since portcullis uninstall put it back without its secrets on %s, so Portcullis does not edit it (undo the change and run this again, or add the secrets by hand)", when))
	}
	text, err := doc.restore(re.Original, offsets, values)
	if err != nil {
		return byHand(err.Error())
	}
	er.Action = ActionRestored
	er.Reason = fmt.Sprintf("its secrets, left out by portcullis uninstall on %s, put back", when)
	for _, s := range missing {
		ms := MovedSecret{EnvVar: s.EnvVar, Scope: s.Scope, Masked: Mask(string(values[s.EnvVar])), Why: "restored from credential scope " + s.Scope}
		if s.Reencoded {
			ms.Why += " (its escaping in the file differs from the original)"
		}
		er.Secrets = append(er.Secrets, ms)
	}
	er.Notes = append(er.Notes, fmt.Sprintf("server %q stays in Portcullis's configuration", re.Label))
	return text, values
}

// restoreCommand is the command that puts back the secrets of the entry named
// name, as `portcullis uninstall AGENT [--scope project] [--servers NAME]
// --restore-secrets`; --servers only when this uninstall was limited to some
// entries, so that the command does not uninstall the others.
func restoreCommand(opts Options, name string) string {
	cmd := "portcullis uninstall " + string(opts.Target.Agent)
	if opts.Target.Scope == ScopeProject {
		cmd += " --scope project"
	}
	if len(opts.Servers) > 0 {
		cmd += " --servers " + shellQuote(name)
	}
	return cmd + " --restore-secrets"
}

// shellQuote quotes s for a POSIX shell when it holds anything but letters,
// digits and -_./@%+=:,.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./@%+=:,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// backupExists reports whether the backup file at path is still there.
func backupExists(path string) bool {
	if path == "" {
		return false
	}
	_, err := os.Lstat(path)
	return err == nil
}

// runsLabel reports whether entry e runs `portcullis connect label`, where
// portcullis is any executable named portcullis or one of exes.
func (d *document) runsLabel(e entry, label string, exes ...string) bool {
	fields, err := d.fields(e)
	if err != nil {
		return false
	}
	var cmd string
	var args []string
	if json.Unmarshal(fields["command"], &cmd) != nil || json.Unmarshal(fields["args"], &args) != nil {
		return false
	}
	known := false
	for _, exe := range exes {
		known = known || (exe != "" && routed(cmd, args, exe))
	}
	return (known || routed(cmd, args, "")) && len(args) == 2 && args[1] == label
}
