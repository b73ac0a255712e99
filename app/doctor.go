package app

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/platform"
	"github.com/portcullis/portcullis/platform/spawn"
)

// DoctorReport is what `portcullis doctor` finds: which daemon a command
// run in this environment (an agent's `portcullis connect` among them)
// reaches, and why.
type DoctorReport struct {
	Config  string `json:"configDir"`
	State   string `json:"stateDir"`
	Socket  string `json:"socket"`
	Why     string `json:"why"` // why the socket is where it is
	Home    string `json:"portcullisHome,omitempty"`
	Answers bool   `json:"answers"` // a daemon answers on Socket
	PID     int    `json:"pid,omitempty"`
	// LockPID and LockSocket are what the lock of State says of the daemon
	// that holds it (Locked); a daemon that holds it but listens elsewhere
	// is why a second one refuses to start.
	Locked     bool   `json:"locked"`
	LockPID    int    `json:"lockPid,omitempty"`
	LockSocket string `json:"lockSocket,omitempty"`
	// SessionBus is the session bus a daemon started from here would use
	// (the uid's), "" when there is none: then no keychain.
	SessionBus string `json:"sessionBus"`
	// Withheld are the names of this environment's variables that a daemon
	// started from here would not get.
	Withheld []string `json:"withheldFromStartedDaemon"`
	// Authentication is whether approvals are OS-authenticated and why
	// (settings.approvalAuthentication): the answering daemon's, else as a
	// daemon started from here would find it.
	Authentication daemon.AuthStatus `json:"authentication"`
	Problems       []string          `json:"problems"`
}

func (a *App) runDoctor(args []string) error {
	fs, asJSON := jsonFlags("doctor", "print the findings as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("doctor takes no arguments")
	}
	r := a.doctor()
	if *asJSON {
		return writeJSON(a.Stdout, r)
	}
	writeDoctor(a.Stdout, r)
	return nil
}

func (a *App) doctor() DoctorReport {
	_, why, err := paths.Explain()
	if err != nil {
		why = err.Error()
	}
	r := DoctorReport{Config: a.Dirs.Config, State: a.Dirs.State, Socket: a.Dirs.Socket(), Why: why, Home: os.Getenv(paths.EnvHome), Problems: []string{}}
	if h, held := daemon.Held(a.Dirs); held {
		r.Locked, r.LockPID, r.LockSocket = true, h.PID, h.Socket
	}
	if data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpStatus}, 5*time.Second); err == nil {
		r.Answers = true
		var rep daemon.StatusReport
		if json.Unmarshal(data, &rep) == nil {
			r.PID = rep.PID
			r.Authentication = rep.Authentication
		}
	} else if !errors.Is(err, control.ErrNoDaemon) {
		r.Problems = append(r.Problems, "the socket does not answer as a Portcullis daemon: "+err.Error())
	}
	if r.Authentication.Mode == "" {
		r.Authentication = a.localAuthStatus()
	}
	if auth := r.Authentication; !auth.OSAuthenticated && auth.Reason != daemon.AuthReasonOff {
		r.Problems = append(r.Problems, "approvals are not OS-authenticated: "+cmp.Or(auth.Unavailable, auth.Meaning))
	}
	p := paths.CurrentPerson()
	run := paths.UserRuntimeDir(p.UID)
	env, withheld := spawn.DaemonEnv(os.Environ(), p, run)
	// Sorted, as status lists what servers do not get: a person looks
	// a name up.
	r.Withheld = slices.Sorted(slices.Values(withheld))
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "DBUS_SESSION_BUS_ADDRESS="); ok {
			r.SessionBus = v
		}
	}
	switch {
	case r.Locked && r.LockSocket != "" && r.LockSocket != r.Socket:
		r.Problems = append(r.Problems, fmt.Sprintf("daemon pid %d holds %s but listens on %s, not on %s where this environment looks: restart it (`portcullis stop`, then start Portcullis) so that it listens at the person's place", r.LockPID, r.State, r.LockSocket, r.Socket))
	case !r.Answers && r.Locked:
		r.Problems = append(r.Problems, fmt.Sprintf("daemon pid %d holds %s but does not answer on %s yet (starting, or stuck: see its log)", r.LockPID, r.State, r.Socket))
	}
	if r.SessionBus == "" {
		where := filepath.Join(paths.UserRuntimeRoot, strconv.Itoa(p.UID), "bus")
		if run != "" {
			where = filepath.Join(run, "bus")
		}
		r.Problems = append(r.Problems, "no session bus at "+where+": a daemon that an agent's `portcullis connect` starts has no keychain (the audit log goes unsigned, servers with credentials do not launch); start Portcullis from your desktop session (the app, at login) instead")
	}
	return r
}

// localAuthStatus is whether approvals are OS-authenticated as a daemon
// started from here would find it: the configuration file's
// settings.approvalAuthentication against this system's mechanism.
func (a *App) localAuthStatus() daemon.AuthStatus {
	var setting string
	if cfg, err := config.Load(a.Dirs.ConfigFile()); err == nil {
		setting = cfg.Settings.ApprovalAuthentication
	}
	return daemon.ResolveAuth(setting, localAuthenticator())
}

// localAuthenticator is this system's mechanism for localAuthStatus (tests
// replace it).
var localAuthenticator = platform.NewAuthenticator

// authStatusHere is the running daemon's approval authentication, or when
// none answers, localAuthStatus.
func (a *App) authStatusHere() daemon.AuthStatus {
	if data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpStatus}, 5*time.Second); err == nil {
		var rep daemon.StatusReport
		if json.Unmarshal(data, &rep) == nil && rep.Authentication.Mode != "" {
			return rep.Authentication
		}
	}
	return a.localAuthStatus()
}

func writeDoctor(w io.Writer, r DoctorReport) {
	if r.Home != "" {
		fmt.Fprintf(w, "%s is set here (%s): this environment reaches only the daemon of that directory.\n", paths.EnvHome, r.Home)
	}
	fmt.Fprintf(w, "Socket: %s\n  because: %s\n", r.Socket, r.Why)
	fmt.Fprintf(w, "Configuration: %s\nState (audit log, catalog, daemon lock): %s\n", r.Config, r.State)
	switch {
	case r.Answers:
		fmt.Fprintf(w, "Daemon: pid %d answers on the socket; `portcullis connect` run from this environment reaches it.\n", r.PID)
	case r.Locked:
		fmt.Fprintf(w, "Daemon: pid %d holds the state directory, but nothing answers on the socket.\n", r.LockPID)
	default:
		fmt.Fprintln(w, "Daemon: none running; `portcullis connect` from this environment would start one.")
	}
	if r.SessionBus != "" {
		fmt.Fprintf(w, "A daemon started by `portcullis connect` uses the session bus %s (the keychain).\n", r.SessionBus)
	}
	if len(r.Withheld) > 0 {
		fmt.Fprintf(w, "Not passed to a daemon started from here: %s\n", strings.Join(r.Withheld, " "))
	}
	fmt.Fprintln(w, authLine(r.Authentication))
	for _, p := range r.Problems {
		fmt.Fprintf(w, "Problem: %s\n", p)
	}
}
