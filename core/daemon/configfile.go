package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/internal/atomicfile"
	"github.com/portcullis/portcullis/core/watch"
)

// configSettle is how long the configuration file must stay quiet after a
// change before the watcher reads it: editors and config.Save write a
// temporary file and rename it, in a burst of events.
const configSettle = 100 * time.Millisecond

// fileStamp is what a stat of the configuration file says, enough to tell
// that it changed: config.Save replaces the file by renaming a new one over
// it (a new inode), and an edit in place changes its size or modification
// time.
type fileStamp struct {
	info os.FileInfo // nil when the stat failed
	err  string      // the stat's error, "" when it succeeded
}

// stampOf stats path, following symbolic links.
func stampOf(path string) fileStamp {
	info, err := os.Stat(path)
	if err != nil {
		return fileStamp{err: err.Error()}
	}
	return fileStamp{info: info}
}

// same reports whether s and o describe the same file contents, as far as a
// stat tells.
func (s fileStamp) same(o fileStamp) bool {
	if s.info == nil || o.info == nil {
		return s.info == nil && o.info == nil && s.err == o.err
	}
	return os.SameFile(s.info, o.info) && s.info.Size() == o.info.Size() &&
		s.info.ModTime().Equal(o.info.ModTime()) && s.info.Mode() == o.info.Mode()
}

// loadAtStart reads the configuration file at path for New and returns the
// configuration to put in force and the bytes it was parsed from. A file
// that loads is in force. A file that exists but does not parse, validate or
// read is an error: the daemon refuses to start, naming the file, line and
// column, and so does one whose last good copy is needed and does not load.
// A missing file (or a symbolic link to none) means no servers yet, with an
// error wrapping fs.ErrNotExist, unless its last good copy exists
// (config.LastGoodPaths): then that copy is in force, as it would be in a
// daemon that was running when the file went missing, from names the copy,
// and the error (wrapping fs.ErrNotExist) says why the file is not in
// force. Nothing is written: neither the file (a person decides whether to
// restore the copy) nor the copy.
func loadAtStart(path string) (cfg *config.Config, data []byte, from string, err error) {
	cfg, data, err = loadConfig(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return cfg, data, "", err
	}
	missing := err
	for _, backup := range config.LastGoodPaths(path) {
		if _, serr := os.Stat(backup); errors.Is(serr, fs.ErrNotExist) {
			continue
		}
		c, b, lerr := loadConfig(backup)
		if lerr != nil {
			// %v: not config.ErrInvalid, whose wording is about the file
			// itself ("fix it, or restore the copy").
			return nil, nil, "", fmt.Errorf("%s is missing, and its last good copy does not load either: %v; restore a good configuration file, or delete the copy to start afresh", path, lerr)
		}
		return c, b, backup, inForce(missing, path, backup)
	}
	return cfg, nil, "", missing
}

// inForce adds to err (why the configuration file at path is not in force)
// that its last good copy from is in force instead, and how to restore it.
func inForce(err error, path, from string) error {
	return fmt.Errorf("%w (in force: its last good copy %s, which the daemon started with; to restore it: cp %s %s)",
		err, from, from, atomicfile.FollowLinks(path))
}

// load reads the configuration file and puts it in force when it loads.
// Unless always is set, a file whose stamp did not change since the last
// read is not read again. A file that does not parse or validate keeps the
// last good configuration in force, and so does a file that disappeared
// after one had loaded (an editor that saves by renaming the old file away
// leaves it missing for a moment) or while the daemon runs with the last
// good copy it started with (loadAtStart): neither ever widens what an
// agent may do. The error says why the file on disk is not in force.
//
// A file that loads is split against the configuration in force
// (config.SplitTrust): what it changes that widens trust is held as the
// pending change (see configtrust.go) until the person confirms it, the
// rest applies at once. A file that widens nothing is in force as it is.
//
// When the configuration in force changed, every agent run re-checks the
// tools its agent sees (applyPolicies) and Changes subscribers are told.
func (d *Daemon) load(always bool) (*config.Config, error) {
	d.loadMu.Lock()
	defer d.loadMu.Unlock()
	return d.loadLocked(always)
}

// loadLocked is load with loadMu held.
func (d *Daemon) loadLocked(always bool) (*config.Config, error) {
	path := d.opts.Dirs.ConfigFile()
	// The stamp is taken before the read: a change that lands between
	// them is seen as a change at the next stat, never missed.
	stamp := stampOf(path)
	by := ""
	if !always {
		d.mu.Lock()
		same, known := stamp.same(d.cfgStamp), d.managed
		cfg, err := d.cfg, d.cfgErr
		d.mu.Unlock()
		if same {
			// The file did not change; the managed policy may have (an
			// administrator edited it): its floors are in force at once,
			// recorded as the policy's change, not the person's.
			if d.opts.readManaged().Same(known) {
				return cfg, err
			}
			by = byManaged
		}
	}
	cfg, data, err := loadConfig(path)
	d.mu.Lock()
	d.cfgStamp = stamp
	missing := errors.Is(err, fs.ErrNotExist)
	if err != nil && (!missing || d.cfgData != nil) {
		if missing && d.cfgFrom != "" {
			err = inForce(err, path, d.cfgFrom)
		}
		repeated := d.cfgErr != nil && d.cfgErr.Error() == err.Error()
		d.cfgErr = err
		cfg := d.cfg
		d.mu.Unlock()
		if !repeated || always {
			d.log.Warn("configuration file is invalid or missing; keeping the last good one", "err", err)
		}
		return cfg, err
	}
	applied := d.cfg
	d.mu.Unlock()
	var over []config.Floor
	cfg, data, over = floorConfig(d.refreshManaged(), cfg, data)
	d.mu.Lock()
	d.overridden = over
	d.mu.Unlock()
	cfg, data = d.holdWidening(applied, cfg, data, path)
	return d.putInForce(cfg, data, by)
}

// byManaged is who changed the configuration in force when only the
// managed policy changed (putInForce's by).
const byManaged = "managed policy"

// putInForce makes cfg, parsed from data, the configuration in force, keeps
// data as the last good copy, and when it changed records it in the audit
// log (by names who made the change, "" for an edit of the file) and tells
// agent runs and subscribers. loadMu is held.
func (d *Daemon) putInForce(cfg *config.Config, data []byte, by string) (*config.Config, error) {
	path := d.opts.Dirs.ConfigFile()
	d.mu.Lock()
	managed := d.managed
	d.mu.Unlock()
	// Never below a floor, whatever put it here (a held change confirmed
	// too).
	cfg, data, _ = floorConfig(managed, cfg, data)
	// The configuration now in force becomes the backup: restoring it
	// restores what was in force, never a change still held.
	if data != nil {
		keepLastGood(path, data, d.log)
	}
	d.mu.Lock()
	changed := !bytes.Equal(data, d.cfgData)
	old := d.cfg
	d.cfg, d.cfgData, d.cfgErr, d.cfgFrom = cfg, data, nil, ""
	d.rememberLocked(cfg)
	az, al := d.authz, d.audit
	d.mu.Unlock()
	if al != nil {
		_ = al.SetDurability(audit.Durability(cfg.Settings.AuditDurability)) // validated with cfg
	}
	if az != nil {
		// Requests raised from now on; pending ones keep their deadline.
		az.SetTimeout(cfg.Settings.ApprovalTimeoutOrDefault())
	}
	if changed {
		d.log.Info("configuration changed", "file", path, "by", by)
		if old != nil && (by == "" || by == byManaged) {
			// What a person (or the managed policy) changed that bears on
			// what agents may do is on the record, with the digest of the
			// configuration in force. (An edit by the person's tools was
			// recorded before it was written, with who made it: see
			// EditConfig.)
			_ = d.recordConfigBy(data, cfg, false, by)
		}
		if old == nil || !reflect.DeepEqual(old.Settings.Telemetry, cfg.Settings.Telemetry) {
			d.followTelemetry(context.Background())
		}
		if old == nil || old.Settings.AuditSigningOn() != cfg.Settings.AuditSigningOn() {
			// After config_changed, which names the change; off the
			// caller's goroutine, as the credential store may take a while.
			d.kickSigning()
		}
		select {
		case d.policyKick <- struct{}{}:
		default: // a re-check is pending already
		}
		d.notify()
	}
	return cfg, nil
}

// fresh returns the configuration in force, after reading the file again
// when a stat says it changed since it was last read: one stat, and a read
// only after a change. Tool policy decisions do not use it (policyOf).
func (d *Daemon) fresh() *config.Config {
	stamp := stampOf(d.opts.Dirs.ConfigFile())
	d.mu.Lock()
	cfg, same := d.cfg, stamp.same(d.cfgStamp)
	d.mu.Unlock()
	if same {
		return cfg
	}
	cfg, _ = d.load(false)
	return cfg
}

// configRecheck is how often the configuration watcher stats the file when
// it gets no change events (the file cannot be watched, or the watcher
// stopped): the longest a hand edit can take to be in force then. With
// events, configRecheckWatched covers one it missed (an event queue
// overflow) without waking an idle daemon every second.
const (
	configRecheck        = time.Second
	configRecheckWatched = 30 * time.Second
)

// watchConfig reads the configuration file again shortly after it changes
// on disk, so that a policy edited by `portcullis servers policy`, by hand
// or in Preferences reaches running agent runs by itself (applyPolicies
// tells their agents), until ctx ends. The file's directory is watched
// (config.Save renames a new file over the old one), and so is the
// directory of the file a symbolic link points to. Every
// configRecheckWatched (d.recheck when a test sets it) the file is also
// stat'ed and read again when it changed, so that a missed event delays
// an edit by at most that long; tool policy decisions never stat
// (policyOf). When the file cannot be watched, the re-check goes on alone,
// every configRecheck.
func (d *Daemon) watchConfig(ctx context.Context) error {
	recheck := d.recheck
	if recheck <= 0 {
		recheck = configRecheck
	}
	// With change events, the periodic re-check only covers a missed one.
	watched := recheck
	if d.recheck <= 0 {
		watched = configRecheckWatched
	}
	tick := time.NewTicker(watched)
	defer tick.Stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var events <-chan watch.Event
	served := make(chan error, 1)
	path := d.opts.Dirs.ConfigFile()
	var target string
	var set func()
	if w, err := d.newWatcher(configSettle, d.log); err != nil {
		d.log.Warn("cannot watch the configuration file; a change takes effect within the periodic re-check", "every", recheck, "err", err)
		set = func() {}
		tick.Reset(recheck)
	} else {
		events = w.Events()
		set = func() {
			t := atomicfile.FollowLinks(path)
			if t == target {
				return
			}
			target = t
			paths := []string{path}
			if t != path {
				paths = append(paths, t)
			}
			if d.opts.ReadManaged == nil {
				// An administrator's edit of the managed policy is in
				// force as soon as it is saved (or, where its directory
				// does not exist yet, at the next periodic re-check).
				paths = append(paths, config.ManagedFile)
			}
			if err := w.Set("config", paths); err != nil {
				d.log.Warn("watching the configuration file", "err", err)
			}
		}
		go func() { served <- w.Serve(ctx) }()
	}
	set()
	for {
		select {
		case <-ctx.Done():
			if events != nil {
				return <-served
			}
			return nil
		case err := <-served:
			if err == nil {
				err = errors.New("it stopped")
			}
			d.log.Warn("the configuration file's watcher stopped; a change takes effect within the periodic re-check", "every", recheck, "err", err)
			events, set = nil, func() {}
			tick.Reset(recheck)
		case <-events:
			_, _ = d.config()
			set()
		case <-tick.C:
			_, _ = d.load(false) // a stat; a read only when it changed
			set()
		}
	}
}

// applyPolicies has every live agent run check, after each configuration
// change, whether the tools its agent sees changed (a tool denied or no
// longer denied), until ctx ends.
func (d *Daemon) applyPolicies(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.policyKick:
			d.mu.Lock()
			for _, s := range d.runs {
				// Each on its own: an agent slow to read holds up no other.
				go s.PolicyChanged()
			}
			d.mu.Unlock()
		}
	}
}
