package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/supervisor"
)

// child is a server process group the daemon started, as recorded on disk
// so that the next daemon can stop it if this one dies without doing so.
// StartTime (the kernel's process start time) guards against pid reuse.
type child struct {
	PID       int         `json:"pid"`
	StartTime uint64      `json:"startTime"`
	Label     string      `json:"label"`
	Epoch     ids.EpochID `json:"epoch"`
}

func (d *Daemon) childrenFile() string { return filepath.Join(d.opts.Dirs.State, "children.json") }

// trackChild records a launched process; untrackChild forgets it.
func (d *Daemon) trackChild(c child) {
	d.mu.Lock()
	if d.children == nil {
		d.children = map[int]child{}
	}
	d.children[c.PID] = c
	d.writeChildrenLocked()
	d.mu.Unlock()
}

func (d *Daemon) untrackChild(pid int) {
	d.mu.Lock()
	delete(d.children, pid)
	d.writeChildrenLocked()
	d.mu.Unlock()
}

func (d *Daemon) writeChildrenLocked() {
	list := make([]child, 0, len(d.children))
	for _, c := range d.children {
		list = append(list, c)
	}
	b, _ := json.Marshal(list)
	tmp := d.childrenFile() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		d.log.Warn("recording server processes", "err", err)
		return
	}
	if err := os.Rename(tmp, d.childrenFile()); err != nil {
		d.log.Warn("recording server processes", "err", err)
	}
}

// orphanGrace is how long a previous daemon's servers get between SIGTERM
// and SIGKILL.
const orphanGrace = 3 * time.Second

// reapOrphans stops the server processes that a previous daemon started
// and did not stop (it was killed): each recorded process that still runs
// with the same start time has its group terminated; then every process of
// this user that carries the mark of a recorded epoch (supervisor.EpochEnv)
// is stopped too, whether or not its server still runs: a descendant that
// left the group (setsid, a double fork), or one left behind by a server
// that exited once its stdin closed. Each one found is logged.
func (d *Daemon) reapOrphans() {
	b, err := os.ReadFile(d.childrenFile())
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		d.log.Warn("reading the previous daemon's server processes", "err", err)
		return
	}
	var list []child
	if err := json.Unmarshal(b, &list); err != nil {
		d.log.Warn("the previous daemon's process list is unreadable; not stopping anything", "err", err)
		return
	}
	var epochs []string
	for _, c := range list {
		epochs = append(epochs, string(c.Epoch))
		if !d.sameProcess(c) {
			continue
		}
		d.log.Warn("stopping a server left running by a previous daemon", "server", c.Label, "pid", c.PID, "epoch", c.Epoch)
		if err := killGroup(c.PID, orphanGrace); err != nil {
			d.log.Warn("stopping orphaned server", "pid", c.PID, "err", err)
		}
	}
	if err := supervisor.StopEpochs(epochs, orphanGrace, d.log); err != nil {
		d.log.Warn("stopping processes of a previous daemon's servers", "err", err)
	}
	_ = os.Remove(d.childrenFile())
}

// sameProcess reports whether c's pid still names the process recorded.
func (d *Daemon) sameProcess(c child) bool {
	if d.opts.Procs == nil || c.PID <= 0 || c.StartTime == 0 {
		return false
	}
	tree, err := d.opts.Procs.Tree(c.PID)
	if err != nil {
		return false
	}
	for _, o := range tree {
		if o.PID == c.PID {
			return o.StartTime == c.StartTime
		}
	}
	return false
}

// closeAbandonedRuns ends, in the audit log, the agent runs that a previous
// daemon started and never ended (it was killed): without it their sessions
// would stay open forever. Calls of those runs that have no tool_completed
// stay as they are: whether they took effect is unknown.
func (d *Daemon) closeAbandonedRuns(ctx context.Context) {
	sessions, err := audit.Sessions(AuditDir(d.opts.Dirs), audit.Filter{})
	if err != nil {
		d.log.Warn("reading the audit log's sessions", "err", err)
		return
	}
	for _, s := range sessions {
		if s.EndSeq != 0 || s.Started.IsZero() {
			continue
		}
		if _, err := d.auditW.Append(ctx, audit.TypeRunEnded, audit.RunEnded{
			AgentRun: s.AgentRun, ServerLabel: s.ServerLabel,
			Reason: "the daemon stopped without ending this run (killed or crashed); its server was stopped by the next daemon",
		}); err != nil {
			d.log.Warn("closing an abandoned run in the audit log", "run", s.AgentRun, "err", err)
		}
	}
}
