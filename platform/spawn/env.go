package spawn

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/portcullis/portcullis/core/paths"
)

// SystemPath is the PATH of a daemon that `portcullis connect` starts, and
// the directories its helpers (pkcheck, pkttyagent, open…) are looked up in:
// the system's own, never a directory an agent put first on its PATH.
var SystemPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// keep are the caller's variables a started daemon keeps: they say how to
// show text and time (and, for PORTCULLIS_*, which data directory a test
// isolates itself in), not which code runs.
func keep(name string) bool {
	switch name {
	case "LANG", "LANGUAGE", "TZ", "TERM", "DISPLAY", "WAYLAND_DISPLAY",
		paths.EnvHome, "PORTCULLIS_DEBUG", "PORTCULLIS_START_WAIT":
		return true
	}
	return strings.HasPrefix(name, "LC_")
}

// DaemonEnv is the environment of a daemon that `portcullis connect` starts
// for an agent, built by Portcullis rather than inherited from the agent
// (docs/DESIGN.md, "Processes"): HOME, USER and LOGNAME from the user
// database, PATH = SystemPath, the person's session bus found from the uid
// (unix:path=/run/user/UID/bus when that socket exists) with
// XDG_RUNTIME_DIR=/run/user/UID, and of the caller's variables only those
// keep allows. It returns the environment and the names of the caller's
// variables left out.
//
// When PORTCULLIS_HOME is set (tests, or a separate installation the caller
// chose), the caller already picked the daemon, and its session bus too:
// DBUS_SESSION_BUS_ADDRESS, when the caller has it (empty: no bus), is
// kept rather than the uid's, so that a test's throwaway keyring is used
// and never the person's.
func DaemonEnv(environ []string, p paths.Person, runtimeDir string) (env, withheld []string) {
	env = []string{"PATH=" + strings.Join(SystemPath, string(os.PathListSeparator))}
	if p.Home != "" {
		env = append(env, "HOME="+p.Home)
	}
	if p.Name != "" {
		env = append(env, "USER="+p.Name, "LOGNAME="+p.Name)
	}
	bus := ""
	if runtimeDir != "" {
		env = append(env, "XDG_RUNTIME_DIR="+runtimeDir)
		if fi, err := os.Stat(filepath.Join(runtimeDir, "bus")); err == nil && fi.Mode().Type() == os.ModeSocket {
			bus = "unix:path=" + filepath.Join(runtimeDir, "bus")
		}
	}
	isolated := false
	callerBus, callerHasBus := "", false
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case name == paths.EnvHome && value != "":
			isolated = true
		case name == "DBUS_SESSION_BUS_ADDRESS":
			callerBus, callerHasBus = value, true
			continue
		}
		if name == "" || !keep(name) {
			if name != "" && !has(withheld, name) && !has(env, kv) { // a built value equal to the caller's is not withheld
				withheld = append(withheld, name)
			}
			continue
		}
		env = append(env, kv)
	}
	if isolated && callerHasBus {
		bus = callerBus
	}
	if bus != "" {
		env = append(env, "DBUS_SESSION_BUS_ADDRESS="+bus)
	}
	if callerBus != "" && callerBus != bus {
		withheld = append(withheld, "DBUS_SESSION_BUS_ADDRESS")
	}
	return env, withheld
}

func has(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Helper returns the absolute path of the system program name, found in
// SystemPath (never the inherited PATH); "" when none is there.
func Helper(name string) string {
	for _, dir := range SystemPath {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}
