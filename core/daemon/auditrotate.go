package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/secrets"
)

// ErrNothingToRotate is returned by RotateAuditLog when the log's key can
// be used (or the log is not signed): there is nothing to rotate.
var ErrNothingToRotate = errors.New("nothing to rotate")

// RotatedAuditLog says where RotateAuditLog moved the old log.
type RotatedAuditLog struct {
	// Dir is the old log's directory now; it holds the anchor of its last
	// seal (anchor.json) when it was sealed.
	Dir string `json:"dir"`
	// Sealed reports whether the old log had an anchor: its seals verify
	// with the verification key the person kept.
	Sealed bool `json:"sealed"`
	// KeyMissing reports whether the HMAC key was missing (true) or its
	// stored value unusable and deleted (false).
	KeyMissing bool `json:"keyMissing"`
}

// RotateAuditLog is `portcullis audit rotate-key`, for a data directory
// whose signed audit log cannot go on because the HMAC key that signed it
// is gone from the credential store (or its stored value is not a key): a
// new key would not verify the old events, so the daemon refuses to start
// on that log. It moves the log aside — the audit directory to
// audit.rotated-TIME, with the anchor of its last seal inside it — and
// removes what would tie a new log to the old one (the unusable key item,
// the sealing key, whose past seals the verification key still proves);
// the next daemon start begins a new log signed with a new key. The old log
// stays verifiable: its hash chain and seals always, its signatures with
// the old key if it is found again.
//
// It refuses, changing nothing, when the key can be used or the store is
// locked or unavailable (a new key could not be stored either: unlock it),
// and when no log is signed. The caller makes sure no daemon runs.
func RotateAuditLog(dirs paths.Dirs, store secrets.Store, now time.Time) (RotatedAuditLog, error) {
	dir := AuditDir(dirs)
	signed, err := audit.HasSigned(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !signed) {
		return RotatedAuditLog{}, fmt.Errorf("%w: no event of the audit log in %s is signed, so no key of it can be lost", ErrNothingToRotate, dir)
	}
	if err != nil {
		return RotatedAuditLog{}, fmt.Errorf("reading the audit log: %w", err)
	}
	_, err = ReadAuditKey(store)
	switch {
	case err == nil:
		return RotatedAuditLog{}, fmt.Errorf("%w: the key %s that signs the audit log is in the credential store and works", ErrNothingToRotate, AuditKeyScope)
	case errors.Is(err, secrets.ErrNotFound), errors.Is(err, ErrBadAuditKey):
	default:
		hint := secrets.Hint(err)
		if hint == "" {
			hint = "make the credential store usable"
		}
		return RotatedAuditLog{}, fmt.Errorf("the credential store cannot be read (%w), so a new key could not be kept either; %s, then start Portcullis again: the old key may well be there; nothing was changed", err, hint)
	}
	r := RotatedAuditLog{Dir: filepath.Join(dirs.State, "audit.rotated-"+now.UTC().Format("20060102T150405Z")), KeyMissing: errors.Is(err, secrets.ErrNotFound)}
	if _, err := os.Lstat(r.Dir); err == nil {
		return RotatedAuditLog{}, fmt.Errorf("%s exists already; try again in a second; nothing was changed", r.Dir)
	}
	if err := os.Rename(dir, r.Dir); err != nil {
		return RotatedAuditLog{}, fmt.Errorf("moving the audit log aside: %w; nothing was changed", err)
	}
	// From here on the old log is aside: report what could not be cleaned
	// up, but keep going.
	var errs []error
	if err := forgetHead(dirs); err != nil {
		errs = append(errs, fmt.Errorf("the run record %s still names an event of the old log (the next start reports it as log_tampered): %w", RunRecordPath(dirs), err))
	}
	switch err := os.Rename(AnchorPath(dirs), filepath.Join(r.Dir, "anchor.json")); {
	case err == nil:
		r.Sealed = true
	case !errors.Is(err, fs.ErrNotExist):
		errs = append(errs, fmt.Errorf("moving the seal anchor into %s: %w (move %s there yourself before the daemon starts)", r.Dir, err, AnchorPath(dirs)))
	}
	if !r.KeyMissing {
		if err := store.Delete(AuditKeyScope); err != nil && !errors.Is(err, secrets.ErrNotFound) {
			errs = append(errs, fmt.Errorf("deleting the unusable key %s: %w", AuditKeyScope, err))
		}
	}
	if runtime.GOOS == "darwin" {
		if err := store.Delete(AuditSealScope); err != nil && !errors.Is(err, secrets.ErrNotFound) {
			errs = append(errs, fmt.Errorf("deleting the old sealing key %s: %w", AuditSealScope, err))
		}
	} else if err := os.Remove(SealKeyPath(dirs)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("deleting the old sealing key: %w", err))
	}
	return r, errors.Join(errs...)
}
