//go:build linux

package e2e

// Issue 34: one daemon per person, found and started the same way whatever
// the agent's environment.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestConnectStartsDaemonWithBuiltEnvironment: a daemon that the shim of
// an agent starts does not inherit the agent's environment: the agent's
// directory first on PATH, its PYTHONPATH and NODE_OPTIONS are neither in
// the daemon's environment nor in that of the server it launches
// (/proc/PID/environ and the server's own dump).
func TestConnectStartsDaemonWithBuiltEnvironment(t *testing.T) {
	h := newHome(t)
	spyDir, agentBin := t.TempDir(), t.TempDir()
	auditAddServer(t, h, "spy", config.Server{
		Command: "/bin/sh",
		Args:    []string{"-c", `env > "$SPY_DIR/env.tmp" && mv "$SPY_DIR/env.tmp" "$SPY_DIR/env"; exec "$ECHO_BIN"`},
		Env:     map[string]string{"SPY_DIR": spyDir, "ECHO_BIN": echoBin},
	}, "echo")
	// The agent's own pkcheck, first on its PATH.
	if err := os.WriteFile(filepath.Join(agentBin, "pkcheck"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const py, node = "/tmp/agent-pythonpath-34", "--require=/tmp/agent-hook-34.js"
	h.Env = append(h.Env, "PORTCULLIS_START_WAIT="+shimStartWait.String(),
		"PATH="+agentBin+":"+os.Getenv("PATH"), "PYTHONPATH="+py, "NODE_OPTIONS="+node)
	stopStrayDaemons(t, h)

	a := startRaw(t, h, "spy")
	a.handshake("1")
	if m := a.call("2", "tools/list", map[string]any{}, answerWithin); m.Error != nil {
		t.Fatalf("tools/list: %s", m.Raw)
	}
	pid := daemonOf(t, h)
	t.Cleanup(func() { stopPID(t, pid) })

	environ, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	checkNotAgents(t, "the daemon's environment", strings.Split(string(environ), "\x00"), agentBin, py, node)
	dump := waitFile(t, filepath.Join(spyDir, "env"))
	checkNotAgents(t, "the server's environment", strings.Split(string(dump), "\n"), agentBin, py, node)
}

func checkNotAgents(t *testing.T, what string, env []string, agentBin, py, node string) {
	t.Helper()
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case name == "PYTHONPATH" || name == "NODE_OPTIONS":
			t.Errorf("%s has %s", what, kv)
		case strings.Contains(value, agentBin) || strings.Contains(value, py) || strings.Contains(value, node):
			t.Errorf("%s has the agent's %s", what, kv)
		}
	}
}

// waitFile returns the contents of file once it exists, failing the test
// after 20 s.
func waitFile(t *testing.T, file string) []byte {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(file)
		if err == nil {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear: %v", file, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopPID sends SIGTERM to pid and waits up to 30 s for its end (pidfd).
func stopPID(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // already gone
	}
	defer unix.Close(fd)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int((30 * time.Second).Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Errorf("pid %d did not exit within 30 s of SIGTERM; killing it", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return
	}
}

// personNS is a private mount namespace in which the person's places (the
// passwd home and /run/user) are fresh tmpfs mounts: the test can run the
// person's daemon at the person's place without PORTCULLIS_HOME and
// without touching this machine's. Commands enter it with nsenter.
type personNS struct {
	holder int    // a process that keeps the namespace alive
	home   string // the passwd home of this uid
	uid    int
}

func newPersonNS(t *testing.T) *personNS {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to make a private mount namespace with the person's places in it")
	}
	for _, tool := range []string{"unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (util-linux)", tool)
		}
	}
	u, err := user.Current()
	if err != nil || !filepath.IsAbs(u.HomeDir) {
		t.Skipf("no passwd home: %v", err)
	}
	ns := &personNS{home: u.HomeDir, uid: os.Getuid()}
	run := filepath.Join("/run/user", strconv.Itoa(ns.uid))
	script := `set -e; mount -t tmpfs -o mode=0755 tmpfs /run/user; mkdir -m 0700 "$1"; mount -t tmpfs -o mode=0700 tmpfs "$2"; echo ready; exec sleep 600`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "/bin/sh", "-c", script, "sh", run, ns.home)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	buf := make([]byte, 6)
	if n, _ := out.Read(buf); string(buf[:n]) != "ready\n" {
		_ = cmd.Wait()
		t.Skipf("cannot make a private mount namespace here: %s", stderr.String())
	}
	ns.holder = cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return ns
}

// command is name args… run inside the namespace with exactly env.
func (ns *personNS) command(env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(ns.holder), "-m", "--", name}, args...)...)
	cmd.Env = env
	return cmd
}

// file is the path of file (as seen inside the namespace) from outside it.
func (ns *personNS) file(file string) string {
	return filepath.Join("/proc", strconv.Itoa(ns.holder), "root", file)
}

// daemons returns the pids of the `… daemon` processes in the namespace.
func (ns *personNS) daemons(t *testing.T) []int {
	t.Helper()
	mine, err := os.Readlink("/proc/" + strconv.Itoa(ns.holder) + "/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	procs, err := harness.Processes()
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, p := range procs {
		dir := "/proc/" + strconv.Itoa(p.PID)
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		mnt, _ := os.Readlink(dir + "/ns/mnt")
		if p.State != "Z" && mnt == mine && bytes.HasSuffix(cmdline, []byte("\x00daemon\x00")) {
			found = append(found, p.PID)
		}
	}
	return found
}

// TestConnectReachesThePersonsDaemon: with the person's daemon running,
// started from a full session (XDG_RUNTIME_DIR, XDG_STATE_HOME, the session
// bus), a client that launches `portcullis connect` with only HOME PATH
// SHELL TERM USER LOGNAME (the MCP TypeScript SDK's default) reaches that
// daemon, and no second daemon starts. No PORTCULLIS_HOME anywhere: the
// person's places are those of the uid, in a private mount namespace.
func TestConnectReachesThePersonsDaemon(t *testing.T) {
	ns := newPersonNS(t)
	u, _ := user.Current()
	minimal := []string{"HOME=" + ns.home, "PATH=/usr/local/bin:/usr/bin:/bin", "SHELL=/bin/sh", "TERM=dumb", "USER=" + u.Username, "LOGNAME=" + u.Username}
	var full []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PORTCULLIS_") && !strings.HasPrefix(kv, "XDG_") {
			full = append(full, kv)
		}
	}
	full = append(full, "XDG_RUNTIME_DIR=/run/user/"+strconv.Itoa(ns.uid), "XDG_STATE_HOME="+filepath.Join(ns.home, "elsewhere-state"),
		"XDG_CONFIG_HOME="+filepath.Join(ns.home, "elsewhere-config"))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	add := ns.command(minimal, portcullis, "servers", "add", "echo", "--", echoBin)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("servers add: %v\n%s", err, out)
	}
	daemonOut := &harness.SyncBuffer{}
	d := ns.command(full, portcullis, "daemon")
	d.Stdout, d.Stderr = daemonOut, daemonOut
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = d.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = d.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("the person's daemon said:\n%s", daemonOut.String())
		}
	})
	t.Cleanup(func() { // before the person's daemon stops: any other daemon of the namespace
		for _, pid := range ns.daemons(t) {
			if pid != d.Process.Pid {
				stopPID(t, pid)
			}
		}
	})
	for {
		if err := ns.command(full, portcullis, "status").Run(); err == nil {
			break
		}
		select {
		case <-done:
			t.Fatalf("the person's daemon exited:\n%s", daemonOut.String())
		case <-ctx.Done():
			t.Fatalf("the person's daemon did not answer:\n%s", daemonOut.String())
		case <-time.After(100 * time.Millisecond):
		}
	}

	a := connectCmd(t, ns.command(append(minimal, "PORTCULLIS_START_WAIT=20s"), portcullis, "connect", "echo"), "")
	tools, err := a.Session.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list through the minimal environment: %v", err)
	}
	if pids := ns.daemons(t); len(pids) != 1 || pids[0] != d.Process.Pid {
		t.Errorf("daemons running: %v, want only the person's (pid %d)", pids, d.Process.Pid)
	}
	if _, err := os.Stat(ns.file(filepath.Join(ns.home, ".local", "state", "portcullis", "daemon.log"))); err == nil {
		t.Errorf("the shim started a daemon of its own (its log exists)")
	}
	// doctor, from the agent's environment, names that daemon.
	doc, err := ns.command(minimal, portcullis, "doctor").CombinedOutput()
	if err != nil || !bytes.Contains(doc, []byte("pid "+strconv.Itoa(d.Process.Pid)+" answers")) {
		t.Errorf("doctor from the minimal environment: %v\n%s", err, doc)
	}
	// A second daemon, from either environment, refuses to start and says
	// why: the running one (not a failure of its own, such as the keychain).
	for _, env := range [][]string{minimal, full} {
		second, err := ns.command(env, portcullis, "daemon").CombinedOutput()
		if err == nil || !bytes.Contains(second, []byte("already running")) || !bytes.Contains(second, []byte("pid "+strconv.Itoa(d.Process.Pid))) ||
			bytes.Contains(second, []byte("audit")) {
			t.Errorf("a second daemon: %v\n%s", err, second)
		}
	}
	// The run is the person's daemon's.
	st := ns.command(minimal, portcullis, "status")
	out, err := st.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("pid "+strconv.Itoa(d.Process.Pid))) {
		t.Errorf("status from the minimal environment: %v\n%s", err, out)
	}
}

// TestServerEnvironmentFixedBase: a daemon started from a shell whose
// environment has PYTHONPATH, NODE_OPTIONS and LD_PRELOAD passes none of
// them to a server (its configuration's env aside), and status names them
// as withheld.
func TestServerEnvironmentFixedBase(t *testing.T) {
	h := newHome(t)
	spyDir := t.TempDir()
	auditAddServer(t, h, "spy", config.Server{
		Command: "/bin/sh",
		Args:    []string{"-c", `env > "$SPY_DIR/env.tmp" && mv "$SPY_DIR/env.tmp" "$SPY_DIR/env"; exec "$ECHO_BIN"`},
		Env:     map[string]string{"SPY_DIR": spyDir, "ECHO_BIN": echoBin, "FROM_CONFIG": "yes"},
	}, "echo")
	const py, node = "/tmp/shell-pythonpath-34", "--require=/tmp/shell-hook-34.js"
	h.Env = append(h.Env, "PYTHONPATH="+py, "NODE_OPTIONS="+node, "LD_PRELOAD=")
	startDaemon(t, h)
	a := startRaw(t, h, "spy")
	a.handshake("1")
	dump := "\n" + string(waitFile(t, filepath.Join(spyDir, "env")))
	for _, name := range []string{"PYTHONPATH=", "NODE_OPTIONS=", "LD_PRELOAD="} {
		if strings.Contains(dump, "\n"+name) {
			t.Errorf("the server got %s from the daemon's environment", name)
		}
	}
	if !strings.Contains(dump, "\nFROM_CONFIG=yes\n") || !strings.Contains(dump, "\nHOME=") || !strings.Contains(dump, "\nPATH=") {
		t.Errorf("the server's environment lacks its configuration's env or the base:\n%s", dump)
	}
	rep, err := h.Status(testContext(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"PYTHONPATH", "NODE_OPTIONS", "LD_PRELOAD"} {
		if !slices.Contains(rep.Withheld, name) {
			t.Errorf("status withheldFromServers %v does not name %s", rep.Withheld, name)
		}
	}
}
