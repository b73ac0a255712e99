package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInstallTakeoverRestartsTheMenuBarApp: scripts/install-takeover.sh
// (run by `make install`) stops a daemon that runs the program just
// replaced. When that daemon was the menu-bar app's (started with no
// command), the new app is started in its place in the terminal's
// graphical session; without one, the script says to start it; a headless
// daemon (`portcullis daemon`) is only stopped, as the shims start the new
// one. The running program and the front are stand-ins here: the running
// "portcullis-app" is cat (with no argument, like the app; with one, like
// `portcullis daemon`), and the front a script that answers status, stops
// it, and notes being started with no command.
func TestInstallTakeoverRestartsTheMenuBarApp(t *testing.T) {
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat here")
	}
	for _, tc := range []struct {
		name    string
		args    []string
		display string
		started bool
		says    string
	}{
		{"menu-bar app", nil, ":97", true, "started the menu-bar app of the new version"},
		{"menu-bar app, no graphical session", nil, "", false, "start Portcullis again from your desktop"},
		{"headless daemon", []string{"-"}, ":97", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := t.TempDir()
			bin := filepath.Join(prefix, "bin")
			must(t, os.MkdirAll(bin, 0o755))
			b, err := os.ReadFile(cat)
			must(t, err)
			must(t, os.WriteFile(filepath.Join(bin, "portcullis-app"), b, 0o755))
			running := exec.Command(filepath.Join(bin, "portcullis-app"), tc.args...)
			running.Args[0] = "portcullis-app"
			in, err := running.StdinPipe() // open until the test ends: cat waits on it
			must(t, err)
			must(t, running.Start())
			ended := make(chan struct{})
			go func() { _ = running.Wait(); close(ended) }()
			t.Cleanup(func() {
				in.Close()
				_ = running.Process.Kill()
				<-ended
			})
			marker := filepath.Join(prefix, "started")
			front := fmt.Sprintf(`#!/bin/sh
case "$1" in
status) printf '{\n  "pid": %d,\n  "socket": "x"\n}\n' ;;
stop) kill %d ;;
"") echo "$DISPLAY" > %q ;;
esac
`, running.Process.Pid, running.Process.Pid, marker)
			must(t, os.WriteFile(filepath.Join(bin, "portcullis"), []byte(front), 0o755))

			cmd := exec.Command("bash", filepath.Join(repoRoot, "scripts", "install-takeover.sh"), prefix)
			cmd.Env = append(os.Environ(), "DISPLAY="+tc.display, "WAYLAND_DISPLAY=")
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "stopped the daemon of the previous version") {
				t.Fatalf("install-takeover.sh: %v\n%s", err, out)
			}
			if tc.says != "" && !strings.Contains(string(out), tc.says) {
				t.Errorf("install-takeover.sh says %q, want %q", out, tc.says)
			}
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatal("the running program was not stopped")
			}
			// setsid -f returns before the new app runs: give it a moment.
			var got []byte
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if got, err = os.ReadFile(marker); err == nil {
					break
				}
			}
			if tc.started && strings.TrimSpace(string(got)) != tc.display {
				t.Errorf("the new app was not started in the session %s (marker %q, %v)\n%s", tc.display, got, err, out)
			}
			if !tc.started && got != nil {
				t.Errorf("a new app was started (in %q) though %s\n%s", got, tc.name, out)
			}
		})
	}
}
