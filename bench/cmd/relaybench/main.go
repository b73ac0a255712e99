// Command relaybench measures per-call latency and throughput of the echo
// test server reached directly, through a socat byte relay, through the npm
// supergateway pair and through Portcullis, alternating the paths round
// after round, then the daemon's resident memory with 0 and with 10 running
// servers (package bench). It prints Markdown tables for docs/BENCHMARKS.md.
//
//	go run ./bench/cmd/relaybench [-rounds 3] [-calls 1000] [-callers 1,8] [-servers 10] [-connects 10] [-paths …] [-portcullis BIN] [-perf FILE] [-strace FILE] [-perfstat FILE] [-trace-shim]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/bench"
	"github.com/portcullis/portcullis/internal/harness"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds; each runs every path once per concurrency")
	calls := flag.Int("calls", 1000, "calls per path, concurrency and round")
	servers := flag.Int("servers", 10, "running servers for the loaded memory figure (0: skip)")
	only := flag.String("paths", "direct,socat,supergateway,portcullis,portcullis-grant,portcullis-cred", "comma-separated paths to measure (portcullis-cred needs a Secret Service: relaybench runs itself inside scripts/with-secret-service.sh when there is none)")
	flag.StringVar(&prebuilt, "portcullis", "", "use this portcullis executable instead of building one (to compare two builds): a front with portcullis-app beside it, or an older single executable")
	flag.IntVar(&connects, "connects", 10, "connections for the connect-time figure, alternating direct and portcullis (0: skip)")
	flag.StringVar(&callersFlag, "callers", "1,8", "comma-separated numbers of concurrent callers, each batch run once per number")
	flag.StringVar(&perfOut, "perf", "", "record a perf profile (perf record -g) of the daemon during the measured batches into this file")
	flag.StringVar(&straceOut, "strace", "", "count the daemon's system calls (strace -c -f) during the measured batches into this file")
	flag.StringVar(&statOut, "perfstat", "", "count the daemon's CPU time, context switches and system calls (perf stat, syscall tracepoints) during the measured batches into this file")
	flag.BoolVar(&traceShim, "trace-shim", false, "-perf, -strace and -perfstat trace the shim (portcullis connect) too, with the daemon")
	flag.Parse()
	selected = map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		selected[strings.TrimSpace(p)] = true
	}
	if selected["portcullis-cred"] {
		inKeyring()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, *rounds, *calls, *servers); err != nil {
		fmt.Fprintln(os.Stderr, "relaybench:", err)
		os.Exit(1)
	}
}

// selected holds the names of the paths to measure (-paths).
var selected map[string]bool

// prebuilt is the -portcullis executable ("" builds one); perfOut the -perf
// file, straceOut the -strace file, statOut the -perfstat file.
var prebuilt, perfOut, straceOut, statOut string

// traceShim adds the first portcullis path's shim (portcullis connect) to
// what -perf, -strace and -perfstat trace.
var traceShim bool

// connects is the -connects count.
var connects int

// callersFlag is the -callers list.
var callersFlag string

func run(ctx context.Context, out io.Writer, rounds, calls, servers int) error {
	root, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "portcullis-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	e := bench.Env{Work: work}
	if prebuilt != "" {
		// A front runs every command but connect as the portcullis-app
		// beside it: check that it finds one now, not in the middle of a run.
		if out, err := exec.CommandContext(ctx, prebuilt, "version").CombinedOutput(); err != nil {
			return fmt.Errorf("-portcullis %s: `version` failed: %v: %s", prebuilt, err, strings.TrimSpace(string(out)))
		}
		e.Portcullis = prebuilt
	} else if e.Portcullis, err = harness.BuildPortcullis(ctx, root, work); err != nil {
		return err
	}
	if e.Echo, err = harness.BuildServer(ctx, root, work, "echo", ""); err != nil {
		return err
	}
	if e.NPM, err = harness.NPM(root); err != nil {
		if !errors.Is(err, harness.ErrNoNPM) {
			return err
		}
		fmt.Fprintf(os.Stderr, "relaybench: skipping supergateway: %v\n", err)
		e.NPM = ""
	}

	var paths []*bench.Path
	defer func() {
		for _, p := range paths {
			p.Close()
		}
	}()
	var skipped []string
	for _, o := range []struct {
		name string
		open func(context.Context, bench.Env) (*bench.Path, error)
	}{
		{"direct", bench.Direct}, {"socat", bench.Socat}, {"supergateway", bench.Supergateway},
		{"portcullis", bench.Portcullis}, {"portcullis-grant", bench.PortcullisGrant}, {"portcullis-cred", bench.PortcullisCred},
	} {
		if !selected[o.name] {
			continue
		}
		p, err := o.open(ctx, e)
		if err != nil {
			if e.NPM == "" && o.name == "supergateway" {
				continue
			}
			if errors.Is(err, bench.ErrNoSecretService) {
				fmt.Fprintf(os.Stderr, "relaybench: skipping: %v\n", err)
				skipped = append(skipped, fmt.Sprintf("not measured, %v", err))
				continue
			}
			return err
		}
		if p.Daemon != 0 {
			fmt.Fprintf(os.Stderr, "relaybench: %s: daemon-side pid %d\n", p.Name, p.Daemon)
		}
		paths = append(paths, p)
	}
	fmt.Fprintf(out, "relaybench: %s/%s, %d CPUs, %s; %d rounds × %d calls per path and concurrency, protocol %s\n\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), rounds, calls, bench.Protocol)

	// Warm up every path (process start, JIT of node, page cache).
	for _, p := range paths {
		if _, err := bench.CallsOf(ctx, p.Session, cmpOr(p.Tool, "echo"), 200, 8); err != nil {
			return fmt.Errorf("%s warm-up: %w", p.Name, err)
		}
	}
	var concurrency []int
	for _, f := range strings.Split(callersFlag, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			return fmt.Errorf("-callers %q: %q is not a number of callers (1 or more)", callersFlag, f)
		}
		concurrency = append(concurrency, c)
	}
	batches := map[string][]bench.Batch{}
	cpu := map[string]time.Duration{}     // daemon-side CPU (utime+stime) per path
	shimCPU := map[string]time.Duration{} // the shim's (the relay the client started)
	if perfOut != "" {
		stop, err := startTracer(paths, "perf", "record", "-g", "-F", "2999", "-o", perfOut)
		if err != nil {
			return err
		}
		defer stop()
	}
	if straceOut != "" {
		stop, err := startTracer(paths, "strace", "-c", "-f", "-o", straceOut)
		if err != nil {
			return err
		}
		defer stop()
	}
	if statOut != "" {
		stop, err := startTracer(paths, "perf", "stat", "-o", statOut, "-e",
			"task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter,"+
				"syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_futex,syscalls:sys_enter_nanosleep,"+
				"syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_newfstatat,syscalls:sys_enter_openat,syscalls:sys_enter_fdatasync")
		if err != nil {
			return err
		}
		defer stop()
	}
	key := func(p *bench.Path, c int) string { return fmt.Sprintf("%s/%d", p.Name, c) }
	for r := range rounds {
		for _, c := range concurrency {
			// Rotate the order each round so no path always goes first.
			for i := range paths {
				p := paths[(i+r)%len(paths)]
				t0, _ := bench.CPUTime(p.Daemon)
				s0, _ := bench.CPUTime(p.Shim)
				b, err := bench.CallsOf(ctx, p.Session, cmpOr(p.Tool, "echo"), calls, c)
				if err != nil {
					return fmt.Errorf("%s, %d callers: %w", p.Name, c, err)
				}
				t1, _ := bench.CPUTime(p.Daemon)
				s1, _ := bench.CPUTime(p.Shim)
				cpu[p.Name] += t1 - t0
				shimCPU[p.Name] += s1 - s0
				batches[key(p, c)] = append(batches[key(p, c)], b)
			}
		}
	}
	for _, s := range skipped {
		fmt.Fprintln(out, s)
	}
	if len(skipped) > 0 {
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out, "| path | callers | calls | p50 | p99 | calls/s |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|")
	for _, c := range concurrency {
		for _, p := range paths {
			s := bench.Summarize(batches[key(p, c)])
			fmt.Fprintf(out, "| %s | %d | %d | %s | %s | %.0f |\n", p.Name, c, s.Calls, us(s.P50), us(s.P99), s.CallsPerSec)
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| path | daemon-side CPU per call (utime+stime / calls) | shim-side CPU per call (the relay the client started) |")
	fmt.Fprintln(out, "|---|---:|---:|")
	perCall := func(d time.Duration) string {
		return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond)/float64(rounds*len(concurrency)*calls))
	}
	for _, p := range paths {
		if p.Daemon == 0 {
			continue
		}
		fmt.Fprintf(out, "| %s | %s | %s |\n", p.Name, perCall(cpu[p.Name]), perCall(shimCPU[p.Name]))
	}
	fdatasync, err1 := bench.SyncLatency(work, 200, bench.Fdatasync)
	fsync, err2 := bench.SyncLatency(work, 200, (*os.File).Sync)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "| this disk, 400-byte append (median of 200) | write + fdatasync %s | write + fsync %s |\n", us(fdatasync), us(fsync))
	for _, p := range paths {
		p.Close()
	}
	paths = nil
	if connects > 0 {
		if err := connectTime(ctx, out, e, connects); err != nil {
			return err
		}
	}
	if servers <= 0 {
		return nil
	}
	return memory(ctx, out, e, servers)
}

// inKeyringEnv marks the relaybench that scripts/with-secret-service.sh
// started, so that it does not start itself again.
const inKeyringEnv = "PORTCULLIS_BENCH_IN_KEYRING"

// inKeyring replaces this process with itself run inside the project's
// scripts/with-secret-service.sh (a private D-Bus session with a throwaway,
// unlocked gnome-keyring), so that the credentialed path has a Secret
// Service; a person's own keyring is never used. It returns when that is
// not needed or not possible (already inside, not Linux, no script), and
// the credentialed path then says why it was skipped; the script itself
// runs relaybench without a Secret Service when dbus-run-session or
// gnome-keyring-daemon is missing.
func inKeyring() {
	if runtime.GOOS != "linux" || os.Getenv(inKeyringEnv) != "" || os.Getenv("PORTCULLIS_TEST_KEYRING_PASSWORD") != "" {
		return
	}
	root, err := harness.RepoRoot()
	if err != nil {
		return
	}
	script := root + "/scripts/with-secret-service.sh"
	self, err := os.Executable()
	if err != nil {
		return
	}
	if _, err := os.Stat(script); err != nil {
		return
	}
	env := append(os.Environ(), inKeyringEnv+"=1")
	err = syscall.Exec("/bin/bash", append([]string{"bash", script, self}, os.Args[1:]...), env)
	fmt.Fprintf(os.Stderr, "relaybench: running inside %s: %v\n", script, err)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// connectTime measures, n times each and alternating, how long a client
// takes from starting its command to the initialize answer (the SDK's
// Connect: exec, initialize, initialized), directly and through
// `portcullis connect` to a running daemon (which launches a server for
// each agent run).
func connectTime(ctx context.Context, out io.Writer, e bench.Env, n int) error {
	h, d, err := bench.StartDaemon(ctx, e, "connect-home")
	if err != nil {
		return err
	}
	defer d.Stop(30 * time.Second)
	var direct, through []time.Duration
	one := func(cmd *exec.Cmd) (time.Duration, error) {
		client := mcp.NewClient(&mcp.Implementation{Name: "portcullis-bench", Version: "1.0.0"}, nil)
		t0 := time.Now()
		a, err := harness.Connect(ctx, client, cmd, &mcp.ClientSessionOptions{ProtocolVersion: bench.Protocol})
		if err != nil {
			return 0, err
		}
		dt := time.Since(t0)
		return dt, a.Close()
	}
	for range n {
		dd, err := one(exec.Command(e.Echo))
		if err != nil {
			return err
		}
		dp, err := one(h.ConnectCommand("echo"))
		if err != nil {
			return err
		}
		direct, through = append(direct, dd), append(through, dp)
	}
	med := func(v []time.Duration) (time.Duration, time.Duration) {
		slices.Sort(v)
		return v[0], v[len(v)/2]
	}
	dmin, dmed := med(direct)
	pmin, pmed := med(through)
	fmt.Fprintln(out)
	fmt.Fprintf(out, "| connect → initialize answered (%d each, alternating) | min | median |\n|---|---:|---:|\n", n)
	fmt.Fprintf(out, "| direct | %s | %s |\n| portcullis | %s | %s |\n", us(dmin), us(dmed), us(pmin), us(pmed))
	return nil
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

// memory reports the daemon's VmRSS idle, then with n agent runs (n
// running servers), each having made one call.
func memory(ctx context.Context, out io.Writer, e bench.Env, n int) error {
	h, d, err := bench.StartDaemon(ctx, e, "memory-home")
	if err != nil {
		return err
	}
	defer d.Stop(30 * time.Second)
	settle := func() (int64, error) {
		time.Sleep(time.Second)
		return harness.RSS(d.PID())
	}
	idle, err := settle()
	if err != nil {
		return err
	}
	var agents []*harness.Agent
	defer func() {
		for _, a := range agents {
			_ = a.Close()
		}
	}()
	for range n {
		client := mcp.NewClient(&mcp.Implementation{Name: "portcullis-bench", Version: "1.0.0"}, nil)
		a, err := harness.Connect(ctx, client, h.ConnectCommand("echo"), &mcp.ClientSessionOptions{ProtocolVersion: bench.Protocol})
		if err != nil {
			return err
		}
		agents = append(agents, a)
		if _, err := bench.Calls(ctx, a.Session, 1, 1); err != nil {
			return err
		}
	}
	rep, err := h.Status(ctx)
	if err != nil {
		return err
	}
	if len(rep.Runs) != n {
		return fmt.Errorf("status shows %d runs, want %d", len(rep.Runs), n)
	}
	loaded, err := settle()
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| daemon | VmRSS |")
	fmt.Fprintln(out, "|---|---:|")
	fmt.Fprintf(out, "| idle, 0 servers | %.1f MB |\n", float64(idle)/(1<<20))
	fmt.Fprintf(out, "| %d agent runs, %d servers running | %.1f MB |\n", n, n, float64(loaded)/(1<<20))
	return nil
}

// startTracer runs the command name with args and "-p DAEMONPID" (perf
// record, strace -c) on the daemon of the first portcullis path measured until the returned function
// is called, which interrupts it and waits for it to write its file.
func startTracer(paths []*bench.Path, name string, args ...string) (func(), error) {
	pid, shim := 0, 0
	for _, p := range paths {
		if strings.HasPrefix(p.Name, "portcullis") && pid == 0 {
			pid, shim = p.Daemon, p.Shim
		}
	}
	if pid == 0 {
		return nil, fmt.Errorf("-%s needs a portcullis path", name)
	}
	pids := strconv.Itoa(pid)
	if traceShim && shim != 0 {
		pids += "," + strconv.Itoa(shim)
	}
	if name == "strace" {
		args = append(args, "-p", strconv.Itoa(pid))
		if traceShim && shim != 0 {
			args = append(args, "-p", strconv.Itoa(shim))
		}
	} else {
		args = append(args, "-p", pids)
	}
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}, nil
}
