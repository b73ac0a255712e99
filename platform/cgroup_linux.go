//go:build linux

package platform

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/supervisor"
)

// linuxCgroups puts each server in a cgroup v2 directory of its own,
// portcullis-daemon-PID/portcullis-EPOCH, made inside the daemon's own
// cgroup when the daemon may write there (a delegated subtree: a systemd user service or scope,
// or a daemon run as root), the process started straight into it
// (clone3's CLONE_INTO_CGROUP: no child can fork before it is placed). When
// the epoch ends the group is killed whole (cgroup.kill) and removed.
// Where the daemon cannot write its cgroup, there is none, and status
// says why. A systemd user scope (systemd-run --user --scope) is not
// used: no machine this was built on had a user manager to run it against.
type linuxCgroups struct {
	dir string // the daemon's cgroup directory; "" with why
	why string // why there are no cgroups here
}

// NewCgroups returns how servers are put in cgroups of their own on this
// system, found once, at the first Place: the daemon's own cgroup v2
// directory (from /proc/self/cgroup and the cgroup2 mount), checked by
// starting a probe process into a group made there. log (nil: none) names
// what is stopped of a dead daemon's groups at that moment.
func NewCgroups(log *slog.Logger) supervisor.Cgroups {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return lazyCgroups{log: log}
}

type lazyCgroups struct{ log *slog.Logger }

func (l lazyCgroups) Place(cmd *exec.Cmd, epoch string) (supervisor.Cgroup, string, error) {
	cgroupsOnce.Do(func() { cgroupsFound = findCgroups(l.log) })
	return cgroupsFound.Place(cmd, epoch)
}

var (
	cgroupsOnce  sync.Once
	cgroupsFound *linuxCgroups
)

// cgroupKillWait bounds the wait for a killed group to empty.
const cgroupKillWait = 5 * time.Second

func findCgroups(log *slog.Logger) *linuxCgroups {
	none := func(why string) *linuxCgroups {
		return &linuxCgroups{why: "none — " + why + "; the process group and the epoch's mark still end the tree"}
	}
	mount, err := cgroup2Mount()
	if err != nil {
		return none(err.Error())
	}
	own, err := ownCgroup()
	if err != nil {
		return none(err.Error())
	}
	dir := filepath.Join(mount, own)
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return none(fmt.Sprintf("the daemon's cgroup %s is not writable (no delegated cgroup v2 subtree; no systemd user scope is made)", dir))
	}
	removeDeadDaemons(dir, log)
	parent := filepath.Join(dir, fmt.Sprintf("portcullis-daemon-%d", os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return none(fmt.Sprintf("making cgroup %s: %v", parent, err))
	}
	c := &linuxCgroups{dir: parent}
	// The probe: a group made here, /bin/true started into it.
	cmd := exec.Command("/bin/true")
	g, _, err := c.Place(cmd, "probe-"+fmt.Sprint(os.Getpid()))
	if err != nil {
		return none(err.Error())
	}
	if _, err := os.Stat(filepath.Join(g.(*linuxCgroup).dir, "cgroup.kill")); err != nil {
		g.Started()
		_ = unix.Rmdir(g.(*linuxCgroup).dir)
		return none(fmt.Sprintf("the kernel's cgroup v2 has no cgroup.kill (Linux 5.14 or later needed) under %s", dir))
	}
	err = cmd.Run()
	g.Started()
	kerr := g.Kill()
	if err != nil {
		return none(fmt.Sprintf("a process could not be started into a cgroup under %s (%v)", dir, err))
	}
	if kerr != nil {
		return none(kerr.Error())
	}
	return c
}

// removeDeadDaemons kills and removes the groups that a daemon which no
// longer runs left in dir (portcullis-daemon-PID, PID gone: killed before
// it could end its epochs). A live daemon's groups, another data
// directory's included, are never touched. Each process stopped is named
// in log first (pid and program), so that the person can tell what ended:
// the dead daemon may have been of another data directory.
func removeDeadDaemons(dir string, log *slog.Logger) {
	parents, _ := filepath.Glob(filepath.Join(dir, "portcullis-daemon-*"))
	for _, parent := range parents {
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(parent), "portcullis-daemon-%d", &pid); err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			continue // alive (or not ours to ask): leave it
		}
		groups, _ := filepath.Glob(filepath.Join(parent, "portcullis-*"))
		for _, g := range groups {
			if procs := groupProcs(g); len(procs) > 0 {
				log.Warn("stopping the processes a dead daemon left in its cgroup", "daemon_pid", pid, "cgroup", g, "processes", strings.Join(procs, ", "))
			}
			_ = (&linuxCgroup{dir: g, fd: -1}).Kill()
		}
		_ = unix.Rmdir(parent)
	}
}

// groupProcs names the processes in cgroup directory g, each as PID
// (program), from cgroup.procs and /proc/PID/comm; nil when it holds none
// or cannot be read.
func groupProcs(g string) []string {
	b, err := os.ReadFile(filepath.Join(g, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []string
	for _, pid := range strings.Fields(string(b)) {
		comm, err := os.ReadFile(filepath.Join("/proc", pid, "comm"))
		name := strings.TrimSpace(string(comm))
		if err != nil || name == "" {
			name = "?"
		}
		out = append(out, pid+" ("+name+")")
	}
	return out
}

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted
// (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid system).
func cgroup2Mount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("reading the mounts: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS…] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if f := strings.Fields(pre); ok && len(f) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			return unescapeMount(f[4]), nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy is mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &v); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroup returns the daemon's cgroup v2 path ("0::PATH" in
// /proc/self/cgroup).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("reading the daemon's cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("the daemon is in no cgroup v2 group")
}

func (c *linuxCgroups) Place(cmd *exec.Cmd, epoch string) (supervisor.Cgroup, string, error) {
	if c.dir == "" {
		return nil, c.why, nil
	}
	dir := filepath.Join(c.dir, "portcullis-"+epoch)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("making cgroup %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, "", fmt.Errorf("opening cgroup %s: %w", dir, err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	return &linuxCgroup{dir: dir, fd: fd}, dir + " (killed whole when the epoch ends)", nil
}

// linuxCgroup is one server's cgroup directory.
type linuxCgroup struct {
	dir  string
	once sync.Once
	fd   int
}

func (g *linuxCgroup) Started() {
	g.once.Do(func() {
		if g.fd >= 0 {
			unix.Close(g.fd)
		}
	})
}

// Kill writes cgroup.kill (SIGKILL to every process in the group and its
// children, which cannot fork away meanwhile), waits, at most
// cgroupKillWait, until cgroup.events says it is empty, and removes it.
func (g *linuxCgroup) Kill() error {
	g.Started()
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // removed already
		}
		return fmt.Errorf("killing cgroup %s: %w", g.dir, err)
	}
	deadline := time.Now().Add(cgroupKillWait)
	for {
		b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.events"))
		if err != nil {
			return fmt.Errorf("reading cgroup %s: %w", g.dir, err)
		}
		if strings.Contains(string(b), "populated 0") {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %v after cgroup.kill", g.dir, cgroupKillWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := unix.Rmdir(g.dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing cgroup %s: %w", g.dir, err)
	}
	return nil
}
