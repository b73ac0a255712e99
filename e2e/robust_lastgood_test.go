package e2e

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRobustStartWithLastGoodCopy proves that a daemon started while
// config.json is missing (deleted, or a symbolic link to nothing) but its
// config.json.last-good copy exists serves the servers of the copy: an
// agent reaches one through `portcullis connect`, `portcullis status`
// (text and --json) says the file is missing and the last good one is in
// force, the daemon's log warns, and neither file is written.
func TestRobustStartWithLastGoodCopy(t *testing.T) {
	for _, how := range []string{"deleted", "dangling symbolic link"} {
		t.Run(how, func(t *testing.T) {
			h := newHome(t)
			addFaulty(t, h, "good")
			d := startDaemon(t, h) // keeps config.json.last-good
			if _, err := h.Status(testContext(t, 30*time.Second)); err != nil {
				t.Fatal(err)
			}
			if err := d.Stop(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			copyPath := h.ConfigFile() + ".last-good"
			good, err := os.ReadFile(copyPath)
			if err != nil {
				t.Fatalf("the first daemon kept no last good copy: %v", err)
			}
			if err := os.Remove(h.ConfigFile()); err != nil {
				t.Fatal(err)
			}
			if how == "dangling symbolic link" {
				if err := os.Symlink(filepath.Join(t.TempDir(), "gone.json"), h.ConfigFile()); err != nil {
					t.Fatal(err)
				}
			}

			d = startDaemon(t, h)
			rep, err := h.Status(testContext(t, 30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Servers) != 1 || rep.Servers[0].Label != "good" {
				t.Errorf("status lists %+v, want server good from the last good copy", rep.Servers)
			}
			if !strings.Contains(rep.ConfigError, h.ConfigFile()) || !strings.Contains(rep.ConfigError, copyPath) {
				t.Errorf("status --json configError %q does not name the missing file and the copy in force", rep.ConfigError)
			}
			r, err := h.Run(testContext(t, 30*time.Second), "status")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(r.Stdout, "Configuration file is missing or invalid; the last good one is in force") || !strings.Contains(r.Stdout, copyPath) {
				t.Errorf("status does not say the last good copy is in force:\n%s", r.Stdout)
			}
			if !strings.Contains(d.Output(), "its last good copy is in force") {
				t.Errorf("the daemon's log does not warn:\n%s", d.Output())
			}

			// Commands that only show the configuration show the copy
			// and say so; those that edit it still refuse.
			if r, err := h.Run(testContext(t, 30*time.Second), "servers", "list"); err != nil || !strings.Contains(r.Stdout, "good") || !strings.Contains(r.Stderr, "showing its last good copy") {
				t.Errorf("servers list with the file missing: %v\nstdout:\n%s\nstderr:\n%s", err, r.Stdout, r.Stderr)
			}
			if _, err := h.Run(testContext(t, 30*time.Second), "servers", "add", "more", "--", "/bin/cat"); err == nil {
				t.Error("servers add with the file missing and its last good copy present succeeded; want a refusal")
			}

			a := startRaw(t, h, "good")
			a.handshake("1")
			if got := a.call("2", "tools/call", toolCall("echo", map[string]any{"message": "from the copy"}), 30*time.Second); got.text(t) != "from the copy" {
				t.Errorf("the server of the last good copy did not serve: %s", got.Raw)
			}
			a.in.Close()
			if code := a.waitExited(30 * time.Second); code != 0 {
				t.Errorf("the shim exited with %d", code)
			}

			if err := d.Stop(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(h.ConfigFile()); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("config.json was written: %v", err)
			}
			if after, _ := os.ReadFile(copyPath); !bytes.Equal(after, good) {
				t.Errorf("config.json.last-good changed:\n%s", after)
			}
		})
	}
}
