//go:build soak

package e2e

// The soak test runs only with -tags soak (make soak): it takes minutes.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

var (
	soakDuration = flag.Duration("soak.duration", 3*time.Minute, "how long TestRobustSoak drives traffic")
	soakSeed     = flag.Uint64("soak.seed", 0, "seed of TestRobustSoak's kills and rebuilds (0: from the clock)")
)

// soakCallBound is how long one call may take before it counts as
// unanswered: longer than the gateway's hold and start-up timeouts (30 s).
const soakCallBound = 90 * time.Second

// soakStats counts what the agents saw.
type soakStats struct {
	results, rpcErrors, agentKilled atomic.Int64
	maxLatency                      atomic.Int64 // nanoseconds
	mu                              sync.Mutex
	unanswered                      []string          // guarded by mu: calls without a result or JSON-RPC error
	refusals                        map[string]int    // guarded by mu: gateway refusals by name
	examples                        map[string]string // guarded by mu: the first message of each
}

func (s *soakStats) latency(d time.Duration) {
	for {
		old := s.maxLatency.Load()
		if int64(d) <= old || s.maxLatency.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// TestRobustSoak drives 20 concurrent agent runs against 5 servers for
// -soak.duration while the servers are rebuilt every few seconds and
// server processes and shims are killed at random, then proves that:
//
//   - every call returned a result or a JSON-RPC error within 90 s
//     (calls whose own shim was killed aside);
//   - once the agents are gone no server process is left (every pid the
//     audit log names as started is gone, with its process group) and the
//     daemon has no child;
//   - the daemon holds no more file descriptors than before the traffic;
//   - the audit log verifies.
func TestRobustSoak(t *testing.T) {
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -soak.seed=%d)", seed, seed)
	rnd := rand.New(rand.NewPCG(seed, 1))
	if _, err := harness.Processes(); err != nil {
		t.Skipf("skipping: %v", err)
	}

	// Two builds of the faulty server with the same catalog; a rebuild
	// renames the other one over a server's executable.
	buildDir := t.TempDir()
	ctx := testContext(t, *soakDuration+10*time.Minute)
	var builds [2][]byte
	for i, label := range []string{"A", "B"} {
		p, err := harness.BuildServer(ctx, repoRoot, filepath.Join(buildDir, label), "faulty", "-X main.buildLabel="+label)
		if err != nil {
			t.Fatal(err)
		}
		if builds[i], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	h := newHome(t)
	const servers = 5
	bins := make([]string, servers)
	for i := range servers {
		dir := t.TempDir()
		bins[i] = filepath.Join(dir, "faulty")
		if err := os.WriteFile(bins[i], builds[0], 0o755); err != nil {
			t.Fatal(err)
		}
		label := fmt.Sprintf("s%d", i)
		switch i {
		case 3: // a noisy one
			addServer(t, h, label, bins[i], "-banner", "-crlf", "-bad-json")
		case 4: // behind a shell, with a grandchild in its group
			if err := h.AddServer(ctx, label, []string{"--watch", bins[i]}, "/bin/sh", "-c", `sleep 3600 & exec "$0"`, bins[i]); err != nil {
				t.Fatal(err)
			}
		default:
			addServer(t, h, label, bins[i])
		}
		allowTools(t, h, label, faultyTools...)
	}
	d := startDaemon(t, h)

	// Warm up (every label once), so that what the daemon opens lazily
	// is open before the file descriptors are counted.
	for i := range servers {
		a := connectCmd(t, h.ConnectCommand(fmt.Sprintf("s%d", i)), "")
		if got := callText(t, a.Session, "echo", map[string]any{"message": "warm"}); got != "warm" {
			t.Fatalf("warm-up on s%d: %q", i, got)
		}
		_ = a.Close()
	}
	waitNoRuns(t, h, time.Minute)
	fdsBefore := fdList(t, d.PID())
	t.Logf("daemon pid %d holds %d file descriptors before the traffic", d.PID(), len(fdsBefore))

	stats := &soakStats{refusals: map[string]int{}, examples: map[string]string{}}
	trafficCtx, stopTraffic := context.WithTimeout(ctx, *soakDuration)
	defer stopTraffic()
	var shims sync.Map  // shim pid → struct{}: live shims, for random kills
	var killed sync.Map // shim pid → struct{}: shims the chaos killed
	var runs atomic.Int64
	var wg sync.WaitGroup
	const agents = 20
	for ai := range agents {
		label := fmt.Sprintf("s%d", ai%servers)
		r := rand.New(rand.NewPCG(seed, uint64(100+ai)))
		wg.Go(func() { soakAgent(trafficCtx, h, label, ai, r, stats, &shims, &killed, &runs) })
	}

	// Chaos: rebuilds every few seconds, kills of servers and shims.
	var rebuilds, serverKills, shimKills int
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		next := make([]int, servers)
		for trafficCtx.Err() == nil {
			select {
			case <-trafficCtx.Done():
				return
			case <-time.After(time.Duration(500+rnd.IntN(1500)) * time.Millisecond):
			}
			switch x := rnd.IntN(10); {
			case x < 4: // rebuild a server
				i := rnd.IntN(servers)
				next[i] ^= 1
				tmp := bins[i] + ".tmp"
				if err := os.WriteFile(tmp, builds[next[i]], 0o755); err != nil {
					t.Error(err)
					return
				}
				if err := os.Rename(tmp, bins[i]); err != nil {
					t.Error(err)
					return
				}
				rebuilds++
			case x < 8: // kill a server process
				rep, err := h.Status(trafficCtx)
				if err != nil || len(rep.Runs) == 0 {
					continue
				}
				r := rep.Runs[rnd.IntN(len(rep.Runs))]
				if r.PID > 0 && r.State == gateway.StateReady && syscall.Kill(r.PID, syscall.SIGKILL) == nil {
					serverKills++
				}
			default: // kill a shim
				var pids []int
				shims.Range(func(k, _ any) bool { pids = append(pids, k.(int)); return true })
				if len(pids) == 0 {
					continue
				}
				pid := pids[rnd.IntN(len(pids))]
				killed.Store(pid, struct{}{})
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					shimKills++
				}
			}
		}
	}()
	<-chaosDone
	wg.Wait()
	t.Logf("%d agent runs; %d rebuilds, %d server kills, %d shim kills", runs.Load(), rebuilds, serverKills, shimKills)
	t.Logf("calls: %d results, %d JSON-RPC errors, %d lost with their killed shim; slowest %s",
		stats.results.Load(), stats.rpcErrors.Load(), stats.agentKilled.Load(), time.Duration(stats.maxLatency.Load()))
	stats.mu.Lock()
	t.Logf("refusals: %v", stats.refusals)
	for name, msg := range stats.examples {
		t.Logf("  e.g. %s: %.300s", name, msg)
	}
	for _, u := range stats.unanswered {
		t.Errorf("unanswered call: %s", u)
	}
	stats.mu.Unlock()
	if stats.results.Load() < 100 {
		t.Errorf("only %d calls got a result: the soak did not exercise much", stats.results.Load())
	}

	// Everything ends: no run, no server process, no child of the daemon.
	waitNoRuns(t, h, 2*time.Minute)
	pids := startedPIDs(t, h)
	replaced := 0
	for _, e := range auditEvents(t, h) {
		if e.Type == audit.TypeServerReplaced {
			replaced++
		}
	}
	t.Logf("%d epochs replaced a running one (rebuilds, restarts after crashes)", replaced)
	for _, pid := range pids {
		groupGone(t, pid, time.Minute, fmt.Sprintf("server %d", pid))
	}
	waitFor(t, "the daemon to have no child process", func() bool { return len(childrenOf(t, d.PID())) == 0 })
	t.Logf("%d server processes were started; none is left", len(pids))

	// No leaked file descriptor.
	deadline := time.Now().Add(time.Minute)
	for {
		after := fdList(t, d.PID())
		if len(after) <= len(fdsBefore) {
			t.Logf("daemon holds %d file descriptors after the traffic (%d before)", len(after), len(fdsBefore))
			break
		}
		if time.Now().After(deadline) {
			var extra []string
			for fd, target := range after {
				if fdsBefore[fd] != target {
					extra = append(extra, fd+" → "+target)
				}
			}
			slices.Sort(extra)
			t.Errorf("daemon holds %d file descriptors after the traffic, %d before; new: %s", len(after), len(fdsBefore), strings.Join(extra, ", "))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	verifyAudit(t, h)
}

// soakAgent is one agent: it connects to label and calls tools until ctx
// ends, reconnecting when its shim is killed or its server is given up on.
func soakAgent(ctx context.Context, h *harness.Home, label string, ai int, r *rand.Rand, stats *soakStats, shims, killed *sync.Map, runs *atomic.Int64) {
	for ctx.Err() == nil {
		cmd := h.ConnectCommand(label)
		a, err := harness.Connect(context.WithoutCancel(ctx), newClient(&progressLog{notify: make(chan struct{}, 1)}), cmd, nil)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			stats.mu.Lock()
			stats.unanswered = append(stats.unanswered, fmt.Sprintf("agent %d: connecting to %s: %v", ai, label, err))
			stats.mu.Unlock()
			time.Sleep(time.Second)
			continue
		}
		runs.Add(1)
		pid := a.PID()
		shims.Store(pid, struct{}{})
		reconnect := soakCalls(ctx, a, ai, r, stats, func() bool { _, ok := killed.Load(pid); return ok })
		shims.Delete(pid)
		_ = a.Close()
		if !reconnect {
			return
		}
	}
}

// soakCalls makes calls on one connection until ctx ends (false) or the
// connection is to be replaced (true).
func soakCalls(ctx context.Context, a *harness.Agent, ai int, r *rand.Rand, stats *soakStats, shimKilled func() bool) bool {
	for i := 0; ; i++ {
		if ctx.Err() != nil {
			return false
		}
		var p mcp.CallToolParams
		switch x := r.IntN(10); {
		case x < 6:
			p = mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": fmt.Sprintf("agent %d call %d", ai, i)}}
		case x < 9:
			p = mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 50 + r.IntN(400)}}
		default:
			p = mcp.CallToolParams{Name: "blob", Arguments: map[string]any{"bytes": r.IntN(200_000)}}
		}
		// Calls run to the end even when the traffic stops: each must be
		// answered within the bound.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), soakCallBound)
		start := time.Now()
		res, err := a.Session.CallTool(cctx, &p)
		took := time.Since(start)
		cancel()
		stats.latency(took)
		var we *jsonrpc.Error
		switch {
		case err == nil && !res.IsError:
			stats.results.Add(1)
		case err == nil:
			stats.results.Add(1) // a tool error is a result too
		case errors.As(err, &we):
			stats.rpcErrors.Add(1)
			name := strings.SplitN(we.Message, ":", 2)[0]
			if len(name) > 40 {
				name = "jsonrpc " + strconv.Itoa(int(we.Code))
			}
			stats.mu.Lock()
			stats.refusals[name]++
			if _, ok := stats.examples[name]; !ok {
				stats.examples[name] = we.Message
			}
			stats.mu.Unlock()
			if strings.HasPrefix(we.Message, string(control.ServerUnavailable)) {
				return true // crash-looping or failed: start a new agent run
			}
		case shimKilled():
			stats.agentKilled.Add(1) // its own shim was killed: nobody to answer
			return true
		default:
			stats.mu.Lock()
			stats.unanswered = append(stats.unanswered, fmt.Sprintf("agent %d %s after %s: %v", ai, p.Name, took, err))
			stats.mu.Unlock()
			return true
		}
	}
}

// childrenOf returns the live child processes of pid.
func childrenOf(t *testing.T, pid int) []harness.Proc {
	t.Helper()
	all, err := harness.Processes()
	if err != nil {
		t.Fatal(err)
	}
	var out []harness.Proc
	for _, p := range all {
		if p.PPID == pid && p.State != "Z" {
			out = append(out, p)
		}
	}
	return out
}

// fdList returns the open file descriptors of pid with their targets.
func fdList(t *testing.T, pid int) map[string]string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		target, _ := os.Readlink(filepath.Join(dir, e.Name()))
		out[e.Name()] = target
	}
	return out
}
