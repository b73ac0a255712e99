package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSplitTrustSessionBus: giving a server the session bus (where the
// Secret Service answers) waits for the person; taking it away applies at
// once.
func TestSplitTrustSessionBus(t *testing.T) {
	cases := []splitCase{{
		name: "sessionBus turned on",
		edit: func(c *Config) { s := c.Servers["plain"]; s.SessionBus = true; c.Servers["plain"] = s },
		held: []Widening{{Kind: WidenSessionBus, Server: "plain", Text: "plain: sessionBus false → true (the server reaches the session bus and the Secret Service on it)"}},
		check: func(t *testing.T, in *Config) {
			if in.Servers["plain"].SessionBus {
				t.Error("sessionBus is in force before the person confirmed it")
			}
		},
	}, {
		name: "a new server with sessionBus",
		edit: func(c *Config) { c.Servers["new"] = Server{Command: "/bin/new", SessionBus: true} },
		held: []Widening{{Kind: WidenSessionBus, Server: "new", Text: "new: sessionBus false → true (the server reaches the session bus and the Secret Service on it)"}},
		check: func(t *testing.T, in *Config) {
			if s, ok := in.Servers["new"]; !ok || s.SessionBus {
				t.Errorf("in force: %+v (present %v), want the new server without the bus", s, ok)
			}
		},
	}}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) { tt.run(t) })
	}
	// Turning it off narrows: nothing held.
	applied := trustBase()
	s := applied.Servers["plain"]
	s.SessionBus = true
	applied.Servers["plain"] = s
	edited := trustBase()
	if in, held := SplitTrust(applied, edited); len(held) != 0 || in.Servers["plain"].SessionBus {
		t.Errorf("sessionBus turned off: held %v, in force %v", held, in.Servers["plain"].SessionBus)
	}
}

// TestValidateEnvSessionBus: the bus is given with sessionBus, never
// through env, which would pass by the person's confirmation.
func TestValidateEnvSessionBus(t *testing.T) {
	c := &Config{Servers: map[string]Server{"a": {Command: "x", Env: map[string]string{"DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1/bus"}}}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `set "sessionBus": true`) {
		t.Fatalf("Validate = %v, want a refusal naming sessionBus", err)
	}
}

// TestSplitTrustSandbox: lowering a server's sandbox waits for the person
// (unset is the default, standard: unset → off is lowered); raising it
// applies at once; an unknown level does not validate.
func TestSplitTrustSandbox(t *testing.T) {
	with := func(level string) *Config {
		c := trustBase()
		s := c.Servers["plain"]
		s.Sandbox = level
		c.Servers["plain"] = s
		return c
	}
	for _, tc := range []struct {
		from, to string
		held     bool
	}{
		{SandboxStrict, SandboxStandard, true},
		{SandboxStrict, "", true},
		{SandboxStrict, SandboxOff, true},
		{"", SandboxOff, true},
		{SandboxStandard, SandboxOff, true},
		{SandboxStandard, "", false},
		{"", SandboxStandard, false},
		{"", SandboxStrict, false},
		{SandboxOff, "", false},
		{SandboxStandard, SandboxStrict, false},
	} {
		in, held := SplitTrust(with(tc.from), with(tc.to))
		if got := len(held) == 1 && held[0].Kind == WidenSandbox; got != tc.held || (!tc.held && len(held) != 0) {
			t.Errorf("%q → %q: held %v, want held %v", tc.from, tc.to, held, tc.held)
		}
		if want := tc.to; tc.held && in.Servers["plain"].Sandbox != tc.from || !tc.held && in.Servers["plain"].Sandbox != want {
			t.Errorf("%q → %q: in force %q", tc.from, tc.to, in.Servers["plain"].Sandbox)
		}
	}
	// A new server below the default is held and starts at the default,
	// so that removing a server and adding it back lowers nothing.
	for _, level := range []string{SandboxOff, "", SandboxStandard, SandboxStrict} {
		applied, edited := trustBase(), with(level)
		edited.Servers["fresh"] = edited.Servers["plain"]
		in, held := SplitTrust(applied, edited)
		var got []Widening
		for _, w := range held {
			if w.Server == "fresh" && w.Kind == WidenSandbox {
				got = append(got, w)
			}
		}
		if wantHeld := level == SandboxOff; (len(got) == 1) != wantHeld || wantHeld && (in.Servers["fresh"].Sandbox != "" || !strings.Contains(got[0].Text, "fresh: sandbox (new server: default standard) → off")) {
			t.Errorf("a new server with sandbox %q: held %v, in force %q", level, got, in.Servers["fresh"].Sandbox)
		}
	}
	if err := with("paranoid").Validate(); err == nil || !strings.Contains(err.Error(), "sandbox must be") {
		t.Errorf("Validate of sandbox paranoid: %v", err)
	}
}

// TestSplitTrustWrite: a write path added to a server (a new server's
// too) waits for the person; removing one applies at once; a relative
// path or / is refused.
func TestSplitTrustWrite(t *testing.T) {
	cases := []splitCase{{
		name: "a write path added",
		edit: func(c *Config) { s := c.Servers["plain"]; s.Write = []string{"/srv/data"}; c.Servers["plain"] = s },
		held: []Widening{{Kind: WidenWrite, Server: "plain", Text: "plain: write paths added: /srv/data (its sandbox lets it write there)"}},
		check: func(t *testing.T, in *Config) {
			if len(in.Servers["plain"].Write) != 0 {
				t.Errorf("write paths in force before the person confirmed them: %v", in.Servers["plain"].Write)
			}
		},
	}, {
		name: "a new server with write paths",
		edit: func(c *Config) { c.Servers["new"] = Server{Command: "/bin/new", Write: []string{"/srv/a", "/srv/b"}} },
		held: []Widening{{Kind: WidenWrite, Server: "new", Text: "new: write paths added: /srv/a, /srv/b (its sandbox lets it write there)"}},
		check: func(t *testing.T, in *Config) {
			if s, ok := in.Servers["new"]; !ok || len(s.Write) != 0 {
				t.Errorf("in force: %+v (present %v), want the new server without write paths", s, ok)
			}
		},
	}}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) { tt.run(t) })
	}
	applied := trustBase()
	s := applied.Servers["plain"]
	s.Write = []string{"/srv/data", "/srv/more"}
	applied.Servers["plain"] = s
	edited := trustBase()
	s = edited.Servers["plain"]
	s.Write = []string{"/srv/data"}
	edited.Servers["plain"] = s
	if in, held := SplitTrust(applied, edited); len(held) != 0 || len(in.Servers["plain"].Write) != 1 {
		t.Errorf("a write path removed: held %v, in force %v", held, in.Servers["plain"].Write)
	}
	for _, bad := range []string{"relative/dir", "/"} {
		c := trustBase()
		s := c.Servers["plain"]
		s.Write = []string{bad}
		c.Servers["plain"] = s
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "write") {
			t.Errorf("write path %q: %v, want a refusal", bad, err)
		}
	}
}

// TestProposedWrite: the existing directories among a server's arguments,
// absolute or relative to its cwd or after "--flag=", are proposed as its
// write paths; files, missing paths, flags, / and the home are not.
func TestProposedWrite(t *testing.T) {
	cwd, root := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(cwd, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, "server.js"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	s := Server{Command: "node", Cwd: cwd, Args: []string{"server.js", root, "./data", "--db=" + root, "--verbose", "/nonexistent", "/", home, "data"}}
	got := ProposedWrite(s)
	want := []string{root, filepath.Join(cwd, "data")}
	if !slices.Equal(got, want) {
		t.Errorf("ProposedWrite = %q, want %q", got, want)
	}
}
