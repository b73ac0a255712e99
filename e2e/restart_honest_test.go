package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRestartFailedLaunchExitsNonZero (issue 34): `portcullis restart`
// waits for the new epoch; when its launch fails (here the server's
// executable is gone), it exits non-zero naming the cause and that the old
// epoch keeps serving, instead of saying it restarted.
func TestRestartFailedLaunchExitsNonZero(t *testing.T) {
	h := newHome(t)
	bin := filepath.Join(t.TempDir(), "echo-server")
	b, err := os.ReadFile(echoBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	addServer(t, h, "mine", bin)
	startDaemon(t, h)
	a := startRaw(t, h, "mine")
	a.handshake("1")
	if m := a.call("2", "tools/list", map[string]any{}, answerWithin); m.Error != nil {
		t.Fatalf("tools/list: %s", m.Raw)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	res, err := h.Run(testContext(t, 60*time.Second), "restart", "mine")
	if err == nil || res.Code == 0 {
		t.Fatalf("restart of a server whose launch fails exited 0:\n%s%s", res.Stdout, res.Stderr)
	}
	out := res.Stdout + res.Stderr
	if !strings.Contains(res.Stderr, "could not be launched") || !strings.Contains(res.Stderr, bin) || !strings.Contains(out, "keeps serving") {
		t.Errorf("restart output does not name the failed launch, its cause (%s) and the epoch kept:\n%s", bin, out)
	}
	// The old epoch still answers.
	if m := a.call("3", "tools/list", map[string]any{}, answerWithin); m.Error != nil {
		t.Errorf("after the failed restart, tools/list: %s", m.Raw)
	}
}
