//go:build linux

package platform

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/platform/spawn"
)

// Polkit is the daemon's Authenticator on Linux: it asks polkit (pkcheck)
// whether the process that decides may perform PolkitAction, with user
// interaction allowed, so that the authentication agent registered for
// that process (pkttyagent, see StartTerminalAgent) or its session (the
// desktop's agent) asks the person for their password.
type Polkit struct {
	// Pkcheck and Pkaction are the commands run ("" = pkcheck and
	// pkaction found in the system's directories, spawn.SystemPath, never
	// in the inherited PATH: an agent's directory first on PATH must not
	// answer for polkit). Tests set absolute paths.
	Pkcheck, Pkaction string

	mu      sync.Mutex
	checked time.Time // guarded by mu; when availErr was measured
	avail   error     // guarded by mu
}

var _ daemon.Authenticator = (*Polkit)(nil)

// NewAuthenticator returns polkit's Authenticator.
func NewAuthenticator() daemon.Authenticator { return &Polkit{} }

// Mechanism is "polkit".
func (*Polkit) Mechanism() string { return "polkit" }

// availableFor is how long an answer of Available is reused.
const availableFor = 5 * time.Second

// Available asks polkit (pkaction) whether it answers on the system bus and
// knows PolkitAction; the answer is reused for a few seconds. As root it is
// never available: polkit authorizes root without authentication.
func (p *Polkit) Available() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.checked.IsZero() && time.Since(p.checked) < availableFor {
		return p.avail
	}
	p.avail = p.measure()
	p.checked = time.Now()
	return p.avail
}

// isRoot says whether this process runs as root (tests replace it).
var isRoot = func() bool { return os.Geteuid() == 0 }

func (p *Polkit) measure() error {
	if isRoot() {
		return &daemon.UnavailableError{Reason: daemon.AuthReasonRoot,
			Text: "polkit authorizes root without asking, so it proves nothing here: run Portcullis as your own user"}
	}
	bin := orDefault(p.Pkaction, "pkaction")
	path, err := systemHelper(bin)
	if err != nil {
		return &daemon.UnavailableError{Reason: daemon.AuthReasonNotFound,
			Text: fmt.Sprintf("polkit is not installed (%v): install it (on Debian and Ubuntu: sudo apt install polkitd; on Fedora: sudo dnf install polkit), then its action: %s", err, PolkitInstallCommand())}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--action-id", PolkitAction).CombinedOutput()
	if err == nil {
		return nil
	}
	text := strings.TrimSpace(string(out))
	switch {
	case strings.Contains(text, "No action with action id"):
		return &daemon.UnavailableError{Reason: daemon.AuthReasonNoAction,
			Text: fmt.Sprintf("polkit does not know the action %s: it is not installed in %s; install it with: %s", PolkitAction, PolkitActionsDir, PolkitInstallCommand())}
	case strings.Contains(text, "Error getting authority"), strings.Contains(text, "Could not connect"):
		return &daemon.UnavailableError{Reason: daemon.AuthReasonNotRunning,
			Text: fmt.Sprintf("no polkit daemon answers on the system bus (%s): polkitd is not running", firstLine(text))}
	}
	return fmt.Errorf("pkaction --action-id %s: %v (%s)", PolkitAction, err, firstLine(text))
}

// Exit codes of pkcheck(1).
const (
	pkcheckAuthorized = 0
	pkcheckDismissed  = 3
)

// Authenticate runs pkcheck --action-id PolkitAction --process
// PID,START,UID --allow-user-interaction. reason is not passed: polkit
// takes details only from trusted callers (root, the action's owner), so
// the agent shows the action's own message. The subject's start time pins its pid (polkit
// refuses a process whose start time differs); without one (0), polkit
// reads it itself.
func (p *Polkit) Authenticate(ctx context.Context, s daemon.AuthSubject, _ string) error {
	subject := strconv.Itoa(s.PID)
	if s.StartTime != 0 {
		subject += "," + strconv.FormatUint(s.StartTime, 10) + "," + strconv.Itoa(s.UID)
	}
	bin, err := systemHelper(orDefault(p.Pkcheck, "pkcheck"))
	if err != nil {
		return fmt.Errorf("polkit is not installed (%v; on Debian the package is polkitd)", err)
	}
	cmd := exec.CommandContext(ctx, bin, "--action-id", PolkitAction, "--process", subject,
		"--allow-user-interaction")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := firstLine(strings.TrimSpace(out.String()))
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() == pkcheckDismissed:
		return fmt.Errorf("%w: pkcheck: %s", daemon.ErrAuthDismissed, text)
	case errors.As(err, &ee) && ee.ExitCode() > pkcheckAuthorized && ee.ExitCode() < pkcheckDismissed:
		if text == "" {
			text = "not authorized"
		}
		return fmt.Errorf("%w: pkcheck: %s", daemon.ErrAuthFailed, text)
	case ctx.Err() != nil:
		return fmt.Errorf("pkcheck: %w", ctx.Err())
	}
	return fmt.Errorf("pkcheck: %v (%s)", err, text)
}

// TerminalAgent is polkit's text authentication agent (pkttyagent)
// registered for one process: polkit asks the person at that process's
// controlling terminal.
type TerminalAgent struct {
	cmd  *exec.Cmd
	done chan error
}

// agentRegisterTimeout bounds the wait for pkttyagent to register.
var agentRegisterTimeout = 10 * time.Second

// StartTerminalAgent starts pkttyagent --process PID,START
// --notify-fd N for process pid (the caller's own, typically), prompting at
// the controlling terminal it inherits, and returns once polkit has
// registered it (pkttyagent closes the notify fd). The agent is not a
// fallback: for this process, its terminal is asked rather than the
// session's agent. prepare, when set, can adjust the command before it
// starts (tests set its credentials).
func StartTerminalAgent(pid int, prepare func(*exec.Cmd)) (*TerminalAgent, error) {
	path, err := systemHelper("pkttyagent")
	if err != nil {
		return nil, fmt.Errorf("polkit's terminal agent is not installed (%v; on Debian it comes with polkitd)", err)
	}
	st, err := (procfs{root: "/proc"}).readStat(pid)
	if err != nil {
		return nil, fmt.Errorf("reading the start time of process %d: %w", pid, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(path, "--process", fmt.Sprintf("%d,%d", pid, st.startTime), "--notify-fd", "3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.Stdin, cmd.Stdout = os.Stdin, os.Stdout
	var errOut bytes.Buffer
	cmd.Stderr = &errOut // the prompt goes to the terminal (/dev/tty), errors here
	if prepare != nil {
		prepare(cmd)
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("starting pkttyagent: %w", err)
	}
	w.Close()
	a := &TerminalAgent{cmd: cmd, done: make(chan error, 1)}
	go func() { a.done <- cmd.Wait() }()
	registered := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, r) // EOF: pkttyagent closed the fd, or exited
		close(registered)
	}()
	select {
	case <-registered:
	case <-time.After(agentRegisterTimeout):
		a.Stop()
		return nil, fmt.Errorf("pkttyagent did not register with polkit within %s", agentRegisterTimeout)
	}
	// The fd also ends when pkttyagent exits without registering
	// (another agent holds the process, no polkitd): it exits at once.
	select {
	case err := <-a.done:
		a.done <- err
		return nil, fmt.Errorf("pkttyagent could not register with polkit: %v (%s)", err, firstLine(strings.TrimSpace(errOut.String())))
	case <-time.After(200 * time.Millisecond):
	}
	return a, nil
}

// Stop ends the agent and waits for it.
func (a *TerminalAgent) Stop() {
	if a == nil || a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.done:
	case <-time.After(2 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

// systemHelper returns bin when it is an absolute path, else the program of
// that name in the system's directories (spawn.SystemPath), never one found
// through the inherited PATH.
func systemHelper(bin string) (string, error) {
	if filepath.IsAbs(bin) {
		if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
			return "", fmt.Errorf("%s not found", bin)
		}
		return bin, nil
	}
	if p := spawn.Helper(bin); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("%s is not in %s", bin, strings.Join(spawn.SystemPath, ":"))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
