package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/audit"
)

// recovering is the daemon's audit log as the gateways use it: after a
// write failure (disk full, I/O error) the log fails closed, and this wrapper
// tries audit.Log.Recover before an append, at most once per retryEvery, so
// that calls work again once the disk has room — without ever forwarding a
// call whose intent was not written.
type recovering struct {
	log        *audit.Log
	retryEvery time.Duration
	// onHealth, when set, is called (without locks held) when appends
	// start failing and when they work again, so that the person is told
	// (status, tray) while calls are refused with audit_unavailable.
	onHealth func()

	mu       sync.Mutex
	last     time.Time // guarded by mu; last recovery attempt
	failed   bool      // guarded by mu; the last append failed
	lastErr  error     // guarded by mu; why, while failed
	tampered bool      // guarded by mu; the log reported tampering at the last append
}

// Append writes one event durably (the authority tier), trying to recover a
// failed log first.
func (r *recovering) Append(ctx context.Context, typ string, fields any) (audit.Event, error) {
	return r.appendTier(ctx, typ, fields, false)
}

// AppendRecord writes one event of the record tier (audit.Log.AppendRecord:
// written before it returns, synced by the group commit), trying to recover
// a failed log first.
func (r *recovering) AppendRecord(ctx context.Context, typ string, fields any) (audit.Event, error) {
	return r.appendTier(ctx, typ, fields, true)
}

func (r *recovering) appendTier(ctx context.Context, typ string, fields any, record bool) (audit.Event, error) {
	ev, err := r.append(ctx, typ, fields, record)
	failed := err != nil && errors.Is(err, audit.ErrUnavailable)
	tampered := r.log.Tampered() != nil
	r.mu.Lock()
	changed := failed != r.failed && (failed || err == nil)
	if changed {
		r.failed = failed
	}
	if tampered != r.tampered {
		// A swapped file noticed by this commit: status and tray say so.
		r.tampered, changed = tampered, true
	}
	if failed {
		r.lastErr = err
	}
	r.mu.Unlock()
	if changed && r.onHealth != nil {
		r.onHealth()
	}
	return ev, err
}

// Err reports why the log cannot be written now, or nil: the gateway asks
// before it raises an approval request, so that nobody is asked to approve
// what could not be recorded. After a failure only a write proves the log
// healthy again (audit.Log.Recover only re-reads the tail): at most once per
// retryEvery, Err recovers the log and appends a log_resumed event naming
// the failure; until that succeeds it keeps reporting the failure.
func (r *recovering) Err() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	failed, lastErr := r.failed, r.lastErr
	due := time.Since(r.last) >= r.retryEvery
	if failed && due {
		r.last = time.Now()
	}
	r.mu.Unlock()
	if !failed {
		if err := r.log.Err(); err != nil {
			return err
		}
		if err := r.log.Tampered(); err != nil {
			// Fail closed as for a write failure: no approval is
			// asked until the person acknowledges it.
			return fmt.Errorf("%w: %w", audit.ErrUnavailable, err)
		}
		return nil
	}
	if !due {
		return lastErr
	}
	ctx := context.Background()
	_ = r.log.Recover(ctx)
	_, err := r.Append(ctx, audit.TypeLogResumed, audit.LogResumed{Failure: lastErr.Error()})
	return err
}

// tryRecover tries audit.Log.Recover, at most once per retryEvery.
func (r *recovering) tryRecover(ctx context.Context) {
	r.mu.Lock()
	try := time.Since(r.last) >= r.retryEvery
	if try {
		r.last = time.Now()
	}
	r.mu.Unlock()
	if try {
		_ = r.log.Recover(ctx)
	}
}

func (r *recovering) append(ctx context.Context, typ string, fields any, record bool) (audit.Event, error) {
	if r.log.Err() != nil {
		r.tryRecover(ctx)
	}
	r.mu.Lock()
	failed, lastErr := r.failed, r.lastErr
	r.mu.Unlock()
	if failed && typ != audit.TypeLogResumed && r.log.Err() == nil {
		// The first event after a failure says that writes resumed.
		if _, err := r.log.Append(ctx, audit.TypeLogResumed, audit.LogResumed{Failure: lastErr.Error()}); err != nil {
			return audit.Event{}, err
		}
	}
	if record {
		return r.log.AppendRecord(ctx, typ, fields)
	}
	return r.log.Append(ctx, typ, fields)
}
