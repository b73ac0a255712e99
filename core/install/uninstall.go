package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
)

// Uninstall puts back the entries that [Install] rewrote in the target file, from
// the install record (see [RecordDir]). An entry is restored only if it still runs
// `portcullis connect LABEL` for its recorded label; one the person changed or
// removed since is left alone and reported. Secrets that install moved to the
// store are put back only with Options.RestoreSecrets (read from Options.Store);
// otherwise their env members are left out and the report says so. When nothing
// else in the file changed, the restored file equals the original byte for byte.
// Servers and credential scopes stay in Portcullis's configuration.
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
		return nil, fmt.Errorf("Portcullis has no record of installing into %s (looked for %s): %w", t.Path, recPath, ErrNotInstalled)
	}
	if opts.RestoreSecrets && opts.Store == nil {
		return nil, fmt.Errorf("--restore-secrets needs the system keychain: %w", ErrNoStore)
	}
	var edits []edit
	var masks []string
	var restored [][]string
	for _, re := range rec.Entries {
		er := EntryReport{Where: entry{path: re.Path}.where(), Name: re.Path[len(re.Path)-1], Label: re.Label}
		if len(opts.Servers) > 0 && !slices.Contains(opts.Servers, er.Name) {
			continue
		}
		e, ok := doc.find(re.Path)
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
		for _, s := range re.Secrets {
			offsets[s.EnvVar] = s.Offset
			ms := MovedSecret{EnvVar: s.EnvVar, Scope: s.Scope}
			switch {
			case !opts.RestoreSecrets:
				ms.Why = "left out: the secret stays in credential scope " + s.Scope + "; pass --restore-secrets to put it back"
			default:
				v, err := opts.Store.Get(s.Scope)
				if err != nil {
					ms.Why = fmt.Sprintf("left out: reading credential scope %s failed: %v", s.Scope, err)
					rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: %s was not restored", er.Where, s.EnvVar))
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
		text, err := restoreEntry(re.Original, offsets, values)
		if err != nil {
			er.Action, er.Reason = ActionSkipped, err.Error()
			rep.Entries = append(rep.Entries, er)
			continue
		}
		edits = append(edits, edit{e.start, e.end, text})
		restored = append(restored, re.Path)
		er.Action = ActionRestored
		er.Notes = append(er.Notes, fmt.Sprintf("server %q stays in Portcullis's configuration", re.Label))
		rep.Entries = append(rep.Entries, er)
	}
	newData := apply(data, edits)
	if err := checkSyntax(t, newData); err != nil {
		return nil, fmt.Errorf("the restored file would not parse (%v); nothing was written", err)
	}
	rep.AgentChanged = !bytes.Equal(newData, data)
	if opts.DryRun {
		rep.AgentDiff = maskText(editDiff(t.Path, t.Path+" (after uninstall)", data, edits), masks)
		return rep, nil
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
