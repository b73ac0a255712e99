package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/supervisor"
)

// Lineage reads from the kernel where a process stands in the process tree,
// so that the daemon can tell the person from the code it supervises
// (docs/DESIGN.md "Who decides"). Package
// platform implements it on the PeerInfo it gives the daemon
// (Options.Peers); a PeerInfo without it makes every decision that needs a
// person fail closed.
type Lineage interface {
	// Ancestry returns the process at the other end of c, then its
	// parent, its parent's parent… up to the root, each with its pid,
	// parent pid, executable and kernel start time. The chain is
	// consistent: a pid reused while it was read makes it start over or
	// fail; an error means it could not be read.
	Ancestry(c net.Conn) ([]identity.Observed, error)
	// Environ returns the value of the environment variable name that
	// process pid, started at startTime, was started with.
	Environ(pid int, startTime uint64, name string) (value string, ok bool, err error)
	// Adopt makes the daemon's process a child subreaper, so that a
	// descendant of a server whose parent exits (setsid, a double fork)
	// stays below the daemon, and reaps those adopted processes until ctx
	// ends. It fails on systems without subreapers (macOS).
	Adopt(ctx context.Context, log *slog.Logger) error
}

// Terminals tells whether a process runs at a terminal: its standard input
// and output are a terminal, the check `portcullis` makes of itself before
// it decides, made here by the daemon on the process that asks, so that a
// process that talks to the control socket without the CLI meets it too.
// Package platform implements it on the PeerInfo it gives the daemon; a
// PeerInfo without it makes every decision that needs a person fail closed.
type Terminals interface {
	// AtTerminal reports whether process pid, if it still is the process
	// that started at startTime, runs at a terminal; an error means it
	// could not be read.
	AtTerminal(pid int, startTime uint64) (bool, error)
}

// codeNotPerson is the control Reply.Code of a refusal by requirePerson.
const codeNotPerson = "not_a_person"

// Refusal kinds, in audit.DecisionRefused.Refusal.
const (
	refusedSupervised = "supervised"  // descends from the daemon: a server's tree, or left it
	refusedMarked     = "marked"      // carries an epoch's mark (supervisor.EpochEnv)
	refusedAgent      = "agent"       // descends from the agent of a live agent run
	refusedUnverified = "unverified"  // its ancestry could not be read
	refusedNoTerminal = "no_terminal" // its stdin and stdout are not a terminal (or that could not be read)
)

// notPersonError is requirePerson's refusal: Error is the sentence the
// refused process is answered with.
type notPersonError struct {
	kind string
	msg  string
}

func (e *notPersonError) Error() string { return e.msg }

// personHint is the one step a refused decision of an approval request
// leaves to the person; actHint that of any other refused action (an edit
// that widens trust, stop, audit acknowledge…), which is not approved in
// an approval window but run again by the person.
const (
	personHint = "approve or deny it from a terminal of your own (portcullis approve|deny ID) or in the Portcullis approval window"
	actHint    = "run the same portcullis command yourself, from a terminal of your own (not through a pipe, a script or an agent's shell), or use the Portcullis window"
)

// peerChain is the ancestry of a control connection's peer, read once when
// the connection was accepted (the shortest window for its pid to be
// reused).
type peerChain struct {
	chain []identity.Observed
	err   error
}

// notePeer reads and keeps the ancestry of c's peer, for requirePerson and
// the agent of a connect; forgetPeer drops it when c closes.
func (d *Daemon) notePeer(c net.Conn) {
	lin, ok := d.opts.Peers.(Lineage)
	if !ok {
		return
	}
	chain, err := lin.Ancestry(c)
	d.peers.Store(c, peerChain{chain: chain, err: err})
}

func (d *Daemon) forgetPeer(c net.Conn) { d.peers.Delete(c) }

func (d *Daemon) peerOf(c net.Conn) ([]identity.Observed, error) {
	lin, ok := d.opts.Peers.(Lineage)
	if !ok {
		return nil, fmt.Errorf("this build cannot read process ancestry on %s", runtime.GOOS)
	}
	if v, ok := d.peers.Load(c); ok {
		p := v.(peerChain)
		return p.chain, p.err
	}
	return lin.Ancestry(c)
}

// adopt makes the daemon a child subreaper (Lineage.Adopt) for as long as
// ctx lasts.
func (d *Daemon) adopt(ctx context.Context) {
	lin, ok := d.opts.Peers.(Lineage)
	if !ok {
		return
	}
	if err := lin.Adopt(ctx, d.log); err != nil {
		d.log.Warn("not a child subreaper: processes that leave a server's tree are recognised only by their epoch mark", "err", err)
	}
}

// noteAgent records, for run, the agent behind the shim on c: the shim's
// parent, with its start time, from the ancestry read at accept. Its
// descendants (the agent's shell tools) are not the person.
func (d *Daemon) noteAgent(run ids.RunID, c net.Conn) {
	chain, err := d.peerOf(c)
	if err != nil || len(chain) < 2 || chain[1].PID <= 1 || chain[1].PID == os.Getpid() {
		// No parent seen, or the shim was orphaned to init: init's
		// descendants are everyone, so it is not taken for the agent.
		return
	}
	d.mu.Lock()
	if d.agents == nil {
		d.agents = map[ids.RunID]identity.Observed{}
	}
	d.agents[run] = chain[1]
	d.mu.Unlock()
}

func (d *Daemon) forgetAgent(run ids.RunID) {
	d.mu.Lock()
	delete(d.agents, run)
	d.mu.Unlock()
}

// requirePerson returns nil when the process at the other end of c may
// decide for the person: what (such as "approve 01J…", "deny 01J…", "turn
// policy of tool x to allow") is then theirs to do. Otherwise it returns an
// error whose text says who was refused, why and what the person should do,
// after writing a decision_refused event to the audit log; the caller
// answers with control.Reply{Error: err.Error(), Code: codeNotPerson} and
// does nothing else.
//
// Refused, from the kernel's view of the peer's ancestry (Lineage):
//   - any process that descends from the daemon: a supervised server and
//     its tree, including descendants that left it with setsid or a double
//     fork, since the daemon is a child subreaper (Linux) and such
//     processes are reparented to it;
//   - any process of that chain carrying an epoch's mark in its
//     environment (supervisor.EpochEnv; the only signal on macOS for a
//     process that left a server's tree);
//   - any process that descends from the agent of a live agent run (the
//     shim's parent, start time checked, as recorded when the shim
//     connected): an agent's shell cannot approve the agent's calls;
//   - any process whose ancestry cannot be read (fail closed).
//
// and then, from what the kernel shows of the process itself:
//   - any process whose standard input and output are not both a terminal
//     (a pipe, a file, /dev/null: a script, a detached process), or where
//     that cannot be read (Terminals): a decision is typed by the person at
//     a terminal of their own, as the CLI requires of itself.
//
// The person's own terminal is neither below the daemon nor below an agent.
// Every operation of the control protocol that decides or widens trust
// goes through here: approve and deny (OpDecide), confirming or rejecting a
// held change (OpChangeDecide), an edit that widens trust (OpConfigEdit:
// `servers policy … allow`…), stop, restore-secrets (OpPerson), audit
// acknowledge and setup-keys.
func (d *Daemon) requirePerson(c net.Conn, what string) error {
	return d.requirePersonFor(c, what, "")
}

// requirePersonFor is requirePerson for a decision of approval request
// request ("" for other changes), named in the audit event.
func (d *Daemon) requirePersonFor(c net.Conn, what string, request ids.RequestID) error {
	hint, nothing := personHint, "nothing was decided"
	if request == "" {
		hint, nothing = actHint, "nothing was changed"
	}
	chain, err := d.peerOf(c)
	if err == nil && len(chain) == 0 {
		err = errors.New("the kernel reported no process")
	}
	if err != nil {
		pid := 0
		if _, p, perr := d.opts.Peers.Peer(c); perr == nil {
			pid = p
		}
		return d.refuse(what, request, &identity.Observed{PID: pid}, nil, refusedUnverified, "", "",
			fmt.Sprintf("refused to %s: Portcullis cannot tell which process asks (pid %d): its ancestry could not be read from the kernel (%v), so %s; %s", what, pid, err, nothing, hint))
	}
	peer := &chain[0]
	who := describeProc(*peer)
	self := os.Getpid()
	for i, p := range chain {
		if p.PID != self {
			continue
		}
		label, how := "", "a process that left a supervised server's process tree (it was reparented to the daemon)"
		if i > 0 {
			if ch, ok := d.childByPID(chain[i-1].PID); ok && (ch.StartTime == 0 || ch.StartTime == chain[i-1].StartTime) {
				label = ch.Label
				how = fmt.Sprintf("the process tree of server %q, which Portcullis supervises", label)
			}
		}
		if label == "" {
			label = d.markedLabel(chain[:i])
		}
		return d.refuse(what, request, peer, chain, refusedSupervised, label, "",
			fmt.Sprintf("refused to %s: %s descends from the Portcullis daemon (%s): it belongs to %s, and the code under review cannot decide for the person; %s", what, who, pidPath(chain[:i+1]), how, hint))
	}
	if lin, ok := d.opts.Peers.(Lineage); ok {
		for _, p := range chain {
			epoch, marked, err := lin.Environ(p.PID, p.StartTime, supervisor.EpochEnv)
			if err != nil || !marked {
				continue // a foreign process (init, a login manager) keeps its environment to itself
			}
			label := d.labelOfEpoch(ids.EpochID(epoch))
			server := "a server Portcullis supervises"
			if label != "" {
				server = fmt.Sprintf("server %q", label)
			}
			return d.refuse(what, request, peer, chain, refusedMarked, label, "",
				fmt.Sprintf("refused to %s: %s carries the mark of an execution epoch of %s (%s=%s in the environment of pid %d): it was started by that server's code, which cannot decide for the person; %s", what, who, server, supervisor.EpochEnv, epoch, p.PID, hint))
		}
	}
	d.mu.Lock()
	agents := make(map[ids.RunID]identity.Observed, len(d.agents))
	for run, a := range d.agents {
		agents[run] = a
	}
	labels := make(map[ids.RunID]string, len(d.labels))
	for run, l := range d.labels {
		labels[run] = l
	}
	d.mu.Unlock()
	for i, p := range chain {
		for run, a := range agents {
			if p.PID != a.PID || p.StartTime != a.StartTime {
				continue
			}
			return d.refuse(what, request, peer, chain, refusedAgent, labels[run], run,
				fmt.Sprintf("refused to %s: %s descends from the agent of agent run %s of %q (%s, %s): an agent cannot approve its own calls; %s", what, who, run, labels[run], describeProc(a), pidPath(chain[:i+1]), hint))
		}
	}
	at, err := false, fmt.Errorf("this build cannot read a process's terminal on %s", runtime.GOOS)
	if t, ok := d.opts.Peers.(Terminals); ok {
		at, err = t.AtTerminal(peer.PID, peer.StartTime)
	}
	if err != nil {
		return d.refuse(what, request, peer, chain, refusedNoTerminal, "", "",
			fmt.Sprintf("refused to %s: Portcullis cannot tell whether %s runs at a terminal (%v), so %s; %s", what, who, err, nothing, hint))
	}
	if !at {
		return d.refuse(what, request, peer, chain, refusedNoTerminal, "", "",
			fmt.Sprintf("refused to %s: %s does not run at a terminal (its standard input and output are not both a terminal: a pipe, a file, or a detached process), and only the person, at a terminal of their own, may; %s; %s", what, who, nothing, hint))
	}
	return nil
}

// personAct is requirePerson for an action that is not the decision of a
// request (stopping the daemon, restoring secrets): a refusal is audited as
// decision_refused, an action allowed as person_action, before it is done.
// An action whose audit event cannot be written is refused too.
func (d *Daemon) personAct(c net.Conn, what string) error {
	if err := d.requirePerson(c, what); err != nil {
		return err
	}
	chain, _ := d.peerOf(c)
	ev := audit.PersonAction{What: what}
	for i, p := range chain {
		if i == 0 {
			ev.PID, ev.Executable = p.PID, p.Exe
		}
		ev.Ancestry = append(ev.Ancestry, p.PID)
	}
	if err := d.appendAudit(audit.TypePersonAction, ev); err != nil {
		return fmt.Errorf("not done: %s could not be recorded in the audit log (%w); fix the audit log, then try again", what, err)
	}
	d.log.Info("the person acted", "what", what, "pid", ev.PID)
	return nil
}

// cliDecider is the record of a decision that came through c (a portcullis
// command): the process and its ancestry as read when c was accepted, and
// what the operating system's authentication did.
func (d *Daemon) cliDecider(c net.Conn, auth osAuth) *audit.Decider {
	dec := &audit.Decider{Channel: audit.ChannelCLI, Authentication: auth.by, AuthenticationMode: auth.mode}
	chain, err := d.peerOf(c)
	if err != nil || len(chain) == 0 {
		if _, pid, perr := d.opts.Peers.Peer(c); perr == nil {
			dec.PID = pid
		}
		return dec
	}
	dec.PID, dec.Executable = chain[0].PID, chain[0].Exe
	for _, p := range chain {
		dec.Ancestry = append(dec.Ancestry, p.PID)
	}
	return dec
}

// windowDecider is the record of a decision made in the app's window, in
// the daemon's own process, from the press in (its origin and device;
// none when the caller did not judge one).
func (d *Daemon) windowDecider(auth osAuth, in WindowInput) *audit.Decider {
	dec := &audit.Decider{Channel: audit.ChannelWindow, PID: os.Getpid(), Authentication: auth.by, AuthenticationMode: auth.mode,
		Input: string(in.Origin), InputDevice: in.Device}
	dec.Executable, _ = os.Executable()
	return dec
}

// refuse audits a refusal and returns it as an error.
func (d *Daemon) refuse(what string, request ids.RequestID, peer *identity.Observed, chain []identity.Observed, kind, label string, run ids.RunID, msg string) error {
	var pids []int
	for _, p := range chain {
		pids = append(pids, p.PID)
	}
	d.log.Warn("refused a decision that needs the person", "what", what, "pid", peer.PID, "exe", peer.Exe, "refusal", kind)
	d.appendAudit(audit.TypeDecisionRefused, audit.DecisionRefused{
		What: what, Request: request, PID: peer.PID, Executable: peer.Exe, Refusal: kind,
		Reason: msg, ServerLabel: label, AgentRun: run, Ancestry: pids,
	})
	return &notPersonError{kind: kind, msg: msg}
}

// childByPID is the server process the daemon started as pid, if any.
func (d *Daemon) childByPID(pid int) (child, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.children[pid]
	return c, ok
}

// labelOfEpoch is the server label of a running epoch, "" when unknown.
func (d *Daemon) labelOfEpoch(epoch ids.EpochID) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.children {
		if c.Epoch == epoch {
			return c.Label
		}
	}
	return ""
}

// markedLabel is the label of the first epoch mark found in chain, "" when
// none is.
func (d *Daemon) markedLabel(chain []identity.Observed) string {
	lin, ok := d.opts.Peers.(Lineage)
	if !ok {
		return ""
	}
	for _, p := range chain {
		if epoch, marked, err := lin.Environ(p.PID, p.StartTime, supervisor.EpochEnv); err == nil && marked {
			return d.labelOfEpoch(ids.EpochID(epoch))
		}
	}
	return ""
}

// describeProc names a process for a person: "process 4242 (/usr/bin/sh)".
func describeProc(p identity.Observed) string {
	if p.Exe == "" {
		return "process " + strconv.Itoa(p.PID)
	}
	return fmt.Sprintf("process %d (%s)", p.PID, p.Exe)
}

// pidPath is the chain as "4242 → 4240 → 4000".
func pidPath(chain []identity.Observed) string {
	parts := make([]string, len(chain))
	for i, p := range chain {
		parts[i] = strconv.Itoa(p.PID)
	}
	return "ancestry " + strings.Join(parts, " → ")
}
