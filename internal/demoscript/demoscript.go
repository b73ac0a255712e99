// Package demoscript is the scripted, headless demo that `make demo` runs
// (internal/demo) and that e2e/demo_test.go checks: it builds `portcullis`
// and the example inventory server, starts `portcullis daemon` in a
// temporary PORTCULLIS_HOME, registers the server, and drives a go-sdk agent
// through `portcullis connect` — listing tools, looking up and adjusting
// stock — printing a few readable lines per step, then `portcullis status`,
// and stops everything.
//
// Each step is a method of script, printed through step and detail, so that
// later chapters (a rebuild, an approval) can be added as more steps.
package demoscript

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/internal/harness"
)

// Options configure Run.
type Options struct {
	// Out receives the story, a few lines per step.
	Out io.Writer
	// Root is the repository root; "" finds it from the working directory.
	Root string
	// Work is a directory for the binaries and PORTCULLIS_HOME; "" makes a
	// temporary one and removes it afterwards.
	Work string
	// DaemonLog, when not nil, receives the daemon's own log.
	DaemonLog io.Writer
}

// The inventory server's demo label and the stock it starts with in every
// process (testdata/servers/README.md).
const (
	label    = "inventory"
	sku      = "WIDGET-1"
	startQty = 40
	delta    = -5
)

// ErrUnexpected is wrapped when a step's outcome is not what the demo
// expects (a wrong quantity, a missing tool): the demo checks what it shows.
var ErrUnexpected = errors.New("unexpected demo outcome")

// script is the demo's state between steps.
type script struct {
	o      Options
	n      int // steps printed so far
	root   string
	work   string
	bin    string // portcullis
	server string // inventory server
	home   *harness.Home
	daemon *harness.Daemon
	agent  *harness.Agent
	pid    int // the server process of the agent's run
}

// Run plays the demo and returns the first error; whatever it started is
// stopped before it returns.
func Run(ctx context.Context, o Options) (err error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	s := &script{o: o, root: o.Root, work: o.Work}
	if s.root == "" {
		if s.root, err = harness.RepoRoot(); err != nil {
			return err
		}
	}
	if s.work == "" {
		if s.work, err = os.MkdirTemp("", "portcullis-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(s.work)
	}
	defer s.stop()
	for _, st := range []func(context.Context) error{
		s.build,
		s.register,
		s.startDaemon,
		s.connect,
		s.listTools,
		s.lookup(startQty),
		s.adjust,
		s.lookup(startQty + delta),
		s.status,
		s.authChapter, // story_auth.go: approvals bound to epochs, told with a rebuild
	} {
		if err := st(ctx); err != nil {
			return err
		}
	}
	return s.finish()
}

// step starts a numbered step.
func (s *script) step(format string, args ...any) {
	s.n++
	fmt.Fprintf(s.o.Out, "\n%d. %s\n", s.n, fmt.Sprintf(format, args...))
}

// detail prints an indented line of the current step.
func (s *script) detail(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if line == "" {
		fmt.Fprintln(s.o.Out)
		return
	}
	fmt.Fprintf(s.o.Out, "   %s\n", line)
}

func (s *script) build(ctx context.Context) error {
	s.step("Build portcullis (headless, no cgo) and the example inventory server")
	var err error
	if s.bin, err = harness.BuildPortcullis(ctx, s.root, s.work); err != nil {
		return err
	}
	if s.server, err = harness.BuildServer(ctx, s.root, s.work, "inventory", ""); err != nil {
		return err
	}
	sum, err := harness.FileSHA256(s.server)
	if err != nil {
		return err
	}
	s.detail("portcullis  %s", s.bin)
	s.detail("inventory   %s", s.server)
	s.detail("            %s", sum)
	return nil
}

func (s *script) register(ctx context.Context) error {
	var err error
	if s.home, err = harness.NewHome(s.bin, filepath.Join(s.work, "home")); err != nil {
		return err
	}
	s.step("Register the server: portcullis servers add %s -- %s", label, filepath.Base(s.server))
	s.detail("PORTCULLIS_HOME=%s", s.home.Dir)
	r, err := s.home.Run(ctx, "servers", "add", label, "--", s.server)
	if err != nil {
		return err
	}
	s.detail("%s", strings.TrimSpace(r.Stdout))
	// Calls need a person's approval unless the tool's policy allows them;
	// this chapter of the demo is about the path, so both are allowed.
	if err := s.home.SetToolPolicy(label, config.PolicyAllow, "inventory_lookup", "inventory_adjust"); err != nil {
		return err
	}
	s.detail("policy: inventory_lookup and inventory_adjust allowed without approval (config.json \"tools\")")
	// The demo decides from a script, at terminals it opens itself: where
	// polkit could authenticate, the default would ask for a password at
	// each of them. Off, in the demo's own data directory only.
	cfg, err := config.Load(s.home.ConfigFile())
	if err != nil {
		return err
	}
	cfg.Settings.ApprovalAuthentication = config.AuthOff
	if err := config.Save(s.home.ConfigFile(), cfg); err != nil {
		return err
	}
	s.detail("settings.approvalAuthentication: off (the demo approves from a script; your own setup asks polkit where it can)")
	return nil
}

func (s *script) startDaemon(ctx context.Context) error {
	s.step("Start the daemon: portcullis daemon")
	var err error
	if s.daemon, err = s.home.StartDaemon(ctx, s.o.DaemonLog); err != nil {
		return err
	}
	rep, err := s.home.Status(ctx)
	if err != nil {
		return err
	}
	s.detail("pid %d, listening on %s", s.daemon.PID(), rep.Socket)
	return nil
}

func (s *script) connect(ctx context.Context) error {
	s.step("An agent (go-sdk client) launches `portcullis connect %s` instead of the server", label)
	client := mcp.NewClient(&mcp.Implementation{Name: "demo-agent", Version: "1.0.0"}, nil)
	var err error
	if s.agent, err = harness.Connect(ctx, client, s.home.ConnectCommand(label), nil); err != nil {
		return err
	}
	ir := s.agent.Session.InitializeResult()
	s.detail("connected: server %s %s, protocol %s", ir.ServerInfo.Name, ir.ServerInfo.Version, ir.ProtocolVersion)
	return nil
}

func (s *script) listTools(ctx context.Context) error {
	s.step("The agent lists the tools (tools/list)")
	res, err := s.agent.Session.ListTools(ctx, nil)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, t := range res.Tools {
		names[t.Name] = true
		s.detail("%-17s %s", t.Name, t.Description)
	}
	if !names["inventory_lookup"] || !names["inventory_adjust"] {
		return fmt.Errorf("%w: tools/list gave %v", ErrUnexpected, names)
	}
	return nil
}

// quantity is the structured content of both inventory tools.
type quantity struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

func (s *script) call(ctx context.Context, tool string, args map[string]any) (quantity, error) {
	var q quantity
	start := time.Now()
	res, err := s.agent.Session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return q, fmt.Errorf("calling %s: %w", tool, err)
	}
	took := time.Since(start)
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if res.IsError {
		return q, fmt.Errorf("%w: %s returned a tool error: %s", ErrUnexpected, tool, text)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(b, &q)
	}
	if err != nil {
		return q, fmt.Errorf("%w: %s structured content: %v", ErrUnexpected, tool, err)
	}
	s.detail("→ %q  (%s)", text, took.Round(100*time.Microsecond))
	return q, nil
}

func (s *script) lookup(want int) func(context.Context) error {
	return func(ctx context.Context) error {
		s.step("The agent calls inventory_lookup {sku: %s}", sku)
		q, err := s.call(ctx, "inventory_lookup", map[string]any{"sku": sku})
		if err != nil {
			return err
		}
		if q.Quantity != want {
			return fmt.Errorf("%w: %s has %d on hand, want %d", ErrUnexpected, sku, q.Quantity, want)
		}
		return nil
	}
}

func (s *script) adjust(ctx context.Context) error {
	s.step("The agent calls inventory_adjust {sku: %s, delta: %d}", sku, delta)
	q, err := s.call(ctx, "inventory_adjust", map[string]any{"sku": sku, "delta": delta})
	if err != nil {
		return err
	}
	if q.Quantity != startQty+delta {
		return fmt.Errorf("%w: after the adjustment %s has %d on hand, want %d", ErrUnexpected, sku, q.Quantity, startQty+delta)
	}
	return nil
}

func (s *script) status(ctx context.Context) error {
	s.step("What the daemon knows: portcullis status")
	r, err := s.home.Run(ctx, "status")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n") {
		s.detail("%s", line)
	}
	rep, err := s.home.Status(ctx)
	if err != nil {
		return err
	}
	run, ok := harness.RunByShim(rep, s.agent.PID())
	if !ok || run.Epoch == "" || run.Record == nil || run.PID <= 0 {
		return fmt.Errorf("%w: status shows no epoch for the agent's run", ErrUnexpected)
	}
	if sum, _ := harness.FileSHA256(s.server); run.Record.EntryDigest != sum {
		return fmt.Errorf("%w: status shows entry digest %s, the file's is %s", ErrUnexpected, run.Record.EntryDigest, sum)
	}
	s.pid = run.PID
	return nil
}

func (s *script) finish() error {
	s.step("The agent disconnects; the daemon stops the server and exits")
	if err := s.stop(); err != nil {
		return err
	}
	// The server leads its own process group: nothing of it may be left.
	if err := syscall.Kill(-s.pid, 0); !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%w: the server's process group %d is still there after the daemon stopped (%v)", ErrUnexpected, s.pid, err)
	}
	s.detail("done: no process left behind (server process group %d is gone)", s.pid)
	return nil
}

// stop ends the agent and the daemon; it is safe to call twice.
func (s *script) stop() error {
	var errs []error
	if s.agent != nil {
		if err := s.agent.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing the agent: %w", err))
		}
		s.agent = nil
	}
	if s.daemon != nil {
		if err := s.daemon.Stop(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
		s.daemon = nil
	}
	return errors.Join(errs...)
}
