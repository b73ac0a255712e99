package identity

import (
	"os"
	"path/filepath"
	"testing"
)

func TestEntryArg(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"s.js", "s.py", "app.jar", "run.sh", "run"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		kind string
		args []string
		want string // relative to dir, "" for none
	}{
		{kindNode, []string{"s.js"}, "s.js"},
		{kindNode, []string{"--inspect=0", "-r", "s.py", "s.js"}, "s.js"},
		{kindNode, []string{"--import=./s.py", "s.js"}, "s.js"},
		{kindNode, []string{"-e", "s.js"}, ""},
		{kindNode, []string{"missing.js", "s.js"}, ""},
		{kindNode, []string{"d"}, ""},
		{kindNode, []string{"--", "s.js"}, "s.js"},
		{kindNode, []string{filepath.Join(dir, "s.js")}, "s.js"},
		{kindPython, []string{"-u", "s.py"}, "s.py"},
		{kindPython, []string{"-um", "s.py"}, ""},
		{kindPython, []string{"-m", "s"}, ""},
		{kindPython, []string{"-c", "print(1)"}, ""},
		{kindPython, []string{"-W", "ignore", "s.py"}, "s.py"},
		{kindPython, []string{"-Wignore", "s.py"}, "s.py"},
		{kindPython, []string{"-X", "dev", "s.py"}, "s.py"},
		{kindDeno, []string{"run", "-A", "--config", "s.py", "s.js"}, "s.js"},
		{kindDeno, []string{"task", "start"}, ""},
		{kindBun, []string{"run", "s.js"}, "s.js"},
		{kindBun, []string{"s.js"}, "s.js"},
		{kindJava, []string{"-cp", "app.jar", "Main"}, ""},
		{kindJava, []string{"-jar", "app.jar"}, "app.jar"},
		{kindShell, []string{"-e", "run.sh"}, "run.sh"},
		{kindShell, []string{"-ec", "run"}, ""},
		{kindShell, []string{"-o", "pipefail", "run.sh"}, "run.sh"},
		{kindUV, []string{"run", "s.py"}, ""},
		{"", []string{"s.js"}, ""},
	}
	for _, tt := range tests {
		want := ""
		if tt.want != "" {
			want = filepath.Join(dir, tt.want)
		}
		if got := entryArg(tt.kind, tt.args, dir); got != want {
			t.Errorf("entryArg(%s, %q) = %q, want %q", tt.kind, tt.args, got, want)
		}
	}
}

func TestRuntimeKind(t *testing.T) {
	tests := map[string]string{
		"node": kindNode, "/usr/bin/nodejs": kindNode, "python": kindPython, "python3": kindPython,
		"/usr/bin/python3.12": kindPython, "python-config": "", "deno": kindDeno, "bun": kindBun,
		"uv": kindUV, "uvx": kindUV, "java": kindJava, "/bin/dash": kindShell, "bash": kindShell,
		"npx": "", "server": "",
	}
	for in, want := range tests {
		if got := runtimeKind(in); got != want {
			t.Errorf("runtimeKind(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct{ kind, out, want string }{
		{kindNode, "v22.14.0\n", "node v22.14.0"},
		{kindPython, "Python 3.12.3\n", "python 3.12.3"},
		{kindDeno, "deno 2.1.4 (stable, release, x86_64-unknown-linux-gnu)\nv8 13.0\n", "deno 2.1.4"},
		{kindBun, "1.1.38\n", "bun 1.1.38"},
		{kindUV, "uv 0.5.11 (c4d0caaee 2024-12-19)\n", "uv 0.5.11"},
		{kindJava, "\nopenjdk 21.0.5 2024-10-15\nOpenJDK Runtime\n", "java 21.0.5"},
		{kindNode, "custom build\n", "node custom build"},
		{kindNode, "", ""},
	}
	for _, tt := range tests {
		if got := parseVersion(tt.kind, tt.out); got != tt.want {
			t.Errorf("parseVersion(%q) = %q, want %q", tt.out, got, tt.want)
		}
	}
}

func TestShebang(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		content       string
		path, program string
		isScript      bool
	}{
		{"#!/bin/sh\necho\n", "/bin/sh", "/bin/sh", true},
		{"#! /usr/bin/env node\n", "/usr/bin/env", "node", true},
		{"#!/usr/bin/env -S node --no-warnings\n", "/usr/bin/env", "node", true},
		{"#!/usr/bin/env -u HOME FOO=1 python3\n", "/usr/bin/env", "python3", true},
		{"#!/usr/bin/python3 -u\n", "/usr/bin/python3", "/usr/bin/python3", true},
		{"\x7fELF\x02\x01", "", "", false},
		{"", "", "", false},
	}
	for i, tt := range tests {
		p := filepath.Join(dir, string(rune('a'+i)))
		if err := os.WriteFile(p, []byte(tt.content), 0o755); err != nil {
			t.Fatal(err)
		}
		sb, err := readShebang(p)
		if err != nil {
			t.Errorf("%q: %v", tt.content, err)
			continue
		}
		if (sb != nil) != tt.isScript {
			t.Errorf("%q: script = %v", tt.content, sb != nil)
			continue
		}
		if sb != nil && (sb.path != tt.path || sb.program != tt.program) {
			t.Errorf("%q: path %q program %q, want %q %q", tt.content, sb.path, sb.program, tt.path, tt.program)
		}
	}
}
