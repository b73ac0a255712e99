package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/internal/harness"
)

// BenchmarkReconnect measures what a daemon's end costs an agent that stays
// connected: a go-sdk client (protocol 2025-06-18) connected through
// `portcullis connect` to the echo test server calls echo; each iteration
// ends the daemon answering, waits until its process is gone, and calls echo
// again, timing from the daemon's death to that call's answer. The shim
// connects again (starting a daemon, which launches a new server), replays
// the client's initialize, and passes the call on. A call that reached the
// shim before it saw the daemon's end is answered epoch_ended and called
// again, within the same figure. Iterations alternate SIGKILL (the shim
// starts a daemon at once) and SIGTERM (a deliberate stop: the shim starts
// one at the next request).
//
// Metrics (medians, ms): sigkill-ms and sigterm-ms, from the daemon's death to
// the answer of the agent's next call.
func BenchmarkReconnect(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e := startEchoDaemon(ctx, b, "home", nil, "echo")
	home, d := e.home, e.daemon
	defer d.Stop(5 * time.Second) // killed below
	client := mcp.NewClient(&mcp.Implementation{Name: "reconnect-bench", Version: "1.0.0"}, nil)
	a, err := harness.Connect(ctx, client, home.ConnectCommand("echo"), &mcp.ClientSessionOptions{ProtocolVersion: Protocol})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	call := func() error {
		res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "ping"}})
		if err == nil && res.IsError {
			return errString("echo answered an error")
		}
		return err
	}
	if err := call(); err != nil {
		b.Fatal(err)
	}
	daemon := func() int {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if rep, err := home.Status(ctx); err == nil && rep.PID != 0 {
				return rep.PID
			}
			time.Sleep(10 * time.Millisecond)
		}
		b.Fatalf("no daemon answers; the shim's stderr: %s", a.Stderr.String())
		return 0
	}
	var killed, stopped []time.Duration
	n := 0
	for b.Loop() {
		pid := daemon()
		sig := syscall.SIGKILL
		if n%2 == 1 {
			sig = syscall.SIGTERM
		}
		n++
		if err := syscall.Kill(pid, sig); err != nil {
			b.Fatal(err)
		}
		for syscall.Kill(pid, 0) == nil && !zombie(pid) {
			time.Sleep(time.Millisecond)
		}
		t0 := time.Now()
		err := call()
		if err != nil && strings.Contains(err.Error(), "epoch_ended") {
			err = call() // sent before the shim saw the end: answered, never retried by it
		}
		if err != nil {
			b.Fatalf("the call after the daemon's end: %v; the shim's stderr: %s", err, a.Stderr.String())
		}
		if sig == syscall.SIGKILL {
			killed = append(killed, time.Since(t0))
		} else {
			stopped = append(stopped, time.Since(t0))
		}
	}
	b.StopTimer()
	if pid := daemon(); pid != d.PID() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if len(killed) > 0 {
		b.ReportMetric(ms(digestMedian(killed)), "sigkill-ms")
	}
	if len(stopped) > 0 {
		b.ReportMetric(ms(digestMedian(stopped)), "sigterm-ms")
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// zombie reports whether pid is gone or a zombie (/proc, Linux).
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}
