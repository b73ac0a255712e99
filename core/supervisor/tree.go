//go:build unix

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
)

// Tree watching (docs/DESIGN.md "Epochs the supervisor observes"): for the
// whole life of a process the supervisor knows which processes of its tree
// answer and what code they run, so that a watcher swapping its worker
// behind the same stdio (nodemon, a shell loop) or an exec that changes the
// code that answers is a new execution epoch, minted here and never by the
// server — and a helper the server runs (git, sleep, its own scripts) is
// not.
//
// Each process is identified by its pid and start time, the digest of the
// file it executes (read through the kernel, Linux /proc/PID/exe), and for
// an interpreter the script its arguments name with that script's digest.
// What counts:
//
//   - the answerers: the process that wrote the first answer (Linux: the
//     writer the kernel names for the bytes that held it, stdout.go;
//     elsewhere every process holding the server's stdio when it
//     answered). An answerer that execs, or a process that starts in its
//     place once every answerer exited (a replaced worker), is a new epoch
//     even when its code is byte-identical, as the supervisor's own
//     restart is: a new program reads the requests;
//   - a process that can read the server's requests (it holds the stdin
//     pipe) or writes its output, running code the epoch does not stand
//     for (code.go): code the person could change that the launch did not
//     measure. A helper running the epoch's code or the system's (git,
//     sleep, python3 -c …) is no new epoch, whatever pipes it holds.
//
// Nothing is read at a fixed rate. The tree is read when the launch
// settles, after the first answer, when an answerer exits (Linux pidfd,
// macOS kqueue), and when the gateway asks before a call that carries
// authority ([Process.CheckTree]); on Linux every chunk of output is also
// checked against its writer as it is read. Not seen: code loaded
// in-process (importlib.reload, a require cache flush), which no process
// table shows; the build watcher reports edits of the files measured.

// Defaults for [Options] tree watching.
const (
	DefaultSettleMax = 2 * time.Second
	settleQuiet      = 30 * time.Millisecond
	settlePoll       = 5 * time.Millisecond
	changeSettleMax  = time.Second
	// replacementFirst and replacementLast bound the reads that look for
	// a worker in place of answerers that exited: 25 ms, 50 ms, … 1.6 s.
	replacementFirst  = 25 * time.Millisecond
	replacementLast   = 1600 * time.Millisecond
	treeChangesBuffer = 8
)

// ErrTreeUnwatched reports that this system offers no view of a process tree
// (neither Linux nor macOS), or that the process was started with tree
// watching off.
var ErrTreeUnwatched = errors.New("the process tree is not watched on this system")

// NoAnswerError reports that every process that answered for the epoch
// exited and none has taken its place: a request written now would wait in
// the pipe for whatever reads it next (a watcher's next worker, which may
// run other code).
type NoAnswerError struct {
	Gone []int // the pids that answered
}

func (e *NoAnswerError) Error() string {
	ps := make([]string, len(e.Gone))
	for i, p := range e.Gone {
		ps[i] = strconv.Itoa(p)
	}
	return "the process that answered for this epoch (pid " + strings.Join(ps, ", ") + ") exited and no process has taken its place yet"
}

// TreeChange is a new execution epoch observed by the supervisor in the
// running tree of a process: Epoch is its ID (minted here), Previous the
// epoch it ends; Old and New are the processes that could answer before and
// after (the kernel's view, with digests), What one line per difference
// ("pid 4242 started: /usr/bin/python3.11 /srv/worker.py",
// "pid 4100 exec'd: …"), At when it was first seen.
type TreeChange struct {
	Epoch    ids.EpochID         `json:"epoch"`
	Previous ids.EpochID         `json:"previous"`
	Old      []identity.Observed `json:"old"`
	New      []identity.Observed `json:"new"`
	What     []string            `json:"what"`
	At       time.Time           `json:"at"`
	// Restarted is true when a new program reads the requests: a process
	// that answered exec'd, or one took the place of the answerers that
	// exited; it needs the handshake again (MCP 2025-11-25 "Lifecycle").
	// False when new code appeared beside a live answerer, which keeps
	// its handshake.
	Restarted bool `json:"restarted"`
	// Answered names the process whose output made the change (Linux): it
	// wrote the server's output running code the epoch does not stand
	// for, or in place of the processes that answered. What it wrote is
	// held from Stdout's readers until Ack (Options.HoldNewCode).
	Answered *identity.Observed `json:"answered,omitempty"`

	ack *acker
}

// Ack tells the supervisor that the change was taken: the old epoch is
// ended, and output held back until then ([Options.HoldNewCode]) may be
// read. It may be called more than once, and on a change that held
// nothing.
func (c TreeChange) Ack() {
	if c.ack != nil {
		c.ack.once.Do(func() { close(c.ack.c) })
	}
}

type acker struct {
	once sync.Once
	c    chan struct{}
}

func newAcker() *acker { return &acker{c: make(chan struct{})} }

// procView is one process as a scan of the kernel's table sees it.
type procView struct {
	pid, ppid int
	start     uint64
	exe       string   // the kernel's executable path ("" unknown)
	exeKey    string   // the running file's device and inode (macOS: and size, times) ("" unknown)
	args      []string // its arguments, args[0] the program name
	cwd       string   // its working directory ("" unknown)
	stdio     bool     // it holds the server's stdin or stdout pipe (true where not knowable)
}

// key is what changes when the process execs: pid and start time stay, the
// file or the arguments change.
func (v procView) key() string {
	return fmt.Sprintf("%d/%d/%s/%s/%q", v.pid, v.start, v.exe, v.exeKey, v.args)
}

// member is a process of the tree with its measured identity.
type member struct {
	view procView
	obs  identity.Observed
}

// treeState is the tree watcher's state, guarded by Process.treeMu.
type treeState struct {
	epoch    ids.EpochID       // the current epoch (the launch epoch, then each observed one)
	base     []member          // the processes the next read is compared with
	recorded []member          // the processes recorded for the current epoch
	byKey    map[string]member // base by procView.key
	settled  bool              // base was read after the launch's exec settled
	armed    bool              // the tree was read after the first answer: changes are new epochs
	// rereads counts the launch's reads that recorded a changed tree
	// before it was armed; armedChanged says the arming read was one.
	rereads      int
	armedChanged bool
	err          error // why the tree cannot be watched, if it cannot
	// stamp is the kernel's fork counter read before the scan that base
	// is (see quickLocked); stamped is false when there is none.
	stamp   uint64
	stamped bool
	quick   quickFiles // the files the quick check reads, kept open (Linux)
	quicks  int        // checks answered by the quick check (tests)
	found   []int      // quickLocked's scratch: what it found of each process of base
	// answerers are the processes that answer for the current epoch (pid
	// -> start time); writers the other processes whose output was
	// accepted as the epoch's (Linux).
	answerers map[int]uint64
	writers   map[int]writer
}

// writer is a process whose output is accepted as the current epoch's:
// its pidfd's inode (0: unknown) and the process as it was read then, so
// that an exec since is seen (quickFiles.same, through /proc files kept
// open).
type writer struct {
	ino  uint64
	view procView
}

// Observed returns the processes recorded for the current epoch (see
// [Process.Settled]), in scan order: the server first, then its
// descendants. Nil before the launch settled or when the tree is not
// watched.
func (p *Process) Observed() []identity.Observed {
	p.treeMu.Lock()
	defer p.treeMu.Unlock()
	return observedOf(p.tree.recorded)
}

// CurrentEpoch returns the epoch the process now runs: the launch epoch
// ([Process.Epoch], which is also the mark in its environment) until the
// supervisor observes a change in its tree, then the epoch of the last
// [TreeChange].
func (p *Process) CurrentEpoch() ids.EpochID {
	p.treeMu.Lock()
	defer p.treeMu.Unlock()
	return p.tree.epoch
}

// Arm tells the supervisor that the process answered its first request;
// the gateway calls it then, and it does not block. The tree is read once
// more at once, as the launch epoch's: a read begun after the answer sees
// the program that gave it, however late a launcher exec'd it (`sh -c
// 'sleep 1; exec server'`). From the end of that read on, a change in the
// tree is a new epoch. Before, a change is the launch settling (a watcher
// that starts its worker after a while, npx downloading): the tree is read
// again and the launch epoch records what it settled into. Nothing that
// carries authority reaches the process before [Process.Identity] returned,
// so what the launch epoch records before that read is what answers.
func (p *Process) Arm() {
	if p.answered.CompareAndSwap(false, true) {
		// The gateway calls Arm when it parsed the first answer: the
		// last chunk read held that answer's end, so its writer
		// answered.
		p.armWriter.Store(p.lastWriter.Load())
		select {
		case p.armKick <- struct{}{}:
		default:
		}
	}
}

// Identity waits until the launch epoch's identity is final and returns
// the processes it recorded: the launch settled (as [Process.Settled]),
// the process answered its first request ([Process.Arm]) and the tree was
// read again after that answer. The gateway forwards the handshake and
// tools/list at once, and holds every call that needs the epoch's identity
// until Identity returns. It returns ErrTreeUnwatched where the tree is
// not watched, ctx's error when ctx ends first, and what was recorded so
// far (nil error) when the process was reaped or stopped before it
// answered.
func (p *Process) Identity(ctx context.Context) ([]identity.Observed, error) {
	select {
	case <-p.identified:
	case <-p.done:
	case <-p.stopping:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return p.Settled(ctx)
}

// Changes delivers the new epochs observed in the running tree, each once,
// in order. It is never closed; nothing more comes once Done is closed.
func (p *Process) Changes() <-chan TreeChange { return p.changes }

// Settled waits until the launch has settled and returns the processes
// recorded for the launch epoch: the tree is read again until no process
// runs a launcher that is about to exec (env, "sh -c", npx and similar
// with no child yet) and two reads settleQuiet apart agree, at most
// Options.SettleMax after start; a launcher still running then is recorded
// as it is, and its exec becomes a [TreeChange]. It returns
// ErrTreeUnwatched where the tree is not watched, ctx's error when ctx
// ends first.
func (p *Process) Settled(ctx context.Context) ([]identity.Observed, error) {
	select {
	case <-p.treeReady:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.treeMu.Lock()
	defer p.treeMu.Unlock()
	if p.tree.err != nil {
		return nil, p.tree.err
	}
	return observedOf(p.tree.recorded), nil
}

// CheckTree reads the tree now and compares it with what the current epoch
// recorded: nil when nothing that can answer changed. When every process
// that answered for the epoch exited and none took its place, it returns
// a *NoAnswerError: a call written now would be read by whatever comes
// next. On a change it waits
// (at most 1 s) for the tree to settle, records the new epoch, delivers it
// on Changes and returns it. The gateway calls it before forwarding a call
// that carries authority, so that nothing in flight slips in between two
// polls. Before the launch settled it waits for that first (bounded by
// ctx); ErrTreeUnwatched where the tree is not watched.
func (p *Process) CheckTree(ctx context.Context) (*TreeChange, error) {
	select {
	case <-p.treeReady:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.treeMu.Lock()
	defer p.treeMu.Unlock()
	if p.tree.err != nil {
		return nil, p.tree.err
	}
	ch, err := p.detectLocked()
	if err != nil || ch != nil || !p.tree.armed {
		return ch, err
	}
	if !p.answererAliveIn(p.tree.base) {
		gone := make([]int, 0, len(p.tree.answerers))
		for pid := range p.tree.answerers {
			gone = append(gone, pid)
		}
		slices.Sort(gone)
		return nil, &NoAnswerError{Gone: gone}
	}
	return nil, nil
}

// kickLocked wakes the watcher so that it watches the current answerers.
func (p *Process) kickLocked() {
	select {
	case p.watchKick <- struct{}{}:
	default:
	}
}

// detectLocked reads the tree (readTreeLocked); until the tree was read
// after the first answer, every change is the launch settling, and the
// first read begun after that answer arms the tree.
func (p *Process) detectLocked() (*TreeChange, error) {
	// Loaded before the scan: only a scan begun after the answer is sure
	// to see the program that gave it.
	answered := p.answered.Load()
	launch := !p.tree.armed
	rereads := p.tree.rereads
	ch, err := p.readTreeLocked(launch)
	if err == nil && launch && answered {
		p.tree.armed = true
		p.tree.armedChanged = p.tree.rereads != rereads
		p.setAnswerersLocked(int(p.armWriter.Load()))
		if err := p.escapedLocked(); err != nil {
			p.logger.Debug("looking for processes of the epoch outside its tree", "err", err)
		}
		close(p.identified)
	}
	return ch, err
}

// setAnswerersLocked records who answers for the launch epoch: the writer
// of the first answer where the platform names it, else every recorded
// process that holds the server's stdio.
func (p *Process) setAnswerersLocked(pid int) {
	t := &p.tree
	t.answerers = map[int]uint64{}
	t.writers = map[int]writer{}
	for _, m := range t.recorded {
		if pid != 0 && m.view.pid == pid {
			t.answerers[pid] = m.view.start
		}
	}
	if len(t.answerers) == 0 {
		// No writer named, or it exited already (a short helper that
		// printed the answer, as a shell server's jq or cat does): what
		// reads the requests answers.
		p.adoptHoldersLocked()
	}
	for _, m := range t.base {
		if st, ok := t.answerers[m.view.pid]; ok && st == m.view.start {
			t.writers[m.view.pid] = writer{view: m.view}
		}
	}
}

// adoptHoldersLocked makes the recorded processes that hold the server's
// stdio the answerers: when no process named as a writer lives on (a
// server whose answers are printed by short helpers), the one that reads
// the requests answers for the epoch.
func (p *Process) adoptHoldersLocked() {
	t := &p.tree
	t.answerers = map[int]uint64{}
	for _, m := range t.base {
		if m.view.stdio {
			t.answerers[m.view.pid] = m.view.start
			t.writers[m.view.pid] = writer{view: m.view}
		}
	}
}

// answererAliveIn reports whether a process that answers for the epoch is
// among ms (same pid and start time); true when none is known.
func (p *Process) answererAliveIn(ms []member) bool {
	if len(p.tree.answerers) == 0 {
		return true
	}
	for _, m := range ms {
		if st, ok := p.tree.answerers[m.view.pid]; ok && st == m.view.start {
			return true
		}
	}
	return false
}

func (p *Process) isAnswererLocked(v procView) bool {
	st, ok := p.tree.answerers[v.pid]
	return ok && st == v.start
}

// ChangedWhenArmed reports whether the read that fixed the launch epoch's
// identity (the first begun after the first answer, [Process.Arm]) found
// the tree changed from what the launch had recorded: a program exec'd
// around the first answers, so what answered them (the catalog among
// them) may not be the code the epoch records. The gateway then fetches
// the catalog again, on the same pipe, before a call passes. False until
// [Process.Identity] returned.
func (p *Process) ChangedWhenArmed() bool {
	p.treeMu.Lock()
	defer p.treeMu.Unlock()
	return p.tree.armedChanged
}

func observedOf(ms []member) []identity.Observed {
	if len(ms) == 0 {
		return nil
	}
	out := make([]identity.Observed, len(ms))
	for i, m := range ms {
		out[i] = m.obs
	}
	return out
}

// stdioPipes returns the inodes of the pipes a process of the tree reads
// requests through or, where the platform does not name the writer of the
// output, writes answers through.
func stdioPipes(stdin, stdout *os.File) []uint64 {
	if attributed {
		return pipeInodes(stdin)
	}
	return pipeInodes(stdin, stdout)
}

// pipeInodes returns the inodes of the pipes files are.
func pipeInodes(files ...*os.File) []uint64 {
	var out []uint64
	for _, f := range files {
		fi, err := f.Stat()
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			out = append(out, uint64(st.Ino))
		}
	}
	return out
}

// scan reads the tree once: the server's, the trees of marked processes
// that left it, of the processes of the base that are still alive
// wherever they were reparented, and on Linux those of marked processes
// reparented to the daemon (a child subreaper). The stamp is the kernel's
// fork counter read before the scan began (ok false: none), so that a
// later equal counter proves that no process was created since this read.
// Call it with treeMu held.
func (p *Process) scan() ([]procView, stamp, error) { return p.scanOpt(true) }

// stamp is a fork counter reading (see forkCount).
type stamp struct {
	n  uint64
	ok bool
}

// scanOpt is scan; orphans also looks at the daemon's own children.
func (p *Process) scanOpt(orphans bool) ([]procView, stamp, error) {
	var st stamp
	st.n, st.ok = p.tree.quick.forks()
	var extra []int
	for pid := range p.escaped {
		extra = append(extra, pid)
	}
	slices.Sort(extra)
	known := func(v procView) (procView, bool) {
		m, ok := p.tree.byKey[v.key()]
		return m.view, ok
	}
	views, err := scanTree(p.server, extra, viewsOf(p.tree.base), string(p.epoch), p.pipes, p.dir, known, p.isLauncher, orphans)
	return views, st, err
}

// isLauncher reports whether the process pid, started at start and running
// exe, is one of the sandbox launcher's processes above the server
// (Process.launchers): the same process, still running the launcher's
// file. Such a process carries the epoch's mark (the launcher passes the
// server's environment on) and can be found among the daemon's children,
// where orphans are looked for, or by the mark; it is never the epoch's,
// so that what the epoch records is the server's tree and nothing of the
// sandbox's.
func (p *Process) isLauncher(pid int, start uint64, exe string) bool {
	exe = strings.TrimSuffix(exe, " (deleted)")
	for _, l := range p.launchers {
		if l.pid == pid && l.start == start && l.exe == exe {
			return true
		}
	}
	return false
}

// measure gives each view its identity, reusing the base's for processes
// that did not exec.
func (p *Process) measureLocked(views []procView) []member {
	out := make([]member, 0, len(views))
	for _, v := range views {
		if m, ok := p.tree.byKey[v.key()]; ok {
			out = append(out, member{view: v, obs: m.obs})
			continue
		}
		o := identity.Observed{PID: v.pid, PPID: v.ppid, Exe: v.exe, StartTime: v.start}
		if sum, err := digestRunning(p.measurer, v.pid, v.exe); err == nil {
			o.SHA256 = sum
		}
		if s := identity.ScriptOf(v.exe, v.args, v.cwd); s != "" {
			o.Script = s
			if sum, err := p.measurer.DigestFile(s); err == nil {
				o.ScriptSHA256 = sum
			}
		}
		out = append(out, member{view: v, obs: o})
	}
	return out
}

// markStdio sets stdio on each of views, for a platform that reads
// descriptors one process at a time (macOS): what an earlier scan knew of
// a process that did not exec, else what holds says (ok false: its
// descriptors cannot be read, and it counts as holding the pipes). When no
// process at all is seen holding them, every one counts as holding them:
// the server's own process holds them at least until it hands them on, so
// such a scan means the platform's answers were not understood.
func markStdio(views []procView, known func(procView) (procView, bool), holds func(pid int) (holds, ok bool)) {
	seen := false
	for i := range views {
		v := &views[i]
		if k, ok := known(*v); ok {
			v.stdio = k.stdio
		} else if h, ok := holds(v.pid); ok {
			v.stdio = h
		} else {
			v.stdio = true
		}
		seen = seen || v.stdio
	}
	if !seen {
		for i := range views {
			views[i].stdio = true
		}
	}
}

// launching reports whether a process is a launcher that is about to exec
// or spawn the real server: env (which always execs), or, with no child
// yet, a wrapper that execs its argument (setsid, nohup, nice, …), a shell
// running "-c", a shell's fork that has not exec'd (it runs its parent's
// file with its parent's arguments: the child of `cmd &` or `( … )`
// before its redirections and exec) or a package runner (npx, uvx, bunx,
// pnpm dlx). A wrapper seen before its exec must not be recorded as what
// runs: its exec would be a new epoch a moment after the launch. A shell's
// fork still holds the server's stdio until its redirections: seen then,
// a helper started with pipes of its own would count as a new process
// holding the stdio (a loaded machine can leave it there for longer than
// the quiet time).
func launching(views []procView) bool { return launchingAmong(views, nil) }

// launchingAmong is launching, looking only at the processes consider
// accepts (nil: all of them); for those, a fork of any program that has
// not exec'd yet counts, not only a shell's (node's spawn, Python's
// subprocess between fork and exec). A fork seen by an earlier read is
// not considered: it is a child that does not exec (a prefork worker).
func launchingAmong(views []procView, consider func(procView) bool) bool {
	parents := map[int]bool{}
	byPID := make(map[int]procView, len(views))
	for _, v := range views {
		parents[v.ppid] = true
		byPID[v.pid] = v
	}
	for _, v := range views {
		if consider != nil && !consider(v) {
			continue
		}
		base := filepath.Base(v.exe)
		if base == "env" {
			return true
		}
		if parents[v.pid] {
			continue
		}
		switch base {
		case "setsid", "nohup", "nice", "ionice", "chrt", "taskset", "stdbuf", "setpriv":
			return true
		}
		if isShell(base) && slices.Contains(v.args, "-c") {
			return true
		}
		if pa, ok := byPID[v.ppid]; ok && (isShell(base) || consider != nil) && v.exe == pa.exe && slices.Equal(v.args, pa.args) {
			return true
		}
		for _, a := range v.args {
			switch filepath.Base(a) {
			case "npx", "npx-cli.js", "uvx", "bunx", "pnpx", "pnpm", "pnpm.cjs", "npm-cli.js":
				return true
			}
		}
	}
	return false
}

func isShell(base string) bool {
	switch base {
	case "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox":
		return true
	}
	return false
}

// sameViews reports whether two scans saw the same processes running the
// same files with the same arguments.
func sameViews(a, b []procView) bool {
	if len(a) != len(b) {
		return false
	}
	ka := make([]string, len(a))
	kb := make([]string, len(b))
	for i := range a {
		ka[i], kb[i] = a[i].key(), b[i].key()
	}
	slices.Sort(ka)
	slices.Sort(kb)
	return slices.Equal(ka, kb)
}

// settle reads the tree until it is quiet and no launcher is about to exec,
// at most max; it returns the last read and the stamp of a read that saw
// those very processes.
func (p *Process) settle(first []procView, st stamp, max time.Duration, orphans bool) ([]procView, stamp) {
	return p.settleWhile(first, st, max, orphans, launching)
}

// freshLaunching is launchingAmong for the processes the base does not
// hold.
func (p *Process) freshLaunching(views []procView) bool {
	return launchingAmong(views, func(v procView) bool { _, ok := p.tree.byKey[v.key()]; return !ok })
}

// settleWhile is settle with busy telling when a launcher is about to exec.
func (p *Process) settleWhile(first []procView, st stamp, max time.Duration, orphans bool, busy func([]procView) bool) ([]procView, stamp) {
	deadline := time.Now().Add(max)
	last := first
	quietSince := time.Now()
	for time.Now().Before(deadline) {
		if !waitStop(p.done, p.stopping, settlePoll) {
			return last, st
		}
		now, nst, err := p.scanOpt(orphans)
		if err != nil {
			return last, st
		}
		st = nst // now and last are the same processes, or last becomes now
		if !sameViews(now, last) {
			last, quietSince = now, time.Now()
			continue
		}
		if time.Since(quietSince) >= settleQuiet && !busy(now) {
			return now, st
		}
	}
	return last, st
}

// waitStop waits d and reports false if the process was reaped or stopped
// meanwhile.
func waitStop(done, stopped <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	case <-stopped:
		return false
	}
}

// setBaseLocked makes ms what the next read is compared with; record also
// makes it the current epoch's recorded identity (at launch, at a change,
// and when the launch settles late), which a process exiting alone does
// not change.
func (p *Process) setBaseLocked(ms []member, record bool, st stamp) {
	p.tree.stamp, p.tree.stamped = st.n, st.ok
	p.tree.quick.retain(ms)
	p.tree.base = ms
	if record {
		p.tree.recorded = ms
	}
	p.tree.byKey = make(map[string]member, len(ms))
	for _, m := range ms {
		p.tree.byKey[m.view.key()] = m
	}
}

// differences lists what in now differs from the base, one line each; nil
// when nothing that counts changed. restarted: a new program reads the
// requests (an answerer exec'd, or a process that can read them started
// once every answerer had exited), and next are the processes that answer
// from then on.
//
// What counts (see the top of this file): an answerer that exec'd; a
// process that can read the requests (it holds the stdin pipe) that
// started or exec'd into code the epoch does not stand for; and one that
// started running the epoch's code after every answerer exited (a
// replaced worker). A helper running the epoch's code or the system's
// counts neither when it starts nor when it execs, whatever it holds: the
// scan may see a shell's child between its fork and its exec, and whether
// that moment is caught must not decide the epoch.
func (p *Process) differencesLocked(now []member) (what []string, restarted bool, next []member) {
	byPID := make(map[int]member, len(p.tree.base))
	for _, m := range p.tree.base {
		byPID[m.view.pid] = m
	}
	alive := p.answererAliveIn(now)
	recorded := make(map[string]bool, len(p.tree.recorded))
	for _, m := range p.tree.recorded {
		recorded[m.view.key()] = true
	}
	for _, m := range now {
		if _, ok := p.tree.byKey[m.view.key()]; ok {
			continue
		}
		old, had := byPID[m.view.pid]
		exec := had && old.view.start == m.view.start
		if !p.tree.armed {
			// Before the first answer nothing answers yet: a process
			// that can read the requests and started or exec'd, or a
			// recorded one whose code changed, is the launch settling,
			// read again as the launch's.
			if m.view.stdio || (exec && recorded[old.view.key()] && old.obs.Code() != m.obs.Code()) {
				what = append(what, fmt.Sprintf("pid %d started or exec'd: %s", m.view.pid, describe(m)))
			}
			continue
		}
		if exec && p.isAnswererLocked(m.view) {
			what = append(what, fmt.Sprintf("pid %d, which answered, exec'd: %s (was %s)", m.view.pid, describe(m), describe(old)))
			restarted = true
			next = append(next, m)
			continue
		}
		ours, why := p.epochCodeLocked(m.obs)
		switch {
		case !exec && !alive && underReview(m.obs):
			// A worker in place of the answerers that exited, whether it
			// reads the server's stdin itself or through a launcher that
			// relays it (nodemon). A system program (a watcher loop's
			// shell fork, its sleep) is no worker; a new worker of the
			// system's code is known when it writes.
			line := fmt.Sprintf("pid %d started in place of %s, which answered and exited: %s", m.view.pid, p.answerersText(), describe(m))
			if !ours {
				line += ": " + why
			}
			what = append(what, line)
		case !m.view.stdio:
			continue // it cannot read the requests; what it writes is checked as it is read
		case !ours && exec:
			what = append(what, fmt.Sprintf("pid %d, which can read the server's requests, exec'd: %s (was %s): %s", m.view.pid, describe(m), describe(old), why))
		case !ours:
			what = append(what, fmt.Sprintf("pid %d started, able to read the server's requests: %s: %s", m.view.pid, describe(m), why))
		default:
			continue
		}
		if !alive {
			restarted = true
			next = append(next, m)
		}
	}
	return what, restarted, next
}

// answerersText names the answerers ("pid 4100", "pids 4100, 4101").
func (p *Process) answerersText() string {
	pids := make([]int, 0, len(p.tree.answerers))
	for pid := range p.tree.answerers {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	ps := make([]string, len(pids))
	for i, pid := range pids {
		ps[i] = strconv.Itoa(pid)
	}
	if len(ps) == 1 {
		return "pid " + ps[0]
	}
	return "pids " + strings.Join(ps, ", ")
}

func describe(m member) string {
	s := m.obs.Exe
	if s == "" {
		s = "(executable unknown)"
	}
	if m.obs.Script != "" {
		s += " " + m.obs.Script
	}
	return s
}

// readTreeLocked reads the tree and, when what can answer changed, settles,
// records the new epoch, and delivers it (CheckTree's caller gets it too);
// launch: the launch epoch is still starting, and a change is recorded as
// its own.
// Every read also looks at the daemon's own children, where orphans land
// when the daemon is a child subreaper (a read without them would drop an
// orphan from the record, and the next read would count it as new again).
func (p *Process) readTreeLocked(launch bool) (*TreeChange, error) {
	if p.quickLocked() {
		return nil, nil
	}
	views, st, err := p.scan()
	if err != nil {
		return nil, err
	}
	if p.freshLaunching(views) {
		// A new fork that has not exec'd yet (a shell starting a helper)
		// runs its parent's code for a moment: what it execs decides. (A
		// fork the last read saw already is a child that never execs,
		// such as a worker of Python's multiprocessing.)
		views, st = p.settleWhile(views, st, changeSettleMax, true, p.freshLaunching)
	}
	now := p.measureLocked(views)
	what, _, _ := p.differencesLocked(now)
	if len(what) == 0 {
		// Processes that exited, or helpers running known code: the
		// base follows so that pids are not compared against stale ones.
		if !sameViews(views, viewsOf(p.tree.base)) {
			p.setBaseLocked(now, false, st)
		} else {
			p.tree.stamp, p.tree.stamped = st.n, st.ok
		}
		return nil, nil
	}
	at := time.Now()
	settled, st := p.settleWhile(views, st, changeSettleMax, true, p.freshLaunching)
	now = p.measureLocked(settled)
	what, restarted, next := p.differencesLocked(now)
	if len(what) == 0 {
		// A fork caught before its exec and redirections (a shell
		// starting a helper) that settled into no change.
		p.setBaseLocked(now, false, st)
		return nil, nil
	}
	if launch {
		// Still starting (a watcher that starts its worker late, npx
		// that downloads first): nothing has answered yet, so this is
		// the launch epoch's tree, read again.
		p.setBaseLocked(now, true, st)
		p.tree.rereads++
		p.logger.Info("process tree read again before the first answer", "what", strings.Join(what, "; "))
		return nil, nil
	}
	ch := TreeChange{
		Epoch:     ids.NewEpoch(),
		Previous:  p.tree.epoch,
		Old:       observedOf(p.tree.recorded),
		New:       observedOf(now),
		What:      what,
		At:        at,
		Restarted: restarted,
		ack:       newAcker(),
	}
	p.setBaseLocked(now, true, st)
	p.newEpochLocked(&ch, next)
	return &ch, nil
}

// newEpochLocked makes ch the current epoch and delivers it; next, when a
// new program reads the requests, are the processes that answer from now
// on.
func (p *Process) newEpochLocked(ch *TreeChange, next []member) {
	p.tree.epoch = ch.Epoch
	if ch.Restarted {
		p.tree.answerers = map[int]uint64{}
		p.tree.writers = map[int]writer{}
		for _, m := range next {
			p.tree.answerers[m.view.pid] = m.view.start
			p.tree.writers[m.view.pid] = writer{view: m.view}
		}
	}
	// Processes that ran the old epoch's code and still write stay
	// accepted only if they did not exec (writer.key) and their code is
	// the new epoch's: the next chunk of each is checked again.
	for pid, w := range p.tree.writers {
		if st, ok := p.tree.answerers[pid]; !ok || w.view.start != st {
			delete(p.tree.writers, pid)
		}
	}
	p.logger.Warn("new epoch observed in the process tree", "previous", ch.Previous, "epoch", ch.Epoch, "what", strings.Join(ch.What, "; "))
	select {
	case p.changes <- *ch:
	case <-p.done:
	case <-p.stopping:
	}
	p.kickLocked()
}

// quickLocked answers a check without reading the whole tree when it can
// prove that nothing changed since the read the base came from: the
// kernel's count of processes created since boot (Linux: "processes" in
// /proc/stat, a 64-bit counter that every fork, clone and thread creation
// moves) is the one read before that read, so no process was created
// anywhere, and the tree has no new member — a process cannot join it
// without being created (reparenting only moves orphans up to the daemon,
// a child subreaper, and every read keeps the processes of the base that
// are still alive wherever they were reparented). An exec creates no
// process, so each process of the base is read again (start time and
// parent from /proc/PID/stat, the running file's device and inode, the
// arguments): one that changed, or a counter that moved, sends the check
// to the full read. Processes of the base that exited leave it, as a full
// read would drop them. The one thing a full read sees and this does not:
// a process outside the tree (another server's) that execs with this
// epoch's mark in its environment to be counted in; nothing is gained by
// that.
func (p *Process) quickLocked() bool {
	t := &p.tree
	if !t.stamped || len(t.base) == 0 {
		return false
	}
	n, ok := t.quick.forks()
	if !ok || n != t.stamp {
		return false
	}
	t.found = t.found[:0]
	gone := 0
	for i := range t.base {
		r := t.quick.same(&t.base[i].view)
		if r == procChanged {
			return false
		}
		if r == procGone {
			gone++
		}
		t.found = append(t.found, r)
	}
	t.quicks++
	if gone == 0 {
		return true
	}
	alive := make([]member, 0, len(t.base)-gone)
	for i, m := range t.base {
		if t.found[i] == procSame {
			alive = append(alive, m)
		}
	}
	p.setBaseLocked(alive, false, stamp{n: n, ok: true})
	return true
}

// What quickFiles.same found of a process of the base.
const (
	procSame    = iota // it runs what it ran, under the same parent
	procGone           // it exited (or is a zombie)
	procChanged        // it exec'd, was reparented, or could not be read
)

func viewsOf(ms []member) []procView {
	out := make([]procView, len(ms))
	for i, m := range ms {
		out[i] = m.view
	}
	return out
}

// watchTree records the launch's tree once it settled, then reads it again
// only when something happens: the first answer (Arm), the exit of a
// process that answers (Linux pidfd, macOS kqueue), until the process is
// reaped or stopped. Nothing is read at a fixed rate.
func (p *Process) watchTree() {
	// Nothing else reads the tree before treeReady: no lock needed yet.
	views, st, err := p.scan()
	if err == nil {
		views, st = p.settle(views, st, p.opts.SettleMax, true)
	}
	p.treeMu.Lock()
	if err != nil {
		p.tree.err = fmt.Errorf("watching the process tree of %s: %w", p.label, err)
		close(p.identified)
	} else {
		p.setBaseLocked(p.measureLocked(views), true, st)
		p.tree.settled = true
	}
	p.treeMu.Unlock()
	close(p.treeReady)
	defer func() {
		p.treeMu.Lock()
		p.tree.quick.close()
		p.treeMu.Unlock()
	}()
	if err != nil {
		return
	}
	wake := newWakeups()
	defer wake.close()
	// After the answerers exited with nothing in their place, the tree is
	// read again a few times, each wait twice the last (a watcher starts
	// the next worker a moment later), then no more until something
	// happens.
	var again <-chan time.Time
	delay := time.Duration(0)
	for {
		select {
		case <-p.armKick:
			// The first answer: the launch's last read, at once.
		case <-wake.C():
			// An answerer exited (or, on macOS, forked or exec'd).
			delay = replacementFirst
		case <-again:
			again = nil
		case <-p.watchKick:
			// New answerers to watch.
			p.treeMu.Lock()
			pids := p.answererPidsLocked()
			p.treeMu.Unlock()
			wake.watch(pids)
			continue
		case <-p.done:
			return
		case <-p.stopping:
			return
		}
		p.treeMu.Lock()
		ch, err := p.detectLocked()
		waiting := err == nil && ch == nil && p.tree.armed && !p.answererAliveIn(p.tree.base)
		pids := p.answererPidsLocked()
		p.treeMu.Unlock()
		wake.watch(pids)
		switch {
		case waiting && delay > 0 && delay <= replacementLast:
			again = time.After(delay)
			delay *= 2
		case waiting && delay > replacementLast:
			// Nothing took the answerers' place: the processes that read
			// the requests answer for the epoch from now on (a server
			// whose answers come from short helpers; a watcher whose
			// next worker will be judged by what it runs and writes).
			p.treeMu.Lock()
			p.adoptHoldersLocked()
			pids = p.answererPidsLocked()
			p.treeMu.Unlock()
			if len(pids) > 0 {
				p.logger.Info("no process took the place of those that answered; the processes holding the server's stdio answer for the epoch", "pids", pids)
				wake.watch(pids)
			}
			delay = 0
		default:
			delay = 0
		}
		if err != nil {
			select {
			case <-p.done:
				return
			default:
			}
			p.logger.Debug("reading the process tree", "err", err)
		}
	}
}

func (p *Process) answererPidsLocked() []int {
	out := make([]int, 0, len(p.tree.answerers))
	for pid := range p.tree.answerers {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// attribute is called by the stdout reader (Linux) with the writer of each
// chunk before the chunk is returned. Before the launch epoch's identity
// is final every writer is the launch settling. After, a writer already
// accepted that did not exec passes; any other is identified at once (its
// pidfd proves that the process read through /proc is the writer): one
// running the epoch's code while an answerer lives is accepted; one
// running other code, or writing in place of answerers that exited, is a
// new epoch, delivered before the chunk is returned and, with
// Options.HoldNewCode, acknowledged by the gateway first.
func (p *Process) attribute(pid, pidfd int) {
	p.lastWriter.Store(int64(pid))
	p.treeMu.Lock()
	if !p.tree.armed || p.tree.err != nil {
		p.treeMu.Unlock()
		return
	}
	execd := false
	if w, ok := p.tree.writers[pid]; ok && (w.ino == 0 || w.ino == pidfdIno(pidfd)) {
		if p.tree.quick.same(&w.view) == procSame {
			p.treeMu.Unlock()
			return
		}
		v, ok := viewOne(pid, p.pipes)
		execd = ok && v.start == w.view.start && v.key() != w.view.key()
	}
	ch := p.newWriterLocked(pid, pidfd, execd)
	p.treeMu.Unlock()
	if ch == nil || !p.holdNew {
		return
	}
	// Held while the process is being stopped too: a replaced epoch's
	// process still writes until it exits, and the gateway records what
	// it wrote as the new code's only once it took the change.
	select {
	case <-ch.ack.c:
	case <-p.done:
	}
}

// newWriterLocked judges a writer that is not an accepted one (see
// attribute) and returns the new epoch it makes, nil when it makes none.
func (p *Process) newWriterLocked(pid, pidfd int, execd bool) *TreeChange {
	v, ok := viewOne(pid, p.pipes)
	if ok && pidfd >= 0 && !pidfdAlive(pidfd) {
		ok = false // exited since it wrote: the pid may name another process now
	}
	if !ok {
		// It wrote and exited before it could be read (a short helper
		// such as cat or printf): nothing says what it ran. What it
		// wrote is passed on as the epoch's and logged; a process that
		// answers lives longer than that.
		p.logger.Info("output written by a process that exited before it could be identified", "pid", pid)
		return nil
	}
	m := p.measureLocked([]procView{v})[0]
	ours, why := p.epochCodeLocked(m.obs)
	alive := p.answererAliveIn(p.tree.base) || p.isAnswererLocked(v)
	// An answerer that exec'd is a new program reading the requests,
	// whatever its code.
	if ours && alive && !(execd && p.isAnswererLocked(v)) {
		p.tree.writers[pid] = writer{ino: pidfdIno(pidfd), view: v}
		return nil
	}
	var what string
	switch {
	case p.isAnswererLocked(v):
		what = fmt.Sprintf("pid %d, which answered, exec'd: %s", pid, describe(m))
	case !ours:
		what = fmt.Sprintf("pid %d wrote the server's output running %s: %s", pid, describe(m), why)
	default:
		what = fmt.Sprintf("pid %d wrote the server's output in place of %s, which answered and exited: %s", pid, p.answerersText(), describe(m))
	}
	// The tree as it is now, with the writer in it wherever it runs.
	views, st, err := p.scan()
	if err != nil {
		views, st = []procView{v}, stamp{}
	}
	if !slices.ContainsFunc(views, func(x procView) bool { return x.pid == v.pid }) {
		views = append(views, v)
	}
	now := p.measureLocked(views)
	obs := m.obs
	// A new program reads the requests when it writes in place of the
	// answerers or is one of them exec'd; a helper running other code
	// beside a live answerer is new code, and the answerer keeps its
	// handshake.
	restarted := !alive || p.isAnswererLocked(v)
	ch := TreeChange{
		Epoch:     ids.NewEpoch(),
		Previous:  p.tree.epoch,
		Old:       observedOf(p.tree.recorded),
		New:       observedOf(now),
		What:      []string{what},
		At:        time.Now(),
		Restarted: restarted,
		Answered:  &obs,
		ack:       newAcker(),
	}
	p.setBaseLocked(now, true, st)
	p.newEpochLocked(&ch, []member{m})
	if !restarted {
		p.tree.writers[pid] = writer{ino: pidfdIno(pidfd), view: v}
	}
	return &ch
}

// escapedLocked looks for processes carrying the launch's mark that are in
// no scanned tree (reparented to init after their parent died, on a system
// where the daemon is no subreaper) and counts them as new processes.
func (p *Process) escapedLocked() error {
	found, err := findMarked(map[string]bool{string(p.epoch): true})
	if err != nil {
		return err
	}
	for _, m := range found {
		if p.isLauncher(m.pid, m.start, m.exe) {
			continue
		}
		in := false
		for _, b := range p.tree.base {
			if b.view.pid == m.pid && b.view.start == m.start {
				in = true
				break
			}
		}
		if !in {
			p.logger.Warn("a process of the epoch left its tree", "pid", m.pid, "exe", m.exe)
			p.escaped[m.pid] = true
			p.tree.stamped = false // the next read looks at it
		}
	}
	return nil
}

// wakeups are kernel notices that a watched process forked, exec'd or
// exited (macOS kqueue EVFILT_PROC), so that the tree is read at once
// rather than at the next poll.
type wakeups interface {
	C() <-chan struct{}
	watch(pids []int) // adds processes to watch; watched ones stay
	close()
}
