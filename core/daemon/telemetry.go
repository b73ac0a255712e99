package daemon

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/telemetry"
)

// TelemetryStatus is the telemetry export's part of `portcullis status`;
// nil when nothing is exported.
type TelemetryStatus struct {
	// Destination names where the export goes (scheme, host, port and
	// protocol; never a path or a token).
	Destination string `json:"destination"`
	telemetry.Stats
	// Error says why settings.telemetry or the OTEL_* variables could not
	// be put in force (nothing is exported then).
	Error string `json:"error,omitempty"`
}

// telemetrySwitch is the audit log's Observer: the export in force, which
// a change of settings.telemetry replaces while the daemon runs.
type telemetrySwitch struct {
	mu   sync.Mutex // serializes follow
	cur  atomic.Pointer[telemetry.Exporter]
	cfg  *config.Telemetry // guarded by mu; the block the export was made from
	set  bool              // guarded by mu; follow ran once
	err  atomic.Pointer[string]
	wg   sync.WaitGroup // exports being shut down
	getv func(string) string
	// started is set by Serve: the configuration loaded before it starts
	// no export.
	started atomic.Bool
}

func (s *telemetrySwitch) Observe(ev audit.Event) {
	if x := s.cur.Load(); x != nil {
		x.Observe(ev)
	}
}

// arguments hands the argument values of call, a call of label, to the
// export when settings.telemetry.arguments names label.
func (s *telemetrySwitch) arguments(label string, call ids.CallID, args func() json.RawMessage) {
	if x := s.cur.Load(); x.ExportsArguments(label) {
		x.Arguments(call, args())
	}
}

// follow puts the t that inForce returns (settings.telemetry in force;
// nil: the OTEL_* variables of the daemon's environment) in force, when it
// differs from the last.
func (s *telemetrySwitch) follow(ctx context.Context, inForce func() *config.Telemetry, log func(msg string, args ...any)) {
	if !s.started.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := inForce() // under mu: the last caller puts the latest in force
	if s.set && reflect.DeepEqual(s.cfg, t) {
		return
	}
	s.set, s.cfg = true, t.Clone()
	s.err.Store(nil)
	getenv := s.getv
	if getenv == nil {
		getenv = os.Getenv
	}
	var next *telemetry.Exporter
	cfg, on, err := telemetry.Configured(t, getenv)
	if err == nil && on {
		next, err = telemetry.New(ctx, cfg, telemetry.Options{})
	}
	if err != nil {
		msg := err.Error()
		s.err.Store(&msg)
		log("telemetry not exported", "err", err)
	} else if on {
		log("telemetry exported", "to", cfg.Where())
	}
	if old := s.cur.Swap(next); old != nil {
		s.wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = old.Shutdown(ctx)
		})
	}
}

// stop sends what is left, within a few seconds, and stops the export.
func (s *telemetrySwitch) stop() {
	if x := s.cur.Swap(nil); x != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = x.Shutdown(ctx)
	}
	s.wg.Wait()
}

func (s *telemetrySwitch) status() *TelemetryStatus {
	if e := s.err.Load(); e != nil {
		return &TelemetryStatus{Error: *e}
	}
	x := s.cur.Load()
	if x == nil {
		return nil
	}
	return &TelemetryStatus{Destination: x.Where(), Stats: x.Stats()}
}

// followTelemetry puts settings.telemetry of the configuration in force in
// force, once Serve has started (the configuration New loads starts no
// export).
func (d *Daemon) followTelemetry(ctx context.Context) {
	d.tel.follow(ctx, func() *config.Telemetry {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.cfg == nil {
			return nil
		}
		return d.cfg.Settings.Telemetry
	}, d.log.Info)
}
