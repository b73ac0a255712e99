package daemon

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/supervisor"
)

type fakeSandbox struct{ level string }

func (f fakeSandbox) Prepare(*exec.Cmd, supervisor.Confinement) (string, error) {
	return f.level + ": hides x", nil
}

var _ supervisor.Sandbox = fakeSandbox{}

// TestSandboxOfDefault: a sandbox left unset is standard where the system
// has one, off with the reason in status where it has none; a level set
// explicitly is never lowered: the launch fails, saying how to run it
// unconfined; any other error of the sandbox fails the
// launch even for the default.
func TestSandboxOfDefault(t *testing.T) {
	unsupported := func(string) (supervisor.Sandbox, error) {
		return nil, &supervisor.UnsupportedError{Reason: "user namespaces are not available here (kernel.unprivileged_userns_clone=0)"}
	}
	missing := func(string) (supervisor.Sandbox, error) {
		return nil, errors.New("unknown sandbox level \"x\"")
	}
	works := func(level string) (supervisor.Sandbox, error) {
		if level == "" {
			level = config.SandboxStandard // the platform's default
		}
		return fakeSandbox{level}, nil
	}
	for _, c := range []struct {
		name    string
		sandbox func(string) (supervisor.Sandbox, error)
		level   string
		status  string // what Prepare says; "" with wantErr
		wantErr string
	}{
		{"default, supported", works, "", "standard: hides x", ""},
		{"default, unsupported", unsupported, "", "off — user namespaces are not available here (kernel.unprivileged_userns_clone=0)", ""},
		{"default, no sandbox in this build", nil, "", "off — this build has no sandbox", ""},
		{"default, another failure", missing, "", "", `unknown sandbox level "x"`},
		{"explicit standard, unsupported", unsupported, config.SandboxStandard, "", "it was not launched (set its sandbox to off to run it unconfined: portcullis servers edit s --sandbox off)"},
		{"explicit strict, no sandbox in this build", nil, config.SandboxStrict, "", "this build cannot provide"},
		{"explicit strict", works, config.SandboxStrict, "strict: hides x", ""},
	} {
		d := &Daemon{opts: Options{Sandbox: c.sandbox, Dirs: paths.Dirs{Config: "/c", State: "/s", Runtime: "/r"}}}
		sb, _, err := d.sandboxOf("s", config.Server{Command: "x", Sandbox: c.level})
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: %v, want an error saying %q", c.name, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got, err := sb.Prepare(&exec.Cmd{}, supervisor.Confinement{})
		if err != nil || got != c.status {
			t.Errorf("%s: status says %q (%v), want %q", c.name, got, err, c.status)
		}
	}
	// off is off, and says nothing more.
	d := &Daemon{opts: Options{Sandbox: works}}
	if sb, _, err := d.sandboxOf("s", config.Server{Command: "x", Sandbox: config.SandboxOff}); sb != nil || err != nil {
		t.Errorf("sandbox off: %v, %v", sb, err)
	}
}

// TestServerDirLeavesAHiddenDirectory: a server without cwd inherits the
// daemon's working directory, unless the sandbox hides it (a daemon
// started in its data directory), which the launcher would refuse; a
// configured cwd is kept as it is.
func TestServerDirLeavesAHiddenDirectory(t *testing.T) {
	data := t.TempDir()
	t.Chdir(data)
	t.Setenv("HOME", data) // hidden too: then /
	if got := serverDir(config.Server{}, []string{"/elsewhere", data}); got != "/" {
		t.Errorf("the working directory of a server without cwd, the daemon's hidden: %q, want /", got)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	if got := serverDir(config.Server{}, []string{data}); got != home {
		t.Errorf("the working directory of a server without cwd, the daemon's hidden: %q, want the home directory %s", got, home)
	}
	if got := serverDir(config.Server{}, []string{"/elsewhere"}); got != "" {
		t.Errorf("a daemon's directory that is not hidden: %q, want it inherited", got)
	}
	if got := serverDir(config.Server{Cwd: "/srv/x"}, []string{data}); got != "/srv/x" {
		t.Errorf("a configured cwd: %q", got)
	}
}
