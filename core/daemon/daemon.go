// Package daemon is the Portcullis daemon: it listens on the control socket,
// turns each `portcullis connect` shim connection into an agent run with its
// own server process (package gateway), and answers the CLI.
//
// The daemon is platform-independent. What needs the operating system (the
// peer's credentials on the socket, the agent's executable, the executables
// of a server's process tree) comes through the interfaces PeerInfo and
// identity.ProcessInfo, which package platform implements.
package daemon

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/install"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/secrets"
	"github.com/portcullis/portcullis/core/supervisor"
	"github.com/portcullis/portcullis/core/watch"
)

// PeerInfo reads, from the kernel, who is on the other end of a Unix socket
// connection and which program started it.
type PeerInfo interface {
	// Peer returns the uid and pid of the process that connected.
	Peer(c net.Conn) (uid, pid int, err error)
	// Parent returns the parent pid of pid and the parent's executable path.
	Parent(pid int) (ppid int, exe string, err error)
}

// ErrRunning is returned by Serve when another daemon answers on the socket.
var ErrRunning = errors.New("another Portcullis daemon is already running")

// ErrSocketTaken is returned by Serve when the socket's path is held by
// another user's file: the daemon does not start.
var ErrSocketTaken = errors.New("the control socket's path belongs to another user")

// Options configure a Daemon.
type Options struct {
	Dirs   paths.Dirs
	Peers  PeerInfo
	Procs  identity.ProcessInfo // nil: executables of the process tree are not observed
	Logger *slog.Logger
	// Supervisor sets the grace periods used to stop servers.
	Supervisor supervisor.Options
	// KeepEnded is how many ended agent runs `status` keeps showing
	// (default 10); health checks are counted apart (StatusReport.Checks).
	KeepEnded int
	// Settle is how long writes must pause before a build counts as
	// complete (default 300 ms).
	Settle time.Duration
	// DrainTimeout bounds how long an agent run goes on after the agent's
	// input ended, for the answers to the requests sent before (default
	// control.DefaultDrainTimeout). The reply to connect tells the shim.
	DrainTimeout time.Duration
	// AuditKey signs the audit log (HMAC-SHA256); nil leaves it unsigned.
	AuditKey []byte
	// AuditNote says why AuditKey is nil, for `portcullis status` (see
	// AuditSigning).
	AuditNote string
	// AuditSigner, when set, decides AuditKey and AuditNote in New, for
	// settings.auditSigning of the configuration file (on): the menu-bar
	// app and `portcullis daemon` call AuditSigning with the credential
	// store. Its error fails New.
	AuditSigner func(on bool) (key []byte, note string, err error)
	// Secrets is the credential store (keychain); nil: no credentials can
	// be injected, and servers that need them are refused at launch. A
	// change of settings.auditSigning to true reads (or creates) the audit
	// log's key in it.
	Secrets secrets.Store
	// Sandbox returns the sandbox of a level of config.Server.Sandbox
	// (standard, strict; "" for the platform's default where the server's
	// is unset) on this system, or why there is none (package platform:
	// NewSandbox); nil: no sandbox, and a server configured with one is
	// not launched.
	Sandbox func(level string) (supervisor.Sandbox, error)
	// Cgroups puts each server in a cgroup of its own, killed whole when
	// its epoch ends (production: platform.NewCgroups); nil: none, and
	// status says nothing of cgroups.
	Cgroups supervisor.Cgroups
	// Authenticator is the operating system's authentication that
	// settings.approvalAuthentication asks for before a grant (osauth.go);
	// nil: this system has none.
	Authenticator Authenticator
	// ReadManaged reads the managed policy (tests); nil:
	// config.ReadManaged, the root-owned file at config.ManagedFile.
	ReadManaged func() config.ManagedState
}

// Daemon owns the agent runs. Create it with New, run it with Serve.
type Daemon struct {
	opts     Options
	log      *slog.Logger
	measurer *identity.Measurer
	uid      int
	catalogs *catalog.Store
	validate *catalog.Validator
	audit    *audit.Log      // set once by Serve before any connection
	auditW   *recovering     // the same log, recovering after write failures
	tel      telemetrySwitch // the telemetry export, the audit log's Observer
	watcher  fileWatcher     // the build watcher
	authz    *authz.Authority
	code     *codeStore    // the source snapshots behind the cards' code sections (code.go)
	health   serviceHealth // services that stopped on their own (services.go)
	standing standingState // the standing approvals' file (standing.go)

	// newWatcher makes the configuration file's watcher (newFileWatcher).
	newWatcher func(settle time.Duration, log *slog.Logger) (fileWatcher, error)
	// recheck is how often watchConfig stats the configuration file
	// (configRecheck when zero; tests shorten it).
	recheck time.Duration

	// loadMu serializes reading the configuration file (config, fresh).
	loadMu sync.Mutex
	// policyKick signals applyPolicies that the configuration changed.
	policyKick chan struct{}
	// signKick signals followAuditSigning that settings.auditSigning
	// changed, or that the audit log works again.
	signKick chan struct{}
	// signMu serializes changes of the audit log's signing.
	signMu sync.Mutex

	mu       sync.Mutex
	cfg      *config.Config                 // guarded by mu; the last configuration that loaded
	cfgData  []byte                         // guarded by mu; the file's bytes that cfg was parsed from (nil: no file)
	cfgStamp fileStamp                      // guarded by mu; the file as it was when last read, loaded or not
	cfgErr   error                          // guarded by mu; why the file on disk is not in force, nil when it is
	cfgFrom  string                         // guarded by mu; the last good copy in force since start, while the file is missing ("": none)
	known    map[string]config.Server       // guarded by mu; label → its entry in the last configuration in force that had it (see policyOf)
	runs     map[ids.RunID]*gateway.Session // guarded by mu; live agent runs by run id
	labels   map[ids.RunID]string           // guarded by mu; run id → server label
	watched  map[string][]string            // guarded by mu; label → paths given to the watcher
	order    []ids.RunID                    // guarded by mu; run ids in start order
	ended    []gateway.Status               // guarded by mu; most recent last
	checks   map[string]*CheckSummary       // guarded by mu; health checks per server label
	cancel   context.CancelFunc             // guarded by mu
	subs     map[chan struct{}]struct{}     // guarded by mu; Changes subscribers
	children map[int]child                  // guarded by mu; server processes running, by pid
	// auditNote says why the audit log is not signed ("": the start's,
	// Options.AuditNote); auditSignErr why its signing differs from
	// settings.auditSigning ("" when it does not). See auditStatus.
	auditNote    string // guarded by mu
	auditSignErr string // guarded by mu
	// pending is the change to the configuration file that widens trust
	// and waits for the person, pendingData the file's bytes (see
	// configtrust.go).
	pending     *PendingChange // guarded by mu
	pendingData []byte         // guarded by mu
	wg          sync.WaitGroup

	// start is what New found of earlier runs (runrecord.go); record is
	// the run record as last written.
	start  startCheck
	recMu  sync.Mutex
	record RunRecord // guarded by recMu

	// managed is the managed policy as last read (managed.go);
	// overridden what the configuration file last read goes below it.
	managed    config.ManagedState // guarded by mu
	overridden []config.Floor      // guarded by mu

	// Who may decide (person.go).
	agents map[ids.RunID]identity.Observed // guarded by mu; run id → its agent process (see noteAgent)
	// peers holds the ancestry of each open control connection's peer
	// (net.Conn → peerChain), read when it was accepted.
	peers sync.Map
}

// New loads the configuration and returns a Daemon. A configuration file that
// does not parse or validate is an error naming the file, line, column and
// reason (config.SyntaxError, config.ValidationError); a missing file means no
// servers yet, unless its last good copy (config.json.last-good) exists: then
// the copy is in force, with a warning in the log and in Status, and neither
// file is written (see loadAtStart).
func New(o Options) (*Daemon, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.KeepEnded <= 0 {
		o.KeepEnded = 10
	}
	if o.Settle <= 0 {
		o.Settle = 300 * time.Millisecond
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = control.DefaultDrainTimeout
	}
	stamp := stampOf(o.Dirs.ConfigFile())
	cfg, data, from, err := loadAtStart(o.Dirs.ConfigFile())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	start := checkStart(o.Dirs, sealKeysFor(runtime.GOOS, o.Dirs, o.Secrets))
	managed := o.readManaged()
	cfg, data, overridden := floorConfig(managed, cfg, data)
	cfg, data, pending, pendingData := trustAtStart(start, cfg, data, cmp.Or(from, o.Dirs.ConfigFile()))
	cfg, data, _ = floorConfig(managed, cfg, data)
	if err := o.Dirs.Ensure(); err != nil {
		return nil, err
	}
	var cfgErr error // no file and no copy: no servers yet, not an error
	switch {
	case err == nil:
		keepLastGood(o.Dirs.ConfigFile(), data, log)
	case from != "":
		cfgErr = err
		log.Warn("configuration file is missing; its last good copy is in force", "file", o.Dirs.ConfigFile(), "copy", from, "err", err)
	}
	if o.AuditSigner != nil {
		if o.AuditKey, o.AuditNote, err = o.AuditSigner(cfg.Settings.AuditSigningOn()); err != nil {
			return nil, err
		}
	}
	cats, err := catalog.OpenStore(filepath.Join(o.Dirs.State, "catalog"), catalog.WithStoreLogger(log))
	if err != nil {
		return nil, fmt.Errorf("opening the catalog store: %w", err)
	}
	w, err := watch.New(o.Settle, log)
	if err != nil {
		return nil, fmt.Errorf("starting the build watcher: %w", err)
	}
	d := &Daemon{
		opts:     o,
		log:      log,
		measurer: identity.NewMeasurer(log),
		uid:      os.Getuid(),
		catalogs: cats,
		validate: catalog.NewValidator(catalog.WithValidatorLogger(log)),
		watcher:  w,
		cfg:      cfg,
		cfgData:  data,
		cfgStamp: stamp,
		cfgErr:   cfgErr,
		cfgFrom:  from,
		runs:     map[ids.RunID]*gateway.Session{},
		code:     newCodeStore(filepath.Join(o.Dirs.State, "code"), log),
		labels:   map[ids.RunID]string{},
		watched:  map[string][]string{},

		policyKick: make(chan struct{}, 1),
		signKick:   make(chan struct{}, 1),
		newWatcher: newFileWatcher,

		pending:     pending,
		pendingData: pendingData,
		start:       start,
		managed:     managed,
		overridden:  overridden,
	}
	if managed.Ignored != "" {
		log.Warn("the managed policy file is not trusted and sets no floor", "file", managed.File, "why", managed.Ignored)
	}
	if managed.Error != "" {
		log.Error("the managed policy file is malformed: every tool asks and approvals need the system's authentication until it is fixed", "file", managed.File, "err", managed.Error)
	}
	d.rememberLocked(cfg)
	d.authz = authz.New(authz.Options{
		Timeout:     cfg.Settings.ApprovalTimeoutOrDefault(),
		Logger:      log,
		OnRequested: d.approvalRequested,
		OnGranted:   d.approvalGranted,
		OnDenied:    d.approvalDenied,
		OnWithdrawn: d.approvalWithdrawn,
		ToolDenied:  func(label, tool string) bool { return d.policyOf(label, tool) == config.PolicyDeny },
		// Standing approvals outlive the daemon (standing.go).
		OnStanding:      d.standingGranted,
		OnStandingEnded: d.standingEnded,
	})
	return d, nil
}

// Authority is the daemon's approval broker: the menu-bar app subscribes to
// it and decides requests.
func (d *Daemon) Authority() *authz.Authority { return d.authz }

// loadConfig reads and parses the configuration file at path like
// config.Load, and also returns the bytes it parsed (nil when it failed), so
// that exactly what loaded can be kept as the last good copy.
func loadConfig(path string) (*config.Config, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		cfg, err := config.Load(path) // the same answer for a missing or unreadable file
		return cfg, nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, config.MaxFileSize+1))
	if err != nil || len(data) > config.MaxFileSize {
		cfg, err := config.Load(path)
		return cfg, nil, err
	}
	cfg, err := config.Parse(data, path)
	if err != nil {
		return nil, nil, err // as config.Load: FILE:LINE:COL: reason
	}
	return cfg, data, nil
}

// keepLastGood writes data, the contents of the configuration file at path
// that just loaded, to its .last-good sibling (unless it already holds
// them), so that a later hand edit that breaks the file can be undone.
func keepLastGood(path string, data []byte, log *slog.Logger) {
	backup := path + config.LastGoodSuffix
	if old, err := os.ReadFile(backup); err == nil && bytes.Equal(old, data) {
		return
	}
	if err := os.WriteFile(backup+".tmp", data, 0o600); err == nil {
		err = os.Rename(backup+".tmp", backup)
		if err != nil {
			log.Warn("keeping a last-good copy of the configuration", "err", err)
		}
	}
}

// AuditDir is where the audit log of a data directory lives.
func AuditDir(d paths.Dirs) string { return filepath.Join(d.State, "audit") }

// Serve listens on the control socket until ctx is cancelled or a client
// asks the daemon to stop. On return every server process has been stopped.
func (d *Daemon) Serve(ctx context.Context) error {
	if err := d.opts.Dirs.Ensure(); err != nil {
		return err
	}
	sock := d.opts.Dirs.Socket()
	ln, err := listen(sock)
	if err != nil {
		return err
	}
	d.reapOrphans()
	// Before the log opens: the events it writes itself are exported too.
	d.tel.started.Store(true)
	d.followTelemetry(ctx)
	defer d.tel.stop()
	al, err := audit.Open(d.auditOptions())
	if err != nil {
		ln.Close()
		return fmt.Errorf("opening the audit log: %w", err)
	}
	d.mu.Lock()
	d.audit = al
	if d.cfg != nil {
		_ = al.SetDurability(audit.Durability(d.cfg.Settings.AuditDurability)) // validated with d.cfg
	}
	// A log that works again may take a signing change that failed.
	d.auditW = &recovering{log: al, retryEvery: time.Second, onHealth: func() { d.notify(); d.kickSigning() }}
	d.mu.Unlock()
	defer al.Close()
	anchorDetail, err := d.checkAnchor()
	if err != nil {
		d.log.Error("comparing the audit log with its anchor", "err", err)
	}
	// What the start found missing (and the anchor check) before anything
	// else of this run, then the record of this start.
	d.recordStart(ctx, al, anchorDetail)
	if cfg, data := d.configData(); cfg != nil {
		d.recordConfig(data, cfg, true) // edits made while no daemon ran
	}
	d.recordHeldAtStart()
	d.loadStanding() // before any agent connects
	// After config_changed, which names a change of settings.auditSigning.
	if err := d.startAuditSigning(ctx); err != nil {
		ln.Close()
		return err
	}
	d.notify() // the status's audit part changed
	d.closeAbandonedRuns(ctx)
	ctx, cancel := context.WithCancel(ctx)
	d.mu.Lock()
	d.cancel = cancel
	d.mu.Unlock()
	defer cancel()
	d.adopt(ctx) // before any server starts: its descendants stay below the daemon
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	waitServices := d.startServices(ctx, d.services())
	d.log.Info("daemon listening", "socket", sock)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			d.log.Warn("accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.handle(ctx, c)
		}()
	}
	// Agent runs end when their context is cancelled; wait for their
	// servers to be stopped, and for the services.
	d.wg.Wait()
	waitServices()
	if err := al.Seal(context.Background(), audit.SealStop); err != nil {
		d.log.Error("sealing the audit log at stop", "err", err)
	}
	_ = os.Remove(sock)
	return nil
}

// listen binds the socket with mode 0600, replacing a stale socket file left
// by a daemon that died, and refusing when another daemon answers.
func listen(sock string) (net.Listener, error) {
	if fi, err := os.Lstat(sock); err == nil {
		if owner, ok := fileOwner(fi); ok && owner != os.Getuid() {
			return nil, fmt.Errorf("%w: the socket path %s is taken by uid %d, not this user (uid %d): another user may be impersonating Portcullis; not starting (have it removed by its owner or root, or set PORTCULLIS_HOME to a directory of your own)", ErrSocketTaken, sock, owner, os.Getuid())
		}
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%w (socket %s)", ErrRunning, sock)
		}
		if err := os.Remove(sock); err != nil {
			return nil, fmt.Errorf("removing stale socket %s: %w", sock, err)
		}
	}
	// The directory is 0700 (paths.Dirs.Ensure); the umask closes the
	// window in which the socket could be opened by others before Chmod.
	old := umask(0o177)
	ln, err := net.Listen("unix", sock)
	umask(old)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", sock, err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("securing %s: %w", sock, err)
	}
	return ln, nil
}

func reply(c net.Conn, r control.Reply) {
	r.OK = r.Error == ""
	b, _ := json.Marshal(r)
	_, _ = c.Write(append(b, '\n'))
}

func (d *Daemon) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	uid, pid, err := d.opts.Peers.Peer(c)
	if err != nil {
		d.log.Warn("reading peer credentials", "err", err)
		reply(c, control.Reply{Error: "cannot verify the connecting process: " + err.Error(), Code: "peer_unknown"})
		return
	}
	if uid != d.uid {
		d.log.Warn("refused a connection from another user", "uid", uid, "pid", pid)
		reply(c, control.Reply{Error: "connection refused: the daemon serves only its own user", Code: "peer_refused"})
		return
	}
	d.notePeer(c)
	defer d.forgetPeer(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	var h control.Hello
	if err := json.Unmarshal(line, &h); err != nil {
		reply(c, control.Reply{Error: "the first line must be a control hello: " + err.Error(), Code: "bad_hello"})
		return
	}
	if h.Version != control.Version {
		reply(c, control.Reply{Error: fmt.Sprintf("control protocol version %d is not %d: the shim and the daemon come from different builds; restart the daemon", h.Version, control.Version), Code: "version_mismatch"})
		return
	}
	switch h.Op {
	case control.OpPing:
		reply(c, control.Reply{})
	case control.OpStatus:
		b, err := json.Marshal(d.Status())
		if err != nil {
			reply(c, control.Reply{Error: err.Error(), Code: "internal"})
			return
		}
		reply(c, control.Reply{Data: b})
	case control.OpStop:
		// A server or an agent that stops the daemon could bind the
		// socket itself: only the person stops it.
		if err := d.personAct(c, "stop the Portcullis daemon"); err != nil {
			reply(c, control.Reply{Error: err.Error(), Code: codeNotPerson})
			return
		}
		reply(c, control.Reply{})
		d.mu.Lock()
		cancel := d.cancel
		d.mu.Unlock()
		cancel()
	case control.OpConnect:
		d.connect(ctx, c, br, h, pid)
	case control.OpPerson:
		if strings.TrimSpace(h.What) == "" {
			reply(c, control.Reply{Error: "person: say what the person is about to do (Hello.What)", Code: "bad_hello"})
			return
		}
		if err := d.personAct(c, h.What); err != nil {
			reply(c, control.Reply{Error: err.Error(), Code: codeNotPerson})
			return
		}
		reply(c, control.Reply{})
	case control.OpApprovals:
		b, _ := json.Marshal(d.authz.Pending())
		reply(c, control.Reply{Data: b})
	case control.OpRevokeStanding:
		st, err := d.RevokeStanding(h.Request, fmt.Sprintf("cli (pid %d)", pid))
		if err != nil {
			reply(c, control.Reply{Error: err.Error(), Code: "not_standing"})
			return
		}
		b, _ := json.Marshal(st)
		reply(c, control.Reply{Data: b})
	case control.OpCode:
		rep, err := d.CodeChanges(ctx, ids.RequestID(h.Request))
		if err != nil {
			reply(c, control.Reply{Error: err.Error(), Code: "not_pending"})
			return
		}
		b, _ := json.Marshal(rep)
		reply(c, control.Reply{Data: b})
	case control.OpDecide:
		req := ids.RequestID(h.Request)
		verb := "approve"
		if authz.Choice(h.Choice) == authz.Deny {
			verb = "deny"
		}
		if err := d.requirePersonFor(c, verb+" approval request "+h.Request, req); err != nil {
			reply(c, control.Reply{Error: err.Error(), Code: codeNotPerson})
			return
		}
		auth, err := d.authenticateDecision(ctx, c, req, authz.Choice(h.Choice), pid)
		if err != nil {
			reply(c, control.Reply{Error: err.Error(), Code: codeAuthentication})
			return
		}
		dec := authz.Decision{Choice: authz.Choice(h.Choice), Tools: h.Tools, Runs: h.Runs, By: "cli", Decider: d.cliDecider(c, auth)}
		if err := d.authz.Decide(req, dec); err != nil {
			code := "decide_failed"
			if re := (*authz.ResolvedError)(nil); errors.As(err, &re) {
				code = control.CodeResolvedPrefix + re.Outcome // withdrawn, and why, in the error
			}
			reply(c, control.Reply{Error: err.Error(), Code: code})
			return
		}
		// Reply.Data is the grants made (authz.DecideReply), absent for a
		// denial: their tool scopes are what was granted, without the
		// tools the person's policy denies now, which the card may still
		// have named; InForce is every tool each run holds now.
		var data json.RawMessage
		if gs := d.authz.GrantsOf(req); len(gs) > 0 {
			out := authz.DecideReply{Grant: gs[0], Grants: gs, InForce: map[ids.RunID][]string{}}
			for _, g := range gs {
				out.InForce[g.AgentRun] = d.authz.InForce(g.AgentRun, g.ExecutionEpoch)
			}
			data, _ = json.Marshal(out)
		}
		reply(c, control.Reply{Data: data})
	case control.OpConfig, control.OpConfigEdit, control.OpChangeDecide:
		d.configOp(c, h, pid)
	case control.OpAuditSetupKeys:
		d.setupKeys(ctx, c, h.Force)
	case control.OpAuditAcknowledge:
		d.acknowledgeTampered(ctx, c)
	case control.OpRestart:
		rctx, cancel := context.WithTimeout(ctx, d.restartWait())
		res := d.RestartWait(rctx, h.Label, "restart requested with portcullis restart")
		cancel()
		if len(res) == 0 {
			reply(c, control.Reply{Error: fmt.Sprintf("no agent run of %q is connected: nothing to restart", h.Label), Code: "no_runs"})
			return
		}
		b, _ := json.Marshal(map[string]any{"restarted": len(res), "results": res})
		reply(c, control.Reply{Data: b})
	default:
		reply(c, control.Reply{Error: fmt.Sprintf("unknown operation %q", h.Op), Code: "bad_hello"})
	}
}

// config returns the configuration now in force: the file is read again at
// every use so `portcullis servers add` needs no reload; a file that became
// invalid keeps the last good configuration in force and is reported (see
// load).
func (d *Daemon) config() (*config.Config, error) { return d.load(true) }

func (d *Daemon) connect(ctx context.Context, c net.Conn, br *bufio.Reader, h control.Hello, shimPID int) {
	label := h.Label
	cfg, cfgErr := d.config()
	srv, ok := cfg.Servers[label]
	if !ok {
		msg := fmt.Sprintf("no server labelled %q is configured in %s", label, d.opts.Dirs.ConfigFile())
		d.mu.Lock()
		for _, f := range d.overridden {
			if f.Field == "mcpServers."+label || f.Field == `mcpServers."`+label+`"` {
				msg = f.Text + " (" + d.managed.File + "); remove it from your agent's MCP servers, or ask whoever manages this machine"
			}
		}
		d.mu.Unlock()
		if cfgErr != nil {
			msg += " (the file is invalid: " + cfgErr.Error() + ")"
		}
		if names := slices.Sorted(mapsKeys(cfg.Servers)); len(names) > 0 {
			msg += fmt.Sprintf("; configured: %v", names)
		}
		reply(c, control.Reply{Error: msg, Code: "unknown_server"})
		return
	}
	agent := gateway.Agent{ShimPID: shimPID}
	if ppid, exe, err := d.opts.Peers.Parent(shimPID); err == nil {
		agent.PID, agent.Exe = ppid, exe
	} else {
		d.log.Info("agent of shim unknown", "shim", shimPID, "err", err)
	}
	runID := ids.NewRun()
	sess := gateway.New(gateway.Options{
		RunID:          runID,
		Label:          label,
		Agent:          agent,
		Launch:         d.launcher(label, runID, agent),
		Authority:      d.authz,
		Credentials:    credentialsOf(cfg, srv),
		Secrets:        d.secret,
		SecretCheck:    d.secretCheck,
		Catalog:        d.catalogs,
		Validator:      d.validate,
		Policy:         d.policy(label),
		RequestPolicy:  func(kind string) config.Policy { return d.requestPolicyOf(label, kind) },
		StartupTimeout: srv.StartupTimeoutOrDefault(),
		HoldTimeout:    cfg.Settings.HoldTimeoutOrDefault(),
		DrainTimeout:   d.opts.DrainTimeout,
		MaxMessage:     cfg.Settings.MaxMessageOrDefault(),
		RestartOnCrash: true,
		Audit:          d.auditW,
		Arguments:      func(call ids.CallID, args func() json.RawMessage) { d.tel.arguments(label, call, args) },
		Logger:         d.log,
		OnChange:       func() { d.rewatch(label); d.notify() },
		// A shim that reads shim lines learns which calls wait for a
		// person, and a run a reconnecting shim continues is recorded.
		ShimLines:       h.ShimLines,
		Continues:       h.Continues,
		PreviousLogHead: d.openedAt(),
		// Behind a launcher that relays its stdin to the worker it
		// swaps, a call carrying authority waits for the watched source
		// to settle (docs/TRUST.md, "A relaying watcher's last call").
		SourceUnsettled: d.sourceUnsettled(label, srv),
	})
	d.mu.Lock()
	d.runs[runID] = sess
	d.labels[runID] = label
	d.order = append(d.order, runID)
	d.mu.Unlock()
	d.noteAgent(runID, c)
	defer d.forgetAgent(runID)
	d.notify()
	// The shim relays the agent's stdio over c. A shim of an older build
	// may offer its descriptors (a "pass" field in its Hello): this Reply
	// does not ask for them, which such a shim takes as its cue to relay.
	r := control.ConnectReply(runID, d.opts.DrainTimeout)
	r.DaemonPID = os.Getpid()
	reply(c, r)
	d.log.Info("agent run started", "run", runID, "server", label, "agent", agent.Exe, "agentPid", agent.PID)

	err := sess.Serve(ctx, br, c)
	if h.ShimLines && ctx.Err() != nil {
		// The daemon stops on purpose: the shim connects again at the
		// agent's next request rather than start a daemon at once.
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte(control.StoppingLine + "\n"))
	}
	st := sess.Status()
	d.mu.Lock()
	delete(d.runs, runID)
	delete(d.labels, runID)
	d.order = slices.DeleteFunc(d.order, func(id ids.RunID) bool { return id == runID })
	if st.Check {
		// A health check (`claude mcp list`): counted, not listed.
		if d.checks == nil {
			d.checks = map[string]*CheckSummary{}
		}
		c := d.checks[label]
		if c == nil {
			c = &CheckSummary{Label: label}
			d.checks[label] = c
		}
		c.Count++
		c.Last = st
	} else {
		d.ended = append(d.ended, st)
		if len(d.ended) > d.opts.KeepEnded {
			d.ended = d.ended[len(d.ended)-d.opts.KeepEnded:]
		}
	}
	d.mu.Unlock()
	d.rewatch(label)
	d.notify()
	d.log.Info("agent run ended", "run", runID, "err", err)
}

func mapsKeys[M ~map[K]V, K comparable, V any](m M) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// measureSpec is what the supervisor measures for a server's identity.
func measureSpec(label string, srv config.Server) identity.MeasureSpec {
	env := make([]string, 0, len(srv.Env))
	for k, v := range srv.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return identity.MeasureSpec{Label: label, Command: srv.Command, Args: srv.Args, Dir: srv.Cwd, Env: env, Extra: srv.Watch, Ignore: srv.Ignore}
}

// policy returns the per-tool policy function of label (see policyOf).
func (d *Daemon) policy(label string) func(tool string) config.Policy {
	return func(tool string) config.Policy { return d.policyOf(label, tool) }
}

// policyOf returns the policy of tool of server label. Each answer comes
// from the configuration in force, which the configuration watcher keeps
// current (watchConfig: at the file's change events, and by a stat every
// configRecheck to cover a missed one), so that no call pays a stat. An
// edit through the daemon (`portcullis servers policy`, Preferences) is in
// force before the command returns; a hand edit of the file takes effect
// within the watcher's latency (its settle time, at most configRecheck
// when an event is missed), not strictly at the next call.
//
// A label no longer configured (`portcullis servers remove`, a config.json
// replaced) keeps the tool policies of the last configuration in force that
// had it: agent runs already connected keep their server until they end,
// and what their agents may do is neither widened nor changed by the
// removal. A label that comes back has its new policies.
func (d *Daemon) policyOf(label, tool string) config.Policy {
	d.mu.Lock()
	srv, ok := d.serverInForceLocked(label)
	d.mu.Unlock()
	if ok {
		return srv.Policy(tool)
	}
	return config.PolicyApprove
}

// requestPolicyOf returns the policy of server label's requests to the
// agent of kind, from the configuration in force as policyOf does.
func (d *Daemon) requestPolicyOf(label, kind string) config.Policy {
	d.mu.Lock()
	srv, _ := d.serverInForceLocked(label)
	d.mu.Unlock()
	return srv.RequestPolicy(kind)
}

// serverInForceLocked returns server label of the configuration in force,
// or, for a label no longer configured, as the last configuration that had
// it said; ok is false for a label never configured.
func (d *Daemon) serverInForceLocked(label string) (srv config.Server, ok bool) {
	if d.cfg != nil {
		if srv, ok = d.cfg.Servers[label]; ok {
			return srv, true
		}
	}
	srv, ok = d.known[label]
	return srv, ok
}

// rememberLocked records the servers of cfg, now in force, for policyOf.
func (d *Daemon) rememberLocked(cfg *config.Config) {
	if cfg == nil {
		return
	}
	if d.known == nil {
		d.known = map[string]config.Server{}
	}
	for label, srv := range cfg.Servers {
		srv.Tools = maps.Clone(srv.Tools)
		d.known[label] = srv
	}
}

// maxCodeChanges bounds how many times one launch starts over because the
// code changed on disk between its measurement and its start.
const maxCodeChanges = 3

// inheritedSecret reports whether a variable of the daemon's own
// environment looks like a secret (install.Secret's rule: a known key
// prefix, a URL with a password, a secret-sounding name with a value that
// is no path or setting, a long random-looking value): a daemon that an
// agent's `portcullis connect` started inherits the agent's environment,
// its API key with it, and a server is not to receive it unasked.
func inheritedSecret(name, value string) bool {
	secret, _ := install.Secret(name, value)
	return secret
}

// errCodeChanged says the code on disk changed between the measurement of a
// launch and its start.
var errCodeChanged = errors.New("the code changed on disk while it was being launched")

// launcher measures the execution identity, starts the process and observes
// what the kernel says it runs: the epoch is minted here, by the supervisor,
// never taken from the server. The configuration is read at each launch, so
// a restart picks up an edited command.
//
// What a person approved is what runs: a launch that waited for approval of
// its credentials measures again just before it starts, and the kernel's
// view of the started executable is compared with the measurement; either
// differing starts the launch over (a new measurement, a new approval for
// new code), at most maxCodeChanges times.
func (d *Daemon) launcher(label string, run ids.RunID, agent gateway.Agent) gateway.Launcher {
	return func(ctx context.Context) (*gateway.Epoch, error) {
		var asked *identity.Record // the code a person was last asked about, when it changed under the launch
		for attempt := 0; ; attempt++ {
			ep, measured, err := d.launch(ctx, label, run, agent, asked)
			if !errors.Is(err, errCodeChanged) {
				return ep, err
			}
			d.log.Warn("launch started over", "server", label, "run", run, "why", err)
			asked = &measured
			if attempt+1 >= maxCodeChanges {
				return nil, fmt.Errorf("%s was not launched: the code changed on disk during %d launch attempts in a row (last: %w); launch it again once the build has finished", label, maxCodeChanges, err)
			}
		}
	}
}

// launch is one attempt of launcher; it returns an error wrapping
// errCodeChanged, with the record it measured first, when the code changed
// under it. asked is the record of the code the previous attempt asked a
// person about (nil on the first attempt).
func (d *Daemon) launch(ctx context.Context, label string, run ids.RunID, agent gateway.Agent, asked *identity.Record) (*gateway.Epoch, identity.Record, error) {
	cfg, _ := d.config()
	srv, ok := cfg.Servers[label]
	if !ok {
		return nil, identity.Record{}, fmt.Errorf("server %q is no longer configured", label)
	}
	if srv.Cwd != "" {
		if info, err := os.Stat(srv.Cwd); err != nil || !info.IsDir() {
			return nil, identity.Record{}, fmt.Errorf("the working directory of %s, %s, does not exist or is not a directory", label, srv.Cwd)
		}
	}
	spec := measureSpec(label, srv)
	measuredAt := time.Now()
	rec, err := d.measurer.Measure(ctx, spec)
	if err != nil {
		return nil, identity.Record{}, fmt.Errorf("measuring %s: %w", label, err)
	}
	credEnv, launchGrant, err := d.envCredentials(ctx, cfg, srv, label, run, agent, rec, asked)
	if err != nil {
		return nil, identity.Record{}, err
	}
	if len(credEnv) > 0 {
		// The approval may have taken minutes: the code approved must
		// still be the code on disk.
		now, err := d.measurer.Measure(ctx, spec)
		if err != nil {
			return nil, identity.Record{}, fmt.Errorf("measuring %s: %w", label, err)
		}
		if authz.IdentityDigest(now) != authz.IdentityDigest(rec) {
			var what []string
			for _, c := range authz.FoldSameFile(identity.Diff(rec, now)) {
				what = append(what, authz.ChangeSubject(c))
			}
			return nil, rec, fmt.Errorf("%w while its approval was asked (changed: %s)", errCodeChanged, strings.Join(what, ", "))
		}
	}
	env := append(spec.Env, credEnv...)
	sandbox, hide, err := d.sandboxOf(label, srv)
	if err != nil {
		return nil, identity.Record{}, err
	}
	proc, err := supervisor.Start(ctx, supervisor.Spec{
		Sandbox: sandbox, Hide: hide, Write: srv.Write, Cgroups: d.opts.Cgroups,
		Label: label, Command: rec.ResolvedExecutable.Path, Args: srv.Args, Dir: serverDir(srv, hide), Env: env,
		SessionBus: srv.SessionBus, Secrets: d.secretsOf(cfg, srv, credEnv),
		Withhold: inheritedSecret, Code: measuredCode(rec, measuredAt),
	}, d.supervisorOptions())
	if err != nil {
		return nil, identity.Record{}, fmt.Errorf("starting %s: %w", label, err)
	}
	rec.Epoch = proc.Epoch() // minted by the supervisor, and marks the process tree (supervisor.EpochEnv)
	rec.ProcessID = proc.Pid()
	rec.StartedAt = time.Now().UTC()
	// Start returned once the exec succeeded: the kernel's file of the
	// direct child is the program launched, compared before anything
	// reaches it. Its digest comes from the measurement's cache when the
	// running file is the one just digested (same device, inode and stat
	// key; identity.Measurer.DigestOpen).
	running, err := proc.ExecutableDigest()
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		d.log.Info("reading the started executable", "pid", proc.Pid(), "err", err)
	}
	if got, ok := swappedExecutable(rec, running); ok {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = proc.Stop(stopCtx)
		cancel()
		return nil, rec, fmt.Errorf("%w (%s was measured as %s, the kernel runs %s)", errCodeChanged, rec.ResolvedExecutable.Path, rec.ResolvedExecutable.SHA256, got)
	}
	start, _ := proc.StartTime() // 0 where unknown: the epoch's mark still finds its processes
	d.trackChild(child{PID: proc.Pid(), StartTime: start, Label: label, Epoch: rec.Epoch})
	go func() {
		<-proc.Done()
		d.untrackChild(proc.Pid())
	}()
	d.log.Info("server started", "server", label, "epoch", rec.Epoch, "pid", rec.ProcessID)
	d.code.launched(rec) // the source tree as this epoch started, for the cards that ask about it
	if launchGrant != nil {
		// The tools approved on the launch card hold on the epoch this
		// launch started, and on no other (authz.Authority.BindLaunch).
		if err := d.authz.BindLaunch(run, launchGrant.ID, rec.Epoch); err != nil {
			d.log.Warn("tools approved with the launch not granted", "server", label, "epoch", rec.Epoch, "err", err)
		}
	}
	// The processes that run the epoch are read once the launcher's exec
	// settled (env, sh -c, npx) and the process answered; the gateway
	// forwards the handshake meanwhile and holds calls until then. The
	// supervisor watches the tree from then on (supervisor.TreeChange).
	observe := func(ctx context.Context) ([]identity.Observed, error) {
		obs, err := proc.Identity(ctx)
		if err != nil && d.opts.Procs != nil {
			obs, err = identity.Observe(ctx, d.opts.Procs, proc.Pid())
		}
		return obs, err
	}
	return &gateway.Epoch{ID: rec.Epoch, Record: rec, Proc: proc, Identify: observe, Refetch: proc.ChangedWhenArmed}, rec, nil
}

// measuredCode is what the supervisor counts as the code of the epoch it
// starts (supervisor.Code): the digests the measurement took, the trees it
// measured (the entry's package, the watched directories) and when it
// began.
func measuredCode(rec identity.Record, at time.Time) supervisor.Code {
	c := supervisor.Code{Since: at}
	add := func(sum string) {
		if sum != "" {
			c.Digests = append(c.Digests, sum)
		}
	}
	add(rec.ResolvedExecutable.SHA256)
	add(rec.EntryDigest)
	if rec.Interpreter != nil {
		add(rec.Interpreter.SHA256)
	}
	for _, w := range rec.Wrappers {
		add(w.SHA256)
	}
	if rec.Package != nil {
		c.Dirs = append(c.Dirs, rec.Package.Dir)
	}
	for p, sum := range rec.ExtraDigests {
		add(sum)
		if !filepath.IsAbs(p) {
			p = filepath.Join(rec.WorkingDirectory, p)
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			c.Dirs = append(c.Dirs, p)
		}
	}
	slices.Sort(c.Dirs)
	return c
}

// sandboxOf returns the sandbox that confines server label, nil when its
// configuration asks for none, and what it hides: the daemon's
// configuration, state and runtime directories and, unless the server has
// the session bus, the bus's socket when its address names a path. A
// level set explicitly that this system cannot provide fails the launch:
// the server is not run unconfined behind the person's back. A sandbox
// left at its default (standard) where the system has none
// (a supervisor.UnsupportedError, or a daemon built without one) runs
// the server unconfined, and status says why (supervisor.Unconfined);
// any other failure fails the launch.
func (d *Daemon) sandboxOf(label string, srv config.Server) (supervisor.Sandbox, []string, error) {
	level := srv.SandboxLevel()
	if level == config.SandboxOff {
		return nil, nil, nil
	}
	if d.opts.Sandbox == nil {
		if srv.Sandbox == "" {
			return supervisor.Unconfined("this build has no sandbox"), nil, nil
		}
		return nil, nil, fmt.Errorf("%s asks for sandbox %s, which this build cannot provide; it was not launched (set its sandbox to off to run it unconfined: portcullis servers edit %s --sandbox off)", label, level, label)
	}
	// An unset sandbox asks for the platform's default ("").
	sb, err := d.opts.Sandbox(srv.Sandbox)
	if u := (*supervisor.UnsupportedError)(nil); err != nil && srv.Sandbox == "" && errors.As(err, &u) {
		return supervisor.Unconfined(u.Reason), nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s asks for sandbox %s (%s), which this system cannot provide (%v); it was not launched (set its sandbox to off to run it unconfined: portcullis servers edit %s --sandbox off)", label, level, cmp.Or(srv.Sandbox, "the default"), err, label)
	}
	hide := []string{d.opts.Dirs.Config}
	for _, p := range []string{d.opts.Dirs.State, d.opts.Dirs.Runtime} {
		if !slices.Contains(hide, p) { // PORTCULLIS_HOME is both Config and State
			hide = append(hide, p)
		}
	}
	if !srv.SessionBus {
		for _, part := range strings.Split(os.Getenv(supervisor.SessionBusEnv), ";") {
			if p, ok := strings.CutPrefix(part, "unix:path="); ok {
				p, _, _ = strings.Cut(p, ",")
				hide = append(hide, p)
			}
		}
	}
	return sb, hide, nil
}

// serverDir returns the working directory of server srv: its cwd; without
// one, the daemon's own, unless the sandbox hides that (a daemon started
// in its data directory): then the person's home directory, or / (the
// sandbox's launcher refuses a working directory it hides, which would
// still lead into it).
func serverDir(srv config.Server, hide []string) string {
	if srv.Cwd != "" || len(hide) == 0 {
		return srv.Cwd
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for _, h := range hide {
		if h = filepath.Clean(h); wd == h || strings.HasPrefix(wd, h+string(filepath.Separator)) {
			if home, err := os.UserHomeDir(); err == nil && !strings.HasPrefix(home+string(filepath.Separator), h+string(filepath.Separator)) {
				return home
			}
			return "/"
		}
	}
	return ""
}

// secretsOf returns the credentials' values that the server srv receives:
// those of credEnv (its environment, "VAR=value"), and those of its meta
// scopes, read from the store (a scope that cannot be read now is not
// injected either), so that the supervisor redacts them from what the
// server writes (supervisor.Redactor).
func (d *Daemon) secretsOf(cfg *config.Config, srv config.Server, credEnv []string) []supervisor.Secret {
	var out []supervisor.Secret
	for _, c := range credentialsOf(cfg, srv) {
		switch c.Inject {
		case config.InjectEnv:
			for _, kv := range credEnv {
				if v, ok := strings.CutPrefix(kv, c.EnvVar+"="); ok {
					out = append(out, supervisor.Secret{Scope: c.Scope, Value: v})
				}
			}
		case config.InjectMeta:
			if v, err := d.secret(c.Scope); err == nil {
				out = append(out, supervisor.Secret{Scope: c.Scope, Value: string(v)})
			}
		}
	}
	return out
}

// swappedExecutable reports whether running, the digest of the file the
// kernel started for rec ("" unknown), differs from the one measured, and
// returns it. Only a launch without interpreter or wrapper is compared: a
// shebang or a wrapper execs further programs.
func swappedExecutable(rec identity.Record, running string) (string, bool) {
	if rec.Interpreter != nil || len(rec.Wrappers) > 0 {
		return "", false
	}
	if running != "" && running != rec.ResolvedExecutable.SHA256 {
		return running, true
	}
	return "", false
}

func (d *Daemon) supervisorOptions() supervisor.Options {
	o := d.opts.Supervisor
	o.Logger = d.log
	// The gateway ends the old epoch before output from new code is read
	// (docs/DESIGN.md "Who answered").
	o.HoldNewCode = true
	if o.Measurer == nil {
		// One digest cache for the measurement and the processes it
		// starts: the running file just measured is not read again.
		o.Measurer = d.measurer
	}
	return o
}

// ServerInfo is a configured server, as `portcullis status` lists it.
type ServerInfo struct {
	Label   string   `json:"label"`
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	Runs    int      `json:"runs"` // live agent runs
}

// StatusReport is the answer to the status operation.
type StatusReport struct {
	Socket      string           `json:"socket"`
	ConfigFile  string           `json:"configFile"`
	ConfigError string           `json:"configError,omitempty"` // the file is invalid; the last good one is in force
	Servers     []ServerInfo     `json:"servers"`
	Runs        []gateway.Status `json:"runs"` // live agent runs, oldest first
	// Approvals are the pending approval requests, oldest first: a call
	// whose run has one here is waiting for a person.
	Approvals []authz.Request  `json:"approvals"`
	Ended     []gateway.Status `json:"ended"` // recently ended runs, oldest first, health checks aside
	// Checks counts, per server label, the ended runs that were health
	// checks (gateway.Status.Check), with the last one; sorted by label.
	Checks []CheckSummary `json:"checks"`
	Audit  AuditStatus    `json:"audit"`
	// Telemetry is the OpenTelemetry export (settings.telemetry), nil
	// when nothing is exported.
	Telemetry *TelemetryStatus `json:"telemetry,omitempty"`
	// PendingChange is the edit of the configuration file whose widening
	// parts wait for the person (portcullis changes), nil when none.
	PendingChange *PendingChange `json:"pendingChange,omitempty"`
	// Authentication is settings.approvalAuthentication as in force.
	Authentication AuthStatus `json:"authentication"`
	// Managed is the managed policy an organisation set (docs/TEAMS.md),
	// nil when there is no file.
	Managed *ManagedStatus `json:"managed,omitempty"`
	// Degraded are the daemon's services that stopped on their own and are
	// being restarted, sorted by name; empty when all run.
	Degraded []ServiceFault `json:"degraded,omitempty"`
	// PID is the daemon's process ID.
	PID int `json:"pid"`
	// Withheld names the variables of the daemon's environment that no
	// server inherits (supervisor.Withheld): a server's environment is its
	// configuration's plus a fixed base.
	Withheld []string `json:"withheldFromServers"`
	// Standing lists the standing approvals in force (approve --code),
	// oldest first; StandingError says why the ones kept in the state
	// directory were not taken at start (then none is in force).
	Standing      []authz.StandingApproval `json:"standing"`
	StandingError string                   `json:"standingError,omitempty"`
}

// CheckSummary counts the health checks of one server label: agent runs
// that only connected, listed and left within gateway.HealthCheckWindow.
// Last is the most recent one.
type CheckSummary struct {
	Label string         `json:"label"`
	Count int            `json:"count"`
	Last  gateway.Status `json:"last"`
}

// Status returns a snapshot of every configured server and agent run.
func (d *Daemon) Status() StatusReport {
	cfg, cfgErr := d.config()
	rep := StatusReport{Socket: d.opts.Dirs.Socket(), ConfigFile: d.opts.Dirs.ConfigFile(), Runs: []gateway.Status{}, Ended: []gateway.Status{}, Checks: []CheckSummary{},
		Servers: []ServerInfo{}} // lists are [] in JSON, never null
	rep.Audit = d.auditStatus()
	rep.Telemetry = d.tel.status()
	rep.PendingChange = d.pendingCopy()
	rep.Authentication = d.authStatus()
	rep.Managed = d.managedStatus()
	rep.Degraded = d.health.list()
	rep.PID = os.Getpid()
	rep.Withheld = append([]string{}, supervisor.Withheld(os.Environ())...)
	if cfgErr != nil {
		rep.ConfigError = cfgErr.Error()
	}
	d.mu.Lock()
	sessions := make([]*gateway.Session, 0, len(d.order))
	for _, id := range d.order {
		sessions = append(sessions, d.runs[id])
	}
	rep.Ended = append(rep.Ended, d.ended...)
	for _, label := range slices.Sorted(mapsKeys(d.checks)) {
		rep.Checks = append(rep.Checks, *d.checks[label])
	}
	d.mu.Unlock()
	rep.Approvals = d.authz.Pending()
	rep.Standing = d.authz.Standing()
	rep.StandingError = d.standingError()
	count := map[string]int{}
	for _, s := range sessions {
		st := s.Status()
		count[st.Label]++
		rep.Runs = append(rep.Runs, st)
	}
	for _, label := range slices.Sorted(mapsKeys(cfg.Servers)) {
		s := cfg.Servers[label]
		rep.Servers = append(rep.Servers, ServerInfo{Label: label, Command: s.Command, Args: s.Args, Runs: count[label]})
	}
	return rep
}

// openedAt is the last event the audit log held when this daemon opened
// it (what the daemon before it left); nil for a new log or none open.
func (d *Daemon) openedAt() *audit.LogHead {
	d.mu.Lock()
	al := d.audit
	d.mu.Unlock()
	if al == nil {
		return nil
	}
	h := al.OpenedAt()
	if h.Seq == 0 {
		return nil
	}
	return &h
}
