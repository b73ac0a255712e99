package daemon

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/internal/atomicfile"
)

// Who may widen trust through the configuration (docs/DESIGN.md "Changes
// that widen trust"):
//
//   - The person's own tools never write config.json themselves while a
//     daemon runs: `portcullis servers …`, `portcullis creds …` and the
//     Preferences window send the whole edited configuration to the daemon
//     (control.OpConfigEdit, or EditConfig in the app's process), which
//     checks that the sender is the person (requirePerson), records the
//     change with who made it (config_changed, by), writes the file and puts
//     it in force.
//   - Any other content of config.json (an editor, a script, an agent's
//     shell) is an edit from outside. It is split against the configuration
//     in force (config.SplitTrust): what narrows trust or does not bear on
//     it applies at once; what widens it is held as the one pending change,
//     shown in status and by `portcullis changes`, until the person confirms
//     it (control.OpChangeDecide, DecideChange) or rejects it (the daemon
//     then writes the configuration in force back to the file).
//   - When no daemon runs, the CLI writes the file itself: the daemon cannot
//     tell then who ran it, so at start it splits the file against the
//     configuration last in force (the run record's, runrecord.go; else
//     config.audited.json) the same way, and holds what widens. Only a
//     first start (neither an audit log nor state of an earlier run) takes
//     the file as it is; a start that finds the log or the record deleted
//     is log_tampered and holds what widens all the same.
//
// config.json.last-good always holds the configuration in force, never a
// held change: restoring it restores what was in force.

// Audit event types of changes held for the person. The fields are
// ConfigChangeEvent.
const (
	TypeConfigChangeHeld      = "config_change_held"
	TypeConfigChangeConfirmed = "config_change_confirmed"
	TypeConfigChangeRejected  = "config_change_rejected"
	// TypeConfigChangeDropped: the file changed again before a decision;
	// Reason says how (a new change is held instead, or the file no longer
	// widens anything).
	TypeConfigChangeDropped = "config_change_dropped"
)

// ConfigChangeEvent is the fields of the config_change_* audit events.
type ConfigChangeEvent struct {
	// Decider, on config_change_confirmed, is who confirmed the change:
	// the channel, the process and its ancestry, the OS authentication.
	audit.Decider
	ID      string   `json:"id"`
	File    string   `json:"file"`
	Digest  string   `json:"digest"` // of the file whose changes are held
	Held    []string `json:"held"`   // each change held, in words
	By      string   `json:"by,omitempty"`
	Reason  string   `json:"reason,omitempty"`
	AtStart bool     `json:"atStart,omitempty"`
}

// PendingChange is an edit of the configuration file, made from outside the
// person's tools, whose widening parts wait for the person.
type PendingChange struct {
	// ID names the change for `portcullis changes confirm|reject ID`. It is
	// derived from the file held and the configuration in force, so it
	// names exactly what was shown: a file edited again gets another ID.
	ID string `json:"id"`
	// File is the file the change came from (config.json, or its last good
	// copy when the daemon started without config.json).
	File string `json:"file"`
	// Digest is the SHA-256 of that file's contents, "sha256:…".
	Digest string `json:"digest"`
	// Held lists the changes that wait; everything else in the file is in
	// force already.
	Held  []config.Widening `json:"held"`
	Since time.Time         `json:"since"`
	// AtStart marks a change found when the daemon started (made while no
	// daemon ran).
	AtStart bool `json:"atStart,omitempty"`
	// LogTampered marks a change found at a start that found the audit
	// log or the daemon's run record missing while other state showed
	// earlier runs (log_tampered): the configuration in force is the last
	// one the person confirmed, whatever config.json says, until the
	// person confirms this change.
	LogTampered bool `json:"logTampered,omitempty"`
}

// ConfigState is the answer to control.OpConfig.
type ConfigState struct {
	File string `json:"file"`
	// Config is the configuration in force, which an edit starts from.
	Config json.RawMessage `json:"config"`
	// Digest names the configuration in force; control.OpConfigEdit
	// refuses an edit made from another one.
	Digest string `json:"digest"`
	// Error says why config.json is not in force as it is on disk
	// (invalid, missing); edits are refused then.
	Error   string         `json:"error,omitempty"`
	Pending *PendingChange `json:"pending,omitempty"`
}

var (
	// ErrChangePending is wrapped by EditConfig while a change from outside
	// waits for the person: an edit made now would bury it.
	ErrChangePending = errors.New("a change to the configuration file is waiting for confirmation")
	// ErrNoChange is wrapped by DecideChange when no change (or another one)
	// is waiting.
	ErrNoChange = errors.New("no such change is waiting for confirmation")
	// ErrConfigMoved is wrapped by an edit made from a configuration that is
	// no longer in force.
	ErrConfigMoved = errors.New("the configuration changed while it was being edited")
)

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func heldTexts(ws []config.Widening) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Text
	}
	return out
}

// split splits cfg, parsed from data (read from file), against applied:
// what is to be in force and its bytes, and the pending change (nil when
// nothing widens). applied nil takes cfg as it is.
func split(applied, cfg *config.Config, data []byte, file string, atStart bool) (*config.Config, []byte, *PendingChange) {
	if applied == nil || data == nil {
		return cfg, data, nil
	}
	inForce, held := config.SplitTrust(applied, cfg)
	if len(held) == 0 {
		return cfg, data, nil
	}
	inData, err := config.Marshal(inForce)
	if err != nil {
		// Not expected for a configuration that validated; then nothing of
		// the file applies.
		inForce = applied
		inData, _ = config.Marshal(applied)
	}
	sum := sha256.Sum256([]byte(digestOf(data) + digestOf(inData)))
	return inForce, inData, &PendingChange{
		ID: "chg-" + hex.EncodeToString(sum[:6]), File: file, Digest: digestOf(data),
		Held: held, Since: time.Now().UTC(), AtStart: atStart,
	}
}

// trustAtStart is New's part: the configuration found at start (cfg, parsed
// from data, read from file) is split against what the start check found
// confirmed before (startCheck.prev: the run record's configuration, else
// config.audited.json, else an empty configuration when earlier runs
// show), as an edit from outside: it may have been written while no daemon
// ran, by anyone. Only a first start, with neither log nor state of an
// earlier run, takes the file as it is. It returns what is to be in force,
// its bytes, and the pending change with the file's bytes; the change is
// marked LogTampered when the start found files of earlier runs missing.
func trustAtStart(s startCheck, cfg *config.Config, data []byte, file string) (*config.Config, []byte, *PendingChange, []byte) {
	if data == nil || s.prev == nil {
		return cfg, data, nil, nil
	}
	in, inData, p := split(s.prev, cfg, data, file, true)
	if p == nil {
		return cfg, data, nil, nil
	}
	p.LogTampered = s.tampered()
	return in, inData, p, data
}

// holdWidening splits cfg, just read from file as data, against applied
// (the configuration in force) and sets or clears the pending change. It
// returns what is to be put in force and its bytes. loadMu is held.
func (d *Daemon) holdWidening(applied, cfg *config.Config, data []byte, file string) (*config.Config, []byte) {
	in, inData, p := split(applied, cfg, data, file, false)
	if data == nil {
		return in, inData // no file: nothing held, nothing dropped
	}
	d.setPending(p, data)
	return in, inData
}

// setPending makes p (from the file's bytes data) the pending change, or
// clears it when p is nil, and records the change in the audit log.
func (d *Daemon) setPending(p *PendingChange, data []byte) {
	d.mu.Lock()
	old := d.pending
	if old != nil && p != nil && old.ID == p.ID {
		d.mu.Unlock()
		return // the same change, seen again
	}
	d.pending, d.pendingData = p, data
	d.mu.Unlock()
	if old == nil && p == nil {
		return
	}
	if old != nil {
		reason := "the file no longer widens anything"
		if p != nil {
			reason = "the file changed again: change " + p.ID + " waits instead"
		}
		_ = d.appendAudit(TypeConfigChangeDropped, ConfigChangeEvent{ID: old.ID, File: old.File, Digest: old.Digest, Held: heldTexts(old.Held), Reason: reason})
	}
	if p != nil {
		d.recordHeld(p)
		d.log.Warn("a change to the configuration file widens trust and waits for the person", "change", p.ID, "held", heldTexts(p.Held))
	}
	d.notify()
}

// recordHeld appends the config_change_held event of p.
func (d *Daemon) recordHeld(p *PendingChange) {
	_ = d.appendAudit(TypeConfigChangeHeld, ConfigChangeEvent{ID: p.ID, File: p.File, Digest: p.Digest, Held: heldTexts(p.Held), AtStart: p.AtStart})
}

// recordHeldAtStart is Serve's part, once the log is open: the change held
// since New is on the record (one found later was recorded when found).
func (d *Daemon) recordHeldAtStart() {
	d.mu.Lock()
	p := d.pending
	d.mu.Unlock()
	if p != nil && p.AtStart {
		d.recordHeld(p)
	}
}

// PendingChange returns the change waiting for the person, nil when none.
func (d *Daemon) PendingChange() *PendingChange {
	d.fresh() // the file as it is now
	return d.pendingCopy()
}

// pendingCopy returns a copy of the pending change, nil when none.
func (d *Daemon) pendingCopy() *PendingChange {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending == nil {
		return nil
	}
	p := *d.pending
	return &p
}

// pendingError says that p waits and what to do.
func pendingError(p *PendingChange) error {
	return fmt.Errorf("%w: change %s of %s (%s); confirm it with `portcullis changes confirm %s` or reject it with `portcullis changes reject %s`, then edit again; nothing was changed",
		ErrChangePending, p.ID, p.File, strings.Join(heldTexts(p.Held), "; "), p.ID, p.ID)
}

// EditConfig changes the configuration for the person's own tools (the
// Preferences window, the CLI through control.OpConfigEdit): change edits a
// copy of the configuration in force; when the result validates, it is
// recorded in the audit log with by (who made it), written to config.json
// and put in force. Nothing is held: by calling it, the caller says the
// person made the change. It refuses (nothing written) while config.json is
// invalid or missing with its last good copy in force, while a change from
// outside waits (ErrChangePending), and when the audit log cannot be
// written. It returns the configuration now in force.
func (d *Daemon) EditConfig(by string, change func(*config.Config) error) (*config.Config, error) {
	return d.editConfig(by, "", change)
}

// editConfig is EditConfig; base, when not "", is the digest of the
// configuration the edit was made from, which must still be in force.
func (d *Daemon) editConfig(by, base string, change func(*config.Config) error) (*config.Config, error) {
	return d.editConfigGated(by, base, change, nil)
}

// editConfigGated is editConfig; gate, when not nil, is asked about the
// trust the edit widens (config.SplitTrust against the configuration in
// force; called only when it widens some) before anything is recorded or
// written, and its error refuses the edit.
func (d *Daemon) editConfigGated(by, base string, change func(*config.Config) error, gate func(held []config.Widening) error) (*config.Config, error) {
	d.loadMu.Lock()
	defer d.loadMu.Unlock()
	path := d.opts.Dirs.ConfigFile()
	cur, err := d.loadLocked(true)
	if err != nil {
		return nil, fmt.Errorf("nothing was changed: %w", err)
	}
	d.mu.Lock()
	p, curData := d.pending, d.cfgData
	d.mu.Unlock()
	if p != nil {
		return nil, pendingError(p)
	}
	if base != "" && base != digestOf(curData) {
		return nil, fmt.Errorf("%w (another edit was saved meanwhile); run the command again; nothing was changed", ErrConfigMoved)
	}
	next := cur.Clone()
	if next.Servers == nil {
		next.Servers = map[string]config.Server{}
	}
	if err := change(next); err != nil {
		return nil, err
	}
	if err := next.Validate(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	managed := d.managed
	d.mu.Unlock()
	if below := managed.Policy.Below(next); len(below) > 0 {
		return nil, managed.Explain(below)
	}
	next, _, _ = floorConfig(managed, next, nil)
	data, err := config.Marshal(next)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(data, curData) {
		return next, nil
	}
	if gate != nil {
		if _, held := config.SplitTrust(cur, next); len(held) > 0 {
			if err := gate(held); err != nil {
				return nil, err
			}
		}
	}
	// On the record, with who made it, before it is in force.
	if err := d.recordConfigBy(data, next, false, by); err != nil {
		return nil, fmt.Errorf("the audit log cannot be written, so the change is not made: %w; nothing was changed", err)
	}
	if err := atomicfile.Write(atomicfile.FollowLinks(path), data, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	stamp := stampOf(path)
	if _, err := d.putInForce(next, data, by); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.cfgStamp = stamp // what the daemon wrote: no need to read it again
	d.mu.Unlock()
	return next, nil
}

// DecideChange confirms (confirm true) or rejects the pending change id for
// the person; by says who decided ("app", "cli (pid N)"). A confirmed change
// is recorded and the file is put in force as it is; a rejected one is
// recorded and the configuration in force is written back to config.json.
// It returns an error wrapping ErrNoChange when id is not the change waiting
// now (none waits, or the file changed since and another change waits), and
// an error when the audit log cannot be written (nothing is decided then).
func (d *Daemon) DecideChange(id string, confirm bool, by string) error {
	return d.decideChange(id, confirm, by, nil)
}

// decideChange is DecideChange; who, when known, is recorded with a
// confirmation (ConfigChangeEvent.Decider).
func (d *Daemon) decideChange(id string, confirm bool, by string, who *audit.Decider) error {
	d.loadMu.Lock()
	defer d.loadMu.Unlock()
	_, _ = d.loadLocked(true) // the file as it is now
	d.mu.Lock()
	p, pdata, inData := d.pending, d.pendingData, d.cfgData
	d.mu.Unlock()
	switch {
	case p == nil:
		return fmt.Errorf("%w: %s (no change to the configuration waits now; portcullis status shows the configuration in force)", ErrNoChange, id)
	case p.ID != id:
		return fmt.Errorf("%w: %s (the configuration file changed since; change %s waits now: `portcullis changes` shows it); nothing was decided", ErrNoChange, id, p.ID)
	}
	ev := ConfigChangeEvent{ID: p.ID, File: p.File, Digest: p.Digest, Held: heldTexts(p.Held), By: by}
	path := d.opts.Dirs.ConfigFile()
	if !confirm {
		if err := d.appendAudit(TypeConfigChangeRejected, ev); err != nil {
			return fmt.Errorf("the audit log cannot be written, so nothing was decided: %w", err)
		}
		if err := atomicfile.Write(atomicfile.FollowLinks(path), inData, 0o600); err != nil {
			return fmt.Errorf("change %s is rejected, but writing the configuration in force back to %s failed: %w", id, path, err)
		}
		stamp := stampOf(path)
		d.mu.Lock()
		d.pending, d.pendingData, d.cfgStamp = nil, nil, stamp
		d.mu.Unlock()
		d.log.Info("configuration change rejected", "change", id, "by", by)
		d.notify()
		return nil
	}
	cfg, err := config.Parse(pdata, p.File)
	if err != nil {
		return fmt.Errorf("change %s no longer parses: %w", id, err)
	}
	if who != nil {
		ev.Decider = *who
	}
	if err := d.appendAudit(TypeConfigChangeConfirmed, ev); err != nil {
		return fmt.Errorf("the audit log cannot be written, so nothing was decided: %w", err)
	}
	if err := d.recordConfigBy(pdata, cfg, false, by); err != nil {
		return fmt.Errorf("the audit log cannot be written, so nothing was decided: %w", err)
	}
	d.mu.Lock()
	d.pending, d.pendingData = nil, nil
	d.mu.Unlock()
	d.log.Info("configuration change confirmed", "change", id, "by", by)
	_, err = d.putInForce(cfg, pdata, by)
	d.notify()
	return err
}

// configState answers control.OpConfig.
func (d *Daemon) configState() ConfigState {
	cfg, cfgErr := d.load(true)
	d.mu.Lock()
	st := ConfigState{File: d.opts.Dirs.ConfigFile(), Digest: digestOf(d.cfgData)}
	if d.pending != nil {
		p := *d.pending
		st.Pending = &p
	}
	d.mu.Unlock()
	if cfgErr != nil {
		st.Error = cfgErr.Error()
	}
	st.Config, _ = config.Marshal(cfg)
	return st
}

// configOp answers the configuration operations of the control protocol:
// OpConfig (anyone of the user: the file is theirs to read anyway),
// OpConfigEdit (the person only when the edit widens trust: requirePerson)
// and OpChangeDecide (the person only).
func (d *Daemon) configOp(c net.Conn, h control.Hello, pid int) {
	by := fmt.Sprintf("cli (pid %d)", pid)
	switch h.Op {
	case control.OpConfig:
		b, _ := json.Marshal(d.configState())
		reply(c, control.Reply{Data: b})
	case control.OpConfigEdit:
		if h.Base == "" {
			reply(c, control.Reply{Error: "config-edit needs base, the digest of the configuration the edit was made from (control.OpConfig gives it)", Code: "bad_hello"})
			return
		}
		edited, err := config.Parse(h.Config, "the edited configuration")
		if err != nil {
			reply(c, control.Reply{Error: err.Error(), Code: "config_invalid"})
			return
		}
		// An edit that widens trust is the person's to make (as a
		// decision is); one that does not could be made by editing the
		// file as well, and applies for anyone of the user. One below a
		// managed floor is no one's: refused before anyone is asked.
		d.mu.Lock()
		applied, managed := d.cfg, d.managed
		d.mu.Unlock()
		if below := managed.Policy.Below(edited); len(below) > 0 {
			reply(c, control.Reply{Error: managed.Explain(below).Error(), Code: "managed_floor"})
			return
		}
		if _, held := config.SplitTrust(applied, edited); len(held) > 0 {
			what := "widen trust in the configuration (" + strings.Join(heldTexts(held), "; ") + ")"
			if err := d.requirePerson(c, what); err != nil {
				reply(c, control.Reply{Error: err.Error(), Code: codeNotPerson})
				return
			}
			if _, err := d.authenticateChange(c, pid, what, held); err != nil {
				reply(c, control.Reply{Error: err.Error(), Code: codeAuthentication})
				return
			}
		} else {
			by += ", widening nothing"
		}
		next, err := d.editConfig(by, h.Base, func(c *config.Config) error { *c = *edited; return nil })
		if err != nil {
			code := "config_edit_failed"
			switch {
			case errors.Is(err, ErrChangePending):
				code = "change_pending"
			case errors.Is(err, ErrConfigMoved):
				code = "config_moved"
			case errors.Is(err, config.ErrInvalid):
				code = "config_invalid"
			case errors.Is(err, config.ErrManagedFloor):
				code = "managed_floor"
			}
			reply(c, control.Reply{Error: err.Error(), Code: code})
			return
		}
		data, _ := config.Marshal(next)
		b, _ := json.Marshal(map[string]string{"digest": digestOf(data)})
		reply(c, control.Reply{Data: b})
	case control.OpChangeDecide:
		if err := d.requirePerson(c, h.Choice+" change "+h.Request+" of the configuration"); err != nil {
			reply(c, control.Reply{Error: err.Error(), Code: codeNotPerson})
			return
		}
		var confirm bool
		switch h.Choice {
		case control.ChoiceConfirm:
			confirm = true
		case control.ChoiceReject:
		default:
			reply(c, control.Reply{Error: fmt.Sprintf("choice %q: want %q or %q", h.Choice, control.ChoiceConfirm, control.ChoiceReject), Code: "bad_hello"})
			return
		}
		var who *audit.Decider
		if p := d.pendingCopy(); confirm && p != nil && p.ID == h.Request {
			auth, err := d.authenticateChange(c, pid, "confirm change "+h.Request+" of the configuration", p.Held)
			if err != nil {
				reply(c, control.Reply{Error: err.Error(), Code: codeAuthentication})
				return
			}
			who = d.cliDecider(c, auth)
		}
		if err := d.decideChange(h.Request, confirm, by, who); err != nil {
			code := "decide_failed"
			if errors.Is(err, ErrNoChange) {
				code = "no_change"
			}
			reply(c, control.Reply{Error: err.Error(), Code: code})
			return
		}
		reply(c, control.Reply{})
	}
}
