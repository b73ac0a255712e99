// Package loginitem declares how Portcullis starts itself when the person logs
// in, and generates the files that make it so: a launchd LaunchAgent property
// list on macOS (launchd.plist(5), Apple's "Creating Launch Daemons and
// Agents") and an XDG autostart desktop entry on Linux (freedesktop.org Desktop
// Application Autostart Specification 0.5 and Desktop Entry Specification
// 1.5). The generators are pure functions; package platform writes their
// output to the right place and implements [Item].
package loginitem

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode"
)

// ID names Portcullis to the login machinery: the launchd Label of the
// LaunchAgent, the bundle identifier it is associated with, and the desktop
// file ID of the autostart entry (ID + ".desktop"). It equals the
// application's identifier in FyneApp.toml.
const ID = "dev.portcullis.app"

// ErrUnsupported is wrapped by the errors of systems that have no login item
// implementation; the error text names the system (runtime.GOOS).
var ErrUnsupported = errors.New("launch at login is not supported on this system")

// ErrBadExecutable is wrapped by [CheckExecutable]'s errors.
var ErrBadExecutable = errors.New("cannot launch this executable at login")

// Item is the setting "launch Portcullis at login" of the current user.
// Implementations are safe to call from any goroutine but are not meant to be
// called concurrently with each other.
type Item interface {
	// Enabled reports whether Portcullis will be started at the next login.
	// It returns an error only when that cannot be determined (for example
	// an unreadable file).
	Enabled() (bool, error)
	// Enable makes Portcullis start at every login, running the executable
	// of the current process. It is idempotent and also repairs an entry
	// that points to an older location of the executable.
	Enable() error
	// Disable stops Portcullis from starting at login. Disabling when it is
	// not enabled is not an error. It never stops the running process.
	Disable() error
}

// CheckExecutable returns nil if exe can be written into a login item: an
// absolute path without control characters (which neither a property list
// nor a desktop entry can carry). Otherwise the error wraps
// [ErrBadExecutable] and quotes the path.
func CheckExecutable(exe string) error {
	switch {
	case !filepath.IsAbs(exe):
		return fmt.Errorf("%w: %q is not an absolute path", ErrBadExecutable, exe)
	case strings.IndexFunc(exe, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %q contains a control character", ErrBadExecutable, exe)
	}
	return nil
}

// LaunchAgentPlist returns the launchd property list (XML, UTF-8, tab
// indented, final newline) that starts exe, without arguments, at every login
// of the person into the graphical session:
//
//   - Label is label (launchd's job name; Portcullis uses [ID]);
//   - ProgramArguments is [exe];
//   - RunAtLoad is true and LimitLoadToSessionType is "Aqua", so the job
//     starts once when the GUI session begins and never in an SSH session;
//   - ProcessType is "Interactive" (a UI app: no resource throttling);
//   - AssociatedBundleIdentifiers is [bundleID] when bundleID is not empty,
//     so that System Settings › Login Items shows the app's name and icon
//     (macOS 13 and later) instead of the executable's.
//
// Strings are escaped for XML (encoding/xml.EscapeText); exe should pass
// [CheckExecutable], since characters XML cannot carry are replaced by
// U+FFFD.
func LaunchAgentPlist(label, exe, bundleID string) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	b.WriteString(`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">` + "\n")
	b.WriteString(`<plist version="1.0">` + "\n<dict>\n")
	key := func(k string) { fmt.Fprintf(&b, "\t<key>%s</key>\n", k) }
	str := func(indent, s string) {
		b.WriteString(indent + "<string>")
		xml.EscapeText(&b, []byte(s)) // writes to a bytes.Buffer: cannot fail
		b.WriteString("</string>\n")
	}
	key("Label")
	str("\t", label)
	key("ProgramArguments")
	b.WriteString("\t<array>\n")
	str("\t\t", exe)
	b.WriteString("\t</array>\n")
	key("RunAtLoad")
	b.WriteString("\t<true/>\n")
	key("LimitLoadToSessionType")
	str("\t", "Aqua")
	key("ProcessType")
	str("\t", "Interactive")
	if bundleID != "" {
		key("AssociatedBundleIdentifiers")
		b.WriteString("\t<array>\n")
		str("\t\t", bundleID)
		b.WriteString("\t</array>\n")
	}
	b.WriteString("</dict>\n</plist>\n")
	return b.Bytes()
}

// DesktopEntry returns the XDG autostart desktop entry (Desktop Entry
// Specification 1.5, UTF-8, final newline) that starts exe, without
// arguments, when the person logs in to a desktop session: Type=Application,
// Name=Portcullis, Exec with exe quoted as [ExecArg] does, Terminal=false and
// X-GNOME-Autostart-enabled=true. It is written to
// $XDG_CONFIG_HOME/autostart/ID.desktop. exe should pass [CheckExecutable].
func DesktopEntry(exe string) []byte {
	var b strings.Builder
	b.WriteString("[Desktop Entry]\n")
	b.WriteString("Type=Application\n")
	b.WriteString("Version=1.5\n")
	b.WriteString("Name=Portcullis\n")
	b.WriteString("Comment=Supervises the local MCP servers that AI agents use\n")
	b.WriteString("Exec=" + ExecArg(exe) + "\n")
	b.WriteString("Terminal=false\n")
	b.WriteString("X-GNOME-Autostart-enabled=true\n")
	return []byte(b.String())
}

// execReserved are the characters that force an Exec argument to be quoted
// (Desktop Entry Specification 1.5, "The Exec key").
const execReserved = " \t\n\"'\\><~|&;$*?#()`"

// ExecArg encodes one argument for the Exec key of a desktop entry, as the
// Desktop Entry Specification 1.5 ("The Exec key") requires: an argument
// holding a reserved character (space, tab, newline, " ' \ > < ~ | & ; $ * ?
// # ( ) or `) is enclosed in double quotes with ", `, $ and \ preceded by a
// backslash; a literal % is written %%; then the general escape rule of
// string values doubles every backslash (it is undone first when the file is
// read), and tabs, newlines and carriage returns become \t, \n and \r. So a
// literal backslash inside quotes ends up as four backslashes, as the
// specification notes.
func ExecArg(s string) string {
	arg := s
	if strings.ContainsAny(s, execReserved) {
		var q strings.Builder
		q.WriteByte('"')
		for _, r := range s {
			if strings.ContainsRune("\"`$\\", r) {
				q.WriteByte('\\')
			}
			q.WriteRune(r)
		}
		q.WriteByte('"')
		arg = q.String()
	}
	arg = strings.ReplaceAll(arg, "%", "%%")
	return strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`).Replace(arg)
}

// DesktopEntryEnabled reports whether an autostart desktop entry (the bytes
// of the file) asks to be started: false when its [Desktop Entry] group says
// Hidden=true or X-GNOME-Autostart-enabled=false (the ways desktops and
// people switch an entry off without deleting it), true otherwise.
func DesktopEntryEnabled(data []byte) bool {
	group := ""
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			group = line
			continue
		}
		if group != "[Desktop Entry]" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case k == "Hidden" && v == "true":
			return false
		case k == "X-GNOME-Autostart-enabled" && v == "false":
			return false
		}
	}
	return true
}

// LaunchdDisabled reports whether the output of `launchctl print-disabled
// gui/UID` marks label as disabled: a line `"LABEL" => disabled` (macOS 13
// and later) or `"LABEL" => true` (earlier releases). Such an override makes
// launchd skip the LaunchAgent at login even though its plist exists.
func LaunchdDisabled(printDisabled []byte, label string) bool {
	quoted := `"` + label + `"`
	for line := range strings.Lines(string(printDisabled)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=>")
		if !ok || strings.TrimSpace(k) != quoted {
			continue
		}
		switch strings.TrimSpace(v) {
		case "disabled", "true":
			return true
		}
	}
	return false
}
