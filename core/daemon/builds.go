package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/watch"
)

// sessionsOf returns the live agent runs of label.
func (d *Daemon) sessionsOf(label string) []*gateway.Session {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*gateway.Session
	for _, id := range d.order {
		if d.labels[id] == label {
			out = append(out, d.runs[id])
		}
	}
	return out
}

// identityPaths lists the files of an execution record that a build can
// change: executable, interpreter, entry, lockfile, wrappers.
func identityPaths(r identity.Record) []string {
	var out []string
	add := func(p string) {
		if p != "" {
			out = append(out, p)
		}
	}
	add(r.ResolvedExecutable.Path)
	if r.Interpreter != nil {
		add(r.Interpreter.Path)
	}
	add(r.Entry)
	add(r.Lockfile)
	for _, w := range r.Wrappers {
		add(w.Path)
	}
	if r.Package != nil {
		add(r.Package.Dir) // the entry's package, watched as a tree
	}
	return out
}

// rewatch points the build watcher at what the live runs of label execute,
// plus the paths the configuration names.
//
// A change in a measured tree that every live run's record calls data
// (identity.DataFilter: a ledger, a log, a sqlite journal the server
// writes beside its code) is no build: the gate stays open.
func (d *Daemon) rewatch(label string) {
	var paths []string
	var filters []*identity.DataFilter
	for _, s := range d.sessionsOf(label) {
		if ep, ok := s.Record(); ok {
			paths = append(paths, identityPaths(ep.Record)...)
			filters = append(filters, identity.NewDataFilter(ep.Record))
		}
	}
	if len(filters) == 0 {
		d.watcher.SetData(label, nil)
	} else {
		d.watcher.SetData(label, func(p string) bool {
			for _, f := range filters {
				if !f.IsData(p) {
					return false
				}
			}
			return true
		})
	}
	if len(paths) > 0 {
		d.mu.Lock()
		srv, ok := d.cfg.Servers[label]
		d.mu.Unlock()
		if ok {
			for _, w := range srv.Watch {
				if !filepath.IsAbs(w) {
					w = filepath.Join(srv.Cwd, w)
				}
				paths = append(paths, w)
			}
		}
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)
	d.mu.Lock()
	same := slices.Equal(d.watched[label], paths)
	if !same {
		d.watched[label] = paths
	}
	d.mu.Unlock()
	if same {
		return
	}
	if err := d.watcher.Set(label, paths); err != nil {
		d.log.Warn("watching build paths", "server", label, "err", err)
	}
}

// builds handles settled file changes until ctx ends (a service).
func (d *Daemon) builds(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-d.watcher.Started():
			// The gate closes at the first event, not after the settle.
			for _, s := range d.sessionsOf(ev.Key) {
				s.BuildStarted(strings.Join(ev.Paths, ", "))
			}
		case ev := <-d.watcher.Events():
			d.onBuild(ctx, ev)
			ev.Done() // what it decided is in force: the source has settled
		}
	}
}

// onBuild measures the identity again and, for each run whose epoch runs
// something else now, records build_detected and replaces the process
// (restart on-change) or notes the build in the status (restart manual).
// A build that rewrote identical bytes changes nothing.
func (d *Daemon) onBuild(ctx context.Context, ev watch.Event) {
	cfg, _ := d.config()
	srv, ok := cfg.Servers[ev.Key]
	if !ok {
		return
	}
	now, err := d.measurer.Measure(ctx, measureSpec(ev.Key, srv))
	if err != nil {
		d.log.Warn("build detected but the identity cannot be measured", "server", ev.Key, "err", err)
		for _, s := range d.sessionsOf(ev.Key) {
			s.NoteBuild(fmt.Sprintf("build changed %s but cannot be measured: %v", strings.Join(ev.Paths, ", "), err))
			s.BuildSettled(false)
		}
		return
	}
	for _, s := range d.sessionsOf(ev.Key) {
		ep, ok := s.Record()
		if !ok {
			continue
		}
		changes := identity.Diff(ep.Record, now)
		if len(changes) == 0 {
			d.log.Info("files changed but the execution identity did not", "server", ev.Key, "paths", ev.Paths)
			s.BuildSettled(false)
			continue
		}
		what := describeChanges(changes, srv.Cwd)
		var fields []string
		for _, c := range changes {
			fields = append(fields, c.Field)
		}
		if _, err := d.auditW.Append(ctx, audit.TypeBuildDetected, audit.BuildDetected{
			ServerLabel: ev.Key, Epoch: ep.ID, Paths: ev.Paths, Digests: fields,
		}); err != nil {
			d.log.Error("audit log write failed", "type", audit.TypeBuildDetected, "err", err)
		}
		line := fmt.Sprintf("build complete: %s changed", what)
		if srv.RestartMode() == config.RestartManual {
			// "running server unchanged" only when its tree was checked.
			switch checked, unchanged := s.TreeUnchanged(); {
			case checked && unchanged:
				s.NoteBuild(fmt.Sprintf("%s; running server unchanged: pid=%d epoch=%s (portcullis restart %s)", line, ep.Proc.Pid(), ep.ID, ev.Key))
			case checked:
				s.NoteBuild(fmt.Sprintf("%s; the running server's process tree changed too: a new epoch was observed", line))
			default:
				s.NoteBuild(fmt.Sprintf("%s; the running server was not checked (its process tree cannot be read here): pid=%d epoch=%s (portcullis restart %s)", line, ep.Proc.Pid(), ep.ID, ev.Key))
			}
			s.BuildSettled(false)
			d.log.Info(line+"; running server kept (restart manual)", "server", ev.Key, "pid", ep.Proc.Pid(), "epoch", ep.ID)
			continue
		}
		d.log.Info(line+"; replacing the server", "server", ev.Key, "epoch", ep.ID)
		s.BuildSettled(true)
		go s.Replace(line)
	}
}

// describeChanges words identity changes for the status line, with paths
// relative to the server's working directory when inside it.
func describeChanges(changes []identity.Change, cwd string) string {
	var parts []string
	var expanded []identity.Change
	for _, c := range changes {
		if len(c.Files) == 0 {
			expanded = append(expanded, c)
			continue
		}
		// A package: the files in it that changed.
		for _, f := range c.Files {
			expanded = append(expanded, identity.Change{Field: c.Field, Path: filepath.Join(c.Path, f)})
		}
	}
	for _, c := range expanded {
		p := c.Path
		switch c.Field {
		case "environment":
			parts = append(parts, "environment "+c.Path)
			continue
		case "ignore":
			parts = append(parts, "ignore patterns")
			continue
		}
		if p == "" {
			parts = append(parts, c.Field)
			continue
		}
		if cwd != "" {
			if rel, err := filepath.Rel(cwd, p); err == nil && !strings.HasPrefix(rel, "..") {
				p = rel
			}
		}
		parts = append(parts, p)
	}
	slices.Sort(parts)
	parts = slices.Compact(parts)
	// A watched directory that changed because a file named too changed
	// in it says nothing more: "dist/server.mjs", not "dist, dist/server.mjs".
	parts = slices.DeleteFunc(parts, func(dir string) bool {
		return slices.ContainsFunc(parts, func(p string) bool {
			return p != dir && strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
		})
	})
	return strings.Join(parts, ", ")
}

// RestartWait is Restart, waiting for each run's new epoch (or its
// failure) until ctx ends; it returns one result per agent run of label.
func (d *Daemon) RestartWait(ctx context.Context, label, why string) []gateway.RestartResult {
	runs := d.sessionsOf(label)
	out := make([]gateway.RestartResult, len(runs))
	var wg sync.WaitGroup
	for i, s := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = s.RestartWait(ctx, why)
		}()
	}
	wg.Wait()
	return out
}

// Restart replaces the process of every live agent run of label with a new
// epoch and returns how many runs it restarted. A crash-looping run restarts
// too: the person acted.
func (d *Daemon) Restart(label, why string) int {
	runs := d.sessionsOf(label)
	for _, s := range runs {
		go s.Restart(why)
	}
	return len(runs)
}

// restartWait bounds how long `portcullis restart` waits for new epochs: a
// launch may wait for a person to approve its credentials.
func (d *Daemon) restartWait() time.Duration {
	w := config.DefaultApprovalTimeout
	if cfg, _ := d.config(); cfg != nil {
		w = cfg.Settings.ApprovalTimeoutOrDefault()
	}
	return w + time.Minute
}

// RestartTimeout is how long a client waits for the answer to restart
// with settings s: the daemon's bound (restartWait) and a margin.
func RestartTimeout(s config.Settings) time.Duration {
	return s.ApprovalTimeoutOrDefault() + 2*time.Minute
}

// sourceUnsettled returns, for a server that runs behind a launcher that
// relays its stdin to the worker it swaps (identity.Launcher.Relays), what
// says whether the files its build watcher watches are unsettled
// (gateway.Options.SourceUnsettled); nil for any other server.
func (d *Daemon) sourceUnsettled(label string, srv config.Server) func() <-chan struct{} {
	if !slices.ContainsFunc(identity.KnownLaunchers(srv.Command, srv.Args), identity.Launcher.Relays) {
		return nil
	}
	return func() <-chan struct{} { return d.watcher.Unsettled(label) }
}
