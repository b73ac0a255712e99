//go:build ci

package e2e

// Issue 30, "A trusted path for the window": the real menu-bar app (the
// cgo build, GLFW) under Xvfb. A click injected through XTEST by a process
// the agent started (xdotool, as the agent's shell tool would run it) on
// "Approve for this run" does not approve: the call stays held, the card
// stays, and the audit log says why (decision_refused synthetic_input,
// with the device's name). Xvfb has no input device but XTEST's, so a real
// device's press cannot be made here; the rule that accepts one (and
// refuses a click with no device press, as SendEvent makes) is tested in
// package platform (TestJudgePresses, TestX11InputCheckTellsXTEST) and
// core/daemon (TestWindowApprovalFromSyntheticInput).

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/internal/harness"
)

// cgoApp returns a directory with the front (portcullis) and the cgo
// build of the full program (portcullis-app): PORTCULLIS_TEST_APP, a cgo
// build made already, or one built now (minutes when the build cache is
// cold). The test is skipped without a C compiler.
func cgoApp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	front, err := os.ReadFile(portcullis)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "portcullis"), front, 0o755); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "portcullis-app")
	if prebuilt := os.Getenv("PORTCULLIS_TEST_APP"); prebuilt != "" {
		b, err := os.ReadFile(prebuilt)
		if err != nil {
			t.Fatalf("PORTCULLIS_TEST_APP: %v", err)
		}
		if err := os.WriteFile(app, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler for the cgo app (scripts/test-deps.sh installs it)")
	}
	cmd := exec.CommandContext(testContext(t, 15*time.Minute), "go", "build", "-tags", "no_emoji", "-o", app, "./cmd/portcullis-app")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the cgo app: %v\n%s", err, out)
	}
	return dir
}

// startXvfb starts Xvfb on a free display for the test and returns the
// display (":N"); skipped without Xvfb.
func startXvfb(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("Xvfb"); err != nil {
		t.Skip("no Xvfb (scripts/test-deps.sh installs it)")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("Xvfb", "-displayfd", "3", "-nolisten", "tcp", "-screen", "0", "1280x800x24")
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case n := <-line:
		if n == "" {
			t.Fatal("Xvfb did not say its display")
		}
		return ":" + n
	case <-time.After(30 * time.Second):
		t.Fatal("Xvfb did not start within 30s")
	}
	return ""
}

// xdotool runs xdotool on display and returns its output.
func xdotool(t *testing.T, display string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(testContext(t, 30*time.Second), "xdotool", args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+display)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("xdotool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// approvalWindow waits until the approval window is shown on display and
// returns its id, width and height.
func approvalWindow(t *testing.T, display string) (id string, w, h int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cmd := exec.Command("xdotool", "search", "--onlyvisible", "--name", "Approval needed")
		cmd.Env = append(os.Environ(), "DISPLAY="+display)
		out, _ := cmd.Output()
		if f := strings.Fields(string(out)); len(f) > 0 {
			id = f[0]
			geo := map[string]int{}
			for _, l := range strings.Split(xdotool(t, display, "getwindowgeometry", "--shell", id), "\n") {
				if k, v, ok := strings.Cut(l, "="); ok {
					geo[k], _ = strconv.Atoi(v)
				}
			}
			if geo["WIDTH"] > 100 && geo["HEIGHT"] > 100 {
				return id, geo["WIDTH"], geo["HEIGHT"]
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no approval window shown within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// syntheticRefusals returns the decision_refused events of kind
// synthetic_input.
func syntheticRefusals(t *testing.T, h *harness.Home) []audit.DecisionRefused {
	t.Helper()
	var out []audit.DecisionRefused
	for _, r := range refusals(t, h) {
		if r.Refusal == "synthetic_input" {
			out = append(out, r)
		}
	}
	return out
}

func TestWindowRefusesSyntheticClicks(t *testing.T) {
	if _, err := exec.LookPath("xdotool"); err != nil {
		t.Skip("no xdotool (scripts/test-deps.sh installs it)")
	}
	display := startXvfb(t)
	bin := cgoApp(t)
	home := newHome(t)
	binDir := t.TempDir()
	callLog := filepath.Join(t.TempDir(), "calls.jsonl")
	srv, _ := buildPublish(t, binDir, publishRevA)
	if err := home.AddServer(testContext(t, 30*time.Second), pubLabel,
		[]string{"--cwd", binDir, "--env", "PUBLISH_CALL_LOG=" + callLog}, srv); err != nil {
		t.Fatal(err)
	}

	// The real app, on the display; no Wayland, no session bus (Fyne's
	// own notifications, no tray host needed).
	appLog := &harness.SyncBuffer{}
	app := exec.Command(filepath.Join(bin, "portcullis"))
	app.Env = append(home.Environ(), "DISPLAY="+display, "WAYLAND_DISPLAY=", "XDG_SESSION_TYPE=x11", "DBUS_SESSION_BUS_ADDRESS=disabled:")
	app.Dir = home.Dir
	app.Stdout, app.Stderr = appLog, appLog
	app.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-app.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = app.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-app.Process.Pid, syscall.SIGKILL)
			<-done
		}
		// Quitting without a session bus (so without a tray) is not a crash.
		if strings.Contains(appLog.String(), "panic:") {
			t.Error("the app panicked as it quit on SIGTERM")
		}
		if t.Failed() {
			t.Logf("app log:\n%s", appLog)
		}
	})
	waitSocket(t, home)

	// The agent (this test) calls a tool that waits for the person.
	agent := connectListChanged(t, home, pubLabel, "")
	if _, err := agent.Session.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	held := asyncCall(t, agent.Session, "publish_preview", map[string]any{"branch": "main"})
	req := waitApproval(t, home, "publish_preview", forTool("publish_preview", ""))
	approvalWindow(t, display)

	// XTEST, as measured: move onto the rightmost approve button (bottom
	// right) and click, after the card's guard time. The window's size is
	// read after it: the card grows when its code report arrives.
	time.Sleep(2 * time.Second)
	win, w, h := approvalWindow(t, display)
	x, y := strconv.Itoa(w-90), strconv.Itoa(h-24)
	xdotool(t, display, "mousemove", "--window", win, x, y, "sleep", "0.7", "click", "1")
	deadline := time.Now().Add(30 * time.Second)
	var got []audit.DecisionRefused
	for len(got) == 0 && time.Now().Before(deadline) {
		select {
		case r := <-held:
			t.Fatalf("the XTEST click approved the call: %+v", r)
		case <-time.After(200 * time.Millisecond):
		}
		got = syntheticRefusals(t, home)
	}
	if len(got) != 1 || got[0].Request != req.ID || !strings.Contains(got[0].Reason, `"Virtual core XTEST pointer"`) || got[0].ServerLabel != pubLabel {
		t.Fatalf("decision_refused synthetic_input events %+v; want one for %s naming the XTEST pointer", got, req.ID)
	}

	// The call is still held, its card still pending; no approval was
	// granted.
	select {
	case r := <-held:
		t.Fatalf("the call returned: %+v", r)
	default:
	}
	pending := false
	for _, r := range approvals(t, home) {
		pending = pending || r.ID == req.ID
	}
	if !pending {
		t.Errorf("request %s is no longer pending", req.ID)
	}
	for _, e := range auditEvents(t, home) {
		if e.Type == audit.TypeApprovalGranted {
			t.Errorf("an approval was granted: %s", fmt.Sprint(auditFields(t, e)))
		}
	}
	if calls := readCalls(t, callLog); len(calls) != 0 {
		t.Errorf("the tool ran: %+v", calls)
	}
}

// TestContainSandboxNoDisplay: a server in the default sandbox, its
// daemon on a running X server (Xvfb, which like a desktop session
// with `xhost +si:localuser` asks no cookie), has no DISPLAY,
// WAYLAND_DISPLAY or XAUTHORITY, sees no socket in /tmp/.X11-unix, and
// cannot reach the X server at all: not through the path socket, nor
// through its abstract one (@/tmp/.X11-unix/XN, which the network
// namespace the default sandbox shares would otherwise expose), whatever
// DISPLAY it sets itself.
func TestContainSandboxNoDisplay(t *testing.T) {
	needBwrap(t)
	if _, err := exec.LookPath("xdpyinfo"); err != nil {
		t.Skip("no xdpyinfo (x11-utils; scripts/test-deps.sh installs it)")
	}
	display := startXvfb(t)
	// The display answers outside the sandbox.
	probe := exec.Command("xdpyinfo", "-display", display)
	if out, err := probe.CombinedOutput(); err != nil {
		t.Fatalf("xdpyinfo outside the sandbox: %v\n%s", err, out)
	}
	h := newHome(t)
	h.Env = append(h.Env, "DISPLAY="+display, "WAYLAND_DISPLAY=wayland-77", "XAUTHORITY="+filepath.Join(t.TempDir(), ".Xauthority"))
	cwd := t.TempDir()
	script := `exec 3>&1 > "$PWD/report" 2>&1
env | grep -E '^(DISPLAY|WAYLAND_DISPLAY|XAUTHORITY)=' || echo no-display-env
echo "x11=[$(ls -A /tmp/.X11-unix 2>/dev/null)]"
xdpyinfo -display "$XDISPLAY" >/dev/null 2>&1 && echo display-reached || echo display-unreachable
exec 1>&3 3>&- 2>/dev/null; exec "$ECHO_BIN"`
	auditAddServer(t, h, "boxed", config.Server{Command: "/bin/sh", Args: []string{"-c", script}, Cwd: cwd,
		Env: map[string]string{"ECHO_BIN": echoBin, "XDISPLAY": display}}, "echo")
	startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("boxed"), "")
	if _, err := a.Session.ListTools(testContext(t, 30*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(cwd, "report"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"no-display-env", "x11=[]", "display-unreachable"} {
		if !strings.Contains(string(b), want+"\n") {
			t.Errorf("the server's report lacks %q:\n%s", want, b)
		}
	}
}
