// Package connect runs `portcullis connect LABEL`, the stdio shim an agent
// launches: it finds the daemon (or starts one, and words why it did not
// come up) and hands the agent's stdio to core/shim. Both the small front
// executable (the top-level package main) and the full program (app) run
// it, so it imports neither Fyne nor the daemon's packages
// (docs/DESIGN.md, "Processes").
package connect

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/shim"
	"github.com/portcullis/portcullis/platform/spawn"
)

// Options is what Run needs.
type Options struct {
	Dirs  paths.Dirs
	Label string // the server label
	// Daemon returns the executable to start as `EXE daemon` when no
	// daemon answers (the full program); nil starts none. Its error is
	// what the agent is told (a *shim.StartError words the reason and
	// the one step to take).
	Daemon func() (string, error)
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Run relays the agent's stdio to the daemon's run of o.Label and returns
// the shim's exit code (shim.Run): 0 when the agent closed its input, 1
// when the daemon could not be reached or the connection failed.
func Run(ctx context.Context, o Options) int {
	var start func() (<-chan error, error)
	if o.Daemon != nil {
		start = func() (<-chan error, error) {
			// A daemon would refuse this configuration: say why now rather
			// than start one that exits at once.
			if err := connectConfigError(o.Dirs); err != nil {
				return nil, err
			}
			if err := o.Dirs.Ensure(); err != nil {
				return nil, err
			}
			exe, err := o.Daemon()
			if err != nil {
				return nil, err
			}
			// An environment Portcullis builds, never the agent's: which
			// code runs, which session bus holds the keychain.
			p := paths.CurrentPerson()
			env, _ := spawn.DaemonEnv(os.Environ(), p, paths.UserRuntimeDir(p.UID))
			st, err := spawn.StartDaemon(exe, daemonLog(o.Dirs), env)
			if err != nil || st.Exited == nil {
				return nil, err
			}
			why := make(chan error, 1)
			go func() {
				if status, ok := <-st.Exited; ok {
					why <- daemonExited(o.Dirs, st, status)
				}
			}()
			return why, nil
		}
	}
	return shim.Run(ctx, shim.Options{
		Socket:    o.Dirs.Socket(),
		Label:     o.Label,
		Start:     start,
		StartWait: envDuration("PORTCULLIS_START_WAIT", 10*time.Second),
		StartLog:  daemonLog(o.Dirs),
		MaxMessage: func() int {
			if cfg, err := config.Load(o.Dirs.ConfigFile()); err == nil {
				return cfg.Settings.MaxMessageOrDefault()
			}
			return config.DefaultMaxMessageBytes
		}(),
		Stdin:  o.Stdin,
		Stdout: o.Stdout,
		Stderr: o.Stderr,
	})
}

// connectConfigError returns, worded for an agent whose shim found no
// daemon, why a daemon would refuse the configuration file; nil when it
// would not (a missing file is an empty configuration).
func connectConfigError(dirs paths.Dirs) error {
	file := dirs.ConfigFile()
	_, err := config.Load(file)
	if err == nil || errors.Is(err, iofs.ErrNotExist) {
		return nil
	}
	retry := "ask the person to fix " + file
	if _, serr := os.Stat(file + config.LastGoodSuffix); serr == nil {
		retry += " (or to restore " + file + config.LastGoodSuffix + ", the last version that loaded)"
	}
	return &shim.StartError{
		Reason: "no daemon was running, and none can start with this configuration file: " + err.Error(),
		Retry:  retry + ", then reconnect the agent",
	}
}

// daemonExited words the end of a daemon that `connect` started and that
// exited before it answered, with status its exit status: the reason the
// daemon wrote to its log (the line `portcullis: REASON` of Main), or,
// when it wrote none, status itself.
func daemonExited(dirs paths.Dirs, st *spawn.Started, status error) error {
	// The configuration may have broken since it was checked.
	if err := connectConfigError(dirs); err != nil {
		return err
	}
	reason := daemonReason(st.Output())
	if reason == "" {
		return status
	}
	if strings.Contains(reason, "already running") {
		// Another daemon holds the person's data. When it listens where
		// this connection looks, it may still be coming up: wait for it.
		h := paths.ReadHolder(dirs)
		if h.Socket == "" || h.Socket == dirs.Socket() {
			return &shim.StartError{
				Reason:  "another Portcullis daemon started at the same time and did not answer yet: " + reason,
				Retry:   "reconnect the agent once `portcullis status` answers",
				Running: true,
			}
		}
		return &shim.StartError{
			Reason: fmt.Sprintf("a Portcullis daemon is running (pid %d) but listens on %s, not on %s where this connection looks; a second one was not started", h.PID, h.Socket, dirs.Socket()),
			Retry:  "ask the person to run `portcullis doctor` in the agent's environment and to restart that daemon (`portcullis stop`, then start Portcullis) so that it listens at the person's place, then reconnect the agent",
		}
	}
	return &shim.StartError{
		Reason: "started a daemon but it exited at once: " + reason,
		Retry:  "once the person has dealt with that (the daemon's output is in " + st.Log + "), reconnect the agent",
	}
}

// daemonReason finds, in the output of a daemon that failed to start, the
// reason it gave: the last `portcullis: ` message with the lines that
// continue it (not log records), or a Go panic's message; "" when there is
// neither.
func daemonReason(out string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		msg, ok := strings.CutPrefix(lines[i], "portcullis: ")
		if !ok {
			continue
		}
		parts := []string{strings.TrimSpace(msg)}
		for _, l := range lines[i+1:] {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "time=") || strings.HasPrefix(l, "Run 'portcullis help'") {
				break
			}
			if l != "" {
				parts = append(parts, l)
			}
		}
		return strings.Join(parts, "\n") // the shim makes it one line
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "panic: ") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// daemonLog is where a daemon started by `connect` writes its output.
func daemonLog(dirs paths.Dirs) string { return filepath.Join(dirs.State, "daemon.log") }

func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return def
}
