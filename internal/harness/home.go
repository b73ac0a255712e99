package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
)

// Home is one PORTCULLIS_HOME directory and the portcullis executable that
// runs against it. Every command it starts gets PORTCULLIS_HOME=Dir on top of
// the current environment and Env.
type Home struct {
	Bin string   // the portcullis executable
	Dir string   // absolute PORTCULLIS_HOME
	Env []string // extra "K=V" entries for every command (later entries win)
}

// NewHome returns a Home for the portcullis executable bin and the directory
// dir, which is created (mode 0700) when missing. dir must be absolute.
func NewHome(bin, dir string) (*Home, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("PORTCULLIS_HOME must be absolute, not %q", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &Home{Bin: bin, Dir: dir}, nil
}

// ConfigFile is the configuration file the daemon reads: Dir/config.json.
func (h *Home) ConfigFile() string { return filepath.Join(h.Dir, "config.json") }

// Environ returns the environment of the commands h starts.
func (h *Home) Environ() []string {
	env := make([]string, 0, len(os.Environ())+len(h.Env)+1)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PORTCULLIS_HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PORTCULLIS_HOME="+h.Dir)
	return append(env, h.Env...)
}

// Command returns `portcullis ARGS…` with h's environment, not started.
func (h *Home) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, h.Bin, args...)
	cmd.Env = h.Environ()
	cmd.Dir = h.Dir
	return cmd
}

// Result is how a finished command ended.
type Result struct {
	Stdout, Stderr string
	Code           int // exit code; -1 when killed by a signal
}

// ExitError is a command that ran and exited non-zero.
type ExitError struct {
	Args   []string
	Result Result
}

// Error names the command, its exit code and its stderr.
func (e *ExitError) Error() string {
	return fmt.Sprintf("portcullis %s: exit code %d\nstderr: %s", strings.Join(e.Args, " "), e.Result.Code, strings.TrimSpace(e.Result.Stderr))
}

// Run runs `portcullis ARGS…` to completion. The error is nil when it exited
// 0, an *ExitError when it exited otherwise (Result is filled either way),
// and any other error when it could not run.
func (h *Home) Run(ctx context.Context, args ...string) (Result, error) {
	cmd := h.Command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String(), Code: cmd.ProcessState.ExitCode()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return r, &ExitError{Args: args, Result: r}
	}
	return r, err
}

// AddServer runs `portcullis servers add LABEL FLAGS… -- COMMAND…` as the
// person would at a terminal of their own (RunAtTerminal): a new server may
// widen trust (credentials, a lower sandbox), which, through a running
// daemon, only the person at a terminal may do.
func (h *Home) AddServer(ctx context.Context, label string, flags []string, command ...string) error {
	args := append([]string{"servers", "add", label}, flags...)
	args = append(append(args, "--"), command...)
	_, err := h.RunAtTerminal(ctx, args...)
	return err
}

// SetToolPolicy sets the authorization policy (config.PolicyAllow,
// PolicyApprove or PolicyDeny) of the named tools of server label with
// `portcullis servers policy`, as the person would at a terminal of their
// own (RunAtTerminal: a policy that widens trust is the person's to set):
// through a running daemon, which applies it at once, to agent runs already
// connected too; with none, written to config.json. It returns an error
// when the label is not configured or the command fails.
func (h *Home) SetToolPolicy(label string, policy config.Policy, tools ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range tools {
		if _, err := h.RunAtTerminal(ctx, "servers", "policy", label, t, string(policy)); err != nil {
			return err
		}
	}
	return nil
}

// Status runs `portcullis status --json` and decodes the report.
func (h *Home) Status(ctx context.Context) (daemon.StatusReport, error) {
	var rep daemon.StatusReport
	r, err := h.Run(ctx, "status", "--json")
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		return rep, fmt.Errorf("decoding `portcullis status --json`: %w\n%s", err, r.Stdout)
	}
	return rep, nil
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers, for
// the stderr of a running process.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
