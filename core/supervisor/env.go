//go:build unix

package supervisor

import (
	"slices"
	"strings"
)

// Environment of a server (docs/DESIGN.md, "Processes": a server's
// environment is its own). It is its configuration's env on top of a fixed
// base: of the daemon's own environment, only the variables [BaseVar]
// names (who and where the person is, how text and time are shown, where
// programs are found), never those that change which code a runtime loads
// (PYTHONPATH, NODE_OPTIONS, LD_PRELOAD…) or anything else the shell or
// agent that started the daemon had; [Withheld] lists the names left out,
// and `portcullis status` shows them. Within the base, what would hand
// the server the daemon's authority is taken out as well:
//
//   - every variable whose name starts with [HiddenPrefix] (PORTCULLIS_HOME
//     names the data directory and, through it, the control socket; others
//     name test keyrings, debug switches, the executable);
//   - the session bus address ([SessionBusEnv]): on Linux the Secret
//     Service, which holds every credential scope of every server and the
//     audit log's key, answers on it. Unless [Spec.SessionBus] asks for the
//     bus, it is set to [NoSessionBus] after the configuration's entries,
//     so that no D-Bus library falls back to $XDG_RUNTIME_DIR/bus or
//     autolaunches one: each of them uses the variable when it is set, and
//     "disabled:" names no transport any of them knows;
//   - variables [Spec.Withhold] says hold a secret: a daemon started by an
//     agent's `portcullis connect` inherits the agent's environment (its
//     API key), and a server gets secrets only as credential scopes, after
//     a person approved, or as its configuration's own env.
const (
	// HiddenPrefix starts the names of the daemon's variables that a
	// server does not inherit. A server's configuration may still set
	// such a variable (Spec.Env): the person named it.
	HiddenPrefix = "PORTCULLIS_"
	// SessionBusEnv is the variable that holds the D-Bus session bus
	// address.
	SessionBusEnv = "DBUS_SESSION_BUS_ADDRESS"
	// NoSessionBus is SessionBusEnv's value for a server that did not ask
	// for the session bus.
	NoSessionBus = "disabled:"
)

// baseNames are the variables of the daemon's environment that every
// server inherits (see BaseVar).
var baseNames = map[string]bool{
	"HOME": true, "USER": true, "LOGNAME": true, "SHELL": true, "PATH": true,
	"LANG": true, "LANGUAGE": true, "TZ": true, "TERM": true, "TMPDIR": true,
	"XDG_RUNTIME_DIR": true, "DISPLAY": true, "WAYLAND_DISPLAY": true,
	SessionBusEnv: true, // only to the servers that ask for the bus (Spec.SessionBus)
}

// BaseVar reports whether the daemon's variable name is part of a
// server's fixed base: HOME USER LOGNAME SHELL PATH LANG LANGUAGE LC_* TZ
// TERM TMPDIR XDG_RUNTIME_DIR DISPLAY WAYLAND_DISPLAY (and the session bus
// address for a server that asks for it). PATH is the daemon's: the
// person's session's when the app or the service manager started it, a
// fixed list of system directories when `portcullis connect` did.
func BaseVar(name string) bool {
	return baseNames[name] || strings.HasPrefix(name, "LC_")
}

// Withheld returns the names of the variables of environ (the daemon's
// environment) that no server inherits, sorted: all but the base and the
// daemon's own PORTCULLIS_* switches. A server's configuration can still
// give one to it (env), or a credential scope.
func Withheld(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == "" || BaseVar(name) || strings.HasPrefix(name, HiddenPrefix) || slices.Contains(out, name) {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// serverEnv returns the environment of a server: of base (the daemon's
// environment, "K=V" entries) the variables BaseVar names, without the
// hidden variables, then extra
// (the configuration's entries and the credentials), then the bus
// address when sessionBus is false, then EpochEnv=epoch. os/exec keeps the
// last of duplicate names, so neither base nor extra can change what
// follows them.
//
// withhold, when not nil, says which other variables of base hold a
// secret (a key of the agent or shell that started the daemon): those are
// left out too, and their names returned as withheld.
func serverEnv(base, extra []string, sessionBus bool, epoch string, withhold func(name, value string) bool) (env, withheld []string) {
	env = make([]string, 0, len(base)+len(extra)+2)
	for _, kv := range base {
		name, value, _ := strings.Cut(kv, "=")
		if !BaseVar(name) || strings.HasPrefix(name, HiddenPrefix) || (!sessionBus && name == SessionBusEnv) {
			continue
		}
		if withhold != nil && withhold(name, value) {
			withheld = append(withheld, name)
			continue
		}
		env = append(env, kv)
	}
	env = append(env, extra...)
	if !sessionBus {
		env = append(env, SessionBusEnv+"="+NoSessionBus)
	}
	return slices.Concat(env, []string{EpochEnv + "=" + epoch}), withheld
}
