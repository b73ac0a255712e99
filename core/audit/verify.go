package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Problems Verify reports in Report.Problem.
const (
	// ProblemEdited: an event's content no longer matches its hash, a line
	// is not a valid event, or an event was rewritten with a fresh hash so
	// that the next event's prev (or head.json) no longer matches it.
	ProblemEdited = "edited"
	// ProblemDeleted: sequence numbers are missing and do not appear later.
	ProblemDeleted = "deleted"
	// ProblemReordered: an event appears out of sequence order (or twice).
	ProblemReordered = "reordered"
	// ProblemTruncated: the log ends before the last committed event that
	// head.json records, or a file ends early while the next file exists, or
	// a torn region swallowed committed events.
	ProblemTruncated = "truncated"
	// ProblemTorn: the last line is a partial event not yet followed by
	// log_recovered (a crash while writing). Not a failure: every whole
	// event before it verified; the next Open records it.
	ProblemTorn = "torn"
	// ProblemBadSignature: an event lacks the signature it must carry (it
	// follows signed events and no signed signing_disabled turned signing
	// off; or it is a signing_enabled or signing_disabled event, which are
	// always signed), signing does not start or stop as the log says (a
	// signed event after signing_disabled or after unsigned events that is
	// not a signing_enabled naming the seq before it), or, with a key, an
	// event's or head.json's signature is wrong.
	ProblemBadSignature = "bad-signature"
	// ProblemTampered: the daemon recorded (log_tampered) that files of
	// the log were replaced or deleted under it, and the person has not
	// acknowledged it.
	ProblemTampered = "tampered"
	// ProblemEmpty: with a verification key, the log holds no event: it
	// was deleted (setting up keys writes a seal at once).
	ProblemEmpty = "empty"
	// ProblemStartsLate: with a verification key, the log does not reach
	// back to the seal the key proves (its first epoch) or to the genesis
	// that seal names: its beginning was deleted or it was replaced.
	ProblemStartsLate = "starts-late"
	// ProblemEndsEarly: with a verification key and an anchor, the log
	// ends before the last seal the anchor records.
	ProblemEndsEarly = "ends-early"
	// ProblemBadSeal: with a verification key, a seal does not verify
	// with the key certified before it, epochs do not follow each other,
	// or a seal names another genesis.
	ProblemBadSeal = "bad-seal"
	// ProblemUnsealed: with a verification key, the log holds no seal the
	// key proves.
	ProblemUnsealed = "unsealed"
)

// VerifyOptions configures VerifyWith.
type VerifyOptions struct {
	// Key is the HMAC-SHA256 key (nil: signatures not checked), as for
	// Verify.
	Key []byte
	// Seal is the person's verification key; nil: seals are not checked.
	Seal *VerificationKey
	// Anchor, with Seal, is the last seal the daemon recorded outside the
	// log (ReadAnchor); nil: none.
	Anchor *Anchor
}

// Seals is what VerifyWith found of the log's forward-secure seals.
type Seals struct {
	// Count is the number of log_sealed events; Proven those checked
	// with the verification key (from its epoch on).
	Count, Proven int
	// Earlier counts seals of epochs before the verification key's (a
	// re-keyed log): only the hash chain covers them.
	Earlier int
	// Last is the last proven seal (Epoch, Seq, Hash, TS); zero when none.
	Last Anchor
	// UnsealedFrom is the first event after the last proven seal (0: the
	// log ends with it): events from there on are covered only by the
	// hash chain (and HMAC), which the holder of the current key can
	// rewrite.
	UnsealedFrom uint64
}

// ErrBroken is wrapped by the error Verify returns when the log fails
// verification; the Report says where and how.
var ErrBroken = errors.New("audit log verification failed")

// Report is the outcome of Verify.
type Report struct {
	// Events is the number of events that verified (before FirstBad).
	Events uint64
	// Files is the number of log files found.
	Files int
	// FirstBad is the first sequence number at which the log departs from an
	// intact chain (for a deleted or truncated range, the first missing one);
	// 0 when Problem is empty.
	FirstBad uint64
	// Problem is one of the Problem constants, or empty.
	Problem string
	// Detail says in words what is wrong, naming files and byte offsets.
	Detail string
	// Signed reports whether signatures were checked (a key was given).
	Signed bool
	// Unsigned counts events before signing_enabled that carry no signature
	// (a log that began before a key existed); only set when Signed.
	Unsigned uint64
	// SignedEvents counts the events that carry a signature, whether or not
	// it could be checked: a log with signed events verified without the
	// key proves only its hash chain, which anyone can recompute.
	SignedEvents uint64
	// SigningOff lists the stretches, oldest first, that were written with
	// signing turned off (Log.DisableSigning): their events carry no
	// signature, so someone who could write the files then could have
	// forged them. The last one has Enabled 0 when the log still ends with
	// signing off.
	SigningOff []SigningOff
	// Recovered lists torn regions that Open recorded with log_recovered.
	Recovered []Recovered
	// SealEvents counts log_sealed events, checked or not.
	SealEvents uint64
	// Seals is set when a verification key was given.
	Seals *Seals
	// Tampered lists the log_tampered events the person acknowledged.
	Tampered []uint64
	// Warnings are conditions that are not failures (such as a missing
	// head.json, which makes trailing truncation undetectable).
	Warnings []string
}

// SigningOff is a stretch of the log written with signing turned off: from
// the signed signing_disabled event at seq Disabled to the signing_enabled
// event at seq Enabled (0: to the end of the log). Reason is the one
// signing_disabled recorded.
type SigningOff struct {
	Disabled uint64
	Enabled  uint64
	Reason   string
}

// Recovered is a torn region found by Verify together with the seq of the
// log_recovered event that accounts for it.
type Recovered struct {
	Seq    uint64 // of the log_recovered event
	File   string
	Offset int64
	Length int64
}

// Failed reports whether the report describes a broken log. A torn last line
// alone is not a failure.
func (r Report) Failed() bool { return r.Problem != "" && r.Problem != ProblemTorn }

// Verify checks the log in dir: every event's hash against its content
// (which must be canonical RFC 8785 JSON), the prev links and sequence
// numbers across all files, signatures when key is non-nil, and the chain's
// end against head.json. It stops at the first problem.
//
// With or without the key it checks where signatures may be missing: an
// unsigned prefix must be closed by signing_enabled, and once events are
// signed every later one is, except after a signed signing_disabled, until
// a signing_enabled (listed in Report.SigningOff). With a key, a log none of
// whose events is signed fails. The error is nil for
// a log that verifies (possibly with a torn last line, Problem "torn"), wraps
// ErrBroken when the log fails (the Report holds FirstBad, Problem and
// Detail), and is any other error when dir cannot be read.
func Verify(dir string, key []byte) (Report, error) {
	return VerifyWith(dir, VerifyOptions{Key: key})
}

// VerifyWith is Verify with the options of o: with o.Seal it also checks
// every seal from the verification key's epoch on (see LogSealed), the
// genesis the first proven seal names, and, with o.Anchor, that the log
// reaches the last seal recorded outside it. A log that is empty, has no
// seal the key proves, starts after that seal's genesis or ends before the
// anchor's seal fails (ProblemEmpty, ProblemUnsealed, ProblemStartsLate,
// ProblemEndsEarly).
func VerifyWith(dir string, o VerifyOptions) (Report, error) {
	key := o.Key
	files, err := listFiles(dir)
	if err != nil {
		return Report{}, fmt.Errorf("audit: verifying %s: %w", dir, err)
	}
	v := &verifier{
		files:    files,
		enc:      newEncoder(nil),
		expected: 1,
		prev:     Genesis,
		rep:      Report{Files: len(files), Signed: key != nil},
	}
	if key != nil {
		v.mac = newEncoder(key)
	}
	if o.Seal != nil {
		v.seal, v.anchor = o.Seal, o.Anchor
		v.sealKey = o.Seal.Public
		v.nextEpoch = o.Seal.Epoch
		v.rep.Seals = &Seals{}
	}
	v.head, v.hasHead, err = readHead(dir)
	if err != nil {
		return v.rep, fmt.Errorf("audit: reading %s: %w", headName, err)
	}
	if err := v.run(); err != nil {
		return v.rep, err
	}
	if v.seal != nil && v.rep.Problem == ProblemDeleted && v.rep.FirstBad == 1 {
		v.rep.Problem = ProblemStartsLate
	}
	if v.rep.Failed() {
		return v.rep, fmt.Errorf("%w: seq %d %s: %s", ErrBroken, v.rep.FirstBad, v.rep.Problem, v.rep.Detail)
	}
	return v.rep, nil
}

type verifier struct {
	tsBuf    []byte // parse: a line's ts formatted again
	files    []logFile
	enc, mac *encoder
	expected uint64
	prev     string
	rep      Report

	head        head
	hasHead     bool
	headMatched bool
	headLineSig string // the signature of the event head.json names

	seal      *VerificationKey
	anchor    *Anchor
	sealKey   []byte // the key the next proven seal verifies with
	nextEpoch uint64
	proven    bool   // a seal of the key's epoch verified
	genesis   string // hash of seq 1
	genesisTS string
	tamper    uint64 // unacknowledged log_tampered
	anchorHit bool

	mode          signMode
	firstUnsigned uint64 // first event of the unsigned prefix, 0 when none

	// position of the line being examined, for the lookahead
	fi int
	lr *lineReader
	f  *os.File
}

// signMode is what the events before the one being checked say of its
// signature.
type signMode int

const (
	// modePrefix: no event so far is signed; unsigned events may follow,
	// and the first signed one must be signing_enabled when any did.
	modePrefix signMode = iota
	// modeOn: the last event is signed: the next one must be signed.
	modeOn
	// modeOff: after a signed signing_disabled: unsigned events may follow,
	// and the first signed one must be signing_enabled.
	modeOff
)

func (v *verifier) fail(seq uint64, problem, format string, args ...any) {
	v.rep.FirstBad, v.rep.Problem, v.rep.Detail = seq, problem, fmt.Sprintf(format, args...)
	if seq > 0 && v.rep.Events > seq-1 {
		v.rep.Events = seq - 1 // events from FirstBad on are not verified
	}
}

func (v *verifier) run() error {
	defer func() {
		if v.f != nil {
			v.f.Close()
		}
	}()
	for v.fi = 0; v.fi < len(v.files); v.fi++ {
		lf := v.files[v.fi]
		if lf.num != v.fi+1 {
			v.fail(v.expected, ProblemDeleted, "file %s is missing", fileName(v.fi+1))
			return nil
		}
		if v.f != nil {
			v.f.Close()
		}
		f, err := os.Open(lf.path)
		if err != nil {
			return fmt.Errorf("audit: verifying: %w", err)
		}
		v.f, v.lr = f, newLineReader(f, 0)
		firstLine := true
		for {
			b, off, term, err := v.lr.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("audit: verifying %s: %w", lf.name, err)
			}
			l, ok := v.parse(b)
			if !ok {
				done, err := v.torn(lf, off, term)
				if err != nil || done {
					return err
				}
				firstLine = false
				continue
			}
			if !v.check(lf, l, firstLine) {
				return nil
			}
			firstLine = false
		}
	}
	v.finish()
	return nil
}

// parse parses and validates one line; ok is false for a line that is not a
// well-formed canonical event.
func (v *verifier) parse(b []byte) (line, bool) {
	l, err := parseLine(b)
	if err != nil || !isCanonical(l.fields) {
		return l, false
	}
	ts, err := time.Parse(time.RFC3339Nano, string(l.ts))
	if err != nil || ts.Location() != time.UTC {
		return l, false
	}
	v.tsBuf = ts.AppendFormat(v.tsBuf[:0], time.RFC3339Nano)
	if !bytes.Equal(l.ts, v.tsBuf) {
		return l, false
	}
	return l, true
}

// check verifies one parsed event; false means a problem was recorded.
func (v *verifier) check(lf logFile, l line, firstLine bool) bool {
	if !v.enc.hashIs(l.prev, l.open, l.hash) {
		v.fail(v.expected, ProblemEdited, "the event in place of seq %d in %s does not match its hash", v.expected, lf.name)
		return false
	}
	if l.seq != v.expected {
		v.gap(lf, l, firstLine)
		return false
	}
	if l.prev != v.prev {
		bad := v.expected - 1
		if bad == 0 {
			bad = 1
		}
		v.fail(bad, ProblemEdited, "seq %d records prev %s but seq %d hashes to %s: seq %d was rewritten", l.seq, l.prev, v.expected-1, v.prev, bad)
		return false
	}
	// After the chain checks, so that a deleted or reordered event is
	// reported as such rather than as the signature it leaves missing.
	if !v.checkSig(l) {
		return false
	}
	if l.seq == 1 {
		v.genesis, v.genesisTS = l.hash, string(l.ts)
	}
	switch l.typ {
	case TypeLogSealed:
		v.rep.SealEvents++
		if !v.checkSeal(l) {
			return false
		}
	case TypeLogTampered:
		v.tamper = l.seq
	case TypeLogTamperAcknowledged:
		var a LogTamperAcknowledged
		if json.Unmarshal(l.fields, &a) == nil && a.Seq == v.tamper && v.tamper != 0 {
			v.rep.Tampered = append(v.rep.Tampered, v.tamper)
			v.tamper = 0
		}
	}
	if v.hasHead && l.seq == v.head.Seq {
		v.headMatched = l.hash == v.head.Hash
		v.headLineSig = l.sig
	}
	if l.typ == TypeLogRecovered {
		var rec LogRecovered
		if json.Unmarshal(l.fields, &rec) == nil && rec.HeadSeq > rec.After {
			v.fail(rec.After+1, ProblemTruncated, "log_recovered at seq %d: head.json had recorded seq %d as committed but the log ended at seq %d", l.seq, rec.HeadSeq, rec.After)
			return false
		}
	}
	v.prev = l.hash
	v.expected++
	v.rep.Events++
	return true
}

// checkSig checks l's signature, with the key when there is one, and that
// it is signed where it must be (see signMode).
func (v *verifier) checkSig(l line) bool {
	if l.sig == "" {
		switch {
		case l.typ == TypeSigningEnabled || l.typ == TypeSigningDisabled:
			v.fail(l.seq, ProblemBadSignature, "seq %d is a %s event without a signature: only the key's holder turns signing on or off", l.seq, l.typ)
			return false
		case v.mode == modeOn:
			v.fail(l.seq, ProblemBadSignature, "seq %d is unsigned but follows signed events, and no signing_disabled turned signing off", l.seq)
			return false
		case v.mode == modePrefix:
			if v.firstUnsigned == 0 {
				v.firstUnsigned = l.seq
			}
			if v.mac != nil {
				v.rep.Unsigned++
			}
		}
		return true
	}
	v.rep.SignedEvents++
	if v.mac != nil && !v.mac.signatureIs(l.hash, l.sig) {
		v.fail(l.seq, ProblemBadSignature, "seq %d has a signature that does not match the key", l.seq)
		return false
	}
	// Where signing starts again, the event must be a signing_enabled
	// naming the seq before it; nowhere else may one appear.
	closing := v.mode == modeOff || v.mode == modePrefix && v.firstUnsigned != 0
	var se SigningEnabled
	enabled := l.typ == TypeSigningEnabled && json.Unmarshal(l.fields, &se) == nil && se.UnsignedThrough+1 == l.seq
	switch {
	case l.typ == TypeSigningEnabled && !enabled:
		v.fail(l.seq, ProblemBadSignature, "seq %d is a signing_enabled event whose unsignedThrough is not %d", l.seq, l.seq-1)
		return false
	case closing && !enabled && v.mode == modeOff:
		off := v.rep.SigningOff[len(v.rep.SigningOff)-1].Disabled
		v.fail(l.seq, ProblemBadSignature, "seq %d is signed but signing was turned off at seq %d and not turned on again by a signing_enabled event", l.seq, off)
		return false
	case closing && !enabled:
		v.fail(v.firstUnsigned, ProblemBadSignature, "seq %d to %d are unsigned and not closed by a signing_enabled event", v.firstUnsigned, l.seq-1)
		return false
	case !closing && enabled:
		v.fail(l.seq, ProblemBadSignature, "seq %d is a signing_enabled event but signing was on", l.seq)
		return false
	}
	if v.mode == modeOff {
		v.rep.SigningOff[len(v.rep.SigningOff)-1].Enabled = l.seq
	}
	v.mode = modeOn
	if l.typ == TypeSigningDisabled {
		var sd SigningDisabled
		_ = json.Unmarshal(l.fields, &sd) // the reason is only reported
		v.rep.SigningOff = append(v.rep.SigningOff, SigningOff{Disabled: l.seq, Reason: sd.Reason})
		v.mode = modeOff
	}
	return true
}

// gap classifies a sequence number that is not the expected one.
func (v *verifier) gap(lf logFile, l line, firstLine bool) {
	exp := v.expected
	if l.seq < exp {
		v.fail(exp, ProblemReordered, "seq %d appears where seq %d was expected (after seq %d)", l.seq, exp, exp-1)
		return
	}
	where, found := v.findLater(exp)
	switch {
	case found:
		v.fail(exp, ProblemReordered, "seq %d appears where seq %d was expected; seq %d comes later, in %s", l.seq, exp, exp, where)
	case firstLine && v.fi > 0:
		v.fail(exp, ProblemTruncated, "%s ends at seq %d but %s starts at seq %d", v.files[v.fi-1].name, exp-1, lf.name, l.seq)
	default:
		v.fail(exp, ProblemDeleted, "seq %d to %d are missing: seq %d follows seq %d in %s", exp, l.seq-1, l.seq, exp-1, lf.name)
	}
}

// findLater reads the rest of the log looking for seq; it consumes the
// current reader.
func (v *verifier) findLater(seq uint64) (string, bool) {
	lr, name := v.lr, v.files[v.fi].name
	for fi := v.fi; ; {
		for {
			b, _, _, err := lr.next()
			if err != nil {
				break
			}
			if l, err := parseLine(b); err == nil && l.seq == seq {
				return name, true
			}
		}
		fi++
		if fi >= len(v.files) {
			return "", false
		}
		f, err := os.Open(v.files[fi].path)
		if err != nil {
			return "", false
		}
		defer f.Close()
		lr, name = newLineReader(f, 0), v.files[fi].name
	}
}

// torn handles a line at off that is not an event: either the start of a
// region that a following log_recovered accounts for, or a torn tail, or
// an edit. term says the line ended with a newline: a torn write ends
// inside its last line, so whole lines that are not events are an edit,
// at the end of the log or recorded by log_recovered alike. done reports
// that verification ended.
func (v *verifier) torn(lf logFile, off int64, term bool) (done bool, err error) {
	// Skip to the next well-formed event in this file.
	for {
		b, next, _, err := v.lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return true, fmt.Errorf("audit: verifying %s: %w", lf.name, err)
		}
		l, ok := v.parse(b)
		if !ok {
			continue
		}
		var rec LogRecovered
		if l.typ != TypeLogRecovered || json.Unmarshal(l.fields, &rec) != nil ||
			rec.File != lf.name || rec.Offset != off || !regionMatches(v.f, off, next, rec) {
			v.fail(v.expected, ProblemEdited, "%s byte %d: a line that is not a valid event", lf.name, off)
			return true, nil
		}
		if rec.Complete {
			v.fail(v.expected, ProblemEdited, "%s byte %d: %d bytes of whole lines that are not events, recorded by log_recovered at seq %d (a crash leaves only a partial last line)", lf.name, off, rec.Length, l.seq)
			return true, nil
		}
		v.rep.Recovered = append(v.rep.Recovered, Recovered{Seq: l.seq, File: lf.name, Offset: off, Length: rec.Length})
		return !v.check(lf, l, false), nil
	}
	// The region runs to the end of the file.
	if v.fi != len(v.files)-1 {
		v.fail(v.expected, ProblemTruncated, "%s ends with a partial line at byte %d and the log continues in %s", lf.name, off, v.files[v.fi+1].name)
		return true, nil
	}
	if term {
		v.fail(v.expected, ProblemEdited, "%s byte %d: whole lines at the end that are not events (a crash leaves only a partial last line)", lf.name, off)
		return true, nil
	}
	v.finish()
	if v.rep.Problem == "" {
		v.fail(v.expected, ProblemTorn, "%s ends with a partial line at byte %d, not yet recovered", lf.name, off)
	}
	return true, nil
}

// regionMatches checks that bytes [off, next) of f are the torn bytes rec
// describes, plus the newline recovery may have added.
func regionMatches(f *os.File, off, next int64, rec LogRecovered) bool {
	n := next - off
	if rec.Length != n && rec.Length != n-1 {
		return false
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, off, rec.Length)); err != nil {
		return false
	}
	return hashPrefix+hex.EncodeToString(h.Sum(nil)) == rec.Digest
}

// checkSeal checks a log_sealed event when a verification key was given.
func (v *verifier) checkSeal(l line) bool {
	v.rep.Seals.add()
	if v.seal == nil {
		return true
	}
	var s LogSealed
	if json.Unmarshal(l.fields, &s) != nil {
		v.fail(l.seq, ProblemBadSeal, "seq %d is a log_sealed event whose fields do not decode", l.seq)
		return false
	}
	ss := v.rep.Seals
	if !v.proven && s.Epoch < v.seal.Epoch {
		ss.Earlier++ // before a re-keying: not the key's to prove
		return true
	}
	if !v.proven && s.Epoch > v.seal.Epoch {
		v.fail(1, ProblemStartsLate, "the first seal the verification key could prove is epoch %d, but the log's seals reach epoch %d at seq %d without it: the log was replaced, or its beginning deleted", v.seal.Epoch, s.Epoch, l.seq)
		return false
	}
	if s.Epoch != v.nextEpoch {
		v.fail(l.seq, ProblemBadSeal, "seq %d seals epoch %d where epoch %d was due: a seal was removed or repeated", l.seq, s.Epoch, v.nextEpoch)
		return false
	}
	sig, ok := parseEdSig(s.Sig)
	if !ok || !ed25519.Verify(v.sealKey, SealMessage(l.seq, l.prev, string(l.ts), s), sig) {
		who := "the verification key"
		if v.proven {
			who = fmt.Sprintf("the key seal epoch %d certified", s.Epoch-1)
		}
		v.fail(l.seq, ProblemBadSeal, "seal epoch %d at seq %d does not verify with %s: the events it covers (seq 1 to %d) were rewritten, or it was forged", s.Epoch, l.seq, who, l.seq-1)
		return false
	}
	wantGen, wantTS := v.genesis, v.genesisTS
	if l.seq == 1 {
		wantGen, wantTS = Genesis, string(l.ts)
	}
	if s.Genesis != wantGen || s.GenesisTS != wantTS {
		v.fail(1, ProblemStartsLate, "seal epoch %d names the genesis %s at %s, but the log's first event is %s at %s: the log starts later than its genesis", s.Epoch, s.Genesis, s.GenesisTS, wantGen, wantTS)
		return false
	}
	next, ok := parsePublic(s.Next)
	if !ok {
		v.fail(l.seq, ProblemBadSeal, "seal epoch %d at seq %d certifies no valid next key", s.Epoch, l.seq)
		return false
	}
	v.proven = true
	v.sealKey, v.nextEpoch = next, s.Epoch+1
	ss.Proven++
	ss.Last = Anchor{Epoch: s.Epoch, Seq: l.seq, Hash: l.hash}
	if t, err := time.Parse(time.RFC3339Nano, string(l.ts)); err == nil {
		ss.Last.TS = t
	}
	ss.UnsealedFrom = 0
	if v.anchor != nil && v.anchor.Epoch == s.Epoch {
		if v.anchor.Seq != l.seq || v.anchor.Hash != l.hash {
			v.fail(l.seq, ProblemEdited, "the anchor records seal epoch %d as seq %d with hash %s, but the log has it at seq %d with hash %s", s.Epoch, v.anchor.Seq, v.anchor.Hash, l.seq, l.hash)
			return false
		}
		v.anchorHit = true
	}
	return true
}

func (s *Seals) add() {
	if s != nil {
		s.Count++
	}
}

// finish compares the end of the chain with head.json.
func (v *verifier) finish() {
	if v.rep.Problem != "" {
		return
	}
	last := v.expected - 1
	if v.tamper != 0 {
		v.fail(v.tamper, ProblemTampered, "seq %d is a log_tampered event the person has not acknowledged: the daemon found files of the log replaced or deleted under it", v.tamper)
		return
	}
	if v.seal != nil {
		ss := v.rep.Seals
		switch {
		case last == 0:
			v.fail(1, ProblemEmpty, "the log holds no event, but a verification key exists (setting up keys seals the log at once): the log was deleted")
			return
		case !v.proven:
			v.fail(1, ProblemUnsealed, "no seal of epoch %d (the verification key's) is in the log (%d seals found): the log was replaced, or sealed with another key", v.seal.Epoch, ss.Count)
			return
		case v.anchor != nil && v.anchor.Epoch >= v.nextEpoch:
			v.fail(last+1, ProblemEndsEarly, "the anchor records seal epoch %d at seq %d, but the log ends at seq %d after seal epoch %d: its end was cut off", v.anchor.Epoch, v.anchor.Seq, last, v.nextEpoch-1)
			return
		}
		if ss.Last.Seq < last {
			ss.UnsealedFrom = ss.Last.Seq + 1
		}
	}
	if v.mac != nil && v.mode == modePrefix && v.rep.Unsigned > 0 {
		v.fail(v.firstUnsigned, ProblemBadSignature, "the log is not signed (seq %d to %d carry no signature)", v.firstUnsigned, last)
		return
	}
	if !v.hasHead {
		if last > 0 {
			v.rep.Warnings = append(v.rep.Warnings, fmt.Sprintf("%s is missing or unreadable: loss of whole trailing events cannot be detected", headName))
		}
		return
	}
	switch {
	case v.head.Seq > last:
		v.fail(last+1, ProblemTruncated, "%s records seq %d as committed but the log ends at seq %d", headName, v.head.Seq, last)
	case !v.headMatched:
		v.fail(v.head.Seq, ProblemEdited, "seq %d does not have the hash %s records", v.head.Seq, headName)
	case v.head.Sig != v.headLineSig:
		// The Log copies the event's signature into head.json: a head
		// without it (or with another) was written by someone else,
		// such as one who cut events off the end and wrote a head to
		// match (one who copies the signature too is not caught here).
		v.fail(v.head.Seq, ProblemEdited, "%s does not carry the signature of seq %d: it was rewritten (events after seq %d may have been cut off)", headName, v.head.Seq, v.head.Seq)
	case v.mac != nil && v.head.Sig != "" && !hmac.Equal([]byte(v.mac.sign(v.head.Hash)), []byte(v.head.Sig)):
		v.fail(v.head.Seq, ProblemBadSignature, "%s has a signature that does not match the key", headName)
	}
}
