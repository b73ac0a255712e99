package spawn

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/paths"
)

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// TestDaemonEnvIsBuilt: a daemon that connect starts gets HOME, USER and
// LOGNAME from the user database, the system PATH and the uid's session
// bus, never what an agent put in its own environment to change which code
// runs or which bus answers; the names left out are returned.
func TestDaemonEnvIsBuilt(t *testing.T) {
	run := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(run, "bus"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	agent := []string{
		"HOME=/tmp/agent-home", "USER=agent", "PATH=/tmp/agent/bin:/usr/bin", "PYTHONPATH=/tmp/agent/py",
		"NODE_OPTIONS=--require /tmp/agent/hook.js", "LD_PRELOAD=/tmp/agent/hook.so",
		"DBUS_SESSION_BUS_ADDRESS=unix:path=/tmp/agent/fake-bus", "XDG_RUNTIME_DIR=/tmp/agent/run",
		"LANG=C.UTF-8", "PORTCULLIS_START_WAIT=5s", "ANTHROPIC_API_KEY=sk-ant-x",
	}
	p := paths.Person{UID: 1000, Home: "/home/dev", Name: "dev"}
	env, withheld := DaemonEnv(agent, p, run)
	got := envMap(env)
	want := map[string]string{
		"HOME": "/home/dev", "USER": "dev", "LOGNAME": "dev", "PATH": strings.Join(SystemPath, ":"),
		"XDG_RUNTIME_DIR": run, "DBUS_SESSION_BUS_ADDRESS": "unix:path=" + filepath.Join(run, "bus"),
		"LANG": "C.UTF-8", "PORTCULLIS_START_WAIT": "5s",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("environment %v has more than %v", env, want)
	}
	for _, name := range []string{"PYTHONPATH", "NODE_OPTIONS", "LD_PRELOAD", "ANTHROPIC_API_KEY", "DBUS_SESSION_BUS_ADDRESS"} {
		if !slices.Contains(withheld, name) {
			t.Errorf("withheld %v does not name %s", withheld, name)
		}
	}

	// No bus of the uid: the agent's bus is not taken in its place…
	got = envMap(first(DaemonEnv(agent, p, "")))
	if _, ok := got["DBUS_SESSION_BUS_ADDRESS"]; ok {
		t.Errorf("without the uid's bus the daemon got the caller's: %v", got)
	}
	// …unless the caller chose the daemon itself (PORTCULLIS_HOME: tests),
	// whose bus (or none, set empty) wins even over the uid's: a test's
	// throwaway keyring, never the person's.
	got = envMap(first(DaemonEnv(append(agent, paths.EnvHome+"=/tmp/ph"), p, run)))
	if got["DBUS_SESSION_BUS_ADDRESS"] != "unix:path=/tmp/agent/fake-bus" || got[paths.EnvHome] != "/tmp/ph" {
		t.Errorf("under PORTCULLIS_HOME: %v", got)
	}
	got = envMap(first(DaemonEnv(append(agent, paths.EnvHome+"=/tmp/ph", "DBUS_SESSION_BUS_ADDRESS="), p, run)))
	if v, ok := got["DBUS_SESSION_BUS_ADDRESS"]; ok {
		t.Errorf("under PORTCULLIS_HOME with the bus set empty, the daemon got %q", v)
	}
	got = envMap(first(DaemonEnv([]string{paths.EnvHome + "=/tmp/ph"}, p, run)))
	if got["DBUS_SESSION_BUS_ADDRESS"] != "unix:path="+filepath.Join(run, "bus") {
		t.Errorf("under PORTCULLIS_HOME with no bus of the caller's: %v", got)
	}
}

func first(env, _ []string) []string { return env }

// TestHelperIgnoresPATH: a helper is found in the system directories,
// never through a PATH an agent changed.
func TestHelperIgnoresPATH(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "sh")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	got := Helper("sh")
	if got == "" || got == fake || !slices.Contains(SystemPath, filepath.Dir(got)) {
		t.Errorf("Helper(sh) = %q, want sh from %v", got, SystemPath)
	}
	if Helper("no-such-helper-anywhere") != "" {
		t.Error("a missing helper was found")
	}
}
