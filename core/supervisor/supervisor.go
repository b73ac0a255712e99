//go:build unix

// Package supervisor launches and stops one local MCP server process over
// stdio (docs/DESIGN.md, "Processes"). The server runs in its own process group so
// that stopping it also stops whatever it spawned: Stop follows the MCP stdio
// shutdown sequence (specification 2025-11-25, "Lifecycle" > "Shutdown" >
// "stdio": close the server's stdin, wait, SIGTERM, wait, SIGKILL), sends the
// signals to the whole group, and returns only once no process of the group is
// left. Descendants that left the group (setsid, setpgid, a double fork) are
// found by the mark of their epoch in their environment ([EpochEnv]) and
// stopped too. Stderr is kept in a bounded ring so a crash can be explained
// without the server ever blocking on a full pipe.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
)

// Defaults for [Options] and [Spec].
const (
	DefaultStopGrace   = 2 * time.Second
	DefaultKillGrace   = 3 * time.Second
	DefaultStderrLimit = 64 << 10
)

// exitTailLines is how many stderr lines [ExitInfo] keeps.
const exitTailLines = 20

// stderrDrain bounds how long the reaper waits, after the direct child was
// reaped, for stderr to reach end of file; grandchildren holding stderr open
// keep it from ever doing so.
const stderrDrain = 250 * time.Millisecond

// groupGoneTimeout bounds how long Stop waits for the group to empty after
// SIGKILL (a process in uninterruptible sleep can take a while).
const groupGoneTimeout = 10 * time.Second

// ErrGroupNotEmpty reports that processes of the server's group survived
// SIGKILL for groupGoneTimeout (uninterruptible sleep, or a process of another
// user that joined the group).
var ErrGroupNotEmpty = errors.New("process group still has processes after SIGKILL")

// Spec says what to launch. Command is as written in the configuration
// ("node", "./run.sh", "/abs/bin") and is resolved with identity.LookPath: a
// bare name through the PATH of the child's environment, a name with a slash
// relative to Dir. Dir "" inherits the working directory. Env entries "K=V"
// are added on top of the fixed base taken from os.Environ() (env.go:
// BaseVar; never PORTCULLIS_* or the session bus address), later entries
// winning; Start adds the bus's placeholder unless SessionBus is set, and
// [EpochEnv] last. SessionBus passes the daemon's session bus address on
// (the person asked for it: the Secret Service answers there). Secrets
// are the credentials' values the server receives (in Env or in its calls):
// what the server writes is redacted of them wherever Process gives it out
// ([Redactor]). Sandbox, when set, confines the process with the paths of
// Hide hidden from it and those of Write writable ([Sandbox],
// [Confinement]); Start fails when it cannot. StderrLimit is how many bytes of stderr are kept (0 or less =
// DefaultStderrLimit).
type Spec struct {
	Label       string
	Command     string
	Args        []string
	Dir         string
	Env         []string
	SessionBus  bool
	Secrets     []Secret
	Sandbox     Sandbox
	Hide        []string
	Write       []string
	StderrLimit int
	// Withhold, when not nil, reports the variables of the daemon's own
	// environment that hold a secret: the server does not inherit them
	// (env.go).
	Withhold func(name, value string) bool
	// Cgroups, when set, puts the process in a control group of its own,
	// killed whole by Stop ([Cgroups]).
	Cgroups Cgroups
	// Code is what the launch measured of the server's code: a process of
	// its tree running only that code (or code the person cannot change)
	// is the epoch's, never a new one ([Code]).
	Code Code
}

// Options tune stopping. StopGrace is the wait after closing stdin before
// SIGTERM to the group (0 = DefaultStopGrace); KillGrace the wait after SIGTERM
// before SIGKILL to the group (0 = DefaultKillGrace). Logger receives lifecycle
// events (nil discards); stderr content is never logged.
//
// NoTree turns tree watching off ([Process.Settled] and
// [Process.CheckTree] then report ErrTreeUnwatched). The tree is never
// polled: it is read when the launch settles, after the first answer, when
// a process that answered exits, when a new process writes the server's
// output, and when the gateway checks it before a call that carries
// authority. SettleMax bounds the wait for a launcher's exec at start (0 =
// DefaultSettleMax); Measurer caches the digests of running executables
// and scripts (nil: one shared by the package).
//
// HoldNewCode, where the platform tells who wrote the server's output
// (Linux), keeps what a process running other code than the epoch's wrote
// from Stdout's readers until the [TreeChange] it causes was acknowledged
// ([TreeChange.Ack]): the gateway ends the old epoch first, so that such
// an answer is never passed on as the old epoch's.
type Options struct {
	StopGrace   time.Duration
	KillGrace   time.Duration
	Logger      *slog.Logger
	NoTree      bool
	SettleMax   time.Duration
	Measurer    *identity.Measurer
	HoldNewCode bool
}

// sharedMeasurer is the digest cache of processes started without
// Options.Measurer.
var sharedMeasurer = identity.NewMeasurer(nil)

// ExitInfo is how the direct child ended. Code is the exit status, -1 when it
// was killed by a signal; Signal is then the signal's name ("SIGKILL").
// StderrTail holds its last stderr lines (newest last, at most 20), At the time
// it was reaped.
type ExitInfo struct {
	Code       int
	Signal     string
	StderrTail []string
	At         time.Time
}

// String returns "exit status N" or "killed by SIGNAME", without stderr, which
// may hold secrets.
func (e ExitInfo) String() string {
	if e.Signal != "" {
		return "killed by " + e.Signal
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Process is one running server. Its methods are safe for concurrent use.
// Call Stop when done with it, even after Done: Stop also ends grandchildren
// left in the group and releases the pipes.
type Process struct {
	label string
	pid   int // the direct child, leader of the process group Stop ends
	// server is the server's process: pid, or, below a sandbox's launcher
	// that stays (Nested), the descendant that exec'd the server.
	server int
	path   string // the server's executable, as resolved
	epoch  ids.EpochID
	cmd    *exec.Cmd
	logger *slog.Logger
	opts   Options

	stdin  *stdinPipe
	stdout *stdoutPipe
	stderr *os.File // read end, closed by Stop
	ring   *ring

	sandbox  string     // what confines it ("": nothing)
	cgroup   Cgroup     // its control group; nil: none
	grouping string     // what status says of its control group ("": not asked)
	redactor *Redactor  // nil: no secrets
	outLog   *outputLog // what of the output reaches the daemon's log

	stderrDone chan struct{} // closed when the stderr reader stops
	done       chan struct{} // closed after the direct child is reaped

	mu   sync.Mutex
	exit ExitInfo // guarded by mu; set before done is closed

	// groupGone is set by the reaper when the group was already empty once
	// the direct child was reaped. An empty group never gains members, but
	// its number may later be reused by an unrelated group, which Stop must
	// then not signal.
	groupGone atomic.Bool

	stopOnce sync.Once
	stopping chan struct{} // closed when the stop sequence begins
	stopped  chan struct{} // closed when the stop sequence has finished
	stopErr  error         // written before stopped is closed

	// Tree watching (tree.go).
	dir       string
	pipes     []uint64 // inodes of the pipes through which requests can be read (stdin; where output is not attributed, stdout too)
	measurer  *identity.Measurer
	treeReady chan struct{} // closed once the launch's tree was first recorded
	changes   chan TreeChange
	treeMu    sync.Mutex
	tree      treeState    // guarded by treeMu
	escaped   map[int]bool // guarded by treeMu; marked pids found outside the tree
	answered  atomic.Bool  // the process answered its first request (Arm)
	armKick   chan struct{}
	watchKick chan struct{} // the answerers changed: watch the new ones
	// lastWriter is the writer of the last chunk of output read (Linux;
	// 0 unknown), armWriter that of the first answer (Arm).
	lastWriter atomic.Int64
	armWriter  atomic.Int64
	code       Code // what the launch measured (Spec.Code)
	holdNew    bool // Options.HoldNewCode
	// identified is closed once the launch epoch's identity is final: the
	// tree was read after the first answer (treeState.armed), or it is not
	// watched at all.
	identified chan struct{}
	// launchers are the sandbox launcher's processes above the server
	// (Nested: bubblewrap's monitor and init), set once by Start: they
	// carry the epoch's mark, but run none of the server's code.
	launchers []procView
}

// Start launches s in a new process group with pipes for stdin and stderr
// and a stdout that names its writers (Linux: a Unix socket,
// stdout_linux.go; elsewhere a pipe), as a new execution epoch: it mints
// the epoch ID
// (ids.NewEpoch, see [Process.Epoch]) and marks the server's
// environment with it ([EpochEnv]). ctx bounds only the start itself:
// cancelling it later does not touch the process; use [Process.Stop]. A
// command that does not resolve gives an error wrapping
// identity.ErrCommandNotFound.
func Start(ctx context.Context, s Spec, o Options) (*Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.StopGrace <= 0 {
		o.StopGrace = DefaultStopGrace
	}
	if o.KillGrace <= 0 {
		o.KillGrace = DefaultKillGrace
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SettleMax <= 0 {
		o.SettleMax = DefaultSettleMax
	}
	if o.Measurer == nil {
		o.Measurer = sharedMeasurer
	}
	limit := s.StderrLimit
	if limit <= 0 {
		limit = DefaultStderrLimit
	}
	epoch := ids.NewEpoch()
	env, withheld := serverEnv(os.Environ(), s.Env, s.SessionBus, string(epoch), s.Withhold)
	if len(withheld) > 0 {
		o.Logger.Info("secret-looking variables of the daemon's environment withheld from the server (give one to it with its configuration's env or a credential scope)",
			"server", s.Label, "variables", strings.Join(withheld, ","))
	}
	path, err := identity.LookPath(s.Command, s.Dir, env)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", s.Label, err)
	}

	var files []*os.File // every pipe end, closed on failure
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, fmt.Errorf("starting %s: stdin pipe: %w", s.Label, err)
	}
	stdout, outW, err := newStdout()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("starting %s: stdout: %w", s.Label, err)
	}
	files = append(files, stdout.f, outW)
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("starting %s: stderr pipe: %w", s.Label, err)
	}
	// Files (not io.Readers) as stdio, so os/exec starts no copying goroutines
	// and Wait returns as soon as the child is reaped.
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{s.Command}, s.Args...),
		Dir:         s.Dir,
		Env:         env,
		Stdin:       inR,
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	var confined, launcher string
	if s.Sandbox != nil {
		if confined, err = s.Sandbox.Prepare(cmd, Confinement{Hide: s.Hide, Write: s.Write}); err != nil {
			closeAll()
			return nil, fmt.Errorf("starting %s in its sandbox: %w", s.Label, err)
		}
		if n, ok := s.Sandbox.(Nested); ok {
			launcher = n.Launcher()
		}
	}
	var (
		group    Cgroup
		grouping string
	)
	if s.Cgroups != nil {
		if group, grouping, err = s.Cgroups.Place(cmd, string(epoch)); err != nil {
			closeAll()
			return nil, fmt.Errorf("starting %s in a cgroup of its own: %w", s.Label, err)
		}
	}
	if st, ok := s.Sandbox.(Starter); ok {
		err = st.Start(cmd)
	} else {
		err = cmd.Start()
	}
	if group != nil {
		group.Started()
		if err != nil {
			_ = group.Kill()
		}
	}
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("starting %s: %w", s.Label, err)
	}
	// The child holds its own copies now.
	inR.Close()
	outW.Close()
	errW.Close()

	p := &Process{
		label:      s.Label,
		pid:        cmd.Process.Pid,
		server:     cmd.Process.Pid,
		path:       path,
		epoch:      epoch,
		cmd:        cmd,
		logger:     o.Logger.With("server", s.Label, "pid", cmd.Process.Pid, "epoch", epoch),
		opts:       o,
		stdin:      &stdinPipe{f: inW},
		stdout:     stdout,
		stderr:     errR,
		ring:       newRing(limit),
		sandbox:    confined,
		cgroup:     group,
		grouping:   grouping,
		redactor:   NewRedactor(s.Secrets),
		outLog:     newOutputLog(time.Now),
		stderrDone: make(chan struct{}),
		done:       make(chan struct{}),
		stopping:   make(chan struct{}),
		stopped:    make(chan struct{}),
		dir:        s.Dir,
		pipes:      stdioPipes(inW, stdout.f),
		code:       s.Code,
		holdNew:    o.HoldNewCode,
		measurer:   o.Measurer,
		treeReady:  make(chan struct{}),
		armKick:    make(chan struct{}, 1),
		watchKick:  make(chan struct{}, 1),
		identified: make(chan struct{}),
		changes:    make(chan TreeChange, treeChangesBuffer),
		tree:       treeState{epoch: epoch},
		escaped:    map[int]bool{},
	}
	go p.readStderr()
	go p.reap()
	if launcher != "" {
		// The sandbox's launcher stays: the server runs below it.
		p.server, p.launchers = findServer(p.pid, launcher, p.done, o.SettleMax)
		p.logger = o.Logger.With("server", s.Label, "pid", p.server, "epoch", epoch)
	}
	p.logger.Info("server started", "path", path)
	if !o.NoTree && treeSupported {
		p.stdout.attribute = p.attribute
		go p.watchTree()
	} else {
		p.tree.err = fmt.Errorf("%w (%s)", ErrTreeUnwatched, runtime.GOOS)
		close(p.treeReady)
		close(p.identified)
	}
	return p, nil
}

// Sandbox says what confines the process (Spec.Sandbox's description),
// "" when nothing does.
func (p *Process) Sandbox() string { return p.sandbox }

// Cgroup says which control group holds the process ([Cgroups.Place]'s
// description), "" when Spec.Cgroups was not set.
func (p *Process) Cgroup() string { return p.grouping }

// Pid returns the server's process ID: the direct child's, which is also
// its process group ID, or, in a sandbox whose launcher stays ([Nested]),
// that of the launcher's descendant that runs the server (as the daemon's
// PID namespace numbers it).
func (p *Process) Pid() int { return p.server }

// StartTime returns the kernel's start time of the direct child, in the
// unit the tree's identity records (identity.Observed.StartTime): with
// its pid it names the process across pid reuse.
func (p *Process) StartTime() (uint64, error) { return startTimeOf(p.server) }

// ExecutableDigest returns the digest of the file the direct child runs
// now, read through the kernel where the system offers it (Linux
// /proc/PID/exe, the running file even when replaced on disk; macOS the
// resolved path). Start returns once the exec succeeded, so right after it
// this is the program launched, before it could exec another. It uses
// Options.Measurer's cache: a file that measurement digested moments
// before is not read again when its device, inode and stat key are the
// same (identity.Measurer.DigestOpen).
func (p *Process) ExecutableDigest() (string, error) {
	return digestRunning(p.measurer, p.server, p.path)
}

// Epoch returns the execution epoch ID that Start minted for this process
// and put in its environment as [EpochEnv].
func (p *Process) Epoch() ids.EpochID { return p.epoch }

// Stdin returns the write end of the server's stdin. Closing it is the first
// step of a graceful stop; Close is idempotent.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout returns the read end of the server's stdout. It reports io.EOF once
// every process holding the write end has exited, or after Stop has finished
// (Stop closes it; output not yet read is then discarded).
func (p *Process) Stdout() io.Reader { return p.stdout }

// Done returns a channel closed when the direct child has exited and been
// reaped (and its stderr drained, at most 250 ms when grandchildren keep
// stderr open). Grandchildren may still run: only Stop waits for the group.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit returns how the direct child ended; the zero ExitInfo before Done is
// closed. Its stderr lines are redacted of Spec.Secrets.
func (p *Process) Exit() ExitInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.exit
	e.StderrTail = p.redactor.RedactAll(slices.Clone(e.StderrTail))
	return e
}

// StderrTail returns up to maxLines of the most recent stderr lines, newest
// last, including an unterminated last line; maxLines <= 0 returns all kept
// lines. Lines longer than the stderr limit are cut to it. The values of
// Spec.Secrets are replaced by "…(scope)" ([Redactor.Redact]).
func (p *Process) StderrTail(maxLines int) []string {
	return p.redactor.RedactAll(p.ring.tail(maxLines))
}

// reap waits for the direct child, drains stderr, records ExitInfo and closes done.
func (p *Process) reap() {
	_ = p.cmd.Wait() // the status is read from ProcessState below
	at := time.Now()
	info := ExitInfo{At: at}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		info.Code, info.Signal = -1, unix.SignalName(ws.Signal())
		if info.Signal == "" {
			info.Signal = ws.Signal().String()
		}
	} else {
		info.Code = p.cmd.ProcessState.ExitCode()
	}
	t := time.NewTimer(stderrDrain)
	select {
	case <-p.stderrDone:
	case <-t.C:
	}
	t.Stop()
	info.StderrTail = p.ring.tail(exitTailLines)
	if alive, err := groupAlive(p.pid); err == nil && !alive {
		p.groupGone.Store(true)
	}
	p.mu.Lock()
	p.exit = info
	p.mu.Unlock()
	p.logger.Info("server exited", "exit", info.String())
	close(p.done)
}

// readStderr copies stderr into the ring until end of file or until Stop
// closes the read end, so the server never blocks on a full stderr pipe.
func (p *Process) readStderr() {
	defer close(p.stderrDone)
	buf := make([]byte, 32<<10)
	for {
		n, err := p.stderr.Read(buf)
		p.ring.write(buf[:n])
		if err != nil {
			return
		}
	}
}

// Stop ends the server and everything in its process group: close stdin, wait
// up to StopGrace for the direct child to exit, SIGTERM the group, wait up to
// KillGrace for the group to empty, SIGKILL the group, and wait until no
// process of the group is left (zombies awaiting their reaper count as gone).
// A child that already exited on its own skips straight to the group.
//
// Then it stops the descendants that left the group, found by the epoch's
// mark ([EpochEnv]; Linux and macOS): each one gets SIGTERM and, KillGrace
// later, SIGKILL, and is logged with its pid and executable. Those found
// when the group is sent SIGTERM get it at the same moment, so a stubborn
// server costs no more than the group's grace periods; those found once the
// group is gone (a server that exited at the end of its stdin and left a
// daemonized child behind) get their own KillGrace, since nothing asked
// them to stop before.
//
// It then closes stdout and stderr. Stop is idempotent and safe to call
// concurrently: every call waits for the same sequence, which keeps running
// when ctx ends (Stop then returns ctx.Err()). It returns nil once the group
// and the epoch's other processes are gone, ErrGroupNotEmpty or
// ErrEpochNotEmpty when processes survive SIGKILL, or a signalling error.
func (p *Process) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() { go p.stop() })
	select {
	case <-p.stopped:
		return p.stopErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Process) stop() {
	defer close(p.stopped)
	close(p.stopping)
	// Not p.logger, whose "pid" is the server's: each line names the
	// process it is about.
	sw := newSweeper([]string{string(p.epoch)}, p.opts.KillGrace, p.opts.Logger.With("server", p.label))
	p.stopErr = p.stopGroup(sw)
	if err := sw.finish(); err != nil {
		p.stopErr = errors.Join(p.stopErr, fmt.Errorf("stopping %s (epoch %s): %w", p.label, p.epoch, err))
	}
	// What is left in the epoch's cgroup (a descendant that cleared its
	// environment and left the group) ends with it.
	if p.cgroup != nil {
		if err := p.cgroup.Kill(); err != nil {
			p.stopErr = errors.Join(p.stopErr, fmt.Errorf("stopping %s (epoch %s): %w", p.label, p.epoch, err))
		}
	}
	if p.stopErr != nil {
		p.logger.Warn("stopping server", "err", p.stopErr)
	}
	p.logDropped()
	// The group and the epoch's other processes are gone, so every writer
	// of stdout and stderr is too (but one that cleared its environment).
	p.stdout.close()
	t := time.NewTimer(stderrDrain)
	select {
	case <-p.stderrDone:
	case <-t.C:
	}
	t.Stop()
	p.stderr.Close()
}

// stopGroup stops the process group; sw gets SIGTERM to the epoch's
// processes outside the group when the group does.
func (p *Process) stopGroup(sw *sweeper) error {
	pgid := p.pid
	p.stdin.Close()
	if !waitChan(p.done, p.opts.StopGrace) {
		p.logger.Info("server did not exit after stdin closed; sending SIGTERM", "grace", p.opts.StopGrace)
	} else if p.groupGone.Load() {
		return nil
	}
	alive, err := groupAlive(pgid)
	if err != nil || !alive {
		return err
	}
	if p.server != p.pid {
		// Below a launcher that stays (bubblewrap): its monitor, signalled,
		// would end the sandbox at once (SIGKILL, --die-with-parent), so
		// the server's processes get SIGTERM first, through the epoch's
		// mark, and the group only SIGKILL once they had their grace.
		if _, err := sw.pass(pgid); err != nil {
			p.logger.Warn("looking for processes of the epoch outside its group", "err", err)
		}
		if gone, err := waitGroupGone(pgid, p.done, p.opts.KillGrace); err != nil || gone {
			return err
		}
		return p.killGroup(pgid)
	}
	if err := signalGroup(pgid, syscall.SIGTERM); err != nil {
		return err
	}
	if _, err := sw.pass(pgid); err != nil {
		p.logger.Warn("looking for processes of the epoch outside its group", "err", err)
	}
	if gone, err := waitGroupGone(pgid, p.done, p.opts.KillGrace); err != nil || gone {
		return err
	}
	return p.killGroup(pgid)
}

// killGroup sends SIGKILL to the process group pgid and waits until it is
// gone.
func (p *Process) killGroup(pgid int) error {
	p.logger.Warn("server group alive after SIGTERM; sending SIGKILL", "grace", p.opts.KillGrace)
	if err := signalGroup(pgid, syscall.SIGKILL); err != nil {
		return err
	}
	gone, err := waitGroupGone(pgid, p.done, groupGoneTimeout)
	if err != nil {
		return err
	}
	if !gone {
		return fmt.Errorf("stopping %s (process group %d): %w", p.label, pgid, ErrGroupNotEmpty)
	}
	return nil
}

// signalGroup sends sig to every process in the group; a group that emptied
// meanwhile is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sending %s to process group %d: %w", unix.SignalName(sig), pgid, err)
	}
	return nil
}

// waitGroupGone waits up to d until the direct child is reaped (done) and no
// process of the group is left.
func waitGroupGone(pgid int, done <-chan struct{}, d time.Duration) (bool, error) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	select {
	case <-done:
	case <-deadline.C:
		return false, nil
	}
	poll := time.Millisecond
	for {
		alive, err := groupAlive(pgid)
		if err != nil || !alive {
			return !alive, err
		}
		t := time.NewTimer(poll)
		select {
		case <-t.C:
		case <-deadline.C:
			t.Stop()
			return false, nil
		}
		poll = min(2*poll, 50*time.Millisecond)
	}
}

// waitChan reports whether c closed within d.
func waitChan(c <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
		return true
	case <-t.C:
		return false
	}
}

// stdinPipe is the server's stdin with an idempotent Close.
type stdinPipe struct {
	f    *os.File
	once sync.Once
	err  error
}

func (s *stdinPipe) Write(b []byte) (int, error) { return s.f.Write(b) }

func (s *stdinPipe) Close() error {
	s.once.Do(func() { s.err = s.f.Close() })
	return s.err
}
