package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseDesignExample(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "design-example.json"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := &Config{
		Servers: map[string]Server{"inventory-local": {
			Command:     "node",
			Args:        []string{"dist/server.js"},
			Cwd:         "/Users/dev/inventory",
			Env:         map[string]string{"LOG_LEVEL": "debug"},
			Credentials: []string{"inventory-api-staging"},
			Watch:       []string{"dist", "package-lock.json"},
			Restart:     RestartOnChange,
			Tools: map[string]ToolPolicy{
				"inventory_adjust": {Policy: PolicyApprove},
				"inventory_lookup": {Policy: PolicyAllow},
			},
		}},
		Credentials: map[string]Credential{"inventory-api-staging": {Inject: InjectEnv, EnvVar: "INVENTORY_TOKEN"}},
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("parsed design example (-want +got):\n%s", diff)
	}
}

func TestParseSettings(t *testing.T) {
	c, err := Parse([]byte(`{"mcpServers":{"a":{"command":"x","startupTimeout":"1m30s"}},
		"settings":{"approvalTimeout":"45s","holdTimeout":"2s","maxMessageBytes":2097152}}`), "c.json")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := Settings{ApprovalTimeout: Duration(45 * time.Second), HoldTimeout: Duration(2 * time.Second), MaxMessageBytes: 2097152}
	if diff := cmp.Diff(want, c.Settings); diff != "" {
		t.Errorf("settings (-want +got):\n%s", diff)
	}
	if got := c.Servers["a"].StartupTimeoutOrDefault(); got != 90*time.Second {
		t.Errorf("startupTimeout = %v, want 1m30s", got)
	}
}

// TestParseAuditSigning: settings.auditSigning is an optional true or false,
// on when absent; null and other types are refused with their position.
func TestParseAuditSigning(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want *bool
		on   bool
	}{
		{`{}`, nil, true},
		{`{"settings":{}}`, nil, true},
		{`{"settings":{"auditSigning":true}}`, new(true), true},
		{`{"settings":{"auditSigning":false}}`, new(false), false},
	} {
		c, err := Parse([]byte(tc.in), "c.json")
		if err != nil {
			t.Fatalf("Parse(%s): %v", tc.in, err)
		}
		if diff := cmp.Diff(tc.want, c.Settings.AuditSigning); diff != "" || c.Settings.AuditSigningOn() != tc.on {
			t.Errorf("Parse(%s): auditSigning (-want +got):\n%s, on = %v", tc.in, diff, c.Settings.AuditSigningOn())
		}
		data, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := Parse(data, "c.json"); err != nil || back.Settings.AuditSigningOn() != tc.on {
			t.Errorf("round trip of %s: %s, %v", tc.in, data, err)
		}
	}
	for in, reason := range map[string]string{
		`{"settings":{"auditSigning":null}}`:  "null is not allowed: want true or false, or leave the key out",
		`{"settings":{"auditSigning":"off"}}`: `want true or false, not the string "off"`,
		`{"settings":{"auditSigning":0}}`:     "want true or false, not the number 0",
	} {
		_, err := Parse([]byte(in), "c.json")
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("Parse(%s) = %v, want a *ValidationError", in, err)
		}
		want := []Problem{{Path: "settings.auditSigning", Line: 1, Column: 29, Reason: reason}}
		if diff := cmp.Diff(want, ve.Problems); diff != "" {
			t.Errorf("Parse(%s) problems (-want +got):\n%s", in, diff)
		}
	}
}

func TestParseEmptyObject(t *testing.T) {
	for _, in := range []string{`{}`, `{"mcpServers":{}}`, "\ufeff{}\n"} {
		c, err := Parse([]byte(in), "c.json")
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		if c.Servers == nil || len(c.Servers) != 0 {
			t.Errorf("Parse(%q).Servers = %#v, want an empty non-nil map", in, c.Servers)
		}
	}
}

// TestSyntaxErrorPosition checks line and column against a hand-counted file.
func TestSyntaxErrorPosition(t *testing.T) {
	in := `{
  "mcpServers": {
    "inventory": {
      "command": "node",
      "args": ["dist/server.js"],
      "env": {
        "LOG": "x" "Y": "z"
      }
    }
  }
}
`
	_, err := Parse([]byte(in), "config.json")
	var se *SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want *SyntaxError", err, err)
	}
	// Line 7 is `        "LOG": "x" "Y": "z"`; the second '"' string starts at column 20.
	if se.File != "config.json" || se.Line != 7 || se.Column != 20 {
		t.Errorf("position = %s:%d:%d, want config.json:7:20 (%v)", se.File, se.Line, se.Column, err)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("SyntaxError does not match ErrInvalid")
	}
	if got, want := err.Error(), "config.json:7:20: invalid character '\"' after object key:value pair"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestSyntaxErrors marks the expected position with '§', placed right before the
// offending character, or at the end for an unexpected end of file.
func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		name, in, reason string
	}{
		{"missing colon", "{\"mcpServers\" §{}}", "after object key"},
		{"trailing comma in object", "{\"mcpServers\": {\n  \"a\": {\"command\": \"x\"},\n§}}", "looking for beginning of object key"},
		{"trailing comma in array", "{\"mcpServers\": {\"a\": {\"command\": \"x\", \"args\": [\"1\",\n   §]}}}", "looking for beginning of value"},
		{"bad literal", "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\t\"restart\": tru§x}}}", "in literal true"},
		{"control character in string", "{\"mcpServers\": {\"a\": {\"command\": \"no§\tde\"}}}", "in string literal"},
		{"bad escape", "{\"mcpServers\": {\"a\": {\"command\": \"\\§q\"}}}", "in string escape code"},
		{"bad number", "{\"mcpServers\": {\"a\": {\"command\": -§x}}}", "in numeric literal"},
		{"single quotes", "{§'mcpServers': {}}", "looking for beginning of object key"},
		{"comment", "{\n  §// servers\n  \"mcpServers\": {}}", "looking for beginning of object key"},
		{"multibyte before error counts as one column", "{\"mcpServers\": {\"a\": {\"command\": \"é✓😀\" §x}}}", "after object key:value pair"},
		{"unclosed object", "{\"mcpServers\": {\"a\": {\"command\": \"x\"}}\n§", "the object that starts at line 1, column 1 is not closed"},
		{"unclosed inner array", "{\"mcpServers\": {\"a\": {\"args\": [\"x\"§", "the array that starts at line 1, column 31 is not closed"},
		{"unclosed string", "{\"mcpServers\": {\"a\": {\"command\": \"x§", "the string that starts at line 1, column 34 is not closed"},
		{"data after object", "{\"mcpServers\": {}}\n\n  §{}", "unexpected data after the top-level object"},
		{"empty", "§", "the file is empty"},
		{"whitespace only", " \n\t\n§", "the file is empty"},
		{"invalid UTF-8", "{\"mcpServers\": {\"§\xff\": {}}}", "not valid UTF-8"},
		{"BOM not counted", "\ufeff{\"mcpServers\" §1}", "after object key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mark := strings.Index(tt.in, "§")
			in := strings.Replace(tt.in, "§", "", 1)
			before := strings.TrimPrefix(tt.in[:mark], "\ufeff")
			wantLine := strings.Count(before, "\n") + 1
			wantCol := len([]rune(before[strings.LastIndex(before, "\n")+1:])) + 1
			if tt.name == "empty" || tt.name == "whitespace only" {
				wantLine, wantCol = 1, 1
			}
			_, err := Parse([]byte(in), "c.json")
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v (%T), want *SyntaxError", err, err)
			}
			if se.Line != wantLine || se.Column != wantCol || !strings.Contains(se.Reason, tt.reason) {
				t.Errorf("got %d:%d %q, want %d:%d and a reason containing %q", se.Line, se.Column, se.Reason, wantLine, wantCol, tt.reason)
			}
		})
	}
}

// TestSchemaProblems covers what the walker finds before decoding: each problem is
// located at the key (object members) or element (arrays) it is about.
func TestSchemaProblems(t *testing.T) {
	in := `{
  "mcpServers": {
    "inventory": {
      "comand": "node",
      "Args": ["a"],
      "watch": ["dist", 3, {"x": [1]}],
      "env": null,
      "restart": true,
      "startupTimeout": "soon",
      "tools": {"t": {"policy": "allow", "why": "because"}}
    },
    "inventory": {"command": "again"}
  },
  "settings": {"approvalTimeout": 30, "maxMessageBytes": "yes"},
  "version": 2
}`
	want := []Problem{
		{Path: "mcpServers.inventory.comand", Line: 4, Column: 7, Reason: `unknown key "comand" (did you mean "command"?)`},
		{Path: "mcpServers.inventory.Args", Line: 5, Column: 7, Reason: `unknown key "Args" (did you mean "args"?)`},
		{Path: "mcpServers.inventory.watch[1]", Line: 6, Column: 25, Reason: "want a string, not the number 3"},
		{Path: "mcpServers.inventory.watch[2]", Line: 6, Column: 28, Reason: "want a string, not an object"},
		{Path: "mcpServers.inventory.env", Line: 7, Column: 14, Reason: "null is not allowed: want an object, or leave the key out"},
		{Path: "mcpServers.inventory.restart", Line: 8, Column: 18, Reason: "want a string, not true"},
		{Path: "mcpServers.inventory.startupTimeout", Line: 9, Column: 25, Reason: `want a duration such as "30s" or "2m", got "soon"`},
		{Path: "mcpServers.inventory.tools.t.why", Line: 10, Column: 42, Reason: `unknown key "why"; known keys here: policy`},
		{Path: "mcpServers.inventory", Line: 12, Column: 5, Reason: `duplicate key "inventory"; it first appears at line 3, column 5`},
		{Path: "settings.approvalTimeout", Line: 14, Column: 35, Reason: `want a duration string such as "30s", not the number 30`},
		{Path: "settings.maxMessageBytes", Line: 14, Column: 58, Reason: `want a whole number, not the string "yes"`},
		{Path: "version", Line: 15, Column: 3, Reason: `unknown key "version"; known keys here: credentials, mcpServers, settings`},
	}
	_, err := Parse([]byte(in), "c.json")
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v (%T), want *ValidationError", err, err)
	}
	if diff := cmp.Diff(want, ve.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if ve.File != "c.json" || !strings.HasPrefix(err.Error(), "c.json: 12 problems in configuration\n\tc.json:4:7: mcpServers.inventory.comand: unknown key") {
		t.Errorf("Error() = %q", err.Error())
	}
}

func TestParseTopLevelNotObject(t *testing.T) {
	for _, in := range []string{`[]`, `null`, `"x"`, `1`} {
		_, err := Parse([]byte(in), "c.json")
		got := problemsOf(t, err)
		if len(got) != 1 || got[0].Path != "" || !strings.HasPrefix(got[0].Reason, "want an object") &&
			!strings.HasPrefix(got[0].Reason, "null is not allowed") {
			t.Errorf("Parse(%s) problems = %v", in, got)
		}
	}
}

// TestValidationPositions checks that Validate's problems found through Parse carry
// the position of the key they name, or of the object missing a required key.
func TestValidationPositions(t *testing.T) {
	in := `{"mcpServers": {
  "bad label": {"command": "x"},
  "dotted.name": {
    "restart": "always",
    "credentials": ["ghost"],
    "watch": ["ok", ""],
    "ignore": ["data/**", "!server.js", " "]
  }
},
"credentials": {"m": {"inject": "meta", "envVar": "X"}}}`
	want := []Problem{
		{Path: `mcpServers."bad label"`, Line: 2, Column: 3, Reason: `server label "bad label" is invalid: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit`},
		{Path: `mcpServers."dotted.name".command`, Line: 3, Column: 3, Reason: "command must not be empty"},
		{Path: `mcpServers."dotted.name".restart`, Line: 4, Column: 5, Reason: `restart must be "on-change" or "manual", not "always"`},
		{Path: `mcpServers."dotted.name".credentials[0]`, Line: 5, Column: 21, Reason: `credential "ghost" is not defined under "credentials"`},
		{Path: `mcpServers."dotted.name".watch[0]`, Line: 6, Column: 15, Reason: `relative watch path "ok" needs a cwd to be relative to; set cwd or use an absolute path`},
		{Path: `mcpServers."dotted.name".watch[1]`, Line: 6, Column: 21, Reason: "watch path must not be empty"},
		{Path: `mcpServers."dotted.name".ignore[1]`, Line: 7, Column: 27, Reason: `ignore pattern "!server.js": a negation (!) belongs in the tree's .gitignore; list only what to leave out`},
		{Path: `mcpServers."dotted.name".ignore[2]`, Line: 7, Column: 41, Reason: "ignore pattern must not be empty"},
		{Path: "credentials.m.envVar", Line: 10, Column: 41, Reason: `envVar is not used with inject "meta"; remove it`},
	}
	_, err := Parse([]byte(in), "c.json")
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v (%T), want *ValidationError", err, err)
	}
	if diff := cmp.Diff(want, ve.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()

	c, err := Load(filepath.Join(dir, "missing.json"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(missing) err = %v, want fs.ErrNotExist", err)
	}
	if c == nil || c.Servers == nil || len(c.Servers) != 0 || c.Validate() != nil {
		t.Errorf("Load(missing) config = %#v, want an empty valid config", c)
	}

	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte(`{"mcpServers":{}}`+strings.Repeat(" ", MaxFileSize)), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(big); err == nil || c != nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) = %v, %v; want a size error", c, err)
	}

	broken := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(broken, []byte("{\n\"mcpServers\": {\"x\": {\"command\": \"y\", \"oops\": 1}}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(broken)
	if got, want := err.Error(), broken+`:2:38: mcpServers.x.oops: unknown key "oops"; known keys here: args, command, credentials, cwd, env, ignore, restart, sandbox, serverRequests, sessionBus, startupTimeout, tools, watch, write`; got != want {
		t.Errorf("Load(broken) err = %q\nwant %q", got, want)
	}
}

// BenchmarkParse measures Parse on a configuration of 50 servers like the design
// example (about 20 KB).
func BenchmarkParse(b *testing.B) {
	c := &Config{Servers: map[string]Server{}, Credentials: fullConfig().Credentials}
	for i := range 50 {
		s := fullConfig().Servers["inventory"]
		c.Servers["server-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26))] = s
	}
	data, err := Marshal(c)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, "bench.json"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestParseApprovalAuthentication(t *testing.T) {
	for _, v := range []string{AuthOff, AuthCredentials, AuthCLI, AuthAlways} {
		in := `{"settings":{"approvalAuthentication":"` + v + `"}}`
		c, err := Parse([]byte(in), "c.json")
		if err != nil {
			t.Fatalf("Parse(%s): %v", in, err)
		}
		if c.Settings.ApprovalAuthentication != v {
			t.Errorf("Parse(%s): approvalAuthentication = %q", in, c.Settings.ApprovalAuthentication)
		}
		data, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := Parse(data, "c.json"); err != nil || back.Settings.ApprovalAuthentication != v {
			t.Errorf("round trip of %s: %s, %v", in, data, err)
		}
	}
	if c, err := Parse([]byte(`{}`), "c.json"); err != nil || c.Settings.ApprovalAuthentication != "" {
		t.Errorf("absent: %+v, %v", c.Settings, err)
	}
	for in, reason := range map[string]string{
		`{"settings":{"approvalAuthentication":"Always"}}`: `is "Always": must be "off", "credentials", "cli" or "always" (or left out for cli where the system can authenticate you)`,
		`{"settings":{"approvalAuthentication":""}}`:       ``,
		`{"settings":{"approvalAuthentication":true}}`:     `want a string, not true`,
	} {
		_, err := Parse([]byte(in), "c.json")
		if reason == "" {
			if err != nil {
				t.Errorf("Parse(%s): %v", in, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Problems) != 1 {
			t.Fatalf("Parse(%s) = %v, want one problem", in, err)
		}
		if p := ve.Problems[0]; p.Path != "settings.approvalAuthentication" || p.Reason != reason {
			t.Errorf("Parse(%s): problem %+v, want reason %q", in, p, reason)
		}
	}
}
