//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/internal/front"
	"github.com/portcullis/portcullis/internal/harness"
)

// The unprivileged user the polkit test runs Portcullis as: polkit
// authorizes root without asking, so the person must be someone else.
const polkitTestUID = 65534

const polkitTestPassword = "correct horse battery staple"

// polkitSetup is a private polkit: a system bus (dbus-daemon) and polkitd
// in a mount namespace of their own, in which /usr/share/polkit-1/actions
// holds only the project's action, /etc/pam.d/polkit-1 checks
// polkitTestPassword (pam_exec), and /run/dbus holds the private bus's
// socket at the standard path (the setuid polkit-agent-helper-1 ignores
// DBUS_SYSTEM_BUS_ADDRESS). Portcullis runs in that namespace as
// polkitTestUID through a wrapper (nsenter), so the daemon's pkcheck, the
// CLI's pkttyagent and its helper all talk to this polkit.
type polkitSetup struct {
	dir    string // world-readable: the wrapper, the binaries, the home
	holder int    // pid of the dbus-daemon whose mount namespace is used
	home   *harness.Home
}

func newPolkitSetup(t *testing.T) *polkitSetup {
	t.Helper()
	s := newPolkitBus(t, true)
	// Portcullis as the unprivileged user, in the namespace.
	bin := filepath.Join(s.dir, "portcullis")
	copyExec(t, portcullis, bin)
	// The full program goes beside it, as make install puts it.
	copyExec(t, front.AppPath(portcullis), front.AppPath(bin))
	s.asPerson(t, bin, config.AuthAlways)
	return s
}

// newPolkitBus starts the private system bus and polkitd of a polkitSetup,
// with Portcullis's action in their /usr/share/polkit-1/actions when
// withAction, else with that directory empty (and writable by root in the
// namespace, as the real one is). s.home is set by asPerson.
func newPolkitBus(t *testing.T, withAction bool) *polkitSetup {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("the polkit test needs root (a mount namespace, polkitd, a second user)")
	}
	for _, p := range []string{"/usr/lib/polkit-1/polkitd", "/usr/lib/polkit-1/polkit-agent-helper-1"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("polkitd is not installed (%v)", err)
		}
	}
	for _, c := range []string{"dbus-daemon", "pkcheck", "pkttyagent", "pkaction", "unshare", "nsenter", "setsid"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("polkitd is installed but %s is not: %v", c, err)
		}
	}
	pam := "/usr/lib/x86_64-linux-gnu/security/pam_exec.so"
	if m, _ := filepath.Glob("/usr/lib/*/security/pam_exec.so"); len(m) > 0 {
		pam = m[0]
	} else if m, _ := filepath.Glob("/lib/*/security/pam_exec.so"); len(m) > 0 {
		pam = m[0]
	}

	dir, err := os.MkdirTemp("", "pcpk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(text), mode))
		return p
	}
	must(t, os.MkdirAll(filepath.Join(dir, "actions"), 0o755))
	if withAction {
		policy, err := os.ReadFile(filepath.Join(repoRoot, "assets", "polkit", "dev.portcullis.approve.policy"))
		must(t, err)
		write("actions/dev.portcullis.approve.policy", string(policy), 0o644)
	}
	check := write("check-password", "#!/bin/sh\n[ \"$(tr -d '\\000')\" = '"+polkitTestPassword+"' ]\n", 0o755)
	write("pam.d/polkit-1", "auth required "+pam+" expose_authtok quiet "+check+"\naccount required pam_permit.so\npassword required pam_deny.so\nsession required pam_permit.so\n", 0o644)
	write("pam.d/other", "auth required pam_deny.so\naccount required pam_deny.so\npassword required pam_deny.so\nsession required pam_deny.so\n", 0o644)
	busConf := write("bus.conf", `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=/run/dbus/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`, 0o644)

	// The holder: a shell that mounts, then becomes the bus.
	mounts := fmt.Sprintf(`set -e
mount --bind %[1]s/actions /usr/share/polkit-1/actions
mount --bind %[1]s/pam.d /etc/pam.d
if [ -d /run/dbus ]; then mount -t tmpfs tmpfs /run/dbus; else mount -t tmpfs tmpfs /run; mkdir /run/dbus; fi
exec dbus-daemon --config-file=%[2]s --nofork --print-address`, dir, busConf)
	bus := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", mounts)
	var busErr bytes.Buffer
	bus.Stderr = &busErr
	out, err := bus.StdoutPipe()
	must(t, err)
	must(t, bus.Start())
	t.Cleanup(func() { _ = bus.Process.Kill(); _ = bus.Wait() })
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- line
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case a := <-addr:
		if !strings.HasPrefix(a, "unix:") {
			t.Fatalf("the private system bus did not start (%q): %s", a, busErr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the private system bus printed no address within 20 s: %s", busErr.String())
	}
	s := &polkitSetup{dir: dir, holder: bus.Process.Pid}

	pk := s.inNS("/usr/lib/polkit-1/polkitd", "--no-debug")
	var pkOut harness.SyncBuffer
	pk.Stdout, pk.Stderr = &pkOut, &pkOut
	must(t, pk.Start())
	t.Cleanup(func() { _ = pk.Process.Kill(); _ = pk.Wait() })
	// polkitd answers once it owns its name and has read the actions.
	s.waitAction(t, withAction, pkOut.String)
	return s
}

// waitAction waits up to 20 s for the private polkitd to answer pkaction:
// for Portcullis's action when action, else at all.
func (s *polkitSetup) waitAction(t *testing.T, action bool, log func() string) {
	t.Helper()
	args := []string{}
	if action {
		args = []string{"--action-id", "dev.portcullis.approve"}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		o, err := s.inNS("pkaction", args...).CombinedOutput()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the private polkitd does not answer pkaction %v within 20 s: %v %s; polkitd: %s", args, err, o, log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// asPerson makes s.home: a data directory of polkitTestUID whose commands
// run bin (a portcullis front with portcullis-app beside it) as that user in
// the namespace, configured with the echo server and
// settings.approvalAuthentication = setting ("" = absent).
func (s *polkitSetup) asPerson(t *testing.T, bin, setting string) {
	t.Helper()
	dir := s.dir
	copyExec(t, echoBin, filepath.Join(dir, "echo"))
	wrapper := filepath.Join(dir, "portcullis-as-person")
	must(t, os.WriteFile(wrapper, []byte(fmt.Sprintf("#!/bin/sh\nexec nsenter --mount=/proc/%d/ns/mnt -S %d -G %d -- %s \"$@\"\n", s.holder, polkitTestUID, polkitTestUID, bin)), 0o755))
	homeDir := filepath.Join(dir, "home")
	h, err := harness.NewHome(wrapper, homeDir)
	must(t, err)
	off := false
	cfg := &config.Config{
		Servers:  map[string]config.Server{"echo": {Command: filepath.Join(dir, "echo")}},
		Settings: config.Settings{ApprovalAuthentication: setting, AuditSigning: &off},
	}
	must(t, config.Save(h.ConfigFile(), cfg))
	must(t, filepath.Walk(homeDir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, polkitTestUID, polkitTestUID)
	}))
	s.home = h
}

// inNS is a command run (as root) in the private polkit's mount namespace.
func (s *polkitSetup) inNS(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{fmt.Sprintf("--mount=/proc/%d/ns/mnt", s.holder), "--", name}, args...)...)
}

func copyExec(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to, b, 0o755))
}

// approveAtTerminal runs `portcullis approve id` as the person at a
// pseudo-terminal of their own (a new session, outside this test's process
// tree, as harness.RunAtTerminal does), and answers polkit's password
// prompt that appears there (pkttyagent): with answer and Enter, or, when
// answer is "", with ^C. It returns what the terminal showed and the exit
// code.
func (s *polkitSetup) approveAtTerminal(t *testing.T, id, answer string) (string, int) {
	t.Helper()
	return s.atTerminal(t, answer, "approve", id)
}

// atTerminal is approveAtTerminal for `portcullis ARGS…`.
func (s *polkitSetup) atTerminal(t *testing.T, answer string, args ...string) (string, int) {
	t.Helper()
	controller, tty := openTestPTY(t)
	defer controller.Close()
	code := filepath.Join(s.dir, "code-"+strings.Join(args, "-"))
	// The trap keeps the shell (and the exit code it records) alive when
	// ^C reaches the terminal's foreground group.
	script := `trap 'true' INT; "$0" "$@"; echo $? > "$PORTCULLIS_TEST_CODE"`
	cmd := exec.Command("setsid", append([]string{"-f", "-c", "sh", "-c", script, s.home.Bin}, args...)...)
	cmd.Env = append(s.home.Environ(), "PORTCULLIS_TEST_CODE="+code)
	cmd.Dir = s.dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	must(t, cmd.Run())
	tty.Close()

	var mu sync.Mutex
	var shown bytes.Buffer
	more := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := controller.Read(buf)
			mu.Lock()
			shown.Write(buf[:n])
			mu.Unlock()
			select {
			case more <- struct{}{}:
			default:
			}
			if err != nil {
				return // EIO once every copy of the terminal is closed
			}
		}
	}()
	text := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.ReplaceAll(shown.String(), "\r\n", "\n")
	}
	timeout := time.After(60 * time.Second)
	for !strings.Contains(text(), "Password: ") {
		select {
		case <-more:
		case <-done:
			t.Fatalf("the terminal closed before polkit asked for a password: %q", text())
		case <-timeout:
			t.Fatalf("polkit asked for no password within 60 s; the terminal shows %q", text())
		}
	}
	// pkttyagent prints the prompt, then turns echo off and flushes the
	// input: answer only once echo is off, as a person's typing would.
	deadline := time.Now().Add(10 * time.Second)
	for {
		tio, err := unix.IoctlGetTermios(int(controller.Fd()), unix.TCGETS)
		must(t, err)
		if tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pkttyagent did not turn echo off within 10 s of its prompt")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if answer == "" {
		_, err := controller.Write([]byte{0x03}) // ^C
		must(t, err)
	} else {
		_, err := controller.Write([]byte(answer + "\n"))
		must(t, err)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("portcullis approve did not end within 60 s of the answer; the terminal shows %q", text())
	}
	b, err := os.ReadFile(code)
	if err != nil {
		t.Fatalf("portcullis approve left no exit code (%v); the terminal shows %q", err, text())
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	must(t, err)
	return text(), n
}

func openTestPTY(t *testing.T) (controller, tty *os.File) {
	t.Helper()
	controller, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	must(t, unix.IoctlSetPointerInt(int(controller.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(controller.Fd()), unix.TIOCGPTN)
	must(t, err)
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	must(t, err)
	return controller, tty
}

// TestPolkitApproval: with settings.approvalAuthentication = always, the
// person's `portcullis approve` at a terminal of their own registers
// polkit's terminal agent and the daemon asks polkit (pkcheck) before it
// grants: the right password at the prompt grants and the call runs; a
// wrong password, and ^C at the prompt, deny the request, its call gets
// the denial, and the audit log records the refusal. Real polkitd,
// pkttyagent, polkit-agent-helper-1 and PAM, in a private setup.
func TestPolkitApproval(t *testing.T) {
	s := newPolkitSetup(t)
	h := s.home
	startDaemon(t, h)
	st, err := h.Status(testContext(t, 30*time.Second))
	must(t, err)
	if a := st.Authentication; a.Mode != config.AuthAlways || a.Mechanism != "polkit" || !a.Available || a.Note != "" {
		t.Fatalf("status authentication %+v, want always with polkit available", a)
	}
	t.Run("password grants", func(t *testing.T) {
		ag := connectCmd(t, h.ConnectCommand("echo"), "")
		pending := asyncCall(t, ag.Session, "echo", map[string]any{"message": "authenticated"})
		req := waitApproval(t, h, "echo", forTool("echo", ""))
		shown, code := s.approveAtTerminal(t, string(req.ID), polkitTestPassword)
		for _, w := range []string{`settings.approvalAuthentication is "always": polkit asks you to authenticate`, "AUTHENTICATING FOR dev.portcullis.approve",
			"Portcullis: authenticate to approve a request of an AI agent", "AUTHENTICATION COMPLETE", string("Approved " + req.ID)} {
			if !strings.Contains(shown, w) {
				t.Errorf("the terminal lacks %q: %q", w, shown)
			}
		}
		if code != 0 {
			t.Errorf("approve exited %d: %q", code, shown)
		}
		if got := okText(t, await(t, pending)); got != "authenticated" {
			t.Errorf("echo answered %q", got)
		}
	})

	for _, tc := range []struct{ name, answer, want string }{
		{"wrong password denies", "not the password", "AUTHENTICATION FAILED"},
		{"cancel denies", "", "Authenticating as: nobody\nPassword: "}, // ^C is not echoed: echo is off
	} {
		t.Run(tc.name, func(t *testing.T) {
			ag := connectCmd(t, h.ConnectCommand("echo"), "") // a new agent run: no grant yet
			msg := "must not run: " + tc.name
			pending := asyncCall(t, ag.Session, "echo", map[string]any{"message": msg})
			req := waitApproval(t, h, "echo", forTool("echo", ""))
			shown, code := s.approveAtTerminal(t, string(req.ID), tc.answer)
			for _, w := range []string{tc.want, "not approved: polkit did not authenticate you (authentication failed: pkcheck: Not authorized.)", string("request " + req.ID + " was denied and nothing was granted")} {
				if !strings.Contains(shown, w) {
					t.Errorf("the terminal lacks %q: %q", w, shown)
				}
			}
			if code != 1 {
				t.Errorf("approve exited %d, want 1: %q", code, shown)
			}
			r := await(t, pending)
			if r.err == nil && !r.res.IsError {
				t.Fatalf("the call ran without authentication: %q", resultText(r.res))
			}
			if r.err == nil || !strings.Contains(r.err.Error(), "denied") {
				t.Errorf("the call ended with %v, want an approval denial", r.err)
			}
			var found bool
			for _, e := range auditEvents(t, h) {
				if e.Type != audit.TypeDecisionRefused {
					continue
				}
				var f audit.DecisionRefused
				must(t, e.DecodeFields(&f))
				if f.Request == req.ID && f.Refusal == "authentication" && strings.Contains(f.Reason, "polkit did not authenticate you") && f.PID > 0 {
					found = true
				}
			}
			if !found {
				t.Errorf("the audit log has no authentication refusal for %s", req.ID)
			}
		})
	}

	// An edit of config.json from outside that turns the setting off is
	// held; confirming it needs the password too, or code that escaped
	// the process trees could turn it off and then approve.
	t.Run("lowering the setting needs the password", func(t *testing.T) {
		b, err := os.ReadFile(h.ConfigFile())
		must(t, err)
		edited := strings.Replace(string(b), `"approvalAuthentication": "always"`, `"approvalAuthentication": "off"`, 1)
		if edited == string(b) {
			t.Fatalf("config.json has no approvalAuthentication always: %s", b)
		}
		must(t, os.WriteFile(h.ConfigFile(), []byte(edited), 0o600)) // in place: it stays the person's file
		var id string
		deadline := time.Now().Add(20 * time.Second)
		for id == "" {
			st, err := h.Status(testContext(t, 30*time.Second))
			must(t, err)
			if p := st.PendingChange; p != nil {
				if len(p.Held) != 1 || p.Held[0].Kind != config.WidenApprovalAuthentication || st.Authentication.Mode != config.AuthAlways {
					t.Fatalf("held %+v with mode %s; want the lowering held and always in force", p.Held, st.Authentication.Mode)
				}
				id = p.ID
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the edit was not held within 20 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		shown, code := s.atTerminal(t, "", "changes", "confirm", id)
		if code != 1 || !strings.Contains(shown, "not done: polkit did not confirm it is you") || !strings.Contains(shown, "nothing was changed") {
			t.Errorf("confirm with ^C exited %d: %q", code, shown)
		}
		st, err := h.Status(testContext(t, 30*time.Second))
		must(t, err)
		if st.PendingChange == nil || st.PendingChange.ID != id || st.Authentication.Mode != config.AuthAlways {
			t.Fatalf("after a cancelled confirmation: pending %+v, mode %s; want it still held and always in force", st.PendingChange, st.Authentication.Mode)
		}
		shown, code = s.atTerminal(t, polkitTestPassword, "changes", "confirm", id)
		if code != 0 || !strings.Contains(shown, "AUTHENTICATION COMPLETE") || !strings.Contains(shown, "Confirmed "+id) {
			t.Errorf("confirm with the password exited %d: %q", code, shown)
		}
		st, err = h.Status(testContext(t, 30*time.Second))
		must(t, err)
		if st.PendingChange != nil || st.Authentication.Mode != config.AuthOff {
			t.Errorf("after the confirmation: pending %+v, mode %s; want off in force", st.PendingChange, st.Authentication.Mode)
		}
	})
}

// polkitAuthJSON is the authentication of `status --json`, as a reader of
// the JSON sees it.
type polkitAuthJSON struct {
	Setting         string `json:"setting"`
	Mode            string `json:"mode"`
	Mechanism       string `json:"mechanism"`
	Available       bool   `json:"available"`
	OSAuthenticated bool   `json:"osAuthenticated"`
	Reason          string `json:"reason"`
	Unavailable     string `json:"unavailable"`
	Meaning         string `json:"meaning"`
	Note            string `json:"note"`
}

// TestPolkitInstall: `make install PREFIX=…` where polkitd is present.
// With the action kept inside PREFIX (POLKIT_ACTIONS_DIR=), make prints the
// sudo command that installs it, and the daemon's `status --json` reports
// approvals not OS-authenticated, why (action_not_installed) and that
// command; `status` and `doctor` say the same. Then `make install` run as
// root puts the action where polkitd reads it (here the private
// namespace's /usr/share/polkit-1/actions, never the machine's), and the
// same daemon reports the default cli in force, OS-authenticated by polkit.
// Real polkitd and make; the installed binaries run as an unprivileged
// user.
func TestPolkitInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("make is not installed: %v", err)
	}
	s := newPolkitBus(t, false)
	const machineAction = "/usr/share/polkit-1/actions/dev.portcullis.approve.policy"
	_, hostErr := os.Stat(machineAction)
	prefix := filepath.Join(s.dir, "prefix")
	makeInstall := func(vars ...string) string {
		t.Helper()
		ctx := testContext(t, 5*time.Minute)
		args := append([]string{fmt.Sprintf("--mount=/proc/%d/ns/mnt", s.holder), "--", "make", "-C", repoRoot, "--no-print-directory", "install",
			"INSTALL_BUILD=headless", "PREFIX=" + prefix}, vars...)
		out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("make install %v: %v\n%s", vars, err, out)
		}
		return string(out)
	}
	shipped := filepath.Join(prefix, "share", "polkit-1", "actions", "dev.portcullis.approve.policy")
	installCmd := "sudo install -m 0644 " + shipped + " /usr/share/polkit-1/actions/"

	// The action only inside PREFIX.
	out := makeInstall("POLKIT_ACTIONS_DIR=")
	if !strings.Contains(out, "approvals are not OS-authenticated until it is in /usr/share/polkit-1/actions: "+installCmd) {
		t.Errorf("make install with the action inside PREFIX does not say how to install it (%q):\n%s", installCmd, out)
	}
	if _, err := os.Stat(shipped); err != nil {
		t.Fatalf("make install did not put the action in PREFIX: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(s.dir, "actions")); len(entries) != 0 {
		t.Fatalf("make install with POLKIT_ACTIONS_DIR= wrote where polkitd reads: %v", entries)
	}
	s.asPerson(t, filepath.Join(prefix, "bin", "portcullis"), "")
	h := s.home
	startDaemon(t, h)
	statusJSON := func() polkitAuthJSON {
		t.Helper()
		r, err := h.Run(testContext(t, 30*time.Second), "status", "--json")
		if err != nil {
			t.Fatalf("status --json: %v", err)
		}
		var rep struct {
			Authentication *polkitAuthJSON `json:"authentication"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || rep.Authentication == nil {
			t.Fatalf("status --json: %v, no authentication in %s", err, r.Stdout)
		}
		return *rep.Authentication
	}
	a := statusJSON()
	if a.Setting != "" || a.Mode != config.AuthOff || a.Mechanism != "polkit" || a.Available || a.OSAuthenticated || a.Reason != "action_not_installed" ||
		!strings.Contains(a.Unavailable, "polkit does not know the action dev.portcullis.approve") || !strings.Contains(a.Unavailable, installCmd) ||
		!strings.Contains(a.Meaning, "Approvals are not OS-authenticated") || !strings.Contains(a.Meaning, "resist only code that stays in the process trees Portcullis sees") {
		t.Errorf("status --json authentication without the action installed: %+v; want off, not OS-authenticated, reason action_not_installed, with %q", a, installCmd)
	}
	r, err := h.Run(testContext(t, 30*time.Second), "status")
	must(t, err)
	for _, w := range []string{"Approval authentication: off (the default), NOT OS-authenticated: polkit's action dev.portcullis.approve is not installed", installCmd} {
		if !strings.Contains(r.Stdout, w) {
			t.Errorf("status lacks %q:\n%s", w, r.Stdout)
		}
	}
	r, _ = h.Run(testContext(t, 30*time.Second), "doctor")
	if !strings.Contains(r.Stdout, "Problem: approvals are not OS-authenticated: polkit does not know the action") || !strings.Contains(r.Stdout, installCmd) {
		t.Errorf("doctor does not say approvals are not OS-authenticated, with %q:\n%s", installCmd, r.Stdout)
	}

	// make install where it can write (root here, in the namespace).
	out = makeInstall()
	if !strings.Contains(out, "installed the polkit action into /usr/share/polkit-1/actions") {
		t.Errorf("make install as root did not install the action where polkitd reads:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "actions", "dev.portcullis.approve.policy")); err != nil {
		t.Fatalf("the action is not where polkitd reads: %v", err)
	}
	if _, err := os.Stat(machineAction); (err == nil) != (hostErr == nil) {
		t.Fatalf("the machine's %s changed (before: %v, after: %v): make install ran outside the namespace", machineAction, hostErr, err)
	}
	s.waitAction(t, true, func() string { return "" })
	deadline := time.Now().Add(30 * time.Second)
	for a = statusJSON(); !a.OSAuthenticated && time.Now().Before(deadline); a = statusJSON() {
		time.Sleep(200 * time.Millisecond)
	}
	if a.Setting != "" || a.Mode != "cli" || a.Mechanism != "polkit" || !a.Available || !a.OSAuthenticated || a.Reason != "" || a.Unavailable != "" || a.Note != "" ||
		!strings.Contains(a.Meaning, "every approval and every trust-widening change made with the portcullis command asks polkit to authenticate you") {
		t.Fatalf("status --json authentication with the action installed: %+v; want the default cli, OS-authenticated by polkit", a)
	}
	r, err = h.Run(testContext(t, 30*time.Second), "status")
	must(t, err)
	if !strings.Contains(r.Stdout, "Approval authentication: cli (the default), OS-authenticated by polkit") {
		t.Errorf("status with the action installed:\n%s", r.Stdout)
	}

}

// TestPolkitEscapeByDefault: with settings.approvalAuthentication absent
// and polkit able to authenticate (the action installed), the agent's
// escaped one-liner — `setsid -f script -qec 'portcullis approve ID'`
// started by the agent, so outside its tree, at a terminal script fakes,
// typing guessed passwords — neither approves a card that carries no
// credential nor confirms a held widening of config.json (a tool allowed):
// polkit asks for the person's password, the guess fails, the request is
// denied and the change stays held.
func TestPolkitEscapeByDefault(t *testing.T) {
	s := newPolkitBus(t, true)
	bin := filepath.Join(s.dir, "portcullis")
	copyExec(t, portcullis, bin)
	copyExec(t, front.AppPath(portcullis), front.AppPath(bin))
	s.asPerson(t, bin, "")
	h := s.home
	startDaemon(t, h)
	st, err := h.Status(testContext(t, 30*time.Second))
	must(t, err)
	if st.Authentication.Mode != "cli" {
		t.Errorf("mode in force %q with settings.approvalAuthentication absent and polkit available, want cli", st.Authentication.Mode)
	}

	ag := connectCmd(t, h.ConnectCommand("echo"), "")
	pending := asyncCall(t, ag.Session, "echo", map[string]any{"message": "must not run"})
	req := waitApproval(t, h, "echo", forTool("echo", ""))
	if len(req.Card.CredentialScope) != 0 {
		t.Fatalf("the card carries credentials %v; the escape is about cards without", req.Card.CredentialScope)
	}
	shown, code := s.escapedOneLiner(t, "approve", string(req.ID))
	for _, w := range []string{"AUTHENTICATING FOR dev.portcullis.approve", "AUTHENTICATION FAILED", "not approved: polkit did not authenticate you", string("request " + req.ID + " was denied and nothing was granted"), `settings.approvalAuthentication is "cli"`} {
		if !strings.Contains(shown, w) {
			t.Errorf("the escaped approve's terminal lacks %q: %q", w, shown)
		}
	}
	if code != 1 {
		t.Errorf("the escaped approve exited %d, want 1", code)
	}
	res := awaitWithin(t, pending, 30*time.Second, "the call after the escaped approval")
	if res.err == nil && !res.res.IsError {
		t.Fatalf("the escaped one-liner approved the call: %q", resultText(res.res))
	}
	if res.err == nil || !strings.Contains(res.err.Error(), "denied") {
		t.Errorf("the call ended with %v, want an approval denial", res.err)
	}

	// A widening edit of config.json (a tool allowed: no credential in it)
	// is held; the escaped `changes confirm` cannot confirm it.
	cfg, err := config.Load(h.ConfigFile())
	must(t, err)
	echo := cfg.Servers["echo"]
	echo.Tools = map[string]config.ToolPolicy{"echo": {Policy: config.PolicyAllow}}
	cfg.Servers["echo"] = echo
	b, err := json.MarshalIndent(cfg, "", "  ")
	must(t, err)
	must(t, os.WriteFile(h.ConfigFile(), b, 0o600)) // in place: it stays the person's file
	var change string
	deadline := time.Now().Add(20 * time.Second)
	for change == "" {
		st, err := h.Status(testContext(t, 30*time.Second))
		must(t, err)
		if p := st.PendingChange; p != nil {
			if len(p.Held) != 1 || p.Held[0].Kind != config.WidenPolicy {
				t.Fatalf("held %+v, want the tool allowed", p.Held)
			}
			change = p.ID
		} else if time.Now().After(deadline) {
			t.Fatal("the edit was not held within 20 s")
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	shown, code = s.escapedOneLiner(t, "changes", "confirm", change)
	if code != 1 || !strings.Contains(shown, "AUTHENTICATION FAILED") || !strings.Contains(shown, "not done: polkit did not confirm it is you") || !strings.Contains(shown, "nothing was changed") {
		t.Errorf("the escaped changes confirm exited %d: %q", code, shown)
	}
	st, err = h.Status(testContext(t, 30*time.Second))
	must(t, err)
	if st.PendingChange == nil || st.PendingChange.ID != change {
		t.Errorf("after the escaped confirmation the change is %+v, want %s still held", st.PendingChange, change)
	}
	// What is in force still asks: a new run's call waits for the person.
	ag2 := connectCmd(t, h.ConnectCommand("echo"), "")
	_ = asyncCall(t, ag2.Session, "echo", map[string]any{"message": "still asks"})
	waitApproval(t, h, "echo", forTool("echo", ""))
}

// escapedOneLiner runs `portcullis ARGS…` as the agent's escaped one-liner
// would: `setsid -f script -qec 'portcullis ARGS…'` started from this test
// (the agent of its runs), so that it leaves the agent's tree and runs at a
// terminal that script fakes, with input that keeps typing a guessed
// password. It returns what the terminal showed and the exit code.
func (s *polkitSetup) escapedOneLiner(t *testing.T, args ...string) (string, int) {
	t.Helper()
	name := strings.Join(args, "-")
	code := filepath.Join(s.dir, "escape-code-"+name)
	out := filepath.Join(s.dir, "escape-out-"+name)
	inner := s.home.Bin + " " + strings.Join(args, " ") + "; echo $? > " + code
	line := "while sleep 1; do echo 'a guessed password'; done | script -qec '" + inner + "' /dev/null > " + out + " 2>&1"
	cmd := exec.Command("setsid", "-f", "sh", "-c", line)
	cmd.Env = s.home.Environ()
	cmd.Dir = s.dir
	must(t, cmd.Run())
	deadline := time.Now().Add(90 * time.Second)
	for {
		b, err := os.ReadFile(code)
		if err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
			shown, _ := os.ReadFile(out)
			n, err := strconv.Atoi(strings.TrimSpace(string(b)))
			must(t, err)
			return strings.ReplaceAll(string(shown), "\r\n", "\n"), n
		}
		if time.Now().After(deadline) {
			shown, _ := os.ReadFile(out)
			t.Fatalf("the escaped portcullis %s did not end within 90 s; its terminal shows %q", strings.Join(args, " "), shown)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
