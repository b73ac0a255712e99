package gateway

import (
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/supervisor"
)

// diesAtStart is a process that exits before it reads anything (a sandbox
// launcher refusing to run the server, a missing module), with the stderr
// its ExitInfo gives.
type diesAtStart struct {
	*scriptServer
	exit supervisor.ExitInfo
	done chan struct{}
}

func (p *diesAtStart) Stdin() io.WriteCloser     { return nopWriteCloser{} }
func (p *diesAtStart) Done() <-chan struct{}     { return p.done }
func (p *diesAtStart) Exit() supervisor.ExitInfo { return p.exit }

type nopWriteCloser struct{}

func (nopWriteCloser) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriteCloser) Close() error                { return nil }

// TestStartFailureSaysWhatTheServerSaid: a process that exits before
// answering its first request gets server_unavailable whose message (all an
// agent shows its model) holds its last stderr line, escaped, not only its
// exit status.
func TestStartFailureSaysWhatTheServerSaid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &rig{t: t, launcher: &fakeLauncher{label: "script"}, audit: &fakeAudit{}, grantAt: map[string]int64{}}
		r.launcher.tools.Store(scriptTools)
		r.launcher.wrap = func(p *scriptServer) Process {
			d := &diesAtStart{scriptServer: p, done: make(chan struct{}), exit: supervisor.ExitInfo{Code: 126, StderrTail: []string{
				"starting",
				"portcullis sandbox: mounting a tmpfs over /home/me/.config/portcullis: permission denied (AppArmor?)\x1b[2J",
				"",
			}}}
			close(d.done)
			return d
		}
		r.start(Options{RunID: "RUN", Label: "script", Launch: r.launcher.launch, Audit: r.audit,
			Catalog: tempCatalogs(t), Policy: func(string) config.Policy { return policyAllow },
			HoldTimeout: 5 * time.Second, StartupTimeout: 5 * time.Second})
		r.agent.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
		_, msg, ref := wireError(t, r.agent.wait(0, 10*time.Second))
		if ref == nil || ref.Error != control.ServerUnavailable {
			t.Fatalf("initialize to a process that died at start: %+v, want server_unavailable", ref)
		}
		for _, want := range []string{"exit status 126", "before answering any request",
			"its last line on stderr: portcullis sandbox: mounting a tmpfs", `(AppArmor?)\x1b[2J`} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
		if strings.ContainsRune(msg, 0x1b) {
			t.Errorf("message %q holds a raw ESC", msg)
		}
	})
}
