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

// AuditSigning decides how a daemon signs the audit log in dir (DESIGN.md,
// "Audit log": an HMAC keyed by a credential-store secret, on by default
// where a credential store works). It returns the key to pass as
// Options.AuditKey, or a nil key and a note for the person saying why the
// log stays unsigned (for the daemon's log and `portcullis status`).
//
// The rule is that signing may start but never silently stops, because the
// verifier treats unsigned events after signed ones, and signatures made
// with another key, as tampering (audit.ProblemBadSignature):
//
//   - the key is in the store: sign with it;
//   - no key is stored and the log holds no signed event: create the key
//     (AuditKey) and sign; audit.Open closes an unsigned prefix with a
//     signing_enabled event;
//   - the store is locked or unavailable (or creating the key failed) and
//     the log holds no signed event: run unsigned and say so in the note;
//     the log is still hash-chained, and signing starts at the first daemon
//     start where the store works;
//   - the log's last event is signed but the key cannot be read (locked,
//     unavailable or deleted): an error wrapping ErrAuditKeyUnusable, with
//     what to do; the daemon must not start;
//   - the stored value is not a key (ErrBadAuditKey, secrets.ErrEmpty): that
//     error; the item is never overwritten.
//
// An error reading the log (other than its directory not existing yet) is
// returned as is.
func AuditSigning(store secrets.Store, dir string) (key []byte, note string, err error) {
	signed, err := auditLogSigned(dir)
	if err != nil {
		return nil, "", err
	}
	key, err = ReadAuditKey(store)
	if err == nil {
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
		if hint != "" {
			hint += ", or "
		}
		hint += "move " + dir + " aside to start a new audit log (`portcullis audit verify` still checks the old one's chain)"
		return nil, "", fmt.Errorf("%w: %w; %s", ErrAuditKeyUnusable, err, hint)
	}
	if errors.Is(err, secrets.ErrNotFound) {
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

// auditLogSigned reports whether the last event of the log in dir is
// signed; a missing directory or an empty log is not signed.
func auditLogSigned(dir string) (bool, error) {
	evs, err := audit.Tail(dir, 1)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the audit log: %w", err)
	}
	return len(evs) == 1 && evs[0].Sig != "", nil
}

// AuditStatus is the audit log's part of `portcullis status`.
type AuditStatus struct {
	// Dir is the audit directory.
	Dir string `json:"dir"`
	// Signed reports whether new events are signed (HMAC-SHA256).
	Signed bool `json:"signed"`
	// Note says why the log is not signed, when it is not.
	Note string `json:"note,omitempty"`
	// Error is set while the log cannot be written (audit.Log.Err): every
	// tool call is refused with audit_unavailable meanwhile.
	Error string `json:"error,omitempty"`
}

// auditStatus returns the state of the audit log for Status.
func (d *Daemon) auditStatus() AuditStatus {
	st := AuditStatus{Dir: AuditDir(d.opts.Dirs), Signed: d.opts.AuditKey != nil, Note: d.opts.AuditNote}
	if st.Signed {
		st.Note = ""
	} else if st.Note == "" {
		st.Note = "the audit log is not signed: the daemon was started without a key"
	}
	d.mu.Lock()
	al := d.audit
	d.mu.Unlock()
	if al != nil {
		if err := al.Err(); err != nil {
			st.Error = err.Error()
		}
	}
	// Not open yet: the daemon is starting, no call is served before the
	// log is open (a daemon that cannot open it stops), so there is no
	// failure to report.
	return st
}
