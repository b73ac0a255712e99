package platform

import (
	"path/filepath"
	"slices"
	"strings"
)

// seatbelt is one server's macOS sandbox (sandbox-exec), written the way
// the sandbox runtime of Claude Code's tools writes its profiles: reads
// allowed but for what is hidden, writes denied but for the server's
// working directory, its write paths, the temporary directories and its
// runtime's caches, and within those never the person's start-up files
// nor the PATH directories; no signal to a process outside the sandbox;
// for strict, no network. Every path is absolute and resolved (Seatbelt
// compares the kernel's paths: /tmp is /private/tmp).
type seatbelt struct {
	level    string
	hide     []string // Portcullis's directories, sockets: neither read nor written
	write    []string // writable: cwd, write paths, temporary directories, caches
	readOnly []string // never writable: start-up files, PATH directories
}

// profile returns the SBPL text. In SBPL the last rule that matches an
// operation decides, so each narrower rule follows the broader one it
// overrides.
func (s seatbelt) profile() string {
	var b strings.Builder
	b.WriteString("(version 1)\n")
	b.WriteString("(allow default)\n")
	b.WriteString("; Writes: denied but for these.\n(deny file-write*)\n")
	b.WriteString("(allow file-write*\n")
	for _, l := range []string{"/dev/null", "/dev/zero", "/dev/tty", "/dev/dtracehelper"} {
		b.WriteString("    (literal " + sbplString(l) + ")\n")
	}
	b.WriteString("    (regex #\"^/dev/fd/[0-9]+$\")\n")
	for _, p := range sortedUnique(s.write) {
		b.WriteString("    (subpath " + sbplString(p) + ")\n")
	}
	b.WriteString(")\n")
	if ro := sortedUnique(s.readOnly); len(ro) > 0 {
		b.WriteString("; Start-up files and PATH directories: never written.\n(deny file-write*\n")
		for _, p := range ro {
			b.WriteString("    (subpath " + sbplString(p) + ")\n")
		}
		b.WriteString(")\n")
	}
	if h := sortedUnique(s.hide); len(h) > 0 {
		b.WriteString("; Portcullis's own files: neither read nor written.\n(deny file-read* file-write*\n")
		for _, p := range h {
			b.WriteString("    (subpath " + sbplString(p) + ")\n")
		}
		b.WriteString(")\n")
	}
	b.WriteString("; Signals only inside the sandbox: not to the daemon nor the agent.\n(deny signal)\n(allow signal (target same-sandbox))\n")
	b.WriteString("; No debugging of other processes.\n(deny process-info* (target others))\n(allow process-info-pidinfo)\n")
	if s.level == SandboxStrict {
		b.WriteString("; strict: no network.\n(deny network*)\n")
	}
	return b.String()
}

// sbplString quotes s as an SBPL (Scheme) string literal.
func sbplString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

func sortedUnique(ps []string) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if p != "" && filepath.IsAbs(p) {
			out = append(out, filepath.Clean(p))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
