package daemon

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/watch"
)

// A service is a long-running part of the daemon: Serve runs until ctx
// ends, then returns nil; an error, or a return before ctx ended, means it
// stopped on its own: it is logged, shown as degraded in the status report
// (StatusReport.Degraded) and restarted after a backoff. Serve waits for
// every service to return before it returns itself.
type service struct {
	name  string
	serve func(ctx context.Context) error
}

// The restart policy of a service that stopped on its own: the first
// restart waits serviceBackoff, each further stop in a row doubles the
// wait up to serviceBackoffMax, and a service that then runs for
// serviceStable without stopping is healthy again (no longer degraded, its
// next stop waits serviceBackoff). Variables so that tests can shorten them.
var (
	serviceBackoff    = time.Second
	serviceBackoffMax = 5 * time.Minute
	serviceStable     = time.Minute
)

// ServiceFault is a daemon service that stopped on its own and is
// restarted with backoff: the daemon runs degraded (a build watcher that
// stopped sees no rebuild, a sealer that stopped seals nothing) until the
// service has run for a minute again.
type ServiceFault struct {
	Service string `json:"service"`
	// Error is why it last stopped.
	Error string `json:"error"`
	// Stops counts its stops in a row; Since is the first of them, Last
	// the latest.
	Stops int       `json:"stops"`
	Since time.Time `json:"since"`
	Last  time.Time `json:"last"`
	// Restart is when it is (or was) started again.
	Restart time.Time `json:"restart"`
}

// serviceHealth holds the faults of the daemon's services; the zero value
// is ready to use.
type serviceHealth struct {
	mu     sync.Mutex
	faults map[string]*ServiceFault // guarded by mu; by service name
}

// stopped records that the service name stopped with err and returns how
// long to wait before starting it again.
func (h *serviceHealth) stopped(name string, err error, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.faults == nil {
		h.faults = map[string]*ServiceFault{}
	}
	f := h.faults[name]
	if f == nil {
		f = &ServiceFault{Service: name, Since: now}
		h.faults[name] = f
	}
	f.Stops++
	f.Error, f.Last = err.Error(), now
	wait := serviceBackoff
	for i := 1; i < f.Stops && wait < serviceBackoffMax; i++ {
		wait *= 2
	}
	wait = min(wait, serviceBackoffMax)
	f.Restart = now.Add(wait)
	return wait
}

// healed forgets the fault of the service name.
func (h *serviceHealth) healed(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.faults, name)
}

// degraded reports whether the service name has a fault.
func (h *serviceHealth) degraded(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.faults[name] != nil
}

// list returns a copy of the faults, sorted by service name.
func (h *serviceHealth) list() []ServiceFault {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]ServiceFault, 0, len(h.faults))
	for _, f := range h.faults {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b ServiceFault) int { return strings.Compare(a.Service, b.Service) })
	return out
}

// fileWatcher is what the daemon needs of a watch.Watcher.
type fileWatcher interface {
	Serve(ctx context.Context) error
	Events() <-chan watch.Event
	Started() <-chan watch.Event // the first event of each change, before it settles
	Set(key string, paths []string) error
	SetData(key string, isData func(path string) bool)
	// Unsettled: see watch.Watcher.Unsettled.
	Unsettled(key string) <-chan struct{}
}

var _ fileWatcher = (*watch.Watcher)(nil)

// newFileWatcher makes a watch.Watcher; the field Daemon.newWatcher lets
// tests give the daemon another one.
func newFileWatcher(settle time.Duration, log *slog.Logger) (fileWatcher, error) {
	return watch.New(settle, log)
}

// services are the daemon's long-running parts, in the order they start.
func (d *Daemon) services() []service {
	return []service{
		{"build watcher", d.watcher.Serve},
		{"builds", d.builds},
		{"configuration watcher", d.watchConfig},
		{"policies", d.applyPolicies},
		{"audit signing", d.followAuditSigning},
		{"audit seals", d.sealAudit},
	}
}

// startServices runs each of svcs in its own goroutine until ctx ends, and
// returns a function that waits until every one has returned.
func (d *Daemon) startServices(ctx context.Context, svcs []service) (wait func()) {
	var wg sync.WaitGroup
	for _, s := range svcs {
		wg.Go(func() { d.superviseService(ctx, s) })
	}
	return wg.Wait
}

// superviseService runs s until ctx ends. When s stops on its own (an
// error, or a return before ctx ended), the stop is logged at error level
// with the service's name and error, recorded in d.health (the status
// report's Degraded), and s is started again after the backoff; once it
// has run for serviceStable, its fault is forgotten.
func (d *Daemon) superviseService(ctx context.Context, s service) {
	for {
		var healthy *time.Timer
		if d.health.degraded(s.name) {
			healthy = time.AfterFunc(serviceStable, func() {
				d.health.healed(s.name)
				d.log.Info("daemon service running again", "service", s.name)
			})
		}
		err := s.serve(ctx)
		if healthy != nil {
			healthy.Stop()
		}
		if ctx.Err() != nil { // the daemon is stopping: no restart
			if err != nil && !errors.Is(err, ctx.Err()) {
				d.log.Error("daemon service stopped", "service", s.name, "err", err)
			} else {
				d.log.Debug("daemon service stopped", "service", s.name)
			}
			return
		}
		if err == nil {
			err = errors.New("it returned while the daemon runs, without an error")
		}
		wait := d.health.stopped(s.name, err, time.Now())
		d.log.Error("daemon service stopped; restarting it", "service", s.name, "err", err, "restartIn", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
