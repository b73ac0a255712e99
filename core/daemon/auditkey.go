package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/secrets"
)

// AuditKeyScope is the credential scope under which the audit log's signing
// key lives in the credential store (secrets.Store: the macOS Keychain, or a
// Secret Service on Linux). The stored value is the key as 64 lower-case
// hexadecimal digits, so that a person looking at the item sees text.
const AuditKeyScope = "portcullis-audit-hmac"

// AuditKeySize is the length in bytes of the audit log's HMAC-SHA256 key
// (RFC 2104 recommends at least the hash's output length, 32 bytes).
const AuditKeySize = 32

var (
	// ErrBadAuditKey means the value stored under AuditKeyScope is not
	// AuditKeySize bytes as hexadecimal digits: something else wrote it.
	// Portcullis never overwrites it.
	ErrBadAuditKey = errors.New("the stored audit key is not " + fmt.Sprint(2*AuditKeySize) + " hexadecimal digits")
	// ErrAuditKeyUnusable means the audit log already holds signed events
	// but its key cannot be read (store locked or unavailable, or the key
	// was deleted). Writing on unsigned, or signing with a new key, would
	// make every later verification fail, so the daemon does not start.
	ErrAuditKeyUnusable = errors.New("the audit log is signed but its key cannot be used")
)

// ReadAuditKey returns the audit log's HMAC-SHA256 key (AuditKeySize bytes)
// from store without ever creating one; `portcullis audit verify` uses it.
// Errors are the store's (matching secrets.ErrNotFound, ErrLocked,
// ErrUnavailable…) or wrap ErrBadAuditKey; they never contain the key.
func ReadAuditKey(store secrets.Store) ([]byte, error) {
	v, err := store.Get(AuditKeyScope)
	if err != nil {
		return nil, err
	}
	return decodeAuditKey(v)
}

// AuditKey returns the audit log's HMAC-SHA256 key (AuditKeySize bytes)
// from store, generating one from crypto/rand and storing it under
// AuditKeyScope when none is stored yet (Get reports secrets.ErrNotFound).
// Errors are the store's (matching secrets.ErrLocked, ErrUnavailable…) or
// wrap ErrBadAuditKey; they never contain the key.
//
// AuditKey does not look at the log: a daemon decides with AuditSigning,
// which refuses to create a new key for a log signed with a lost one.
func AuditKey(store secrets.Store) ([]byte, error) {
	key, err := ReadAuditKey(store)
	if errors.Is(err, secrets.ErrNotFound) {
		return createAuditKey(store)
	}
	return key, err
}

func createAuditKey(store secrets.Store) ([]byte, error) {
	key := make([]byte, AuditKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generating the audit key: %w", err)
	}
	if err := store.Set(AuditKeyScope, []byte(hex.EncodeToString(key))); err != nil {
		return nil, err
	}
	return key, nil
}

func decodeAuditKey(v []byte) ([]byte, error) {
	s := strings.TrimSpace(string(v))
	key, err := hex.DecodeString(s)
	if err != nil || len(key) != AuditKeySize {
		return nil, fmt.Errorf("credential scope %s: %w", AuditKeyScope, ErrBadAuditKey)
	}
	return key, nil
}

// AuditSigningOffNote is the audit note of `portcullis status` while
// settings.auditSigning is false.
const AuditSigningOffNote = "the audit log is not signed: signing is turned off in settings (settings.auditSigning)"

// auditSigningOffReason is the reason the signing_disabled event records.
const auditSigningOffReason = "settings.auditSigning is false"

// AuditSigning decides how a daemon signs the audit log in dir at its start
// (docs/DESIGN.md, "Audit log": an HMAC keyed by a credential-store secret, on by
// default where a credential store works), for settings.auditSigning on or
// off. It returns the key to pass as Options.AuditKey, and a note for the
// person saying why the log stays unsigned (for the daemon's log and
// `portcullis status`); Options.AuditSigner calls it with the setting in
// force.
//
// The rule is that signing may start but never silently stops, because the
// verifier treats unsigned events after signed ones as tampering unless a
// signed signing_disabled event precedes them, and signatures made with
// another key as tampering too (audit.ProblemBadSignature). "The log signs"
// below means that its last event is signed and is not signing_disabled.
//
// With on:
//
//   - the key is in the store: sign with it;
//   - no key is stored and no event of the log is signed: create the key
//     (AuditKey) and sign; audit.Open closes an unsigned prefix with a
//     signing_enabled event;
//   - no key is stored, the log does not sign but holds signed events (its
//     signing was turned off, then the key deleted): run unsigned with a
//     note, never with a new key, which would not verify them;
//   - the store is locked or unavailable (or creating the key failed) and
//     the log does not sign: run unsigned and say so in the note; the log
//     is still hash-chained, and signing starts at the first daemon start
//     where the store works;
//   - the log signs but the key cannot be read (locked, unavailable or
//     deleted): an error wrapping ErrAuditKeyUnusable, with what to do; the
//     daemon must not start.
//
// With off, the store is asked only when the log signs: the key is then
// returned with AuditSigningOffNote, for Serve to sign the signing_disabled
// event with it; when it cannot be read, an error wrapping
// ErrAuditKeyUnusable. A log that does not sign gives a nil key and
// AuditSigningOffNote.
//
// Either way, a stored value that is not a key (ErrBadAuditKey,
// secrets.ErrEmpty) is an error, and the item is never overwritten. An error
// reading the log (other than its directory not existing yet) is returned as
// is.
func AuditSigning(store secrets.Store, dir string, on bool) (key []byte, note string, err error) {
	signed, err := auditLogSigned(dir)
	if err != nil {
		return nil, "", err
	}
	if !on && !signed {
		return nil, AuditSigningOffNote, nil
	}
	key, err = ReadAuditKey(store)
	if err == nil {
		if !on {
			return key, AuditSigningOffNote, nil
		}
		return key, "", nil
	}
	if errors.Is(err, ErrBadAuditKey) || errors.Is(err, secrets.ErrEmpty) || errors.Is(err, secrets.ErrInvalidScope) {
		return nil, "", fmt.Errorf("reading the audit log's signing key: %w (remove the item %s from the credential store to let Portcullis create a new one)", err, AuditKeyScope)
	}
	if signed {
		hint := secrets.Hint(err)
		if errors.Is(err, secrets.ErrNotFound) {
			hint = "restore the item " + AuditKeyScope + " in the credential store"
		}
		if errors.Is(err, secrets.ErrUnavailable) {
			// The store does not answer here (no session bus, say): the
			// key is most likely still in it. Rotating is not the fix.
			if hint != "" {
				hint += "; "
			}
			hint += "the key stays in the credential store, and once this daemon can reach it (started from the person's session, where the store answers) it starts as before; only if the key is lost for good, run `portcullis audit rotate-key` (with no daemon running), which moves " + dir + " aside and starts a new signed log"
		} else {
			if hint != "" {
				hint += ", or "
			}
			hint += "run `portcullis audit rotate-key` (with no daemon running) to move " + dir + " aside and start a new signed log; the old one stays verifiable"
		}
		if !on {
			hint = "settings.auditSigning is false, and the signing_disabled event that turns signing off must be signed with it: " + hint
		}
		return nil, "", fmt.Errorf("%w: %w; %s", ErrAuditKeyUnusable, err, hint)
	}
	if errors.Is(err, secrets.ErrNotFound) {
		had, err := audit.HasSigned(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, "", fmt.Errorf("reading the audit log: %w", err)
		}
		if had {
			return nil, "the audit log is not signed: " + lostKeyText(dir), nil
		}
		if key, err = createAuditKey(store); err == nil {
			return key, "", nil
		}
	}
	note = "the audit log is not signed: its key cannot be kept in the credential store (" + err.Error() + "); the log is hash-chained all the same, and signing starts at the first daemon start where the credential store works"
	if h := secrets.Hint(err); h != "" {
		note += " (" + h + ")"
	}
	return nil, note, nil
}

// lostAuditKey is the error of a log in dir that does not sign now, whose
// earlier signed events' key is no longer stored: a new key would not verify
// them. It wraps ErrAuditKeyUnusable and secrets.ErrNotFound.
func lostAuditKey(dir string) error {
	return fmt.Errorf("%w (%w): %s", ErrAuditKeyUnusable, secrets.ErrNotFound, lostKeyText(dir))
}

// lostKeyText says why signing cannot resume on the log in dir, and what to
// do, when the key of its earlier signed events is gone.
func lostKeyText(dir string) string {
	return "the key " + AuditKeyScope + " that signed its earlier events is missing from the credential store, and a new key would not verify them; " +
		"restore the item, or stop Portcullis and run `portcullis audit rotate-key` to move " + dir + " aside and start a new signed log"
}

// auditKeyToResume returns the key to turn signing on with for the log in
// dir, which does not sign now: the stored one or, when none is stored and
// no event of the log is signed, a new one (stored under AuditKeyScope).
// Errors are the store's, one wrapping ErrBadAuditKey, lostAuditKey's, or
// reading the log.
func auditKeyToResume(store secrets.Store, dir string) ([]byte, error) {
	key, err := ReadAuditKey(store)
	if !errors.Is(err, secrets.ErrNotFound) {
		return key, err
	}
	had, err := audit.HasSigned(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	if had {
		return nil, lostAuditKey(dir)
	}
	return createAuditKey(store)
}

// auditLogSigned reports whether the log in dir signs: its last event is
// signed and is not signing_disabled. A missing directory or an empty log
// does not sign.
func auditLogSigned(dir string) (bool, error) {
	evs, err := audit.Tail(dir, 1)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the audit log: %w", err)
	}
	return len(evs) == 1 && evs[0].Sig != "" && evs[0].Type != audit.TypeSigningDisabled, nil
}

// AuditStatus is the audit log's part of `portcullis status`.
type AuditStatus struct {
	// Dir is the audit directory.
	Dir string `json:"dir"`
	// Signed reports whether new events are signed (HMAC-SHA256).
	Signed bool `json:"signed"`
	// Note says why the log is not signed, when it is not (such as
	// AuditSigningOffNote).
	Note string `json:"note,omitempty"`
	// SigningError is set while the log's signing differs from
	// settings.auditSigning because applying the setting failed (the key
	// could not be read or created, or the log could not be written); the
	// daemon tries again every 30 s, when the setting changes, and when the
	// log recovers.
	SigningError string `json:"signingError,omitempty"`
	// Error is set while the log cannot be written (audit.Log.Err): every
	// tool call is refused with audit_unavailable meanwhile.
	Error string `json:"error,omitempty"`
	// Tampered is set while a log_tampered event is not acknowledged
	// (`portcullis audit acknowledge`): no approval is asked meanwhile.
	Tampered string `json:"tampered,omitempty"`
	// Sealed reports whether the log holds a sealing key (set up with
	// `portcullis audit setup-keys`); SealEpoch is its epoch.
	Sealed    bool   `json:"sealed"`
	SealEpoch uint64 `json:"sealEpoch,omitempty"`
	// SealError says why the last seal could not complete.
	SealError string `json:"sealError,omitempty"`
}

// AuditStatus returns the state of the audit log, as Status reports it.
func (d *Daemon) AuditStatus() AuditStatus { return d.auditStatus() }

// auditStatus returns the state of the audit log for Status.
func (d *Daemon) auditStatus() AuditStatus {
	d.mu.Lock()
	al := d.audit
	note, signErr := d.auditNote, d.auditSignErr
	d.mu.Unlock()
	st := AuditStatus{Dir: AuditDir(d.opts.Dirs), Signed: d.opts.AuditKey != nil, SigningError: signErr}
	if al != nil {
		st.Signed = al.Signing()
		if err := al.Err(); err != nil {
			st.Error = err.Error()
		}
		if err := al.Tampered(); err != nil {
			st.Tampered = err.Error()
		}
		st.SealEpoch, st.Sealed = al.Sealing()
		if err := al.SealErr(); err != nil {
			st.SealError = err.Error()
		}
	}
	// Not open yet: the daemon is starting, no call is served before the
	// log is open (a daemon that cannot open it stops), so there is no
	// failure to report.
	if !st.Signed {
		switch {
		case note != "":
			st.Note = note
		case d.opts.AuditNote != "":
			st.Note = d.opts.AuditNote
		default:
			st.Note = "the audit log is not signed: the daemon was started without a key"
		}
	}
	return st
}
