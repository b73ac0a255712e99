package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
func (w *fakeWatcher) Unsettled(string) <-chan struct{}     { return nil }

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

// TestStoppedServiceRestartsWithBackoff: a service that stops on its own
// (an error, or a return without one while the daemon runs) is started
// again after 1 s, then 2 s, then 4 s; meanwhile it is degraded, with its
// last error and its stops in a row; once it has run for a minute it is
// healthy again, and its next stop waits 1 s again. Before, a stopped
// service was only logged: it stayed stopped and nothing showed it.
func TestStoppedServiceRestartsWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &Daemon{log: slog.New(slog.DiscardHandler)}
		boom := errors.New("inotify: no space left on device")
		var starts []time.Duration
		t0 := time.Now()
		svc := service{"build watcher", func(ctx context.Context) error {
			starts = append(starts, time.Since(t0))
			switch len(starts) {
			case 1, 2:
				return boom
			case 3:
				return nil // stopped without saying why
			case 4: // runs long enough to be healthy, then fails once more
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(serviceStable + time.Second):
					return boom
				}
			}
			<-ctx.Done()
			return ctx.Err()
		}}
		ctx, cancel := context.WithCancel(t.Context())
		wait := d.startServices(ctx, []service{svc})

		synctest.Wait()
		f := d.health.list()
		if len(f) != 1 || f[0].Service != "build watcher" || f[0].Stops != 1 || f[0].Error != boom.Error() || f[0].Restart.Sub(t0) != time.Second {
			t.Fatalf("after the first stop: degraded %+v; want the build watcher, 1 stop, %q, restart in 1 s", f, boom)
		}
		time.Sleep(7 * time.Second) // restarts at 1 s, 1+2 s, 1+2+4 s
		synctest.Wait()
		if want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second}; !slices.Equal(starts, want) {
			t.Fatalf("started at %v; want %v", starts, want)
		}
		f = d.health.list()
		if len(f) != 1 || f[0].Stops != 3 || !strings.Contains(f[0].Error, "without an error") {
			t.Fatalf("after the third stop and a restart: degraded %+v; want 3 stops, the last without an error", f)
		}
		time.Sleep(serviceStable - time.Second)
		synctest.Wait()
		if f := d.health.list(); len(f) != 1 {
			t.Fatalf("59 s after the restart: degraded %+v; want still degraded", f)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if f := d.health.list(); len(f) != 0 {
			t.Fatalf("a minute after the restart: degraded %+v; want healthy", f)
		}
		time.Sleep(time.Second) // the fourth run fails
		synctest.Wait()
		f = d.health.list()
		if len(f) != 1 || f[0].Stops != 1 || f[0].Restart.Sub(f[0].Last) != time.Second {
			t.Fatalf("a stop after a healthy minute: degraded %+v; want 1 stop, restart in 1 s", f)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if len(starts) != 5 {
			t.Fatalf("%d starts; want 5", len(starts))
		}
		cancel()
		wait()
	})
}

// TestStatusShowsDegradedService: the status operation (what `portcullis
// status` and the tray read) names a service that stopped, with its error,
// while it is being restarted.
func TestStatusShowsDegradedService(t *testing.T) {
	boom := errors.New("inotify: no space left on device")
	d, err := New(Options{Dirs: shortHome(t), Peers: selfPeers{}})
	if err != nil {
		t.Fatal(err)
	}
	replaceWatcher(d, newFakeWatcher(func(context.Context) error { return boom }))
	ctx, cancel := context.WithCancel(context.Background())
	served := startDaemon(t, ctx, d)
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := control.Call(d.opts.Dirs.Socket(), control.Hello{Op: control.OpStatus}, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep StatusReport
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Degraded) == 1 && rep.Degraded[0].Service == "build watcher" && rep.Degraded[0].Error == boom.Error() && rep.Degraded[0].Stops >= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status within 10 s of the build watcher's failure: degraded %+v; want the build watcher with %q", rep.Degraded, boom)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
