package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/internal/harness"
)

// shimStartWait is the shim's start-up wait in these tests
// (PORTCULLIS_START_WAIT): far longer than answerWithin, so that an answer
// within answerWithin cannot be the end of that wait.
const (
	shimStartWait = 60 * time.Second
	answerWithin  = 20 * time.Second
)

// TestConnectStartedDaemonFails proves that when no daemon runs and the
// one `portcullis connect` starts exits at once (its audit log is signed
// but the key cannot be read), the shim does not wait out its start-up
// wait: the agent's initialize is answered with server_unavailable
// carrying the daemon's own reason and advice, not "start Portcullis",
// and stderr has that reason on one line. The cause named is the missing
// session bus, and rotating the key is not offered as its fix (issue 34).
func TestConnectStartedDaemonFails(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "echo", echoBin)
	// No credential store: the key of a signed log cannot be read.
	h.Env = append(h.Env, "DBUS_SESSION_BUS_ADDRESS=", "XDG_RUNTIME_DIR="+t.TempDir(),
		"PORTCULLIS_START_WAIT="+shimStartWait.String())
	auditDir := filepath.Join(h.Dir, "audit")
	if err := os.MkdirAll(auditDir, 0o700); err != nil {
		t.Fatal(err)
	}
	hex64 := strings.Repeat("ab", 32)
	signed := `{"fields":{},"prev":"` + audit.Genesis + `","seq":1,"ts":"2026-01-02T03:04:05Z","type":"daemon_started","hash":"sha256:` + hex64 + `","sig":"hmac-sha256:` + hex64 + `"}` + "\n"
	if err := os.WriteFile(filepath.Join(auditDir, "audit-000001.jsonl"), []byte(signed), 0o600); err != nil {
		t.Fatal(err)
	}
	stopStrayDaemons(t, h)

	a := startRaw(t, h, "echo")
	a.request("1", "initialize", initParams())
	m, _ := a.await("1", answerWithin) // fails the test after answerWithin
	ref := m.refusal(t)
	if ref.Error != control.ServerUnavailable ||
		!strings.Contains(m.Error.Message, "the audit log is signed but its key cannot be used") ||
		!strings.Contains(m.Error.Message, "no D-Bus session bus") ||
		!strings.Contains(m.Error.Message, "the key stays in the credential store") ||
		!strings.Contains(m.Error.Message, "only if the key is lost for good") ||
		!strings.Contains(ref.Retry, "reconnect the agent") {
		t.Errorf("initialize answered %.1000s, want server_unavailable with the daemon's reason and advice", m.Raw)
	}
	if strings.Contains(m.Error.Message, "start Portcullis") || strings.Contains(m.Error.Message, "did not answer within") {
		t.Errorf("initialize answered %.1000s: advice to start Portcullis, or a start-up wait that did not end early", m.Raw)
	}
	log, _ := os.ReadFile(filepath.Join(h.Dir, "daemon.log"))
	if !bytes.Contains(log, []byte("the audit log is signed but its key cannot be used")) {
		t.Errorf("daemon.log does not show the started daemon's failure:\n%s", log)
	}
	a.in.Close()
	if c := a.waitExited(30 * time.Second); c != 1 {
		t.Errorf("the shim exited with %d, want 1", c)
	}
	checkOneStderrLine(t, a.stderr.String(), "the audit log is signed but its key cannot be used", "no D-Bus session bus", "moves "+auditDir+" aside")
}

// TestConnectInvalidConfig proves that when no daemon runs and config.json
// is invalid, `portcullis connect` answers at once with one piece of
// advice: fix the file or restore its .last-good copy, then reconnect —
// not also "start Portcullis", which could not work.
func TestConnectInvalidConfig(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "echo", echoBin)
	h.Env = append(h.Env, "PORTCULLIS_START_WAIT="+shimStartWait.String())
	good, err := os.ReadFile(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.ConfigFile()+".last-good", good, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(good, []byte(`"mcpServers": {`), []byte(`"mcpServers": {,`), 1)
	if bytes.Equal(bad, good) {
		t.Fatalf("nothing to break in:\n%s", good)
	}
	if err := os.WriteFile(h.ConfigFile(), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	stopStrayDaemons(t, h)

	a := startRaw(t, h, "echo")
	a.request("1", "initialize", initParams())
	m, _ := a.await("1", answerWithin)
	ref := m.refusal(t)
	where := h.ConfigFile() + ":2:"
	if ref.Error != control.ServerUnavailable || !strings.Contains(ref.Reason, where) ||
		!strings.Contains(ref.Retry, "fix "+h.ConfigFile()) || !strings.Contains(ref.Retry, h.ConfigFile()+".last-good") ||
		!strings.Contains(ref.Retry, "reconnect the agent") {
		t.Errorf("initialize answered %.1000s, want server_unavailable naming %s and advice to fix it or restore .last-good", m.Raw, where)
	}
	if strings.Contains(m.Error.Message, "start Portcullis") || strings.Count(m.Error.Message, "reconnect") != 1 {
		t.Errorf("initialize answered %.1000s: want one piece of advice, not \"start Portcullis\"", m.Raw)
	}
	a.in.Close()
	if c := a.waitExited(30 * time.Second); c != 1 {
		t.Errorf("the shim exited with %d, want 1", c)
	}
	checkOneStderrLine(t, a.stderr.String(), where, ".last-good")
	if after, _ := os.ReadFile(h.ConfigFile()); !bytes.Equal(after, bad) {
		t.Errorf("config.json was changed:\n%s", after)
	}
}

func initParams() map[string]any {
	return map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "raw-agent", "version": "1.0.0"},
	}
}

// checkOneStderrLine fails t unless stderr is one line holding every want.
func checkOneStderrLine(t *testing.T, stderr string, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 1 {
		t.Errorf("stderr has %d lines, want 1:\n%s", len(lines), stderr)
		return
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("stderr %q does not mention %q", lines[0], w)
		}
	}
}

// stopStrayDaemons stops, when the test ends, any `portcullis daemon` for
// h that a shim started and that did not exit as the test expects.
func stopStrayDaemons(t *testing.T, h *harness.Home) {
	t.Cleanup(func() {
		procs, err := harness.Processes()
		if err != nil {
			return
		}
		home := []byte("PORTCULLIS_HOME=" + h.Dir + "\x00")
		for _, p := range procs {
			dir := "/proc/" + strconv.Itoa(p.PID)
			cmdline, _ := os.ReadFile(dir + "/cmdline")
			env, _ := os.ReadFile(dir + "/environ")
			if p.State == "Z" || !bytes.HasSuffix(cmdline, []byte("\x00daemon\x00")) || !bytes.Contains(env, home) {
				continue
			}
			t.Errorf("a daemon started by the shim is still running (pid %d); stopping it", p.PID)
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	})
}
