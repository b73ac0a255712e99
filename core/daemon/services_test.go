package daemon

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/watch"
)

// fakeWatcher is a file watcher whose Serve is the test's.
type fakeWatcher struct {
	serve  func(ctx context.Context) error
	events chan watch.Event
}

var _ fileWatcher = (*fakeWatcher)(nil)

func newFakeWatcher(serve func(ctx context.Context) error) *fakeWatcher {
	return &fakeWatcher{serve: serve, events: make(chan watch.Event)}
}

func (w *fakeWatcher) Serve(ctx context.Context) error      { return w.serve(ctx) }
func (w *fakeWatcher) Events() <-chan watch.Event           { return w.events }
func (w *fakeWatcher) Started() <-chan watch.Event          { return nil }
func (w *fakeWatcher) Set(key string, paths []string) error { return nil }
func (w *fakeWatcher) SetData(string, func(string) bool)    {}

// replaceWatcher gives d the build watcher w, closing the one New made.
func replaceWatcher(d *Daemon, w fileWatcher) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = d.watcher.Serve(ctx) // returns at once, and closes it
	d.watcher = w
}

// records is a slog handler that hands every record to the test.
type records chan slog.Record

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	select {
	case r <- rec.Clone():
	default: // the test has seen what it waits for
	}
	return nil
}
func (r records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r records) WithGroup(string) slog.Handler      { return r }

// attrs returns the record's attributes as text.
func attrs(rec slog.Record) map[string]string {
	m := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

// startDaemon serves d in the background until ctx ends and returns once
// it answers on its socket; served receives Serve's result.
func startDaemon(t *testing.T, ctx context.Context, d *Daemon) (served <-chan error) {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- d.Serve(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := control.Call(d.opts.Dirs.Socket(), control.Hello{Op: control.OpPing}, time.Second); err == nil {
			return ch
		}
		select {
		case err := <-ch:
			t.Fatalf("Serve returned before it answered: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not answer within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServeWaitsForServices: stopping the daemon returns only once every
// service has returned (here the build watcher, slow to stop), so nothing
// of the daemon runs on after Serve, on a closed audit log.
func TestServeWaitsForServices(t *testing.T) {
	dirs := shortHome(t)
	d, err := New(Options{Dirs: dirs, Peers: selfPeers{}})
	if err != nil {
		t.Fatal(err)
	}
	stopping, release := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	replaceWatcher(d, newFakeWatcher(func(ctx context.Context) error {
		<-ctx.Done()
		close(stopping)
		<-release
		returned.Store(true)
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := startDaemon(t, ctx, d)
	cancel()
	<-stopping
	// Serve is left the time to return, which it must not take.
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) while the build watcher was still stopping", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10 s of the last service returning")
	}
	if !returned.Load() {
		t.Error("Serve returned before the build watcher")
	}
}

// TestServiceErrorIsLogged: a service that fails is logged at error level
// with its name and its error; before, the configuration watcher's error
// was dropped. The configuration watcher's own watcher failing is logged as
// a warning with its error: the service goes on with its periodic re-check.
func TestServiceErrorIsLogged(t *testing.T) {
	boom := errors.New("inotify: no space left on device")
	const stopped = "daemon service stopped"
	const recheckOnly = "a change takes effect within the periodic re-check"
	tests := []struct {
		name    string
		setup   func(d *Daemon)
		service string // "" for a log of no service
		message string // what the log record's message contains
		level   slog.Level
	}{
		{"configuration watcher fails", func(d *Daemon) {
			d.newWatcher = func(time.Duration, *slog.Logger) (fileWatcher, error) {
				return newFakeWatcher(func(context.Context) error { return boom }), nil
			}
		}, "", recheckOnly, slog.LevelWarn},
		{"configuration watcher cannot start", func(d *Daemon) {
			d.newWatcher = func(time.Duration, *slog.Logger) (fileWatcher, error) { return nil, boom }
		}, "", recheckOnly, slog.LevelWarn},
		{"build watcher fails", func(d *Daemon) {
			replaceWatcher(d, newFakeWatcher(func(context.Context) error { return boom }))
		}, "build watcher", stopped, slog.LevelError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := make(records, 256)
			d, err := New(Options{Dirs: shortHome(t), Peers: selfPeers{}, Logger: slog.New(logs)})
			if err != nil {
				t.Fatal(err)
			}
			tt.setup(d)
			ctx, cancel := context.WithCancel(context.Background())
			served := startDaemon(t, ctx, d)
			defer func() {
				cancel()
				if err := <-served; err != nil {
					t.Errorf("Serve: %v", err)
				}
			}()
			timeout := time.After(10 * time.Second)
			for {
				select {
				case rec := <-logs:
					a := attrs(rec)
					if !strings.Contains(rec.Message, tt.message) || a["service"] != tt.service {
						continue
					}
					if rec.Level != tt.level || !strings.Contains(a["err"], boom.Error()) {
						t.Errorf("logged %s %q %v, want an error naming %q", rec.Level, rec.Message, a, boom)
					}
					return
				case <-timeout:
					t.Fatalf("no log %q of %q within 10 s", tt.message, tt.service)
				}
			}
		})
	}
}
