package harness

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
)

// Agent is a go-sdk client session over the stdio of a command (the
// `portcullis connect` shim, or a server run directly), with every message
// recorded in Wire and the command's stderr in Stderr.
type Agent struct {
	Session *mcp.ClientSession
	Wire    *Wire
	Cmd     *exec.Cmd
	Stderr  *SyncBuffer
}

// ConnectCommand returns `portcullis connect LABEL` with h's environment,
// not started.
func (h *Home) ConnectCommand(label string) *exec.Cmd {
	cmd := exec.Command(h.Bin, "connect", label)
	cmd.Env = h.Environ()
	return cmd
}

// Connect starts cmd and connects client to it over stdio
// (mcp.CommandTransport) with opts; cmd.Stderr is replaced by a SyncBuffer.
// On error the command has been stopped and the error carries its stderr.
func Connect(ctx context.Context, client *mcp.Client, cmd *exec.Cmd, opts *mcp.ClientSessionOptions) (*Agent, error) {
	a := &Agent{Cmd: cmd, Stderr: &SyncBuffer{}}
	cmd.Stderr = a.Stderr
	a.Wire = &Wire{Transport: &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}}
	s, err := client.Connect(ctx, a.Wire, opts)
	if err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return nil, fmt.Errorf("connecting to %s: %w (stderr: %q)", cmd.Path, err, a.Stderr.String())
	}
	a.Session = s
	return a, nil
}

// PID is the pid of the command (for `portcullis connect`, the shim).
func (a *Agent) PID() int { return a.Cmd.Process.Pid }

// Close ends the session: stdin is closed and the command awaited (SIGTERM,
// then SIGKILL after 5 s each, as mcp.CommandTransport does).
func (a *Agent) Close() error { return a.Session.Close() }

// RunByShim returns the agent run, live or ended, whose shim has pid shimPID.
func RunByShim(rep daemon.StatusReport, shimPID int) (gateway.Status, bool) {
	for _, list := range [][]gateway.Status{rep.Runs, rep.Ended} {
		for _, r := range list {
			if r.Agent.ShimPID == shimPID {
				return r, true
			}
		}
	}
	for _, c := range rep.Checks { // a run that only listed: the last health check
		if c.Last.Agent.ShimPID == shimPID {
			return c.Last, true
		}
	}
	return gateway.Status{}, false
}
