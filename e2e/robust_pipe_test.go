package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// TestRobustPipedThenClosed: an agent that writes its whole session at once
// and closes its stdin right away (a script piping into `portcullis
// connect`) gets every answer before the shim exits 0, as it would from the
// server started directly: the daemon answers what was sent before the end
// of the input, then ends the run and stops the server. This holds while
// the daemon still launches the server (the run's first messages) and once
// it runs.
func TestRobustPipedThenClosed(t *testing.T) {
	h := newHome(t)
	auditAddServer(t, h, "echo", config.Server{Command: echoBin}, "echo")
	startDaemon(t, h)

	const session = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"piped"}}}
{"jsonrpc":"2.0","id":4,"method":"ping"}
`
	for round := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, h.Bin, "connect", "echo")
		cmd.Env = h.Environ()
		cmd.Stdin = strings.NewReader(session)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("round %d: connect: %v\nstderr:\n%s", round, err, stderr.String())
		}
		answers := map[string][]byte{}
		r := mcpwire.NewReader(&stdout, 1<<20)
		for {
			line, err := r.ReadLine()
			if err != nil {
				break
			}
			if id := mcpwire.GetPath(line, "id"); id != nil && mcpwire.GetPath(line, "method") == nil {
				answers[string(id)] = bytes.Clone(line)
			}
		}
		for _, id := range []string{"1", "2", "3", "4"} {
			a, ok := answers[id]
			switch {
			case !ok:
				t.Errorf("round %d: request %s was not answered; stdout:\n%s\nstderr:\n%s", round, id, stdout.String(), stderr.String())
			case mcpwire.GetPath(a, "error") != nil:
				t.Errorf("round %d: request %s answered with an error: %s", round, id, a)
			}
		}
		if a := answers["3"]; a != nil && !strings.Contains(string(a), "piped") {
			t.Errorf("round %d: the call answered %s, want the echo of %q", round, a, "piped")
		}
	}
	// Each run ended, and stopped its server, once answered.
	waitNoRuns(t, h, 30*time.Second)
}

// TestRobustShimKilledWhileDraining: an agent that closed its stdin with a
// slow call in flight, and whose shim is then killed (MCP's stdio shutdown
// is "close stdin, then SIGTERM"), leaves nothing behind: the daemon sees
// the connection end during the drain, ends the run and stops its server
// at once, without waiting for the call.
func TestRobustShimKilledWhileDraining(t *testing.T) {
	h := newHome(t)
	callLog := filepath.Join(t.TempDir(), "calls")
	addFaulty(t, h, "faulty", "-log", callLog)
	startDaemon(t, h)

	cmd := exec.Command(h.Bin, "connect", "faulty")
	cmd.Env = h.Environ()
	cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{"ms":60000}}}
`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	// The slow call reached the server: the run is draining.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(callLog)
		if strings.Contains(string(b), "tools/call") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow call never reached the server; its log: %q", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("the shim exited while its call was in flight")
	default:
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-done
	start := time.Now()
	waitNoRuns(t, h, 20*time.Second)
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the run ended %s after its shim was killed; want at once", took)
	}
	for _, pid := range startedPIDs(t, h) {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("server process %d still runs after its agent's shim was killed", pid)
		}
	}
}
