package connect

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/shim"
	"github.com/portcullis/portcullis/platform/spawn"
)

// TestDaemonReason: the reason a daemon that failed to start gave is found
// in its log among the log records of this and earlier starts.
func TestDaemonReason(t *testing.T) {
	for _, tc := range []struct{ name, out, want string }{
		{"audit key",
			"time=T level=INFO msg=\"daemon listening\"\nportcullis: the audit log is signed but its key cannot be used: locked; move /s/audit aside\n",
			"the audit log is signed but its key cannot be used: locked; move /s/audit aside"},
		{"config, two lines, after an earlier failure",
			"portcullis: old\ntime=T level=WARN msg=x\nportcullis: /c/config.json:2:18: invalid character\nThe configuration file was not changed; fix it\n",
			"/c/config.json:2:18: invalid character\nThe configuration file was not changed; fix it"},
		{"panic", "panic: boom\n\ngoroutine 1 [running]:\nmain.main()\n", "panic: boom"},
		{"nothing", "time=T level=INFO msg=\"daemon listening\"\n", ""},
	} {
		if got := daemonReason(tc.out); got != tc.want {
			t.Errorf("%s: daemonReason = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestDaemonExitedBesideRunning: a started daemon that exits because
// another holds the person's data is a race to wait out when that one
// listens where this connection looks, and a named cause (not "start
// Portcullis", not the keychain) when it listens elsewhere.
func TestDaemonExitedBesideRunning(t *testing.T) {
	root := t.TempDir()
	dirs := paths.Dirs{Config: root, State: root, Runtime: filepath.Join(root, "run")}
	log := filepath.Join(root, "daemon.log")
	msg := "portcullis: another Portcullis daemon is already running: daemon pid 4242 holds " + root + "\n"
	if err := os.WriteFile(log, []byte(msg), 0o600); err != nil {
		t.Fatal(err)
	}
	st := &spawn.Started{Log: log}
	for _, tc := range []struct {
		socket  string
		running bool
		want    string
	}{
		{dirs.Socket(), true, "did not answer yet"},
		{"/elsewhere/portcullis.sock", false, "listens on /elsewhere/portcullis.sock, not on " + dirs.Socket()},
	} {
		if err := os.WriteFile(dirs.LockFile(), []byte("pid 4242\nsocket "+tc.socket+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var se *shim.StartError
		if err := daemonExited(dirs, st, errors.New("exit status 1")); !errors.As(err, &se) || se.Running != tc.running || !strings.Contains(se.Reason, tc.want) {
			t.Errorf("holder on %s: %#v, want Running=%v and %q", tc.socket, err, tc.running, tc.want)
		}
	}
}
