// Package bench measures what Portcullis costs on the path of a tool call,
// against the same Go echo test server (testdata/servers/echo, tool "echo")
// reached four ways in the same run:
//
//   - direct: the client runs the server itself over stdio;
//   - socat: a plain byte relay of the same shape as Portcullis's path —
//     `socat STDIO UNIX-CONNECT:S` as the agent's command and
//     `socat UNIX-LISTEN:S,fork EXEC:server` as the daemon;
//   - supergateway: the npm supergateway pair, stdio → HTTP (SSE) → stdio;
//   - portcullis: `portcullis connect` and `portcullis daemon`, calling an
//     allow-policy tool (portcullis), a tool approved for the run
//     (portcullis-grant), or an allowed tool of a server holding a
//     credential scope (portcullis-cred, needs a Secret Service).
//
// Each path carries one go-sdk client session (protocol 2025-06-18, so every
// path speaks the same era). Latency is measured per call in the client,
// from CallTool to its result; calls/s is calls over the wall time of a
// batch. Batches of the four paths alternate, round after round, so that a
// drift of the machine affects all of them alike. It also reads the
// daemon's resident set size (VmRSS) idle and with running servers.
//
// `go run ./bench/cmd/relaybench` (make bench) prints the figures that
// docs/BENCHMARKS.md records.
package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/internal/harness"
)

// Protocol is the protocol version every benchmarked session negotiates.
const Protocol = "2025-06-18"

// Env is what the paths are built from.
type Env struct {
	Work       string // scratch directory (sockets, PORTCULLIS_HOME)
	Portcullis string // the portcullis executable
	Echo       string // the echo test server executable
	NPM        string // node_modules with supergateway; "" skips that path
}

// Path is one connected way to reach the echo server.
type Path struct {
	Name    string
	Session *mcp.ClientSession
	// Tool is the tool its batches call: "echo" (allowed by policy) when
	// empty, "add" for the path whose calls run under a person's grant.
	Tool string
	// Daemon is the pid of the process that sits between client and server
	// on the daemon side (the socat the listener forked for this
	// connection, supergateway server, portcullis daemon); 0 for the
	// direct path.
	Daemon int
	// Shim is the pid of the process the client started, when it is a
	// relay rather than the server (portcullis connect, socat STDIO, the
	// supergateway client); 0 for the direct path.
	Shim    int
	home    *harness.Home // the Portcullis paths' data directory
	cleanup []func()
}

// Close ends the session and stops everything the path started.
func (p *Path) Close() {
	if p.Session != nil {
		_ = p.Session.Close()
	}
	for i := len(p.cleanup) - 1; i >= 0; i-- {
		p.cleanup[i]()
	}
}

func newClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "portcullis-bench", Version: "1.0.0"}, nil)
}

func (p *Path) connect(ctx context.Context, cmd *exec.Cmd) error {
	a, err := harness.Connect(ctx, newClient(), cmd, &mcp.ClientSessionOptions{ProtocolVersion: Protocol})
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	p.Session = a.Session
	if p.Name != "direct" {
		p.Shim = a.Cmd.Process.Pid
	}
	return nil
}

// background starts cmd in its own process group and registers its stop.
func (p *Path) background(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: starting %s: %w", p.Name, cmd.Path, err)
	}
	p.Daemon = cmd.Process.Pid
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cleanup = append(p.cleanup, func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	return nil
}

// Direct connects the client to the echo server it runs itself.
func Direct(ctx context.Context, e Env) (*Path, error) {
	p := &Path{Name: "direct"}
	if err := p.connect(ctx, exec.Command(e.Echo)); err != nil {
		return nil, err
	}
	return p, nil
}

// Socat connects through a socat byte relay over a Unix socket.
func Socat(ctx context.Context, e Env) (*Path, error) {
	socat, err := exec.LookPath("socat")
	if err != nil {
		return nil, fmt.Errorf("socat: %w", err)
	}
	p := &Path{Name: "socat"}
	sock := filepath.Join(e.Work, "socat.sock")
	_ = os.Remove(sock)
	if err := p.background(exec.Command(socat, "UNIX-LISTEN:"+sock+",fork", "EXEC:"+e.Echo)); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, func() bool { _, err := os.Stat(sock); return err == nil }); err != nil {
		p.Close()
		return nil, fmt.Errorf("socat: socket %s did not appear: %w", sock, err)
	}
	if err := p.connect(ctx, exec.Command(socat, "STDIO", "UNIX-CONNECT:"+sock)); err != nil {
		p.Close()
		return nil, err
	}
	// The listener forks one socat per connection, and that one relays
	// (the initialize above went through it): it is the daemon side.
	child, err := childNamed(p.Daemon, "socat")
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("socat: the listener's relay for this connection: %w", err)
	}
	p.Daemon = child
	return p, nil
}

// childNamed returns the pid of the one child of ppid whose command name
// is comm (scanning /proc: a kernel may not list children itself).
func childNamed(ppid int, comm string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var found []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(string(b[close+1:]))
		// Fields after the name: state(0) ppid(1).
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) && string(b[open+1:close]) == comm {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("%d children of %d named %s, want 1", len(found), ppid, comm)
	}
	return found[0], nil
}

// Supergateway connects through the npm supergateway pair: the server side
// runs the echo server over stdio and serves SSE on a loopback port, the
// client side is the stdio command the client runs.
func Supergateway(ctx context.Context, e Env) (*Path, error) {
	if e.NPM == "" {
		return nil, errors.New("supergateway: npm peers not installed")
	}
	node, err := harness.Node()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	entry := filepath.Join(e.NPM, harness.SupergatewayEntry)
	p := &Path{Name: "supergateway"}
	if err := p.background(exec.Command(node, entry, "--stdio", e.Echo, "--port", strconv.Itoa(port), "--logLevel", "none")); err != nil {
		return nil, err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/sse", port)
	if err := waitFor(ctx, func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}); err != nil {
		p.Close()
		return nil, fmt.Errorf("supergateway: port %d did not open: %w", port, err)
	}
	if err := p.connect(ctx, exec.Command(node, entry, "--sse", url, "--logLevel", "none", "--protocolVersion", Protocol)); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Portcullis connects through `portcullis connect` to a `portcullis daemon`
// with the echo server registered and its echo tool allowed.
func Portcullis(ctx context.Context, e Env) (*Path, error) {
	return portcullisIn(ctx, e, "portcullis-home")
}

// portcullisIn is Portcullis with its PORTCULLIS_HOME under e.Work/name.
func portcullisIn(ctx context.Context, e Env, name string) (*Path, error) {
	p := &Path{Name: "portcullis"}
	h, d, err := StartDaemon(ctx, e, name)
	if err != nil {
		return nil, err
	}
	p.Daemon, p.home = d.PID(), h
	p.cleanup = append(p.cleanup, func() { _ = d.Stop(30 * time.Second) })
	if err := p.connect(ctx, h.ConnectCommand("echo")); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// PortcullisGrant is Portcullis with calls of the echo server's add tool,
// whose policy is approve: the first call raises an approval request, which
// is approved for the run from a terminal of its own (as the person
// would), and every later call runs under that grant, so its intent is an
// authority event synced before the call is forwarded.
func PortcullisGrant(ctx context.Context, e Env) (*Path, error) {
	p, err := portcullisIn(ctx, e, "grant-home")
	if err != nil {
		return nil, err
	}
	p.Name, p.Tool = "portcullis-grant", "add"
	first := make(chan error, 1)
	go func() {
		_, err := CallsOf(ctx, p.Session, p.Tool, 1, 1)
		first <- err
	}()
	if err := approveFirst(ctx, p.home); err != nil {
		p.Close()
		return nil, fmt.Errorf("portcullis-grant: %w", err)
	}
	if err := <-first; err != nil {
		p.Close()
		return nil, fmt.Errorf("portcullis-grant: the approved call: %w", err)
	}
	return p, nil
}

// ErrNoSecretService says that the credentialed path cannot be measured:
// no Secret Service answers in this session (relaybench runs itself inside
// scripts/with-secret-service.sh when it can).
var ErrNoSecretService = errors.New("no Secret Service in this session")

// credScope is the credential scope the credentialed path's server holds.
const credScope = "bench-token"

// PortcullisCred is Portcullis with the echo server holding a credential
// scope (bench-token, injected as the environment variable BENCH_TOKEN,
// its secret in the session's Secret Service) and its echo tool allowed:
// the launch with the credential is approved from a terminal of its own
// (as the person would), and every call, carrying the credential's
// authority, has its intent synced and the server's tree checked before it
// is forwarded. Without a Secret Service it returns ErrNoSecretService
// (wrapped, with the reason) and measures nothing.
func PortcullisCred(ctx context.Context, e Env) (*Path, error) {
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" {
		return nil, fmt.Errorf("portcullis-cred: %w: DBUS_SESSION_BUS_ADDRESS is not set (run inside scripts/with-secret-service.sh, which needs dbus-run-session and gnome-keyring-daemon)", ErrNoSecretService)
	}
	p := &Path{Name: "portcullis-cred"}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	h, d, err := startDaemonWith(ctx, e, "cred-home", []string{"--cred", credScope}, func(h *harness.Home) error {
		cmd := h.Command(ctx, "creds", "set", credScope, "--env", "BENCH_TOKEN")
		cmd.Stdin = strings.NewReader(hex.EncodeToString(secret) + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%w: portcullis creds set %s: %v (%s)", ErrNoSecretService, credScope, err, bytes.TrimSpace(out))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("portcullis-cred: %w", err)
	}
	p.Daemon, p.home = d.PID(), h
	p.cleanup = append(p.cleanup, func() { _ = d.Stop(30 * time.Second) })
	connected := make(chan error, 1)
	go func() { connected <- p.connect(ctx, h.ConnectCommand("echo")) }()
	if err := approveFirst(ctx, h); err != nil {
		p.Close()
		return nil, fmt.Errorf("portcullis-cred: the launch with %s: %w", credScope, err)
	}
	if err := <-connected; err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// approveFirst waits for the first pending approval request of h and
// approves it for the run from a terminal of its own, as the person.
func approveFirst(ctx context.Context, h *harness.Home) error {
	var id string
	if err := waitFor(ctx, func() bool {
		r, err := h.Run(ctx, "approvals", "--json")
		if err != nil {
			return false
		}
		var reqs []struct{ ID string }
		if json.Unmarshal([]byte(r.Stdout), &reqs) == nil && len(reqs) > 0 {
			id = reqs[0].ID
		}
		return id != ""
	}); err != nil {
		return fmt.Errorf("no approval request: %w", err)
	}
	if r, err := h.RunAtTerminal(ctx, "approve", id); err != nil {
		return fmt.Errorf("approve %s: %w (%s)", id, err, r.Stdout)
	}
	return nil
}

// StartDaemon starts `portcullis daemon` in a new PORTCULLIS_HOME under
// e.Work/name with the echo server registered as "echo" and its echo tool
// allowed without approval.
func StartDaemon(ctx context.Context, e Env, name string) (*harness.Home, *harness.Daemon, error) {
	return startDaemonWith(ctx, e, name, nil, nil)
}

// startDaemonWith is StartDaemon with more `servers add` flags for the
// echo server, and prepare run on the home before the daemon starts.
func startDaemonWith(ctx context.Context, e Env, name string, flags []string, prepare func(*harness.Home) error) (*harness.Home, *harness.Daemon, error) {
	h, err := harness.NewHome(e.Portcullis, filepath.Join(e.Work, name))
	if err != nil {
		return nil, nil, err
	}
	if prepare != nil {
		if err := prepare(h); err != nil {
			return nil, nil, err
		}
	}
	if err := h.AddServer(ctx, "echo", flags, e.Echo); err != nil {
		return nil, nil, err
	}
	if err := h.SetToolPolicy("echo", config.PolicyAllow, "echo"); err != nil {
		return nil, nil, err
	}
	d, err := h.StartDaemon(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	return h, d, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitFor(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Batch is the outcome of one batch of calls on one path.
type Batch struct {
	Latencies []time.Duration // one per call, in completion order
	Wall      time.Duration   // from the first call to the last result
}

// Calls makes n calls of the echo tool on s with the given number of
// concurrent callers (each making its share in sequence) and returns their
// latencies. A call that fails or returns a tool error fails the batch.
func Calls(ctx context.Context, s *mcp.ClientSession, n, callers int) (Batch, error) {
	return CallsOf(ctx, s, "echo", n, callers)
}

// CallsOf is Calls of tool: "echo" {message: "ping"} or "add" {a: 20, b: 22}.
func CallsOf(ctx context.Context, s *mcp.ClientSession, tool string, n, callers int) (Batch, error) {
	var (
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, n)
		errs []error
		wg   sync.WaitGroup
	)
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "ping"}}
	if tool == "add" {
		params = &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 20, "b": 22}}
	}
	start := time.Now()
	for c := range callers {
		share := n / callers
		if c < n%callers {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, share)
			for range share {
				t0 := time.Now()
				res, err := s.CallTool(ctx, params)
				d := time.Since(t0)
				if err == nil && res.IsError {
					err = fmt.Errorf("%s returned a tool error: %+v", tool, res.Content)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				local = append(local, d)
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b := Batch{Latencies: lat, Wall: time.Since(start)}
	if len(errs) > 0 {
		return b, fmt.Errorf("%d of %d calls failed, first: %w", len(errs), n, errs[0])
	}
	return b, nil
}

// Summary is the figures of many batches of one path and concurrency.
type Summary struct {
	Calls       int
	P50, P99    time.Duration
	CallsPerSec float64
}

// Summarize pools the latencies of batches and computes p50 and p99
// (nearest rank) and calls per second over the summed wall time.
func Summarize(batches []Batch) Summary {
	var all []time.Duration
	var wall time.Duration
	for _, b := range batches {
		all = append(all, b.Latencies...)
		wall += b.Wall
	}
	if len(all) == 0 {
		return Summary{}
	}
	slices.Sort(all)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(all))+0.999999) - 1
		return all[min(max(i, 0), len(all)-1)]
	}
	return Summary{Calls: len(all), P50: rank(0.50), P99: rank(0.99), CallsPerSec: float64(len(all)) / wall.Seconds()}
}

// CPUTime returns the CPU time (utime + stime, all threads, exited ones
// included) that process pid used so far, from /proc/PID/stat; 0 and an
// error for pid 0 or without /proc.
func CPUTime(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, errors.New("no process")
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// Fields after the name: state(0) … utime(11) stime(12), in clock ticks.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	// USER_HZ is 100 on every Linux Go supports.
	return time.Duration(ut+st) * (time.Second / 100), nil
}

// SyncLatency appends a 400-byte line to a new file in dir n times, each
// followed by sync (for example fdatasync), and returns the median of
// write + sync: the disk's price of one durable audit commit.
func SyncLatency(dir string, n int, sync func(*os.File) error) (time.Duration, error) {
	f, err := os.CreateTemp(dir, "sync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	line := append(bytes.Repeat([]byte{'x'}, 399), '\n')
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := f.Write(line); err != nil {
			return 0, err
		}
		if err := sync(f); err != nil {
			return 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat[len(lat)/2], nil
}
