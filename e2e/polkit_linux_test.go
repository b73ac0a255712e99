//go:build linux

package e2e

import (
	"bufio"
	"bytes"
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
	policy, err := os.ReadFile(filepath.Join(repoRoot, "assets", "polkit", "dev.portcullis.approve.policy"))
	must(t, err)
	write("actions/dev.portcullis.approve.policy", string(policy), 0o644)
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
	// polkitd answers once it owns its name and has read the action.
	deadline := time.Now().Add(20 * time.Second)
	for {
		o, err := s.inNS("pkaction", "--action-id", "dev.portcullis.approve").CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the private polkitd does not answer within 20 s: pkaction: %v %s; polkitd: %s", err, o, pkOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Portcullis as the unprivileged user, in the namespace.
	bin := filepath.Join(dir, "portcullis")
	copyExec(t, portcullis, bin)
	// The full program goes beside it, as make install puts it.
	copyExec(t, front.AppPath(portcullis), front.AppPath(bin))
	copyExec(t, echoBin, filepath.Join(dir, "echo"))
	wrapper := write("portcullis-as-person", fmt.Sprintf("#!/bin/sh\nexec nsenter --mount=/proc/%d/ns/mnt -S %d -G %d -- %s \"$@\"\n", s.holder, polkitTestUID, polkitTestUID, bin), 0o755)
	homeDir := filepath.Join(dir, "home")
	h, err := harness.NewHome(wrapper, homeDir)
	must(t, err)
	off := false
	cfg := &config.Config{
		Servers:  map[string]config.Server{"echo": {Command: filepath.Join(dir, "echo")}},
		Settings: config.Settings{ApprovalAuthentication: config.AuthAlways, AuditSigning: &off},
	}
	must(t, config.Save(h.ConfigFile(), cfg))
	must(t, filepath.Walk(homeDir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, polkitTestUID, polkitTestUID)
	}))
	s.home = h
	return s
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
		shown, code := s.approveAtTerminal(t, req.ID, polkitTestPassword)
		for _, w := range []string{`settings.approvalAuthentication is "always": polkit asks you to authenticate`, "AUTHENTICATING FOR dev.portcullis.approve",
			"Portcullis: authenticate to approve a request of an AI agent", "AUTHENTICATION COMPLETE", "Approved " + req.ID} {
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
			shown, code := s.approveAtTerminal(t, req.ID, tc.answer)
			for _, w := range []string{tc.want, "not approved: polkit did not authenticate you (authentication failed: pkcheck: Not authorized.)", "request " + req.ID + " was denied and nothing was granted"} {
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

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
