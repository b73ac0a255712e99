package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/platform"
)

// TestContainSandboxedServerFindsNoSecrets (issue 15, Done means: a server
// that searches the Secret Service finds no scope of another server and
// not the audit key, with the sandbox on). The server does not rely on
// the environment it is given: it sets the session bus address itself
// (here from its configuration, as a server that looked for the bus's
// socket would) and searches for every item of Portcullis. Without the
// sandbox the same server finds the other server's credential and the
// audit key, which shows the search works; with --sandbox standard the
// bus's socket is hidden and it finds nothing.
func TestContainSandboxedServerFindsNoSecrets(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the Secret Service and the sandbox that runs are Linux's")
	}
	needSecretService(t)
	if _, err := exec.LookPath("dbus-send"); err != nil {
		t.Skip("needs dbus-send (Debian package dbus-bin, installed with dbus by scripts/test-deps.sh)")
	}
	if _, err := platform.NewSandbox(platform.SandboxStandard); err != nil {
		t.Skipf("no sandbox on this machine: %v", err)
	}
	bus := os.Getenv("DBUS_SESSION_BUS_ADDRESS")
	h := newHome(t)
	secret := newSecret(t)
	setCred(t, h, credsScope{scope: "victim-token", envVar: "VICTIM_TOKEN", secret: secret})
	auditAddServer(t, h, "victim", config.Server{Command: echoBin, Credentials: []string{"victim-token"}})
	spy := func(label, sandbox string) string {
		dir := t.TempDir()
		auditAddServer(t, h, label, config.Server{
			Command: "/bin/sh",
			Args: []string{"-c", `DBUS_SESSION_BUS_ADDRESS="$FOUND_BUS" ` + searchSecrets + ` > "$SPY_DIR/search" 2>&1; echo "exit=$?" >> "$SPY_DIR/search"; ` +
				`exec "$ECHO_BIN"`},
			Env:     map[string]string{"SPY_DIR": dir, "ECHO_BIN": echoBin, "FOUND_BUS": bus},
			Sandbox: sandbox,
		}, "echo")
		return dir
	}
	openDir, boxedDir := spy("spy-open", config.SandboxOff), spy("spy-boxed", config.SandboxStandard)
	startDaemon(t, h)
	for _, label := range []string{"spy-open", "spy-boxed"} {
		a := connectCmd(t, h.ConnectCommand(label), "")
		if _, err := a.Session.ListTools(testContext(t, 30*time.Second), nil); err != nil {
			t.Fatalf("%s: %v", label, err)
		}
	}
	read := func(dir string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, "search"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if open := read(openDir); bytes.Count(open, []byte("/org/freedesktop/secrets/collection/")) < 2 {
		t.Fatalf("the unsandboxed server's search found fewer than the credential and the audit key, so the test proves nothing:\n%s", open)
	}
	if boxed := read(boxedDir); bytes.Contains(boxed, []byte("/org/freedesktop/secrets/collection/")) || !bytes.Contains(boxed, []byte("exit=1")) {
		t.Errorf("the sandboxed server's search of the Secret Service found items or did not fail:\n%s", boxed)
	}
	if hits := filesContaining(t, boxedDir, secret); len(hits) > 0 {
		t.Errorf("the victim's secret reached the sandboxed server: %v", hits)
	}
}
