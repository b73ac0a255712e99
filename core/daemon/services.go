package daemon

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/watch"
)

// A service is a long-running part of the daemon: Serve runs until ctx
// ends, then returns nil; an error means it stopped on its own (the daemon
// goes on without it, and says so in its log). Serve waits for every
// service to return before it returns itself.
type service struct {
	name  string
	serve func(ctx context.Context) error
}

// fileWatcher is what the daemon needs of a watch.Watcher.
type fileWatcher interface {
	Serve(ctx context.Context) error
	Events() <-chan watch.Event
	Started() <-chan watch.Event // the first event of each change, before it settles
	Set(key string, paths []string) error
	SetData(key string, isData func(path string) bool)
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
// returns a function that waits until every one has returned. A service's
// error is logged with its name; one that returns before ctx ended without
// an error is logged too, since nothing asked it to stop.
func (d *Daemon) startServices(ctx context.Context, svcs []service) (wait func()) {
	var wg sync.WaitGroup
	for _, s := range svcs {
		wg.Go(func() {
			err := s.serve(ctx)
			switch {
			case err != nil && (ctx.Err() == nil || !errors.Is(err, ctx.Err())):
				d.log.Error("daemon service stopped", "service", s.name, "err", err)
			case ctx.Err() == nil:
				d.log.Error("daemon service stopped before the daemon", "service", s.name)
			default:
				d.log.Debug("daemon service stopped", "service", s.name)
			}
		})
	}
	return wg.Wait
}
