package ui

import (
	"slices"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"
	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/textsafe"
)

const (
	epochA = "01JQ7R4S4S0QJ7GZP1S2AAAAAA"
	epochB = "01JQ7R9X3Y0QJ7GZP1S2BBBBBB"
)

func run(id, label string, st gateway.State, epoch string, rev uint64) gateway.Status {
	return gateway.Status{Run: ids.RunID(id), Label: label, State: st, Epoch: ids.EpochID(epoch), CatalogRevision: rev,
		Agent: gateway.Agent{Exe: "/usr/local/bin/claude", PID: 4242}}
}

func TestRunLine(t *testing.T) {
	tests := []struct {
		name      string
		st        gateway.Status
		waiting   bool
		withAgent bool
		want      string
	}{
		{"ready", run("r1", "inventory", gateway.StateReady, epochA, 13), false, false, "inventory — ready · epoch S2AAAAAA · catalog r13"},
		{"waiting wins over state", run("r1", "inventory", gateway.StateReady, epochB, 14), true, false, "inventory — waiting for approval · epoch S2BBBBBB · catalog r14"},
		{"identity pending, no catalog yet", run("r1", "inventory", gateway.StateIdentityPending, epochB, 0), false, false, "inventory — identity pending · epoch S2BBBBBB"},
		{"failed before any epoch", run("r1", "inventory", gateway.StateFailed, "", 0), false, false, "inventory — failed"},
		{"crash-looping", run("r1", "echo", gateway.StateCrashLooping, epochA, 2), false, false, "echo — crash-looping · epoch S2AAAAAA · catalog r2"},
		{"two runs of a label name the agent", run("r1", "echo", gateway.StateReady, epochA, 2), false, true, "echo (claude 4242) — ready · epoch S2AAAAAA · catalog r2"},
		{"unknown state shown as is", run("r1", "echo", gateway.State("odd"), "", 0), false, false, "echo — odd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := runLine(tt.st, tt.waiting, tt.withAgent); got != tt.want {
				t.Errorf("runLine = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStateText(t *testing.T) {
	want := map[gateway.State]string{
		gateway.StateStarting: "starting", gateway.StateIdentityPending: "identity pending",
		gateway.StateCatalogPending: "fetching tools", gateway.StateReady: "ready",
		gateway.StateRestarting: "restarting", gateway.StateCrashLooping: "crash-looping",
		gateway.StateFailed: "failed", gateway.StateEnded: "ended",
	}
	got := map[gateway.State]string{}
	for s := range want {
		got[s] = stateText(s, false)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stateText (-want +got):\n%s", d)
	}
}

func TestMenuModel(t *testing.T) {
	pendingFor := func(runs ...string) []authz.Request {
		var out []authz.Request
		for i, r := range runs {
			out = append(out, authz.Request{ID: ids.RequestID("apr_" + r), Card: authz.Card{AgentRun: ids.RunID(r)}, Created: time.Unix(int64(i), 0)})
		}
		return out
	}
	sep := menuEntry{Kind: entrySeparator}
	tail := func(login menuEntry) []menuEntry {
		return []menuEntry{sep,
			{Kind: entryPrefs, Label: "Preferences…"},
			{Kind: entryAudit, Label: "Audit log…"},
			login,
			sep,
			{Kind: entryQuit, Label: "Quit Portcullis"},
		}
	}
	loginOff := menuEntry{Kind: entryLogin, Label: "Launch at login", Disabled: true}
	failedRun := run("r9", "notes", gateway.StateFailed, "", 0)
	failedRun.Reason = "server process exited before answering initialize: exit status 1"
	endedFailed := run("r8", "pub", gateway.StateFailed, epochA, 0)
	endedFailed.Reason = "crashed: killed by SIGSEGV"
	recent := []decided{{ID: "apr_9", Server: "notes", Tool: "notes_write", Outcome: "approved once", At: time.Date(2026, 9, 1, 19, 4, 0, 0, time.Local)}}
	tests := []struct {
		name    string
		rep     daemon.StatusReport
		pending []authz.Request
		login   loginState
		recent  []decided
		want    []menuEntry
	}{
		{
			name: "no servers configured",
			want: append([]menuEntry{
				{Kind: entryInfo, Label: "No servers configured", Disabled: true},
				sep,
				{Kind: entryApprovals, Label: "No approvals waiting", Disabled: true},
			}, tail(loginOff)...),
		},
		{
			name:  "servers idle, no agent; launch at login on",
			rep:   daemon.StatusReport{Servers: []daemon.ServerInfo{{Label: "notes"}, {Label: "echo"}}},
			login: loginState{Available: true, Enabled: true},
			want: append([]menuEntry{
				{Kind: entryServer, Label: "echo — idle", Server: "echo"},
				{Kind: entryServer, Label: "notes — idle", Server: "notes"},
				sep,
				{Kind: entryApprovals, Label: "No approvals waiting", Disabled: true},
			}, tail(menuEntry{Kind: entryLogin, Label: "Launch at login", Checked: true})...),
		},
		{
			name: "running: one run with its epoch, two runs counted, one waiting; failed with the reason, live or ended; restarts per live label",
			rep: daemon.StatusReport{
				Servers: []daemon.ServerInfo{{Label: "pub"}, {Label: "echo"}, {Label: "notes"}, {Label: "files"}},
				Runs: []gateway.Status{
					run("r1", "files", gateway.StateReady, epochB, 4),
					run("r2", "echo", gateway.StateReady, epochA, 1),
					run("r3", "files", gateway.StateIdentityPending, epochA, 0),
					run("r4", "echo", gateway.StateReady, epochB, 1),
					failedRun,
				},
				Ended: []gateway.Status{endedFailed},
			},
			pending: pendingFor("r1", "r1"),
			login:   loginState{Available: true},
			recent:  recent,
			want: append([]menuEntry{
				{Kind: entryServer, Label: "echo — running, 2 runs", Server: "echo"},
				{Kind: entryServer, Label: "files — waiting for approval, 2 runs", Server: "files"},
				{Kind: entryServer, Label: "notes — failed: server process exited before answering initialize: exit status 1", Server: "notes"},
				{Kind: entryServer, Label: "pub — failed: crashed: killed by SIGSEGV", Server: "pub"},
				sep,
				{Kind: entryApprovals, Label: "Approvals (2)…"},
				{Kind: entryRestart, Label: "Restart echo", Server: "echo"},
				{Kind: entryRestart, Label: "Restart files", Server: "files"},
				{Kind: entryRestart, Label: "Restart notes", Server: "notes"},
				sep,
				{Kind: entryInfo, Label: "Recent decisions", Disabled: true},
				{Kind: entryRecent, Label: "19:04  `notes_write` on notes — approved once", Request: "apr_9"},
			}, tail(menuEntry{Kind: entryLogin, Label: "Launch at login", Icon: true})...),
		},
		{
			name: "one run: its state, epoch and revision",
			rep:  daemon.StatusReport{Servers: []daemon.ServerInfo{{Label: "echo"}}, Runs: []gateway.Status{run("r2", "echo", gateway.StateReady, epochA, 1)}},
			want: append([]menuEntry{
				{Kind: entryServer, Label: "echo — ready · epoch S2AAAAAA · catalog r1", Server: "echo"},
				sep,
				{Kind: entryApprovals, Label: "No approvals waiting", Disabled: true},
				{Kind: entryRestart, Label: "Restart echo", Server: "echo"},
			}, tail(loginOff)...),
		},
		{
			name: "a configuration change that waits for the person",
			rep:  daemon.StatusReport{PendingChange: &daemon.PendingChange{ID: "chg-0123456789ab"}, Servers: []daemon.ServerInfo{{Label: "echo"}}},
			want: append([]menuEntry{
				{Kind: entryInfo, Label: "config.json change chg-0123456789ab widens trust: not in force until confirmed (portcullis changes)", Disabled: true},
				{Kind: entryServer, Label: "echo — idle", Server: "echo"},
				sep,
				{Kind: entryApprovals, Label: "No approvals waiting", Disabled: true},
			}, tail(loginOff)...),
		},
		{
			name: "invalid configuration is said first; a run's label is listed though the file names none",
			rep:  daemon.StatusReport{ConfigError: "config.json:3:4: bad", Runs: []gateway.Status{run("r1", "echo", gateway.StateFailed, "", 0)}},
			want: append([]menuEntry{
				{Kind: entryInfo, Label: "Configuration file missing or invalid: the last good one is in force", Disabled: true},
				{Kind: entryServer, Label: "echo — failed", Server: "echo"},
				sep,
				{Kind: entryApprovals, Label: "No approvals waiting", Disabled: true},
				{Kind: entryRestart, Label: "Restart echo", Server: "echo"},
			}, tail(loginOff)...),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := menuModel(tt.rep, tt.pending, tt.login, tt.recent)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("menuModel (-want +got):\n%s", d)
			}
		})
	}
}

func TestTrayStateOf(t *testing.T) {
	ready := run("r1", "a", gateway.StateReady, epochA, 1)
	failed := run("r2", "b", gateway.StateFailed, "", 0)
	looping := run("r3", "c", gateway.StateCrashLooping, epochA, 1)
	pending := run("r4", "d", gateway.StateIdentityPending, epochB, 0)
	tests := []struct {
		name    string
		runs    []gateway.Status
		pending int
		want    TrayState
	}{
		{"nothing running", nil, 0, TrayReady},
		{"all ready", []gateway.Status{ready, pending}, 0, TrayReady},
		{"failed", []gateway.Status{ready, failed}, 0, TrayFailed},
		{"crash-looping", []gateway.Status{looping}, 0, TrayFailed},
		{"approval waiting", []gateway.Status{ready}, 1, TrayApproval},
		{"approval wins over failure", []gateway.Status{failed}, 2, TrayApproval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := trayStateOf(daemon.StatusReport{Runs: tt.runs}, tt.pending); got != tt.want {
				t.Errorf("trayStateOf = %v, want %v", got, tt.want)
			}
		})
	}
	tampered := daemon.StatusReport{Runs: []gateway.Status{ready}, Audit: daemon.AuditStatus{Tampered: "log_tampered at seq 4"}}
	if got := trayStateOf(tampered, 0); got != TrayFailed {
		t.Errorf("trayStateOf(a tampered log) = %v, want %v", got, TrayFailed)
	}
	found := false
	for _, e := range menuModel(tampered, nil, loginState{}, nil) {
		found = found || strings.Contains(e.Label, "tampered") && strings.Contains(e.Label, "audit acknowledge")
	}
	if !found {
		t.Error("the tray menu does not say the audit log was tampered with")
	}
}

// TestTrayShowsDegradedService: a daemon service that stopped and is being
// restarted turns the icon to failed and has a line of its own in the
// menu, naming it.
func TestTrayShowsDegradedService(t *testing.T) {
	rep := daemon.StatusReport{Runs: []gateway.Status{run("r1", "a", gateway.StateReady, epochA, 1)},
		Degraded: []daemon.ServiceFault{{Service: "build watcher", Error: "inotify: no space left on device", Stops: 2}}}
	if got := trayStateOf(rep, 0); got != TrayFailed {
		t.Errorf("trayStateOf(a degraded daemon) = %v, want %v", got, TrayFailed)
	}
	var lines []string
	for _, e := range menuModel(rep, nil, loginState{}, nil) {
		if strings.Contains(e.Label, "build watcher") {
			lines = append(lines, e.Label)
		}
	}
	if want := []string{"Degraded: the build watcher stopped and is being restarted (portcullis status)"}; !slices.Equal(lines, want) {
		t.Errorf("menu lines naming the build watcher: %q, want %q", lines, want)
	}
}

// TestTrayTextsEscaped: what a server wrote (a failure's reason, a tool's
// name) reaches the tray menu and the notifications escaped: no control,
// bidi or zero-width character gets through.
func TestTrayTextsEscaped(t *testing.T) {
	evil := "drop_all\x1b[2K\u202eelif\u200d"
	failed := run("r1", "inventory", gateway.StateFailed, epochA, 3)
	failed.Reason = "crashed: " + evil
	req := authz.Request{ID: "apr_1", Card: authz.Card{AgentRun: "r1", ServerLabel: "inventory", Tool: evil, Reason: "first use of " + evil}}
	var texts []string
	for _, e := range menuModel(daemon.StatusReport{Runs: []gateway.Status{failed}}, []authz.Request{req}, loginState{}, []decided{{ID: "apr_0", Tool: evil}}) {
		texts = append(texts, e.Label)
	}
	notes := &fakeNotifier{added: make(chan struct{}, 4)}
	tr := NewTray(test.NewTempApp(t), Options{Daemon: newFakeDaemon(), Approvals: newFakeApprovals(), Notifier: notes, Clock: func() time.Time { return testNow }})
	tr.notify(req)
	for _, n := range notes.all() {
		texts = append(texts, n.Title, n.Body)
	}
	gone := decided{ID: "apr_2", Server: "inventory", Tool: evil, Outcome: "withdrawn", Why: "the epoch ended: " + evil, At: testNow, Missed: true}
	title, body := missedText(gone)
	texts = append(texts, title, body, gone.outcomeText(), gone.menuLine())
	if len(notes.all()) != 1 {
		t.Fatalf("notifications %+v", notes.all())
	}
	for _, s := range texts {
		for _, r := range s {
			if r != '\n' && textsafe.Unsafe(r) {
				t.Errorf("raw %U in %q", r, s)
			}
		}
	}
}
