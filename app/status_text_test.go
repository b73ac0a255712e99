package app

import (
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
)

// TestStatusTextUnsignedOneLine: why the audit log is not signed takes one
// line of status, however long the daemon's note.
func TestStatusTextUnsignedOneLine(t *testing.T) {
	var b strings.Builder
	writeStatus(&b, daemon.StatusReport{Audit: daemon.AuditStatus{Note: "the audit log is not signed: its key cannot be kept in the credential store (the Secret Service is not running: org.freedesktop.DBus.Error.ServiceUnknown: The name org.freedesktop.secrets was not provided by any .service files); the log is hash-chained all the same, and signing starts at the first daemon start where the credential store works (start gnome-keyring-daemon or KeePassXC with Secret Service integration)"}})
	var lines []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.Contains(l, "signed") || strings.Contains(l, "Secret Service") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || len(lines[0]) > 200 || !strings.Contains(lines[0], "its key cannot be kept in the credential store") || !strings.Contains(lines[0], "portcullis help audit") {
		t.Errorf("status lines about signing: %q", lines)
	}
}

// TestStatusTextCause: a failed run shows the line of its stderr that names
// the cause; a running one does not single out a line.
func TestStatusTextCause(t *testing.T) {
	tail := []string{"node:internal/modules/cjs/loader:1228", "  throw err;", "Error: Cannot find module '/src/server.mjs'", "    at Module._resolveFilename (node:internal/modules/cjs/loader:1225:15)", "  code: 'MODULE_NOT_FOUND',", "}", "Node.js v20.20.2"}
	var b strings.Builder
	writeRun(&b, gateway.Status{Label: "mysrv", State: gateway.StateFailed, StderrTail: tail})
	if !strings.Contains(b.String(), "  cause     Error: Cannot find module '/src/server.mjs'\n") {
		t.Errorf("failed run:\n%s", b.String())
	}
	b.Reset()
	writeRun(&b, gateway.Status{Label: "mysrv", State: gateway.StateReady, StderrTail: tail})
	if strings.Contains(b.String(), "cause") {
		t.Errorf("running run shows a cause:\n%s", b.String())
	}
}

// TestShortAuditNote: the setting that turned signing off stays named; a
// long error is cut.
func TestShortAuditNote(t *testing.T) {
	for note, want := range map[string]string{
		daemon.AuditSigningOffNote: "signing is turned off in settings (settings.auditSigning)",
		"the audit log is not signed: its key cannot be kept in the credential store (the Secret Service is not running: org.freedesktop.DBus.Error.ServiceUnknown); the log is hash-chained": "its key cannot be kept in the credential store",
		"the audit log is not signed: the daemon was started without a key": "the daemon was started without a key",
	} {
		if got := shortAuditNote(note); got != want {
			t.Errorf("shortAuditNote(%q) = %q, want %q", note, got, want)
		}
	}
}

// TestStatusTextTelemetry: status says where telemetry goes, what it sent
// and dropped, and nothing when it is off.
func TestStatusTextTelemetry(t *testing.T) {
	var b strings.Builder
	rep := daemon.StatusReport{Telemetry: &daemon.TelemetryStatus{Destination: "http://127.0.0.1:4318 (http/protobuf)"}}
	rep.Telemetry.Exported, rep.Telemetry.Dropped, rep.Telemetry.LastError = 12, 3, "connection refused"
	writeStatus(&b, rep)
	if !strings.Contains(b.String(), "Telemetry: exported to http://127.0.0.1:4318 (http/protobuf); 12 sent, 3 dropped (last error: connection refused)\n") {
		t.Errorf("status with telemetry:\n%s", b.String())
	}
	b.Reset()
	writeStatus(&b, daemon.StatusReport{})
	if strings.Contains(b.String(), "Telemetry") {
		t.Errorf("status without telemetry mentions it:\n%s", b.String())
	}
}

// TestStatusTextDegraded: a daemon service that stopped is named in the
// status text with its error and when it is restarted.
func TestStatusTextDegraded(t *testing.T) {
	var b strings.Builder
	last := time.Date(2026, 12, 6, 7, 0, 0, 0, time.Local)
	writeStatus(&b, daemon.StatusReport{Degraded: []daemon.ServiceFault{{Service: "build watcher", Error: "inotify: no space left on device\x1b[2K", Stops: 3, Since: last, Last: last, Restart: last.Add(4 * time.Second)}}})
	want := "Degraded: the daemon's build watcher stopped (3 times in a row, last at 07:00:00) and is restarted at 07:00:04:\n  inotify: no space left on device\\x1b[2K\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("status text:\n%s\nwant it to hold:\n%s", b.String(), want)
	}
}

// TestStatusListsIdleServers: a configured server no agent is connected to
// is named, not left out behind "No agent runs."
func TestStatusListsIdleServers(t *testing.T) {
	var b strings.Builder
	writeStatus(&b, daemon.StatusReport{Servers: []daemon.ServerInfo{{Label: "notes", Command: "/bin/notes"}, {Label: "busy", Command: "/bin/busy", Runs: 1}, {Label: "inv", Command: "/bin/inv"}}})
	if !strings.Contains(b.String(), "Configured, no agent connected: notes, inv (their commands: portcullis servers list)\n") {
		t.Errorf("status does not name the idle servers:\n%s", b.String())
	}
	b.Reset()
	writeStatus(&b, daemon.StatusReport{})
	if strings.Contains(b.String(), "Configured, no agent connected") {
		t.Errorf("status names idle servers when none is configured:\n%s", b.String())
	}
}
