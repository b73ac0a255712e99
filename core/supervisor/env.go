//go:build unix

package supervisor

import (
	"slices"
	"strings"
)

// Environment of a server (docs/DESIGN.md, "Processes": a server's
// environment is its own). The daemon's own environment is the base, with
// what would hand the server the daemon's authority taken out:
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

// serverEnv returns the environment of a server: base (the daemon's
// environment, "K=V" entries) without the hidden variables, then extra
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
		if strings.HasPrefix(name, HiddenPrefix) || (!sessionBus && name == SessionBusEnv) {
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
