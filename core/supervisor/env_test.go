//go:build unix

package supervisor_test

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/supervisor"
)

// serverEnviron starts env(1) as a server with spec's Env and SessionBus
// and returns the environment it printed, as a map.
func serverEnviron(t *testing.T, spec supervisor.Spec) map[string][]string {
	t.Helper()
	spec.Label, spec.Command = "env", "env"
	p := start(t, spec, fast)
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	got := map[string][]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = append(got[k], v)
	}
	return got
}

// TestServerEnvironmentIsItsOwn: a server inherits neither PORTCULLIS_*
// variables nor the session bus address from the daemon, gets the bus's
// placeholder instead, unless SessionBus asks for the daemon's bus; the
// configuration's entries still reach it, but cannot replace the
// placeholder or the epoch's mark.
func TestServerEnvironmentIsItsOwn(t *testing.T) {
	const bus = "unix:path=/run/user/1000/bus"
	t.Setenv("PORTCULLIS_HOME", "/home/someone/.portcullis")
	t.Setenv("PORTCULLIS_TEST_KEYRING_PASSWORD", "hunter2")
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", bus)
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("LC_TIME", "C")
	t.Setenv("NOT_BASE", "left out")
	t.Setenv("AGENT_API_KEY", "sk-ant-inherited-from-the-agent-0123456789")
	// What an agent would set to change the code a server's runtime loads.
	t.Setenv("PYTHONPATH", "/tmp/agent/py")
	t.Setenv("NODE_OPTIONS", "--require /tmp/agent/hook.js")
	t.Setenv("LD_PRELOAD", "/tmp/agent/hook.so")

	tests := []struct {
		name string
		spec supervisor.Spec
		want map[string][]string // name → its only value ("" = absent)
	}{
		{"default", supervisor.Spec{Env: []string{"FROM_CONFIG=1"}}, map[string][]string{
			"PORTCULLIS_HOME": nil, "PORTCULLIS_TEST_KEYRING_PASSWORD": nil,
			"DBUS_SESSION_BUS_ADDRESS": {supervisor.NoSessionBus}, "NOT_BASE": nil, "FROM_CONFIG": {"1"},
			"LANG": {"C.UTF-8"}, "LC_TIME": {"C"}, "PYTHONPATH": nil, "NODE_OPTIONS": nil, "LD_PRELOAD": nil,
		}},
		{"the configuration gives what the base does not", supervisor.Spec{Env: []string{"PYTHONPATH=/srv/lib"}}, map[string][]string{
			"PYTHONPATH": {"/srv/lib"}, "NODE_OPTIONS": nil,
		}},
		{"session bus asked for", supervisor.Spec{SessionBus: true}, map[string][]string{
			"PORTCULLIS_HOME": nil, "DBUS_SESSION_BUS_ADDRESS": {bus}, "NOT_BASE": nil,
		}},
		{"the configuration names a PORTCULLIS_ variable", supervisor.Spec{Env: []string{"PORTCULLIS_SOCKET=/tmp/s"}}, map[string][]string{
			"PORTCULLIS_SOCKET": {"/tmp/s"}, "PORTCULLIS_HOME": nil,
		}},
		{"secrets of the daemon's environment withheld", supervisor.Spec{Env: []string{"CONFIG_TOKEN=sk-given-by-config-0123456789"},
			Withhold: func(name, value string) bool { return strings.HasPrefix(value, "sk-") }}, map[string][]string{
			"AGENT_API_KEY": nil, "CONFIG_TOKEN": {"sk-given-by-config-0123456789"},
		}},
		{"no withholding asked: still not in the base", supervisor.Spec{}, map[string][]string{
			"AGENT_API_KEY": nil,
		}},
		{"the configuration cannot set the bus or the mark", supervisor.Spec{Env: []string{"DBUS_SESSION_BUS_ADDRESS=" + bus, supervisor.EpochEnv + "=forged"}}, map[string][]string{
			"DBUS_SESSION_BUS_ADDRESS": {supervisor.NoSessionBus},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := serverEnviron(t, tc.spec)
			for name, want := range tc.want {
				if diff := cmp.Diff(want, got[name]); diff != "" {
					t.Errorf("%s in the server's environment (-want +got):\n%s", name, diff)
				}
			}
			if marks := got[supervisor.EpochEnv]; len(marks) != 1 || marks[0] == "forged" {
				t.Errorf("%s = %q, want the epoch the supervisor minted", supervisor.EpochEnv, marks)
			}
			for name := range got {
				if strings.HasPrefix(name, supervisor.HiddenPrefix) && name != supervisor.EpochEnv && !slices.Contains(tc.spec.Env, name+"="+got[name][0]) {
					t.Errorf("the server inherited %s=%q", name, got[name])
				}
			}
		})
	}
}

// TestWithheld: status lists every variable of the daemon's environment
// that servers do not inherit, once, sorted, without the base and the
// daemon's own switches.
func TestWithheld(t *testing.T) {
	got := supervisor.Withheld([]string{"PATH=/usr/bin", "PYTHONPATH=/x", "HOME=/h", "NODE_OPTIONS=-r x", "LC_ALL=C",
		"PORTCULLIS_HOME=/p", "LD_PRELOAD=/y.so", "PYTHONPATH=/again", "DBUS_SESSION_BUS_ADDRESS=unix:path=/b", "=weird"})
	if diff := cmp.Diff([]string{"LD_PRELOAD", "NODE_OPTIONS", "PYTHONPATH"}, got); diff != "" {
		t.Errorf("Withheld (-want +got):\n%s", diff)
	}
}
