package e2e

// Issue 15, item 1 (second half): a server with --sandbox standard runs
// with the data directory (configuration, audit log, control socket)
// hidden: it finds an empty directory (bubblewrap mounts an empty tmpfs
// over it), cannot read config.json nor reach the socket, and status says
// what confines it.

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/internal/front"
	"github.com/portcullis/portcullis/platform"
)

func TestContainSandboxHidesTheDataDirectory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the sandbox that runs is Linux's (macOS: sandbox-exec, not yet run)")
	}
	if _, err := platform.NewSandbox(platform.SandboxStandard); err != nil {
		t.Skipf("no sandbox on this machine: %v", err)
	}
	h := newHome(t)
	out := t.TempDir()
	script := `ls -A "$PC_HOME" > "$OUT/ls" 2>&1
cat "$PC_HOME/config.json" > "$OUT/config" 2>&1; echo "exit=$?" >> "$OUT/config"
test -S "$PC_HOME/run/portcullis.sock" && echo socket-visible > "$OUT/socket" || echo socket-hidden > "$OUT/socket"
exec "$ECHO_BIN"`
	auditAddServer(t, h, "boxed", config.Server{Command: "/bin/sh", Args: []string{"-c", script},
		Env: map[string]string{"PC_HOME": h.Dir, "OUT": out, "ECHO_BIN": echoBin}, Sandbox: config.SandboxStandard}, "echo")
	startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("boxed"), "")
	if _, err := a.Session.ListTools(testContext(t, 30*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if got := read("ls"); got != "" {
		t.Errorf("the server lists the data directory as %q, want it empty", got)
	}
	if got := read("config"); strings.Contains(got, "mcpServers") || !strings.Contains(got, "exit=1") {
		t.Errorf("the server read config.json: %q", got)
	}
	if got := read("socket"); got != "socket-hidden" {
		t.Errorf("the control socket: %s", got)
	}
	run := waitRun(t, h, a.PID(), buildWait, "ready", readyOn(""))
	if !strings.HasPrefix(run.Sandbox, "standard: hides ") || !strings.Contains(run.Sandbox, h.Dir) {
		t.Errorf("status says the sandbox is %q, want standard hiding %s", run.Sandbox, h.Dir)
	}
	// What Portcullis measured and observed is the server, not
	// bubblewrap, which stays as its parent.
	bwrap, _ := exec.LookPath("bwrap")
	for _, o := range run.Record.Observed {
		if o.Exe == portcullis || o.Exe == front.AppPath(portcullis) || o.Exe == bwrap {
			t.Errorf("the launcher is in the observed tree: %+v", run.Record.Observed)
		}
	}
	if len(run.Record.Observed) == 0 || run.Record.Observed[0].Exe != "/bin/sh" && run.Record.Observed[0].Exe != "/usr/bin/dash" && run.Record.Observed[0].Exe != echoBin {
		t.Errorf("the observed tree does not start with the server: %+v", run.Record.Observed)
	}
	plain, err := h.Run(testContext(t, 30*time.Second), "status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plain.Stdout, "sandbox   standard: hides") {
		t.Errorf("status does not show the sandbox:\n%s", plain.Stdout)
	}
	// And which cgroup holds it, or why none does.
	if !strings.HasSuffix(run.Cgroup, "/portcullis-"+string(run.Epoch)+" (killed whole when the epoch ends)") && !strings.HasPrefix(run.Cgroup, "none — ") {
		t.Errorf("status says the cgroup is %q", run.Cgroup)
	}
	if !strings.Contains(plain.Stdout, "cgroup    "+run.Cgroup) {
		t.Errorf("status does not show the cgroup %q:\n%s", run.Cgroup, plain.Stdout)
	}
}

// TestContainSandboxRefusesAHiddenCwd: a server whose working directory lies
// in the data directory, which the default sandbox hides, is not started
// there (its cwd would still lead into the hidden directory): the agent's
// refusal carries the sandbox's reason, naming both directories and what
// to change.
func TestContainSandboxRefusesAHiddenCwd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the sandbox that runs is Linux's")
	}
	if _, err := platform.NewSandbox(""); err != nil {
		t.Skipf("no sandbox on this machine: %v", err)
	}
	h := newHome(t)
	cwd := filepath.Join(h.Dir, "work")
	if err := os.Mkdir(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	auditAddServer(t, h, "inside", config.Server{Command: echoBin, Cwd: cwd}, "echo")
	startDaemon(t, h)
	a := startRaw(t, h, "inside")
	m := a.call("1", "initialize", map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw-agent", "version": "1.0.0"},
	}, 30*time.Second)
	m.refusal(t)
	want := "the server's working directory " + cwd + " is inside " + h.Dir + ", which the sandbox hides"
	if !strings.Contains(string(m.Raw), want) || !strings.Contains(string(m.Raw), "--sandbox off") {
		t.Errorf("the refusal %.800s does not say %q and how to change it", m.Raw, want)
	}
}
