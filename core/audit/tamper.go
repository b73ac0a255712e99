package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrTampered is wrapped by Log.Tampered's error while a log_tampered event
// is not acknowledged by the person (Log.AcknowledgeTampered).
var ErrTampered = errors.New("the audit log's files were changed under the daemon")

// LogTampered is the fields of a log_tampered event.
type LogTampered struct {
	// Files are the files found replaced or deleted.
	Files []TamperedFile `json:"files,omitempty"`
	// Detail says what the daemon found, in words.
	Detail string `json:"detail"`
	// Segment is the new file the log continues in.
	Segment string `json:"segment"`
	// LastSeq and LastHash are the last event the Log had committed before
	// it noticed: a verifier finds it before this event, or events were
	// lost.
	LastSeq  uint64 `json:"lastSeq"`
	LastHash string `json:"lastHash"`
}

// TamperedFile is one file of a log_tampered event.
type TamperedFile struct {
	File string `json:"file"`
	// Change is "replaced" or "deleted" (for a file the daemon had open),
	// "missing" (found absent at start while other state shows earlier
	// runs) or "unreadable" (found at start, not as the daemon wrote it).
	Change string `json:"change"`
}

// LogTamperAcknowledged is the fields of a log_tamper_acknowledged event:
// the person saw the log_tampered event at Seq.
type LogTamperAcknowledged struct {
	Seq uint64 `json:"seq"`
	By  string `json:"by"`
}

// Tamper is an unacknowledged log_tampered event.
type Tamper struct {
	Seq    uint64
	Fields LogTampered
}

func (t *Tamper) err() error {
	if t == nil {
		return nil
	}
	return fmt.Errorf("%w: %s (log_tampered at seq %d); no approval is asked until the person runs `portcullis audit acknowledge`", ErrTampered, t.Fields.Detail, t.Seq)
}

// Tampered returns an error wrapping ErrTampered while the log holds a
// log_tampered event the person has not acknowledged, else nil.
func (l *Log) Tampered() error { return l.tamper.Load().err() }

// TamperedEvent returns the unacknowledged log_tampered event, if any.
func (l *Log) TamperedEvent() (Tamper, bool) {
	t := l.tamper.Load()
	if t == nil {
		return Tamper{}, false
	}
	return *t, true
}

// RecordTampered writes a log_tampered event with detail in a new file (the
// daemon calls it when the log no longer holds the last seal its anchor
// names); approvals stop until AcknowledgeTampered.
func (l *Log) RecordTampered(ctx context.Context, detail string) error {
	return l.RecordTamperedFiles(ctx, nil, detail)
}

// RecordTamperedFiles is RecordTampered naming the files found missing,
// replaced or unreadable (LogTampered.Files).
func (l *Log) RecordTamperedFiles(ctx context.Context, files []TamperedFile, detail string) error {
	_, err := l.do(ctx, &request{op: opTamper, files: files, reason: detail, done: make(chan result, 1)})
	return err
}

// AcknowledgeTampered records that the person (by, such as "cli") saw the
// unacknowledged log_tampered event, which Tampered then no longer reports.
// It writes nothing and returns nil when there is none.
func (l *Log) AcknowledgeTampered(ctx context.Context, by string) error {
	_, err := l.do(ctx, &request{op: opAck, reason: by, done: make(chan result, 1)})
	return err
}

// swappedLocked compares the open file and, with head set, head.json with
// what their paths name now (device and inode). head.json is written only
// after a sync, so a commit that leaves its events to the group commit
// checks it there (syncPendingLocked), before it is written.
func (l *Log) swappedLocked(head bool) []TamperedFile {
	w := &l.w
	var out []TamperedFile
	check := func(f *os.File, info os.FileInfo) {
		if f == nil || info == nil {
			return
		}
		same, err := l.opts.hooks.sameFile(f.Name(), info) // once per commit
		switch {
		case err != nil:
			out = append(out, TamperedFile{File: filepath.Base(f.Name()), Change: "deleted"})
		case !same:
			out = append(out, TamperedFile{File: filepath.Base(f.Name()), Change: "replaced"})
		}
	}
	check(w.f, w.fInfo)
	if head {
		check(w.headF, w.headInfo)
	}
	return out
}

// sameFile reports whether path still names the file info describes (same
// device and inode): false when it was replaced, an error (an
// *os.PathError) when it is gone.
func sameFile(path string, info os.FileInfo) (bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return os.SameFile(st, info), nil
}

// tamperedLocked continues the log in a new file and writes log_tampered
// there.
func (l *Log) tamperedLocked(files []TamperedFile, detail string) error {
	w := &l.w
	// The whole directory may be gone (rm -rf): the log goes on in a new
	// one, which no longer holds the deleted files.
	if err := os.MkdirAll(l.opts.Dir, 0o700); err != nil {
		return l.failLocked("creating "+l.opts.Dir+" after tampering", err)
	}
	next := w.fileNum + 1
	if lf, err := listFiles(l.opts.Dir); err == nil && len(lf) > 0 && lf[len(lf)-1].num >= next {
		next = lf[len(lf)-1].num + 1
	}
	f, err := l.opts.hooks.open(filepath.Join(l.opts.Dir, fileName(next)), os.O_RDWR|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return l.failLocked("starting a new file after tampering", err)
	}
	st, err := f.Stat()
	if err == nil {
		err = syncDir(l.opts.Dir)
	}
	if err != nil {
		f.Close()
		return l.failLocked("starting a new file after tampering", err)
	}
	if w.f != nil {
		if w.unsyncedLocked() > 0 {
			_ = l.opts.hooks.sync(w.f) // a file replaced under the writer: best effort
		}
		l.retireLocked(w.f)
	}
	w.f, w.fileNum, w.size, w.fInfo = f, next, 0, st
	if w.headF != nil {
		w.headF.Close()
		w.headF, w.headInfo = nil, nil
	}
	_ = os.Remove(filepath.Join(l.opts.Dir, headName))
	if detail == "" {
		detail = "files of the audit log were changed while the daemon had them open:"
		for _, tf := range files {
			detail += " " + tf.File + " " + tf.Change
		}
	}
	rec := LogTampered{Files: files, Detail: detail, Segment: fileName(next), LastSeq: w.seq, LastHash: w.prev}
	fields, err := canonicalFields(rec)
	if err != nil {
		return err
	}
	evs, err := l.commitCheckedLocked([]item{{typ: TypeLogTampered, fields: fields}}, true)
	if err != nil {
		return err
	}
	l.log.Error("audit log tampered with; approvals stop until acknowledged", "detail", detail, "seq", evs[0].Seq)
	l.tamper.Store(&Tamper{Seq: evs[0].Seq, Fields: rec})
	return nil
}

func (l *Log) ackLocked(by string) error {
	t := l.tamper.Load()
	if t == nil {
		return nil
	}
	fields, err := canonicalFields(LogTamperAcknowledged{Seq: t.Seq, By: by})
	if err != nil {
		return err
	}
	if _, err := l.commitLocked([]item{{typ: TypeLogTamperAcknowledged, fields: fields}}); err != nil {
		return err
	}
	l.tamper.Store(nil)
	return nil
}

// pendingTamper scans file path for the last log_tampered event not
// followed by its log_tamper_acknowledged (Open keeps it across restarts;
// the event is in the file it started, or one after it).
func pendingTamper(path string) (*Tamper, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var t *Tamper
	lr := newLineReader(f, 0)
	for {
		b, _, _, err := lr.next()
		if err == io.EOF {
			return t, nil
		}
		if err != nil {
			return nil, err
		}
		if !bytes.Contains(b, []byte(`"type":"log_tamper`)) {
			continue
		}
		ln, err := parseLine(b)
		if err != nil {
			continue
		}
		switch ln.typ {
		case TypeLogTampered:
			var rec LogTampered
			if json.Unmarshal(ln.fields, &rec) == nil {
				t = &Tamper{Seq: ln.seq, Fields: rec}
			}
		case TypeLogTamperAcknowledged:
			var a LogTamperAcknowledged
			if json.Unmarshal(ln.fields, &a) == nil && t != nil && a.Seq == t.Seq {
				t = nil
			}
		}
	}
}

// Sealing reports whether the Log holds a sealing key, and its epoch.
func (l *Log) Sealing() (epoch uint64, ok bool) {
	p := l.sealEpoch.Load()
	if p == nil {
		return 0, false
	}
	return *p, true
}

// SealErr returns why the last seal or key replacement failed, or nil.
func (l *Log) SealErr() error {
	if p := l.sealErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Seal writes a log_sealed event for the current sealing epoch with reason
// (SealSchedule, SealStop) and moves to the next epoch, erasing the key. It
// returns nil without writing when the Log has no sealing key, or when
// nothing was written since the last seal and reason is SealSchedule.
func (l *Log) Seal(ctx context.Context, reason string) error {
	_, err := l.do(ctx, &request{op: opSeal, reason: reason, done: make(chan result, 1)})
	return err
}

// SetupSeals makes a new first sealing key pair, writes a log_sealed event
// signed with it (covering every event so far) and returns the verification
// key the person keeps. With a sealing key already (or an anchor left by
// one), it refuses with ErrSealKeysExist unless force: re-keying is itself
// sealed with the current key (a log_sealed event with reason SealRekey
// whose Next is the new key), so the holder of the old verification key
// follows the seals on.
func (l *Log) SetupSeals(ctx context.Context, force bool) (VerificationKey, error) {
	r := &request{op: opSetup, force: force, done: make(chan result, 1)}
	_, err := l.do(ctx, r)
	return r.vk, err
}

func (l *Log) setupLocked(force bool) (VerificationKey, error) {
	w := &l.w
	if l.opts.SealKeys == nil {
		return VerificationKey{}, fmt.Errorf("%w: this log has no place for a sealing key", ErrInvalid)
	}
	if w.failed != nil {
		return VerificationKey{}, w.failed
	}
	anchor, hasAnchor, _ := ReadAnchor(l.opts.AnchorPath)
	if !force && (w.sealKey != nil || hasAnchor) {
		return VerificationKey{}, fmt.Errorf("%w: re-keying needs --force", ErrSealKeysExist)
	}
	epoch := uint64(0)
	switch {
	case w.sealKey != nil:
		epoch = w.sealKey.Epoch + 1
	case hasAnchor:
		epoch = anchor.Epoch + 1
	}
	first, firstPub, err := newSealKey(epoch)
	if err != nil {
		return VerificationKey{}, err
	}
	if w.sealKey != nil {
		// The current key certifies the new first key.
		if err := l.sealLocked(SealRekey, first, firstPub); err != nil {
			return VerificationKey{}, err
		}
	} else {
		w.sealKey = &first
	}
	next, nextPub, err := newSealKey(epoch + 1)
	if err != nil {
		return VerificationKey{}, err
	}
	if err := l.sealLocked(SealSetup, next, nextPub); err != nil {
		return VerificationKey{}, err
	}
	return VerificationKey{Epoch: epoch, Public: firstPub}, nil
}

// sealLocked writes the seal of the current epoch, certifying nextPub, then
// makes next the current key, replacing (and erasing) the stored one.
func (l *Log) sealLocked(reason string, next SealKey, nextPub ed25519.PublicKey) error {
	w := &l.w
	cur := w.sealKey
	if cur == nil {
		return nil
	}
	if w.failed != nil {
		return w.failed
	}
	if files := l.swappedLocked(true); len(files) > 0 {
		if err := l.tamperedLocked(files, ""); err != nil {
			return err
		}
	}
	// The next key is stored (beside the current one) before the seal
	// certifying it is written: a crash after the seal is durable then
	// leaves both, and Open finishes the change (finishSealLocked).
	if err := l.opts.SealKeys.Replace(SealKey{Epoch: cur.Epoch, Private: cur.Private, Next: next.Private}); err != nil {
		err = fmt.Errorf("storing the next sealing key before the seal: %w", err)
		l.sealErr.Store(&err)
		return err
	}
	seq, prev := w.seq+1, w.prev
	ts := l.opts.Clock().UTC()
	tsText := string(ts.AppendFormat(nil, tsLayout))
	s := LogSealed{Epoch: cur.Epoch, Genesis: w.genesis, GenesisTS: w.genesisTS, Next: formatPublic(nextPub), Reason: reason}
	if seq == 1 {
		s.Genesis, s.GenesisTS = Genesis, tsText
	}
	s.Sig = edPrefix + fmt.Sprintf("%x", ed25519.Sign(cur.Private, SealMessage(seq, prev, tsText, s)))
	fields, err := canonicalFields(s)
	if err != nil {
		return err
	}
	evs, err := l.commitCheckedLocked([]item{{typ: TypeLogSealed, fields: fields, ts: ts}}, true)
	if err != nil {
		return err
	}
	// The seal is durable: the key that signed it goes.
	clear(cur.Private)
	w.sealKey = &next
	e := next.Epoch
	l.sealEpoch.Store(&e)
	w.sinceSeal = false
	var serr error
	if err := l.opts.SealKeys.Replace(next); err != nil {
		serr = fmt.Errorf("the next sealing key could not be stored (the daemon keeps it in memory; after a restart seals fail until `portcullis audit setup-keys --force`): %w", err)
	} else if l.opts.AnchorPath != "" {
		a := Anchor{Epoch: cur.Epoch, Seq: evs[0].Seq, Hash: evs[0].Hash, TS: ts, File: fileName(w.fileNum)}
		if err := writeAnchor(l.opts.AnchorPath, a); err != nil {
			serr = fmt.Errorf("writing the audit anchor: %w", err)
		}
	}
	if serr != nil {
		l.log.Error("audit seal", "err", serr)
		l.sealErr.Store(&serr)
	} else {
		l.sealErr.Store(nil)
	}
	return nil
}

// finishSealLocked is Open's part, once the tail is read: a stored key
// with a Next is a seal that was being written. If the log ends with that
// seal (certifying Next), the change is finished: Next becomes the key and
// the old one is erased. Otherwise the seal never reached the disk and the
// key stays. A key no newer than the anchor's seal is refused (an old key
// file put back: sealing with it would repeat an epoch).
func (l *Log) finishSealLocked() {
	w := &l.w
	k := w.sealKey
	if k == nil {
		return
	}
	if k.Next != nil {
		var s LogSealed
		nextPub := k.Next.Public().(ed25519.PublicKey)
		if w.lastSeal != nil && json.Unmarshal(w.lastSeal, &s) == nil && s.Epoch == k.Epoch && s.Next == formatPublic(nextPub) {
			nk := SealKey{Epoch: k.Epoch + 1, Private: k.Next}
			if err := l.opts.SealKeys.Replace(nk); err != nil {
				l.log.Error("finishing an interrupted seal", "err", err)
			}
			clear(k.Private)
			k = &nk
		} else {
			k = &SealKey{Epoch: k.Epoch, Private: k.Private}
		}
		w.sealKey = k
	}
	if a, ok, _ := ReadAnchor(l.opts.AnchorPath); ok && k.Epoch <= a.Epoch {
		err := fmt.Errorf("the stored sealing key is for epoch %d but seal epoch %d was written already: the log is not sealed until `portcullis audit setup-keys --force`", k.Epoch, a.Epoch)
		l.log.Error("audit sealing key", "err", err)
		l.sealErr.Store(&err)
		clear(k.Private)
		w.sealKey = nil
		return
	}
	e := k.Epoch
	l.sealEpoch.Store(&e)
}

func (l *Log) sealNowLocked(reason string) error {
	w := &l.w
	if w.sealKey == nil || reason == SealSchedule && !w.sinceSeal {
		return nil
	}
	next, pub, err := newSealKey(w.sealKey.Epoch + 1)
	if err != nil {
		return err
	}
	return l.sealLocked(reason, next, pub)
}

// Segment returns the name of the file the Log writes to now
// (audit-000001.jsonl): with an event's seq and hash, where HasEvent looks
// first.
func (l *Log) Segment() string {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return fileName(l.w.fileNum)
}
