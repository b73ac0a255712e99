package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/internal/atomicfile"
	"github.com/portcullis/portcullis/core/paths"
)

// The daemon's run record (docs/DESIGN.md "Changes that widen trust"): a
// small file of the state directory, outside the audit directory and apart
// from the configuration, saying that the daemon has run. It holds an event
// of the audit log (written at the daemon's last start or configuration
// change, synced) and the configuration in force then, the last one the
// person confirmed or narrower. At start (checkStart) a log or a record
// that is missing while other state shows earlier runs is log_tampered,
// and config.json is split against the record's configuration: what widens
// is held for the person, whatever config.json and config.audited.json say.

// RunRecordName is the name of the run record in the state directory.
const RunRecordName = "daemon-record.json"

// RunRecordPath is the path of the run record of the data directory d:
// RunRecordName in its state directory, outside the audit directory, so
// that moving the audit log aside does not take the record with it.
func RunRecordPath(d paths.Dirs) string { return filepath.Join(d.State, RunRecordName) }

// runRecordVersion is the Version of the records this daemon writes.
const runRecordVersion = 1

// RunRecord is the contents of the run record: that the daemon has run on
// this data directory, an event its audit log must still hold, and the
// configuration in force at that event. A later start finds a deleted log
// or record by it, and holds what widens trust past that configuration for
// the person.
type RunRecord struct {
	// Version is the record's format (runRecordVersion); a record of
	// another version is refused (ErrBadRunRecord), never guessed at.
	Version int `json:"version"`
	// Starts counts the daemon's starts on this data directory.
	Starts uint64 `json:"starts"`
	// Head is an event the daemon wrote to its audit log at its last start
	// or configuration change; nil after `portcullis audit rotate-key`
	// moved the log aside.
	Head *RecordHead `json:"head,omitempty"`
	// Config is the configuration file in force then ("" with none), and
	// ConfigDigest its "sha256:…".
	Config       string `json:"config"`
	ConfigDigest string `json:"configDigest"`
}

// RecordHead names one event of the audit log by its file, sequence number
// and hash: enough for a later start to find it and tell whether the log
// still holds that very event, not just one with the same number.
type RecordHead struct {
	File string `json:"file"` // the log file it was written to (audit-000001.jsonl)
	Seq  uint64 `json:"seq"`  // the event's audit.Event.Seq
	Hash string `json:"hash"` // the event's audit.Event.Hash
}

// ErrBadRunRecord is wrapped by ReadRunRecord's error for a record that is
// not as the daemon writes it (unparsable, another version, a digest that
// does not match, a configuration that does not validate).
var ErrBadRunRecord = errors.New("the daemon's run record is not as the daemon writes it")

// ReadRunRecord reads the run record at path: ok false (and no error) when
// there is none; an error wrapping ErrBadRunRecord, naming the file and
// what is wrong, when it is not a record the daemon wrote; another error
// when it cannot be read.
func ReadRunRecord(path string) (rec RunRecord, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return RunRecord{}, false, nil
	}
	if err != nil {
		return RunRecord{}, false, fmt.Errorf("reading %s: %w", path, err)
	}
	bad := func(what string) error { return fmt.Errorf("%w: %s: %s", ErrBadRunRecord, path, what) }
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return RunRecord{}, false, bad(err.Error())
	}
	if dec.More() {
		return RunRecord{}, false, bad("data after the record")
	}
	switch {
	case rec.Version != runRecordVersion:
		return RunRecord{}, false, bad(fmt.Sprintf("version %d, want %d", rec.Version, runRecordVersion))
	case rec.Starts == 0:
		return RunRecord{}, false, bad("no start counted")
	case rec.Head != nil && (rec.Head.Seq == 0 || rec.Head.Hash == "" || rec.Head.File != filepath.Base(rec.Head.File)):
		return RunRecord{}, false, bad("the audit event it names is incomplete")
	case rec.Config == "" && rec.ConfigDigest != "", rec.Config != "" && rec.ConfigDigest != digestOf([]byte(rec.Config)):
		return RunRecord{}, false, bad("the configuration does not match its digest")
	}
	if _, err := rec.config(); err != nil {
		return RunRecord{}, false, bad(err.Error())
	}
	return rec, true, nil
}

// config parses the record's configuration; an empty one when it has none.
func (r RunRecord) config() (*config.Config, error) {
	if r.Config == "" {
		return &config.Config{}, nil
	}
	return config.Parse([]byte(r.Config), "the configuration of "+RunRecordName)
}

// writeRunRecord replaces the run record at path with r.
func writeRunRecord(path string, r RunRecord) error {
	r.Version = runRecordVersion
	r.ConfigDigest = ""
	if r.Config != "" {
		r.ConfigDigest = digestOf([]byte(r.Config))
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o600)
}

// startCheck is what New found of earlier runs, before any file is written.
type startCheck struct {
	record  RunRecord // the record read (zero when none could be)
	missing []audit.TamperedFile
	detail  []string
	// prev is what config.json is split against: the record's
	// configuration, else config.audited.json, else an empty one when
	// earlier runs show; nil on a first start (the file as it is).
	prev *config.Config
}

// tampered reports whether the start found files of earlier runs missing
// or not as the daemon wrote them (log_tampered).
func (s startCheck) tampered() bool { return len(s.detail) > 0 }

func (s *startCheck) found(file, change, detail string) {
	s.missing = append(s.missing, audit.TamperedFile{File: file, Change: change})
	s.detail = append(s.detail, detail)
}

// earlierState lists what shows that a daemon ran on dirs before, apart
// from the audit log and the run record: the catalog store's entries, the
// seal anchor, the sealing key (in sk: a file of dirs on Linux, the
// Keychain on macOS, which deleting the state directory leaves),
// config.audited.json, a log moved aside by `portcullis audit rotate-key`.
func earlierState(dirs paths.Dirs, sk audit.SealKeyStore) []string {
	var out []string
	if ents, _ := os.ReadDir(filepath.Join(dirs.State, "catalog")); len(ents) > 0 {
		out = append(out, "catalog/")
	}
	for _, p := range []string{AnchorPath(dirs), filepath.Join(dirs.State, auditedConfigFile)} {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, filepath.Base(p))
		}
	}
	switch k := sk.(type) {
	case audit.SealKeyFile:
		if _, err := os.Lstat(k.Path); err == nil {
			out = append(out, filepath.Base(k.Path))
		}
	case secretSealKeys:
		if v, err := k.store.Get(AuditSealScope); err == nil {
			clear(v)
			out = append(out, "the sealing key in the credential store ("+AuditSealScope+")")
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dirs.State, "audit.rotated-*")); len(m) > 0 {
		out = append(out, filepath.Base(m[0]))
	}
	return out
}

// rotatedLog reports whether `portcullis audit rotate-key` moved a log aside.
func rotatedLog(dirs paths.Dirs) bool {
	m, _ := filepath.Glob(filepath.Join(dirs.State, "audit.rotated-*"))
	return len(m) > 0
}

// hasLog reports whether the audit directory holds log files.
func hasLog(dirs paths.Dirs) bool {
	m, _ := filepath.Glob(filepath.Join(AuditDir(dirs), "audit-*.jsonl"))
	return len(m) > 0
}

// checkStart looks, before the daemon writes anything, at what earlier runs
// left: the run record, the audit log, config.audited.json and the other
// state (earlierState; sk is where the sealing key lives). A first start is
// one with none of them.
func checkStart(dirs paths.Dirs, sk audit.SealKeyStore) startCheck {
	var s startCheck
	rewritten := false
	rec, hasRec, recErr := ReadRunRecord(RunRecordPath(dirs))
	logFiles := hasLog(dirs)
	earlier := earlierState(dirs, sk)
	var audited *config.Config
	kept := filepath.Join(dirs.State, auditedConfigFile)
	if b, err := os.ReadFile(kept); err == nil {
		audited, _ = config.Parse(b, kept) // unreadable: as if absent
	}
	switch {
	case recErr != nil:
		s.found(RunRecordName, "unreadable", recErr.Error())
	case hasRec:
		s.record = rec
		switch h := rec.Head; {
		case h == nil && (logFiles || !rotatedLog(dirs)):
			// Only `audit rotate-key` clears the head, moving the log
			// aside with no daemon running: a record naming no event
			// beside a log, or with no log moved aside, was written by
			// someone else (a configuration it holds would go unchecked).
			rewritten = true
			s.found(RunRecordName, "rewritten", RunRecordName+" names no audit event, as only `portcullis audit rotate-key` leaves it, but the audit log was not moved aside: it was rewritten while no daemon ran")
		case h == nil:
		case !logFiles:
			s.found(filepath.Base(AuditDir(dirs))+"/", "missing", fmt.Sprintf("the audit log is gone although %s names its event seq %d: it was deleted while no daemon ran", RunRecordName, h.Seq))
		default:
			ev, found, err := audit.FindEvent(AuditDir(dirs), h.File, h.Seq, h.Hash)
			switch want, ok := recordedConfig(ev); {
			case err != nil:
			case !found:
				s.found(h.File, "replaced", fmt.Sprintf("the audit log no longer holds event seq %d that %s names: it was replaced or cut while no daemon ran", h.Seq, RunRecordName))
			case !ok || want != digestOf([]byte(rec.Config)):
				// The record's configuration is bound to its event: a
				// record rewritten to a wider one, or naming an event that
				// records none, is not believed.
				rewritten = true
				s.found(RunRecordName, "rewritten", fmt.Sprintf("the configuration in %s is not the one its audit event seq %d recorded: it was rewritten while no daemon ran", RunRecordName, h.Seq))
			}
		}
	case logFiles:
		// A log without a record: written by a version that kept none
		// (not tampering), unless the log shows this daemon kept one.
		if kept, _ := audit.HasType(AuditDir(dirs), TypeDaemonStarted); kept {
			s.found(RunRecordName, "missing", RunRecordName+" is gone although the audit log shows that the daemon kept it: it was deleted while no daemon ran")
		}
	case len(earlier) > 0:
		s.found(filepath.Base(AuditDir(dirs))+"/", "missing", "the audit log and "+RunRecordName+" are gone although "+strings.Join(earlier, ", ")+" show that the daemon ran before: they were deleted while no daemon ran")
		s.missing = append(s.missing, audit.TamperedFile{File: RunRecordName, Change: "missing"})
	}
	if s.tampered() && audited == nil {
		s.missing = append(s.missing, audit.TamperedFile{File: auditedConfigFile, Change: "missing"})
	}
	switch {
	case hasRec && !rewritten:
		s.prev, _ = rec.config() // ReadRunRecord checked it
	case audited != nil && !s.tampered():
		// A log of a version that kept no record. After tampering the
		// copy is not believed: the agent can write it as well as delete.
		s.prev = audited
	case logFiles || len(earlier) > 0 || recErr != nil || s.tampered():
		s.prev = &config.Config{} // nothing confirmed is known: all that widens waits
	}
	return s
}

// recordedConfig is the digest of the configuration in force that ev, the
// event a run record names, recorded: ok false for an event that records
// none (another type, or a daemon_started written before it carried one).
func recordedConfig(ev audit.Event) (digest string, ok bool) {
	switch ev.Type {
	case audit.TypeConfigChanged:
		var f audit.ConfigChanged
		if ev.DecodeFields(&f) == nil && f.Digest != "" {
			return f.Digest, true
		}
	case TypeDaemonStarted:
		var f DaemonStarted
		if ev.DecodeFields(&f) == nil && f.ConfigDigest != "" {
			return f.ConfigDigest, true
		}
	}
	return "", false
}

// TypeDaemonStarted is the audit event the daemon writes at each start,
// once the log is open and the start's checks are on the record; its head
// is what the run record names. The fields are DaemonStarted.
const TypeDaemonStarted = "daemon_started"

// DaemonStarted is the fields of daemon_started: the start's count and
// what it found, on the record, so that a reader of the log sees each
// start and the configuration it put in force.
type DaemonStarted struct {
	// Starts counts the daemon's starts on this data directory, this one
	// included.
	Starts uint64 `json:"starts"`
	// FirstStart: neither an audit log nor other state of an earlier run
	// was found (the configuration file was taken as it is).
	FirstStart bool `json:"firstStart,omitempty"`
	// ConfigDigest is the "sha256:…" of the configuration file put in
	// force at this start: what the run record naming this event holds.
	ConfigDigest string `json:"configDigest,omitempty"`
}

// recordStart is Serve's part once the log is open: the start's findings
// go on the record as one log_tampered event (with what the anchor check
// found, anchorDetail), then daemon_started, whose head and the
// configuration in force become the run record.
func (d *Daemon) recordStart(ctx context.Context, al *audit.Log, anchorDetail string) {
	s := d.start
	detail := s.detail
	if anchorDetail != "" {
		detail = append(detail, anchorDetail)
	}
	if len(detail) > 0 {
		if err := al.RecordTamperedFiles(ctx, s.missing, strings.Join(detail, "; ")); err != nil {
			d.log.Error("recording what the start found missing", "err", err)
		}
	}
	starts := s.record.Starts + 1
	_, data := d.configData()
	ev, err := d.auditW.Append(ctx, TypeDaemonStarted, DaemonStarted{Starts: starts, FirstStart: s.prev == nil, ConfigDigest: digestOf(data)})
	d.recMu.Lock()
	defer d.recMu.Unlock()
	d.record = RunRecord{Starts: starts}
	if err != nil {
		// The file keeps naming the last event that was written; the next
		// configuration change the log takes writes it.
		return
	}
	d.keepRecordLocked(ev, al.Segment(), data)
}

// keepRecord makes ev (an event just written to the log's file seg) and
// data, the configuration file put in force with it, the run record's.
func (d *Daemon) keepRecord(ev audit.Event, seg string, data []byte) {
	d.recMu.Lock()
	defer d.recMu.Unlock()
	if d.record.Starts == 0 {
		return // before recordStart: it writes the record
	}
	d.keepRecordLocked(ev, seg, data)
}

func (d *Daemon) keepRecordLocked(ev audit.Event, seg string, data []byte) {
	d.record.Head = &RecordHead{File: seg, Seq: ev.Seq, Hash: ev.Hash}
	d.record.Config = string(data)
	if err := writeRunRecord(RunRecordPath(d.opts.Dirs), d.record); err != nil {
		d.log.Error("writing the daemon's run record", "file", RunRecordPath(d.opts.Dirs), "err", err)
	}
}

// forgetHead is RotateAuditLog's part: the log the record names is moved
// aside, so the record names no event of the new one (the configuration it
// holds stays what the next start holds config.json against).
func forgetHead(dirs paths.Dirs) error {
	rec, ok, err := ReadRunRecord(RunRecordPath(dirs))
	if err != nil || !ok {
		return err
	}
	rec.Head = nil
	return writeRunRecord(RunRecordPath(dirs), rec)
}
