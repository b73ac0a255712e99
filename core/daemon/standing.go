package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/internal/atomicfile"
	"github.com/portcullis/portcullis/core/paths"
)

// Standing approvals (`portcullis approve --code`: this code, for every run
// of the agent program) outlive the daemon. Each is recorded in the audit
// log (standing_approval_granted) before it is kept, and kept in a file of
// the state directory that names, for each, the audit event that recorded
// it. The file is a file of the person's user, which the agent can write
// too, so the daemon believes it only as far as the log backs it: at start
// each entry must be the very approval its event recorded, and no later
// standing_approval_revoked may name it. A file that fails any of this
// (unparsable, another version, an entry its event does not back, an
// entry revoked since) is refused whole: no standing approval is in force,
// status says why, and standing_approvals_refused records it. Deleting the
// file or an entry only narrows trust. An approval ends (revoked, and so
// recorded) when the person revokes it, when a card for other code of its
// server and program is raised (it is bound to the code), or when more
// than authz.MaxStanding are kept.

// StandingFileName is the standing approvals' file in the state directory.
const StandingFileName = "standing-approvals.json"

// StandingPath is the standing approvals' file of a data directory.
func StandingPath(d paths.Dirs) string { return filepath.Join(d.State, StandingFileName) }

// Audit event types of standing approvals. The fields of the first are an
// authz.StandingApproval, of the second StandingRevoked, of the third
// StandingRefused.
const (
	TypeStandingGranted = "standing_approval_granted"
	TypeStandingRevoked = "standing_approval_revoked"
	TypeStandingRefused = "standing_approvals_refused"
)

// StandingRevoked is the fields of standing_approval_revoked.
type StandingRevoked struct {
	ID          ids.RequestID `json:"id"`
	ServerLabel string        `json:"serverLabel"`
	AgentExe    string        `json:"agentExe"`
	Code        string        `json:"code"`
	Why         string        `json:"why"`
}

// StandingRefused is the fields of standing_approvals_refused.
type StandingRefused struct {
	File  string `json:"file"`
	Error string `json:"error"`
}

// standingVersion is the Version of the files this daemon writes.
const standingVersion = 1

// standingFile is the contents of the standing approvals' file.
type standingFile struct {
	Version   int             `json:"version"`
	Approvals []standingEntry `json:"approvals"`
}

// standingEntry is one standing approval and the audit event that
// recorded it.
type standingEntry struct {
	Approval authz.StandingApproval `json:"approval"`
	Event    RecordHead             `json:"event"`
}

// ErrBadStanding is wrapped by the error of a standing approvals' file the
// daemon did not write as it is.
var ErrBadStanding = errors.New("the standing approvals' file is not as the daemon wrote it")

// standingState is the daemon's part: the entries in force, in the order
// written, and why the file was refused at start.
type standingState struct {
	mu      sync.Mutex
	entries []standingEntry
	err     string
}

// readStanding reads the standing approvals' file of dirs and checks each
// entry against the audit log: nil and no error when there is none.
func readStanding(dirs paths.Dirs) ([]standingEntry, error) {
	path := StandingPath(dirs)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadStanding, path, fmt.Sprintf(format, args...))
	}
	var f standingFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, bad("%v", err)
	}
	if dec.More() {
		return nil, bad("data after the approvals")
	}
	if f.Version != standingVersion {
		return nil, bad("version %d, want %d", f.Version, standingVersion)
	}
	revoked := map[ids.RequestID]uint64{}
	if len(f.Approvals) > 0 {
		evs, err := audit.EventsOfType(AuditDir(dirs), TypeStandingRevoked)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("reading the audit log to check %s: %w", path, err)
		}
		for _, ev := range evs {
			var r StandingRevoked
			if ev.DecodeFields(&r) == nil {
				revoked[r.ID] = ev.Seq
			}
		}
	}
	seen := map[ids.RequestID]bool{}
	for _, e := range f.Approvals {
		id := e.Approval.ID
		if id == "" || seen[id] {
			return nil, bad("an approval without an id, or one named twice (%q)", id)
		}
		seen[id] = true
		if e.Event.Seq == 0 || e.Event.Hash == "" || e.Event.File != filepath.Base(e.Event.File) {
			return nil, bad("approval %s names no complete audit event", id)
		}
		ev, found, err := audit.FindEvent(AuditDir(dirs), e.Event.File, e.Event.Seq, e.Event.Hash)
		if err != nil {
			return nil, fmt.Errorf("reading the audit log to check %s: %w", path, err)
		}
		if !found || ev.Type != TypeStandingGranted {
			return nil, bad("approval %s names audit event seq %d, which the log does not hold as a %s", id, e.Event.Seq, TypeStandingGranted)
		}
		var recorded authz.StandingApproval
		if err := ev.DecodeFields(&recorded); err != nil {
			return nil, bad("approval %s: %v", id, err)
		}
		want, _ := json.Marshal(recorded)
		got, _ := json.Marshal(e.Approval)
		if !bytes.Equal(want, got) {
			return nil, bad("approval %s is not the one its audit event seq %d recorded: it was rewritten", id, e.Event.Seq)
		}
		if seq, ok := revoked[id]; ok {
			return nil, bad("approval %s was revoked (audit event seq %d) and is in the file again", id, seq)
		}
	}
	return f.Approvals, nil
}

// writeStanding replaces the standing approvals' file with entries.
func writeStanding(dirs paths.Dirs, entries []standingEntry) error {
	b, err := json.MarshalIndent(standingFile{Version: standingVersion, Approvals: append([]standingEntry{}, entries...)}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(StandingPath(dirs), append(b, '\n'), 0o600)
}

// loadStanding is Serve's part, once the audit log is open: the standing
// approvals kept by earlier runs go in force when the log backs every one
// of them; otherwise none does, and the refusal is recorded.
func (d *Daemon) loadStanding() {
	entries, err := readStanding(d.opts.Dirs)
	st := &d.standing
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.entries, st.err = nil, err.Error()
		d.log.Error("no standing approval is in force: their file is refused", "file", StandingPath(d.opts.Dirs), "err", err)
		_ = d.appendAudit(TypeStandingRefused, StandingRefused{File: StandingPath(d.opts.Dirs), Error: err.Error()})
		return
	}
	st.entries, st.err = entries, ""
	list := make([]authz.StandingApproval, 0, len(entries))
	for _, e := range entries {
		list = append(list, e.Approval)
	}
	d.authz.RestoreStanding(list)
}

// standingError is why the standing approvals' file was refused at start.
func (d *Daemon) standingError() string {
	d.standing.mu.Lock()
	defer d.standing.mu.Unlock()
	return d.standing.err
}

// standingGranted is authz.Options.OnStanding: the approval is recorded in
// the audit log, then written to the file with its event; an error (either
// failed) keeps it out of force.
func (d *Daemon) standingGranted(a authz.StandingApproval) error {
	d.mu.Lock()
	w, al := d.auditW, d.audit
	d.mu.Unlock()
	if w == nil || al == nil {
		return errors.New("the audit log is not open")
	}
	ev, err := w.AppendRecord(context.Background(), TypeStandingGranted, a)
	if err != nil {
		return fmt.Errorf("recording the standing approval: %w", err)
	}
	st := &d.standing
	st.mu.Lock()
	defer st.mu.Unlock()
	entries := append(slices.Clone(st.entries), standingEntry{Approval: a, Event: RecordHead{File: al.Segment(), Seq: ev.Seq, Hash: ev.Hash}})
	if err := writeStanding(d.opts.Dirs, entries); err != nil {
		_ = d.appendAudit(TypeStandingRevoked, StandingRevoked{ID: a.ID, ServerLabel: a.ServerLabel, AgentExe: a.AgentExe, Code: a.Code,
			Why: "it could not be saved: " + err.Error()})
		return fmt.Errorf("saving the standing approval: %w", err)
	}
	st.entries = entries
	// A file refused at start is replaced by this one: what is in it now
	// is what is in force.
	st.err = ""
	return nil
}

// standingEnded is authz.Options.OnStandingEnded (the authority no longer
// applies the approval): its end is recorded first, so that a copy of an
// older file that still holds it is refused, then it leaves the file. In
// that order a daemon killed between the two leaves a file the log
// contradicts, refused whole at the next start; in the other order it
// would leave an older file and no record of the end, which a copy made
// before could bring back.
func (d *Daemon) standingEnded(a authz.StandingApproval, why string) {
	_ = d.appendAudit(TypeStandingRevoked, StandingRevoked{ID: a.ID, ServerLabel: a.ServerLabel, AgentExe: a.AgentExe, Code: a.Code, Why: why})
	st := &d.standing
	st.mu.Lock()
	entries := slices.DeleteFunc(slices.Clone(st.entries), func(e standingEntry) bool { return e.Approval.ID == a.ID })
	if err := writeStanding(d.opts.Dirs, entries); err != nil {
		d.log.Error("writing the standing approvals' file", "file", StandingPath(d.opts.Dirs), "err", err)
	}
	st.entries = entries
	st.mu.Unlock()
}

// RevokeStanding ends the standing approval of request id (`portcullis
// revoke`): it narrows trust, so anyone of the user may.
func (d *Daemon) RevokeStanding(id, by string) (authz.StandingApproval, error) {
	st, err := d.authz.RevokeStanding(ids.RequestID(id), "revoked by "+by)
	if errors.Is(err, authz.ErrNoStanding) {
		return st, fmt.Errorf("no standing approval %s is in force (portcullis approvals --standing lists them); nothing was revoked", id)
	}
	return st, err
}
