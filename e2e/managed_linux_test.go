//go:build linux

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/internal/harness"
)

// managedNS is a private mount namespace in which /etc/portcullis is a
// temporary directory of the test (bind-mounted over a fresh directory of
// an overlay on /etc): the daemon and the CLI, run in it, read the managed
// policy at its real path, while this machine's /etc is not touched.
type managedNS struct {
	dir    string // the directory that is /etc/portcullis in the namespace
	holder int    // a process that keeps the namespace alive
	home   *harness.Home
}

func newManagedNS(t *testing.T) *managedNS {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: the managed policy is root's file, in a private mount namespace")
	}
	for _, tool := range []string{"unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (util-linux)", tool)
		}
	}
	base, err := os.MkdirTemp("", "pcmng-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	must(t, os.Chmod(base, 0o755))
	ns := &managedNS{dir: filepath.Join(base, "managed")}
	for _, d := range []string{ns.dir, filepath.Join(base, "upper"), filepath.Join(base, "work")} {
		must(t, os.Mkdir(d, 0o755))
	}
	script := `set -e
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc
mkdir -p /etc/portcullis
mount --bind "$1/managed" /etc/portcullis
echo ready
exec sleep 600`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "/bin/sh", "-c", script, "sh", base)
	out, err := cmd.StdoutPipe()
	must(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	buf := make([]byte, 6)
	if n, _ := out.Read(buf); string(buf[:n]) != "ready\n" {
		_ = cmd.Wait()
		t.Skipf("cannot make a private mount namespace with an overlay on /etc here: %s", stderr.String())
	}
	ns.holder = cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if _, err := os.Stat(config.ManagedFile); err == nil {
		t.Fatalf("%s exists outside the namespace: this machine has a managed policy of its own", config.ManagedFile)
	}
	wrapper := filepath.Join(base, "portcullis-in-ns")
	must(t, os.WriteFile(wrapper, fmt.Appendf(nil, "#!/bin/sh\nexec nsenter --mount=/proc/%d/ns/mnt -- %s \"$@\"\n", ns.holder, portcullis), 0o755))
	ns.home, err = harness.NewHome(wrapper, t.TempDir())
	must(t, err)
	return ns
}

// setPolicy writes the managed policy file (as root, mode 0644).
func (ns *managedNS) setPolicy(t *testing.T, text string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(ns.dir, "managed.json")
	must(t, os.WriteFile(p, []byte(text), mode))
	must(t, os.Chmod(p, mode))
}

// inForce is the configuration in force, as the daemon gives it to the
// person's tools (control.OpConfig).
func inForce(t *testing.T, h *harness.Home) *config.Config {
	t.Helper()
	sock := filepath.Join(h.Dir, "run", "portcullis.sock")
	data, err := control.Call(sock, control.Hello{Op: control.OpConfig}, 10*time.Second)
	must(t, err)
	var st daemon.ConfigState
	must(t, json.Unmarshal(data, &st))
	cfg, err := config.Parse(st.Config, "in force")
	must(t, err)
	return cfg
}

// TestManagedFloors: a managed policy (approvalAuthentication always,
// sandbox standard, echo's tool echo always asks) holds the configuration
// in force at its floors whatever config.json says (written while no
// daemon ran, and edited by hand while it runs): status says what is
// managed and what of the file it overrides. The CLI's attempts to go
// below a floor (`servers policy … allow`, `servers edit --sandbox off`)
// are refused with the reason, with the daemon running and without it;
// an edit above the floors is made. A managed file others can write is
// ignored with a warning; a malformed one puts every tool behind the
// person.
func TestManagedFloors(t *testing.T) {
	ns := newManagedNS(t)
	h := ns.home
	ctx := testContext(t, 3*time.Minute)
	ns.setPolicy(t, `{"approvalAuthentication": "always", "sandbox": "standard", "alwaysAsk": ["echo/echo"]}`, 0o644)

	// Written as an editor would, with no daemon: everything below the
	// floors.
	low := &config.Config{
		Servers: map[string]config.Server{"echo": {Command: echoBin, Sandbox: config.SandboxOff,
			Tools: map[string]config.ToolPolicy{"echo": {Policy: config.PolicyAllow}, "add": {Policy: config.PolicyAllow}}}},
		Settings: config.Settings{ApprovalAuthentication: config.AuthOff},
	}
	must(t, config.Save(h.ConfigFile(), low))

	// Without a daemon the CLI checks the floors itself.
	r, err := h.Run(ctx, "servers", "policy", "echo", "echo", "allow")
	if err == nil || !strings.Contains(r.Stderr, "managed policy /etc/portcullis/managed.json") || !strings.Contains(r.Stderr, "always asks") {
		t.Fatalf("servers policy echo echo allow with no daemon: err %v, stderr %q; want a refusal naming the managed policy", err, r.Stderr)
	}

	startDaemon(t, h)
	checkFloors := func(when string) {
		t.Helper()
		cfg := inForce(t, h)
		echo := cfg.Servers["echo"]
		if cfg.Settings.ApprovalAuthentication != config.AuthAlways || echo.Sandbox != config.SandboxStandard ||
			echo.Policy("echo") != config.PolicyApprove {
			t.Fatalf("%s: in force approvalAuthentication %q, echo sandbox %q, echo %s; want always, standard, approve (always asks)",
				when, cfg.Settings.ApprovalAuthentication, echo.Sandbox, echo.Policy("echo"))
		}
	}
	checkFloors("at start")
	if got := inForce(t, h).Servers["echo"].Policy("add"); got != config.PolicyAllow {
		t.Errorf("at start: add (not managed) is %s in force, want allow as config.json says", got)
	}
	rep, err := h.Status(ctx)
	must(t, err)
	if rep.Managed == nil || rep.Managed.File != config.ManagedFile || len(rep.Managed.Floors) != 3 {
		t.Fatalf("status --json managed = %+v, want the file and its three floors", rep.Managed)
	}
	var fields []string
	for _, f := range rep.Managed.Overridden {
		fields = append(fields, f.Field)
	}
	if want := "settings.approvalAuthentication mcpServers.echo.sandbox mcpServers.echo.tools.echo.policy"; strings.Join(fields, " ") != want {
		t.Errorf("status --json managed.overridden = %v, want %s", fields, want)
	}
	if rep.Authentication.Mode != config.AuthAlways {
		t.Errorf("status: authentication mode %q, want always", rep.Authentication.Mode)
	}
	r, err = h.Run(ctx, "status")
	must(t, err)
	for _, want := range []string{
		"Managed policy (/etc/portcullis/managed.json): approvalAuthentication at least always; every server's sandbox at least standard; always ask: echo/echo",
		"managed   settings.approvalAuthentication is off: the managed policy's floor always is in force",
		"managed   echo: sandbox is off: the managed policy's floor standard is in force",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("status does not say %q:\n%s", want, r.Stdout)
		}
	}

	// The CLI, through the daemon.
	for _, args := range [][]string{
		{"servers", "policy", "echo", "echo", "allow"},
		{"servers", "edit", "echo", "--sandbox", "off"},
	} {
		r, err := h.Run(ctx, args...)
		if err == nil || !strings.Contains(r.Stderr, "refused by the managed policy") || !strings.Contains(r.Stderr, "nothing was changed") {
			t.Errorf("%s: err %v, stderr %q; want a refusal by the managed policy", strings.Join(args, " "), err, r.Stderr)
		}
	}
	checkFloors("after the CLI's attempts")
	// Above the floors, the person's edits are made.
	if r, err := h.Run(ctx, "servers", "policy", "echo", "add", "approve"); err != nil {
		t.Fatalf("servers policy echo add approve: %v %s", err, r.Stderr)
	}
	if got := inForce(t, h).Servers["echo"].Policy("add"); got != config.PolicyApprove {
		t.Errorf("after servers policy echo add approve: add is %s in force", got)
	}
	// The file the daemon wrote holds the floors now.
	if c, err := config.Load(h.ConfigFile()); err != nil || c.Settings.ApprovalAuthentication != config.AuthAlways {
		t.Errorf("config.json after the CLI's edit: %v, approvalAuthentication %q", err, c.Settings.ApprovalAuthentication)
	}

	// A hand edit while the daemon runs: below the floors again (and add
	// as it is in force: allowing it would widen trust, held apart).
	low.Servers["echo"].Tools["add"] = config.ToolPolicy{Policy: config.PolicyApprove}
	must(t, config.Save(h.ConfigFile(), low))
	deadline := time.Now().Add(20 * time.Second)
	for {
		rep, err := h.Status(ctx)
		must(t, err)
		if rep.Managed != nil && len(rep.Managed.Overridden) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status does not show the hand edit's values below the floors within 20 s: %+v", rep.Managed)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkFloors("after a hand edit")
	if p := pendingChange(t, h); p != nil {
		t.Errorf("a hand edit below the floors is held as change %+v; want nothing held (the floors are in force)", p)
	}

	// A managed file others may write is not trusted.
	ns.setPolicy(t, `{}`, 0o666)
	rep, err = h.Status(ctx)
	must(t, err)
	if rep.Managed == nil || !strings.Contains(rep.Managed.Ignored, "writable by its group or others") || rep.Managed.Policy != nil {
		t.Errorf("managed file of mode 0666: status managed = %+v, want it ignored", rep.Managed)
	}
	r, err = h.Run(ctx, "status")
	must(t, err)
	if !strings.Contains(r.Stdout, "Managed policy: /etc/portcullis/managed.json is IGNORED") {
		t.Errorf("status does not warn of the ignored file:\n%s", r.Stdout)
	}

	// A malformed one: the daemon runs, every tool asks, approvals need
	// the system's authentication.
	ns.setPolicy(t, `{"approvalAuthentication": "always",}`, 0o644)
	rep, err = h.Status(ctx)
	must(t, err)
	if rep.Managed == nil || rep.Managed.Error == "" {
		t.Fatalf("malformed managed file: status managed = %+v, want the error", rep.Managed)
	}
	cfg := inForce(t, h)
	if cfg.Servers["echo"].Policy("add") != config.PolicyApprove || cfg.Settings.ApprovalAuthentication != config.AuthAlways {
		t.Errorf("malformed managed file: add %s, approvalAuthentication %q in force; want approve, always", cfg.Servers["echo"].Policy("add"), cfg.Settings.ApprovalAuthentication)
	}
	r, err = h.Run(ctx, "status")
	must(t, err)
	if !strings.Contains(r.Stdout, "is MALFORMED; until it is fixed every tool asks") {
		t.Errorf("status does not say the managed file is malformed:\n%s", r.Stdout)
	}
}
