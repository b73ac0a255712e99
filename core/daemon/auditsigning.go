package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The audit log's signing follows settings.auditSigning (config.Settings):
// AuditSigning decides the key at the start (Options.AuditSigner),
// startAuditSigning turns signing off at once when the setting is off and
// the log signs, and followAuditSigning applies every later change of the
// setting to the open log. A failure never weakens the log: a log that
// cannot be turned off keeps signing, and one that cannot be turned on stays
// as it is; either way status says why (AuditStatus.SigningError).

// kickSigning asks followAuditSigning to bring the log's signing in line
// with settings.auditSigning.
func (d *Daemon) kickSigning() {
	select {
	case d.signKick <- struct{}{}:
	default: // one is pending already
	}
}

// startAuditSigning is Serve's part, once the log is open: with
// settings.auditSigning false and a log that signs (opened with the key, see
// AuditSigning), it writes the signing_disabled event. An error means the
// daemon must not start (the log could not be written). Turning signing on
// is left to AuditSigning, which asked the credential store already.
func (d *Daemon) startAuditSigning(ctx context.Context) error {
	d.signMu.Lock()
	defer d.signMu.Unlock()
	d.mu.Lock()
	on, al := d.cfg.Settings.AuditSigningOn(), d.audit
	d.mu.Unlock()
	if on || !al.Signing() {
		return nil
	}
	if err := al.DisableSigning(ctx, auditSigningOffReason); err != nil {
		return fmt.Errorf("turning audit signing off (settings.auditSigning is false): %w", err)
	}
	d.setAuditSigning(AuditSigningOffNote, "")
	return nil
}

// signRetry is how often a change of settings.auditSigning that could not
// be applied (a locked keychain, a log that could not be written) is tried
// again, until it is.
var signRetry = 30 * time.Second // a variable for tests

// followAuditSigning applies settings.auditSigning to the open log each
// time kickSigning is called, and every signRetry while the last attempt
// failed, until ctx ends (a service).
func (d *Daemon) followAuditSigning(ctx context.Context) error {
	// The retry timer runs only while the last attempt failed: an idle
	// daemon whose signing is in order is not woken.
	retry := time.NewTimer(signRetry)
	defer retry.Stop()
	d.mu.Lock()
	failing := d.auditSignErr != ""
	d.mu.Unlock()
	if !failing {
		retry.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.signKick:
		case <-retry.C:
		}
		err := d.applyAuditSigning(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Error("the audit log's signing does not follow settings.auditSigning; tried again every "+signRetry.String(), "err", err)
		}
		d.mu.Lock()
		failing = d.auditSignErr != ""
		d.mu.Unlock()
		if failing {
			retry.Reset(signRetry)
		} else {
			retry.Stop()
		}
		d.notify()
	}
}

// applyAuditSigning brings the open log's signing in line with
// settings.auditSigning of the configuration in force: off writes a signed
// signing_disabled (audit.Log.DisableSigning); on reads the key from the
// credential store, or creates it as AuditSigning would (auditKeyToResume),
// and writes a signed signing_enabled (audit.Log.EnableSigning). It records
// the outcome for auditStatus and returns the failure.
func (d *Daemon) applyAuditSigning(ctx context.Context) error {
	d.signMu.Lock()
	defer d.signMu.Unlock()
	d.mu.Lock()
	on, al, aw := d.cfg.Settings.AuditSigningOn(), d.audit, d.auditW
	d.mu.Unlock()
	if al == nil {
		return nil // Serve has not opened the log yet; it applies the setting then
	}
	if al.Signing() == on {
		if on {
			d.setAuditSigning("", "")
		} else {
			// Unsigned already (the store did not work, or it was off):
			// the setting now says why.
			d.setAuditSigning(AuditSigningOffNote, "")
		}
		return nil
	}
	// A log that failed is recovered first (at most once a second), so that
	// the change is written by a working log or refused with its failure.
	err := aw.Err()
	if !on {
		if err == nil {
			err = al.DisableSigning(ctx, auditSigningOffReason)
		}
		if err != nil {
			d.setAuditSigning("", "settings.auditSigning is false but signing could not be turned off, so events are still signed: "+err.Error())
			return err
		}
		d.setAuditSigning(AuditSigningOffNote, "")
		return nil
	}
	var key []byte
	if err == nil {
		if d.opts.Secrets == nil {
			err = errors.New("no credential store is available")
		} else {
			key, err = auditKeyToResume(d.opts.Secrets, AuditDir(d.opts.Dirs))
		}
	}
	if err == nil {
		err = al.EnableSigning(ctx, key)
		clear(key)
	}
	if err != nil {
		msg := "settings.auditSigning is true but signing could not start, so events stay unsigned (hash-chained all the same; tried again every " + signRetry.String() + "): " + err.Error()
		d.setAuditSigning("the audit log is not signed: "+err.Error(), msg)
		return err
	}
	d.setAuditSigning("", "")
	return nil
}

// setAuditSigning records why the log is not signed and why its signing
// differs from the setting ("" for none), for auditStatus.
func (d *Daemon) setAuditSigning(note, signErr string) {
	d.mu.Lock()
	d.auditNote, d.auditSignErr = note, signErr
	d.mu.Unlock()
}
