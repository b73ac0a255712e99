//go:build unix

package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EpochEnv names the environment variable that marks every process of an
// execution epoch: Start sets EpochEnv=<epoch ID> in the server's
// environment (after Spec.Env, so a configuration cannot change it), and
// every descendant inherits it. It is not secret: the epoch ID is shown in
// `portcullis status` and the audit log, and a server may read it.
//
// The mark reaches the descendants that a process group cannot: one that
// left the group (setsid, setpgid, a double fork into a session of its own)
// still carries it. When an epoch is stopped, and at daemon start for the
// epochs of a daemon that died, the processes of this user that carry the
// epoch's exact mark are stopped too. A descendant that execs with a cleared
// or rewritten environment (env -i, or a program that drops the variable
// before exec) carries no mark and escapes; so does one that makes itself
// unreadable (a set-user-ID program, or PR_SET_DUMPABLE 0 on Linux).
// Finding marked processes needs Linux (/proc/PID/environ) or macOS
// (kern.procargs2); on other systems only the process group is stopped.
const EpochEnv = "PORTCULLIS_EPOCH"

// ErrEpochNotEmpty reports that processes carrying an epoch's mark survived
// SIGKILL for 10 s (uninterruptible sleep).
var ErrEpochNotEmpty = errors.New("processes of the epoch still run after SIGKILL")

// marked is a live process found carrying an epoch's mark.
type marked struct {
	pid   int
	pgid  int
	start uint64 // the kernel's start time, to tell a reused pid
	exe   string // "" when unknown
	epoch string
}

// procKey names one process across pid reuse.
type procKey struct {
	pid   int
	start uint64
}

// sweeper stops the processes that carry the marks of some epochs: each is
// sent SIGTERM when first found and SIGKILL once grace has passed since.
// The platform's findMarked lists them and signalMarked signals one.
//
// On Linux the daemon makes itself a child subreaper (PR_SET_CHILD_SUBREAPER,
// see the platform's Lineage.Adopt): a marked process that left its group
// and whose parent exited is reparented to the daemon, which reaps it
// without taking the exit status of the servers os/exec waits for. Where
// the daemon is no subreaper (macOS, or prctl refused), such a process is
// reparented to init or to the session's subreaper, which reaps it; either
// way it is found here by its mark, not by its parent.
type sweeper struct {
	epochs map[string]bool
	grace  time.Duration
	log    *slog.Logger
	termAt map[procKey]time.Time
	killed map[procKey]bool
}

func newSweeper(epochs []string, grace time.Duration, log *slog.Logger) *sweeper {
	s := &sweeper{epochs: map[string]bool{}, grace: grace, log: log, termAt: map[procKey]time.Time{}, killed: map[procKey]bool{}}
	for _, e := range epochs {
		if e != "" {
			s.epochs[e] = true
		}
	}
	return s
}

// pass looks once for marked processes, leaving out the members of process
// group skip (0: none; the group has signals of its own), sends SIGTERM to
// each one found for the first time and SIGKILL to each one sent SIGTERM at
// least grace ago, and returns those it found alive.
func (s *sweeper) pass(skip int) ([]marked, error) {
	if len(s.epochs) == 0 {
		return nil, nil
	}
	procs, err := findMarked(s.epochs)
	if err != nil {
		return nil, err
	}
	var left []marked
	now := time.Now()
	for _, m := range procs {
		if skip != 0 && m.pgid == skip {
			continue
		}
		left = append(left, m)
		k := procKey{m.pid, m.start}
		at, termed := s.termAt[k]
		if !termed {
			s.termAt[k] = now
			s.log.Warn("a process of the epoch is still running; sending SIGTERM",
				"epoch", m.epoch, "pid", m.pid, "pgid", m.pgid, "exe", m.exe)
			s.signal(m, syscall.SIGTERM)
		} else if !s.killed[k] && now.Sub(at) >= s.grace {
			s.killed[k] = true
			s.log.Warn("a process of the epoch is alive after SIGTERM; sending SIGKILL",
				"epoch", m.epoch, "pid", m.pid, "exe", m.exe, "grace", s.grace)
			s.signal(m, syscall.SIGKILL)
		}
	}
	return left, nil
}

func (s *sweeper) signal(m marked, sig syscall.Signal) {
	if err := signalMarked(m, sig); err != nil {
		s.log.Warn("signalling a process of the epoch", "pid", m.pid, "signal", unix.SignalName(sig), "err", err)
	}
}

// finish sweeps until no marked process is left: each one gets SIGTERM
// when found, then SIGKILL grace later (those found by an earlier pass
// count from then); it gives up grace + groupGoneTimeout after it began,
// so a process in uninterruptible sleep or one that keeps forking cannot
// hold it longer. It returns an error wrapping ErrEpochNotEmpty when some
// are left, or the error of listing processes.
func (s *sweeper) finish() error {
	if len(s.epochs) == 0 {
		return nil
	}
	deadline := time.Now().Add(s.grace + groupGoneTimeout)
	poll := 5 * time.Millisecond
	for {
		left, err := s.pass(0)
		if err != nil || len(left) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			pids := make([]string, 0, len(left))
			for _, m := range left {
				pids = append(pids, strconv.Itoa(m.pid))
			}
			slices.Sort(pids)
			return fmt.Errorf("%w (pids %s)", ErrEpochNotEmpty, strings.Join(pids, ", "))
		}
		time.Sleep(poll)
		poll = min(2*poll, 100*time.Millisecond)
	}
}

// StopEpochs stops every process of this user that carries the mark of one
// of epochs (see [EpochEnv]): SIGTERM at once, SIGKILL to those still alive
// grace later, each one logged with its pid and executable. It returns once
// none is left, or with an error wrapping [ErrEpochNotEmpty] when some
// survive SIGKILL for 10 s. The daemon calls it at start for the epochs of
// servers that a previous daemon started and could not stop. On systems
// other than Linux and macOS it does nothing.
func StopEpochs(epochs []string, grace time.Duration, log *slog.Logger) error {
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return newSweeper(epochs, grace, log).finish()
}

// envHas reports whether env, NUL-separated "K=V" entries as the kernel
// keeps them, holds the entry EpochEnv=e for an e in epochs, and which e.
func envHas(env []byte, epochs map[string]bool) (string, bool) {
	prefix := []byte(EpochEnv + "=")
	for entry := range bytes.SplitSeq(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(entry, prefix); ok && epochs[string(v)] {
			return string(v), true
		}
	}
	return "", false
}
