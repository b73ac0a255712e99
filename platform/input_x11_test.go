//go:build linux && cgo && !ci

package platform

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/daemon"
)

// startXvfb starts Xvfb on a free display for the test, sets DISPLAY to it
// and returns it; the test is skipped without Xvfb.
func startXvfb(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("Xvfb"); err != nil {
		t.Skip("no Xvfb")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("Xvfb", "-displayfd", "3", "-nolisten", "tcp", "-screen", "0", "800x600x24")
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
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
		t.Setenv("DISPLAY", ":"+n)
		t.Setenv("WAYLAND_DISPLAY", "")
		t.Setenv("XDG_SESSION_TYPE", "x11")
		return ":" + n
	case <-time.After(30 * time.Second):
		t.Fatal("Xvfb did not start within 30s")
	}
	return ""
}

// TestX11InputCheckTellsXTEST: under a real X server, a click injected
// through XTEST (xdotool, as an agent's shell would run it) is judged
// synthetic and names the XTEST device; with no press at all (an event
// sent to the window), the decision is synthetic without a device.
func TestX11InputCheckTellsXTEST(t *testing.T) {
	if _, err := exec.LookPath("xdotool"); err != nil {
		t.Skip("no xdotool")
	}
	startXvfb(t)
	c := NewInputCheck()
	defer c.Close()
	if _, ok := c.(*x11Input); !ok {
		t.Fatalf("no X11 input check: %+v", c.Judge(0, ""))
	}
	if v := c.Judge(0, ""); v.Origin != daemon.InputSynthetic || v.Device != "" {
		t.Errorf("no press at all: %+v, want synthetic without a device", v)
	}
	if out, err := exec.Command("xdotool", "click", "1").CombinedOutput(); err != nil {
		t.Fatalf("xdotool: %v\n%s", err, out)
	}
	if v := c.Judge(0, ""); v.Origin != daemon.InputSynthetic || v.Device != "Virtual core XTEST pointer" {
		t.Errorf("an XTEST click: %+v, want synthetic from the XTEST pointer", v)
	}
	if out, err := exec.Command("xdotool", "key", "space").CombinedOutput(); err != nil {
		t.Fatalf("xdotool: %v\n%s", err, out)
	}
	if v := c.Judge(0, ""); v.Origin != daemon.InputSynthetic || v.Device != "Virtual core XTEST keyboard" {
		t.Errorf("an XTEST key press: %+v, want synthetic from the XTEST keyboard", v)
	}
}
