package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestServersAddBadRestart proves that a mistyped --restart value is refused
// with a message naming the value and the accepted ones, and that nothing is
// written.
func TestServersAddBadRestart(t *testing.T) {
	h := newHome(t)
	ctx := testContext(t, 30*time.Second)
	addServer(t, h, "echo", echoBin)
	before, err := os.ReadFile(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.Run(ctx, "servers", "add", "other", "--restart", "sometimes", "--", echoBin)
	var ee *harness.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("servers add with --restart sometimes: %v, want a non-zero exit", err)
	}
	for _, want := range []string{"restart", `"sometimes"`, "on-change", "manual"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr %q does not mention %s", r.Stderr, want)
		}
	}
	if strings.Count(strings.TrimSpace(r.Stderr), "\n") > 2 {
		t.Errorf("stderr is more than a short message: %q", r.Stderr)
	}
	after, err := os.ReadFile(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("config.json changed after a refused add:\n%s", after)
	}
}

// TestConnectUnknownLabel proves that `portcullis connect nosuch` answers the
// agent's first request with a JSON-RPC error naming the label (so the
// person sees it in the agent), and writes the reason on stderr (the agent's
// log). The go-sdk client with its default protocol first sends
// server/discover, then initialize; pinned to 2025-06-18 it sends
// initialize alone.
func TestConnectUnknownLabel(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "echo", echoBin)
	startDaemon(t, h)
	for _, pv := range protocolVersions {
		t.Run(pv.name, func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			var opts *mcp.ClientSessionOptions
			if pv.version != "" {
				opts = &mcp.ClientSessionOptions{ProtocolVersion: pv.version}
			}
			cmd := h.ConnectCommand("nosuch")
			var stderr harness.SyncBuffer
			cmd.Stderr = &stderr
			w := &harness.Wire{Transport: &mcp.CommandTransport{Command: cmd}}
			client := mcp.NewClient(&mcp.Implementation{Name: "newcomer", Version: "1"}, nil)
			start := time.Now()
			s, err := client.Connect(ctx, w, opts)
			if err == nil {
				s.Close()
				t.Fatal("connecting to an unknown label succeeded")
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the refusal took %s", d)
			}
			if !strings.Contains(err.Error(), `"nosuch"`) {
				t.Errorf("the agent's error does not name the label: %v", err)
			}
			var initErr error
			for _, m := range w.Messages() {
				if !m.Out && m.Response && m.Method == "initialize" {
					initErr = m.Err
				}
			}
			if initErr == nil || !strings.Contains(initErr.Error(), `"nosuch"`) || !strings.Contains(initErr.Error(), string(control.ServerUnavailable)) {
				t.Errorf("initialize was answered with %v, want a server_unavailable error naming \"nosuch\"", initErr)
			}
			_ = cmd.Wait()
			if !strings.Contains(stderr.String(), `"nosuch"`) || !strings.Contains(stderr.String(), "echo") {
				t.Errorf("stderr %q does not give the reason (label and the configured servers)", stderr.String())
			}
		})
	}
}

// TestQuietLocale proves that with LANG=C (servers, CI) the CLI writes
// nothing on stderr: Fyne's locale warning does not leak.
func TestQuietLocale(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "echo", echoBin)
	h.Env = []string{"LANG=C", "LC_ALL=", "LC_MESSAGES=", "LANGUAGE="}
	for _, args := range [][]string{{"servers", "list"}, {"version"}} {
		r, err := h.Run(testContext(t, 30*time.Second), args...)
		if err != nil {
			t.Fatal(err)
		}
		if r.Stderr != "" {
			t.Errorf("LANG=C portcullis %s wrote on stderr: %q", strings.Join(args, " "), r.Stderr)
		}
		if args[0] == "servers" && !strings.Contains(r.Stdout, "echo") {
			t.Errorf("servers list printed %q, want the echo server", r.Stdout)
		}
	}
}

// TestCorruptConfig proves that a config.json broken by hand stops `portcullis
// daemon` with a non-zero exit naming FILE:LINE:COL, and that the file is
// left byte for byte as it was.
func TestCorruptConfig(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "echo", echoBin)
	good, err := os.ReadFile(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	// Drop the colon after "command": a syntax error at the value.
	lines := strings.SplitAfter(string(good), "\n")
	at, col := -1, 0
	for i, l := range lines {
		if k := strings.Index(l, `"command": "`); k >= 0 {
			lines[i] = strings.Replace(l, `"command": "`, `"command" "`, 1)
			at, col = i+1, k+len(`"command" "`)
			break
		}
	}
	if at < 0 {
		t.Fatalf("no \"command\" line to break in:\n%s", good)
	}
	bad := []byte(strings.Join(lines, ""))
	if err := os.WriteFile(h.ConfigFile(), bad, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r, err := h.Run(ctx, "daemon")
	if ctx.Err() != nil {
		t.Fatal("portcullis daemon kept running with a corrupt config.json")
	}
	var ee *harness.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("portcullis daemon: %v, want a non-zero exit", err)
	}
	want := fmt.Sprintf("%s:%d:%d: ", h.ConfigFile(), at, col)
	if !strings.Contains(r.Stderr, want) {
		t.Errorf("stderr does not name %s (the string after the missing colon):\n%s", want, r.Stderr)
	}
	if strings.Contains(r.Stderr, "panic") || strings.Count(strings.TrimSpace(r.Stderr), "\n") > 3 {
		t.Errorf("stderr is not a short message:\n%s", r.Stderr)
	}
	after, err := os.ReadFile(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, bad) {
		t.Errorf("config.json was changed:\n%s", after)
	}
}
