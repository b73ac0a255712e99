//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

// Environment variables of the idle and load benchmarks.
const (
	// EnvIdleWindow is how long BenchmarkIdle measures the daemon per
	// number of runs, as a Go duration ("10s", the default; "2s" for a
	// quick run).
	EnvIdleWindow = "PORTCULLIS_BENCH_IDLE_WINDOW"
	// EnvLoadCalls is how many calls each agent run makes per round of
	// BenchmarkLoad (default 50).
	EnvLoadCalls = "PORTCULLIS_BENCH_LOAD_CALLS"
)

const (
	defaultIdleWindow = 10 * time.Second
	defaultLoadCalls  = 50
	// idleSettle is how long the daemon is left alone after its runs are
	// ready and before a window starts: the launches' last steps (tree
	// settle, identity) are over by then.
	idleSettle = 2 * time.Second
	// connectParallel is how many agent runs connect at once.
	connectParallel = 8
	// readyTimeout bounds the wait for connected runs to be ready.
	readyTimeout = 3 * time.Minute
)

// BenchmarkIdle measures what `portcullis daemon` costs while nothing
// happens, with 0, 1, 10 and 100 idle agent runs connected. Each agent run
// is a go-sdk client (protocol 2025-06-18) connected through `portcullis
// connect echo` with a server process of its own (the echo test server,
// testdata/servers/echo); it listed the tools and does nothing more. One
// daemon serves the sub-benchmarks in turn, the runs of the smaller counts
// staying connected. Once every run is ready (its epoch identified) and
// after a further 2 s, the daemon process alone (not its servers, not the
// shims) is sampled from /proc at the start and end of a window
// (PORTCULLIS_BENCH_IDLE_WINDOW, default 10 s); it fails when a run, its
// epoch or its server pid changed meanwhile. Metrics per sub-benchmark
// (runs=N):
//
//   - cpu-%: utime + stime of all its threads over the window, as a
//     percentage of one core (a clock tick is 10 ms, so over 10 s the
//     figure moves in steps of 0.1 %);
//   - wakeups/s: voluntary + nonvoluntary context switches of its threads
//     (/proc/PID/task/*/status) per second;
//   - preempted/s: the nonvoluntary part of wakeups/s, preemptions, which
//     other work on a shared machine adds;
//   - rss-MB: VmRSS at the end of the window;
//   - load-1m: the machine's load average at the end (/proc/loadavg), to
//     read the others by on a shared machine.
//
// The ns/op figure is the window's length and means nothing.
// PORTCULLIS_BENCH_BINARY names a portcullis executable to run instead of
// building this tree's (to measure another build: a front with its
// portcullis-app beside it).
func BenchmarkIdle(b *testing.B) {
	window := defaultIdleWindow
	if v := os.Getenv(EnvIdleWindow); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q: want a positive Go duration such as 10s", EnvIdleWindow, v)
		}
		window = d
	}
	f := startFleet(b, "idle")
	defer f.close(b)
	for _, n := range []int{0, 1, 10, 100} {
		b.Run(fmt.Sprintf("runs=%d", n), func(b *testing.B) {
			f.grow(b, n)
			time.Sleep(idleSettle)
			var sum Usage
			for b.Loop() {
				u, err := f.measure(func() { time.Sleep(window) })
				if err != nil {
					b.Fatal(err)
				}
				sum.Window += u.Window
				sum.CPU += u.CPU
				sum.Switches.Voluntary += u.Switches.Voluntary
				sum.Switches.Nonvoluntary += u.Switches.Nonvoluntary
				sum.RSS = u.RSS
			}
			b.StopTimer()
			if err := f.unchanged(b.Context()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(sum.CPUPercent(), "cpu-%")
			b.ReportMetric(sum.WakeupsPerSec(), "wakeups/s")
			b.ReportMetric(sum.PreemptedPerSec(), "preempted/s")
			b.ReportMetric(float64(sum.RSS)/(1<<20), "rss-MB")
			reportLoad(b)
		})
	}
}

// BenchmarkLoad measures calls through one `portcullis daemon` from 30 and
// from 100 agent runs at once, each connected as in BenchmarkIdle (its own
// echo server) and making its calls of the echo tool, whose policy is allow
// (no approval), one after the other: every run makes
// PORTCULLIS_BENCH_LOAD_CALLS calls (default 50) per round, all runs
// concurrently. One daemon serves the sub-benchmarks in turn, the 30 runs
// staying connected for the 100:
//
//   - runs=30 and runs=100: every run calls back to back, so 30 and 100
//     calls are in flight. Where the daemon is the bottleneck, latency
//     grows with the calls in flight at the same throughput (Little's law:
//     100/30 = 3.3× the p50 at equal calls/s);
//   - runs=100,inflight=30: the same 100 runs make the same calls, but at
//     most 30 calls are in flight at once (a call waits for a slot before
//     it is timed): against runs=30, what 70 more connected runs that also
//     call cost, without the queueing of 70 more calls in flight.
//
// Metrics per sub-benchmark, over its rounds:
//
//   - calls/s: calls over the rounds' wall time;
//   - p50-ms, p99-ms: latency of one call in the client, CallTool to its
//     result (nearest rank);
//   - daemon-cpu-µs/call: the daemon's utime + stime over the rounds, per
//     call;
//   - load-1m: as for BenchmarkIdle.
//
// The ns/op figure is one round's length. PORTCULLIS_BENCH_BINARY is as
// for BenchmarkIdle.
func BenchmarkLoad(b *testing.B) {
	calls := defaultLoadCalls
	if v := os.Getenv(EnvLoadCalls); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive number of calls per run", EnvLoadCalls, v)
		}
		calls = n
	}
	f := startFleet(b, "load")
	defer f.close(b)
	if err := f.home.SetToolPolicy("echo", config.PolicyAllow, "echo"); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ runs, inflight int }{{30, 0}, {100, 0}, {100, 30}} {
		name := fmt.Sprintf("runs=%d", c.runs)
		if c.inflight > 0 {
			name += fmt.Sprintf(",inflight=%d", c.inflight)
		}
		b.Run(name, func(b *testing.B) {
			f.grow(b, c.runs)
			var batches []Batch
			var cpu time.Duration
			for b.Loop() {
				var round Batch
				var callErr error
				u, err := f.measure(func() { round, callErr = callsFromEach(b.Context(), f.agents[:c.runs], calls, c.inflight) })
				if err = errors.Join(err, callErr); err != nil {
					b.Fatal(err)
				}
				batches = append(batches, round)
				cpu += u.CPU
			}
			s := Summarize(batches)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(s.CallsPerSec, "calls/s")
			b.ReportMetric(ms(s.P50), "p50-ms")
			b.ReportMetric(ms(s.P99), "p99-ms")
			b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(s.Calls), "daemon-cpu-µs/call")
			reportLoad(b)
		})
	}
}

// reportLoad reports the machine's load average over the last minute
// (/proc/loadavg) as "load-1m": on a machine shared with other work, the
// figures beside it are read with it.
func reportLoad(b *testing.B) {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Logf("no load average: %v", err)
		return
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return
	}
	if l, err := strconv.ParseFloat(f[0], 64); err == nil {
		b.ReportMetric(l, "load-1m")
	}
}

// callsFromEach makes n calls of the echo tool {message: "ping"} from each
// of agents at once, each agent its calls one after the other; with
// inflight > 0, at most that many calls are in flight across the agents (a
// call's latency starts once it has a slot). It returns every call's
// latency and the wall time from the start to the last result; a call that
// fails or returns a tool error fails the round.
func callsFromEach(ctx context.Context, agents []*harness.Agent, n, inflight int) (Batch, error) {
	var slots chan struct{}
	if inflight > 0 {
		slots = make(chan struct{}, inflight)
	}
	lat := make([][]time.Duration, len(agents))
	errs := make([]error, len(agents))
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "ping"}}
	begin := make(chan struct{})
	var wg sync.WaitGroup
	for i, a := range agents {
		lat[i] = make([]time.Duration, 0, n)
		wg.Go(func() {
			<-begin
			for range n {
				if slots != nil {
					slots <- struct{}{}
				}
				t0 := time.Now()
				res, err := a.Session.CallTool(ctx, params)
				d := time.Since(t0)
				if slots != nil {
					<-slots
				}
				if err == nil && res.IsError {
					err = fmt.Errorf("echo returned a tool error: %+v", res.Content)
				}
				if err != nil {
					errs[i] = fmt.Errorf("agent run %d of %d, call %d: %w", i+1, len(agents), len(lat[i])+1, err)
					return
				}
				lat[i] = append(lat[i], d)
			}
		})
	}
	start := time.Now()
	close(begin)
	wg.Wait()
	out := Batch{Wall: time.Since(start)}
	for _, l := range lat {
		out.Latencies = append(out.Latencies, l...)
	}
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return out, fmt.Errorf("%d of %d agent runs' calls failed, first: %w", len(failed), len(agents), failed[0])
	}
	return out, nil
}

// fleet is a `portcullis daemon` with the echo test server configured and
// agent runs connected to it through `portcullis connect echo`.
type fleet struct {
	home   *harness.Home
	daemon *harness.Daemon
	logs   *harness.SyncBuffer
	agents []*harness.Agent // in the order they connected
	// ready holds, for each live agent run when they were last found
	// ready (waitReady), its epoch and server pid ("EPOCH pid PID").
	ready map[string]string
}

// startFleet builds portcullis (or takes PORTCULLIS_BENCH_BINARY) and the
// echo test server, configures echo in a new PORTCULLIS_HOME under a
// temporary directory (named after name) and starts the daemon with no
// agent run.
func startFleet(b *testing.B, name string) *fleet {
	b.Helper()
	if _, err := SampleProc(os.Getpid()); err != nil {
		b.Skipf("cannot measure a process here: %v", err)
	}
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	logs := &harness.SyncBuffer{}
	e := startEchoDaemon(ctx, b, name+"-home", logs)
	return &fleet{home: e.home, daemon: e.daemon, logs: logs}
}

// grow connects agent runs (connectParallel at a time) until n are
// connected, each having listed the tools, then waits until the daemon
// reports n live runs, each ready with a server process of its own and its
// epoch identified.
func (f *fleet) grow(b *testing.B, n int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), readyTimeout)
	defer cancel()
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, connectParallel)
	)
	for range n - len(f.agents) {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			client := mcp.NewClient(&mcp.Implementation{Name: "idle-bench", Version: "1.0.0"}, nil)
			a, err := harness.Connect(ctx, client, f.home.ConnectCommand("echo"), &mcp.ClientSessionOptions{ProtocolVersion: Protocol})
			if err == nil {
				if _, err = a.Session.ListTools(ctx, nil); err != nil {
					_ = a.Close()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			f.agents = append(f.agents, a)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		b.Fatalf("%d of the agent runs failed to connect and list, first: %v\ndaemon log:\n%s", len(errs), errs[0], tail(f.logs.String(), 40))
	}
	if err := f.waitReady(ctx, n); err != nil {
		b.Fatal(err)
	}
}

// waitReady waits until the daemon has logged n epochs identified and
// reports n live agent runs, all ready, with n distinct server pids.
func (f *fleet) waitReady(ctx context.Context, n int) error {
	var last string
	for {
		identified := strings.Count(f.logs.String(), `msg="epoch identified"`)
		if identified >= n {
			rep, err := f.home.Status(ctx)
			if err != nil {
				return err
			}
			pids := map[int]bool{}
			ready := 0
			for _, r := range rep.Runs {
				if r.State == gateway.StateReady && r.PID > 0 {
					ready++
					pids[r.PID] = true
				}
			}
			if len(rep.Runs) == n && ready == n && len(pids) == n {
				f.ready = epochsOf(rep.Runs)
				return nil
			}
			last = fmt.Sprintf("%d live runs, %d ready, %d distinct server pids", len(rep.Runs), ready, len(pids))
		} else {
			last = fmt.Sprintf("%d epochs identified", identified)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d agent runs not ready in time (%s); daemon log:\n%s", n, last, tail(f.logs.String(), 40))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// unchanged returns an error unless the live agent runs, their epochs and
// their server pids are those waitReady last found: a daemon that ended a
// run or started an epoch meanwhile was not idle.
func (f *fleet) unchanged(ctx context.Context) error {
	rep, err := f.home.Status(ctx)
	if err != nil {
		return err
	}
	now := epochsOf(rep.Runs)
	var diff []string
	for run, was := range f.ready {
		if is := now[run]; is != was {
			diff = append(diff, fmt.Sprintf("run %s: %q, now %q", run, was, is))
		}
	}
	for run, is := range now {
		if _, ok := f.ready[run]; !ok {
			diff = append(diff, fmt.Sprintf("run %s: new, %q", run, is))
		}
	}
	if len(diff) > 0 {
		return fmt.Errorf("the agent runs changed while they were idle, so the figures are not of an idle daemon: %s\ndaemon log:\n%s", strings.Join(diff, "; "), tail(f.logs.String(), 40))
	}
	return nil
}

// epochsOf maps each run to "EPOCH pid PID".
func epochsOf(runs []gateway.Status) map[string]string {
	out := make(map[string]string, len(runs))
	for _, r := range runs {
		out[string(r.Run)] = fmt.Sprintf("%s pid %d", r.Epoch, r.PID)
	}
	return out
}

// measure samples the daemon before and after do and returns what it used
// meanwhile.
func (f *fleet) measure(do func()) (Usage, error) {
	s0, err := SampleProc(f.daemon.PID())
	if err != nil {
		return Usage{}, err
	}
	do()
	s1, err := SampleProc(f.daemon.PID())
	if err != nil {
		return Usage{}, err
	}
	return s1.Since(s0), nil
}

// close ends every agent run (at once) and stops the daemon.
func (f *fleet) close(b *testing.B) {
	var wg sync.WaitGroup
	for _, a := range f.agents {
		wg.Go(func() { _ = a.Close() })
	}
	wg.Wait()
	if err := f.daemon.Stop(30 * time.Second); err != nil {
		b.Error(err)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
