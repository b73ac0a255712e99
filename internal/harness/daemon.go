package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// Daemon is a `portcullis daemon` subprocess in its own process group.
type Daemon struct {
	cmd    *exec.Cmd
	stderr *SyncBuffer
	done   chan struct{} // closed once the process was reaped
	err    error         // Wait's result; written before done is closed
}

// DaemonReadyTimeout bounds the wait for a started daemon to answer status.
var DaemonReadyTimeout = 15 * time.Second

// StartDaemon starts `portcullis daemon` for h, writes its stderr (its log)
// to log as well when log is not nil, and returns once `portcullis status`
// answers. When the daemon exits or does not answer within
// DaemonReadyTimeout, it is stopped and the error carries its stderr.
func (h *Home) StartDaemon(ctx context.Context, log io.Writer) (*Daemon, error) {
	d := &Daemon{stderr: &SyncBuffer{}, done: make(chan struct{})}
	cmd := exec.Command(h.Bin, "daemon")
	cmd.Env = h.Environ()
	cmd.Dir = h.Dir
	cmd.Stdout = d.stderr
	cmd.Stderr = d.stderr
	if log != nil {
		cmd.Stdout = io.MultiWriter(d.stderr, log)
		cmd.Stderr = cmd.Stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting portcullis daemon: %w", err)
	}
	d.cmd = cmd
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	deadline := time.Now().Add(DaemonReadyTimeout)
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := h.Status(sctx)
		cancel()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("portcullis daemon exited before answering (%v); its output:\n%s", d.err, d.stderr.String())
		case <-ctx.Done():
			_ = d.Stop(5 * time.Second)
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = d.Stop(5 * time.Second)
			return nil, fmt.Errorf("portcullis daemon did not answer status within %s (last: %v); its output:\n%s", DaemonReadyTimeout, err, d.stderr.String())
		}
	}
}

// PID is the daemon's process id.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Output returns what the daemon wrote on stdout and stderr so far.
func (d *Daemon) Output() string { return d.stderr.String() }

// Done is closed once the daemon process has exited and was reaped.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// ErrDaemonHung reports that the daemon did not exit after SIGTERM within the
// grace period and its process group was killed.
var ErrDaemonHung = errors.New("portcullis daemon did not exit after SIGTERM")

// Stop sends SIGTERM and waits up to grace for the daemon to stop its
// servers and exit. If it does not, its process group is killed (SIGKILL)
// and the error wraps ErrDaemonHung. A daemon that exits with a non-zero
// status after SIGTERM is reported as an error too. Stop is idempotent.
func (d *Daemon) Stop(grace time.Duration) error {
	select {
	case <-d.done:
		return d.exitErr()
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return d.exitErr()
	case <-time.After(grace):
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	<-d.done
	return fmt.Errorf("%w within %s; killed its process group. Its output:\n%s", ErrDaemonHung, grace, d.stderr.String())
}

func (d *Daemon) exitErr() error {
	if d.err != nil {
		return fmt.Errorf("portcullis daemon: %w; its output:\n%s", d.err, d.stderr.String())
	}
	return nil
}
