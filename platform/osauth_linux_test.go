//go:build linux

package platform

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/daemon"
)

// fakeTool writes an executable script that prints out and exits with
// code, and records its arguments in a file next to it.
func fakeTool(t *testing.T, out string, code int) (path, argsFile string) {
	t.Helper()
	dir := t.TempDir()
	path, argsFile = filepath.Join(dir, "tool"), filepath.Join(dir, "args")
	script := "#!/bin/sh\necho \"$@\" > " + argsFile + "\nprintf '%s\\n' '" + out + "'\nexit " + strconv.Itoa(code) + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, argsFile
}

// TestPolkitAuthenticate: pkcheck's exit codes (pkcheck(1)) become
// success, ErrAuthFailed, ErrAuthDismissed or another error, and the
// subject is passed as PID,START,UID.
func TestPolkitAuthenticate(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		code int
		want error // nil: success; else errors.Is
		text string
	}{
		{"authorized", "", 0, nil, ""},
		{"not authorized", "Not authorized.", 1, daemon.ErrAuthFailed, "pkcheck: Not authorized."},
		{"dismissed", "Authentication request was dismissed.", 3, daemon.ErrAuthDismissed, "dismissed"},
		{"error", "Error checking for authorization: no bus", 127, errors.New("other"), "no bus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, args := fakeTool(t, tc.out, tc.code)
			p := &Polkit{Pkcheck: bin}
			err := p.Authenticate(context.Background(), daemon.AuthSubject{PID: 4242, StartTime: 777, UID: 1000}, "approve x")
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("err = %v, want success", err)
			case tc.want != nil && err == nil:
				t.Fatal("success, want an error")
			case tc.want != nil && tc.code != 127 && !errors.Is(err, tc.want):
				t.Fatalf("err = %v, want %v", err, tc.want)
			case tc.code == 127 && (errors.Is(err, daemon.ErrAuthFailed) || errors.Is(err, daemon.ErrAuthDismissed)):
				t.Fatalf("err = %v: an error of pkcheck is neither a failure nor a cancellation", err)
			}
			if err != nil && !strings.Contains(err.Error(), tc.text) {
				t.Errorf("err %q lacks %q", err, tc.text)
			}
			b, _ := os.ReadFile(args)
			if got, want := strings.TrimSpace(string(b)), "--action-id dev.portcullis.approve --process 4242,777,1000 --allow-user-interaction"; got != want {
				t.Errorf("pkcheck %s, want %s", got, want)
			}
		})
	}
}

// TestPolkitAvailable: pkaction's answers become the reasons status shows;
// as root polkit is never available.
func TestPolkitAvailable(t *testing.T) {
	known, _ := fakeTool(t, "dev.portcullis.approve", 0)
	isRoot = func() bool { return true }
	if err := (&Polkit{Pkaction: known}).Available(); err == nil || !strings.Contains(err.Error(), "polkit authorizes root without asking") || reasonOf(err) != daemon.AuthReasonRoot {
		t.Errorf("as root: %v (reason %q)", err, reasonOf(err))
	}
	isRoot = func() bool { return false }
	t.Cleanup(func() { isRoot = func() bool { return os.Geteuid() == 0 } })
	for _, tc := range []struct {
		name, out string
		code      int
		want      string // "" = available
		reason    string
	}{
		{"known", "dev.portcullis.approve", 0, "", ""},
		{"action missing", "No action with action id dev.portcullis.approve", 1, "it is not installed in /usr/share/polkit-1/actions; install it with: sudo make install-polkit", daemon.AuthReasonNoAction},
		{"no polkitd", "Error getting authority: Error initializing authority: Could not connect: No such file or directory", 1, "no polkit daemon answers on the system bus", daemon.AuthReasonNotRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, _ := fakeTool(t, tc.out, tc.code)
			err := (&Polkit{Pkaction: bin}).Available()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Available = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || reasonOf(err) != tc.reason {
				t.Fatalf("Available = %v (reason %q), want %q (%s)", err, reasonOf(err), tc.want, tc.reason)
			}
		})
	}
	if err := (&Polkit{Pkaction: "/nonexistent/pkaction"}).Available(); err == nil || !strings.Contains(err.Error(), "polkit is not installed") || reasonOf(err) != daemon.AuthReasonNotFound {
		t.Errorf("missing pkaction: %v", err)
	}
}

func reasonOf(err error) string {
	var ue *daemon.UnavailableError
	if errors.As(err, &ue) {
		return ue.Reason
	}
	return ""
}

// TestPolkitInstallCommand: the step that installs the action names the
// copy `make install` put in PREFIX/share/polkit-1/actions beside the
// executable's PREFIX/bin, quoted for the shell; without one, the make
// target of the source tree.
func TestPolkitInstallCommand(t *testing.T) {
	if got := PolkitInstallCommand(); !strings.HasPrefix(got, "sudo make install-polkit") {
		t.Errorf("without a shipped policy: %q", got)
	}
	for path, want := range map[string]string{
		"/opt/portcullis/share/polkit-1/actions/dev.portcullis.approve.policy": "/opt/portcullis/share/polkit-1/actions/dev.portcullis.approve.policy",
		"/home/a b/.local/share/x.policy":                                      "'/home/a b/.local/share/x.policy'",
		"/tmp/it's":                                                            `'/tmp/it'\''s'`,
	} {
		if got := shellWord(path); got != want {
			t.Errorf("shellWord(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestPolkitIgnoresAgentPATH: an agent that puts a directory of its own
// first on PATH, with a pkcheck that always says yes, does not answer for
// polkit: the pkcheck run is the system's (which, with no polkit daemon
// here, fails), and the fake never runs.
func TestPolkitIgnoresAgentPATH(t *testing.T) {
	fake, argsFile := fakeTool(t, "authorized", 0)
	dir := filepath.Dir(fake)
	if err := os.Rename(fake, filepath.Join(dir, "pkcheck")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := (&Polkit{}).Authenticate(ctx, daemon.AuthSubject{PID: os.Getpid()}, "")
	if _, serr := os.Stat(argsFile); serr == nil {
		t.Fatalf("the pkcheck first on PATH ran (Authenticate = %v)", err)
	}
	t.Logf("the system's pkcheck said: %v", err)
}
