package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// validConfig returns a configuration that passes every rule; each test case
// breaks one.
func validConfig() *Config {
	return &Config{
		Servers: map[string]Server{
			"inventory": {
				Command:     "node",
				Args:        []string{"dist/server.js"},
				Cwd:         "/srv/inventory",
				Env:         map[string]string{"LOG_LEVEL": "debug"},
				Credentials: []string{"api", "sig"},
				Watch:       []string{"dist", "/opt/shared/lib"},
				Restart:     RestartManual,
				Tools:       map[string]ToolPolicy{"lookup": {Policy: PolicyAllow}, "drop": {Policy: PolicyDeny}},
			},
		},
		Credentials: map[string]Credential{
			"api":   {Inject: InjectEnv, EnvVar: "API_TOKEN"},
			"sig":   {Inject: InjectMeta, AskEveryUse: true},
			"other": {Inject: InjectEnv, EnvVar: "LOG_LEVEL"}, // unused by inventory: no conflict
		},
		Settings: Settings{ApprovalTimeout: Duration(time.Minute)},
	}
}

// problem is the part of a Problem a rule test checks: where, and a phrase of why.
type problem struct{ Path, Reason string }

func problemsOf(t *testing.T, err error) []problem {
	t.Helper()
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error %v does not match ErrInvalid", err)
	}
	var out []problem
	for _, p := range ve.Problems {
		out = append(out, problem{p.Path, p.Reason})
	}
	return out
}

// reasonContains compares problems by path and by the expected reason being a
// substring of the actual one.
var reasonContains = cmp.Comparer(func(a, b problem) bool {
	return a.Path == b.Path && (strings.Contains(a.Reason, b.Reason) || strings.Contains(b.Reason, a.Reason))
})

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *Config)
		want   []problem
	}{
		{"valid", func(c *Config) {}, nil},
		{"empty config", func(c *Config) { *c = Config{} }, nil},
		{"label with space", func(c *Config) { c.Servers["my server"] = Server{Command: "x"} },
			[]problem{{`mcpServers."my server"`, "label"}}},
		{"label starting with dot", func(c *Config) { c.Servers[".hidden"] = Server{Command: "x"} },
			[]problem{{`mcpServers.".hidden"`, "label"}}},
		{"label too long", func(c *Config) { c.Servers[strings.Repeat("a", 65)] = Server{Command: "x"} },
			[]problem{{"mcpServers." + strings.Repeat("a", 65), "label"}}},
		{"label of 64 is fine", func(c *Config) { c.Servers[strings.Repeat("a", 64)] = Server{Command: "x"} }, nil},
		{"label with dots is fine", func(c *Config) { c.Servers["a.b_c-9"] = Server{Command: "x"} }, nil},
		{"empty command", func(c *Config) { setServer(c, func(s *Server) { s.Command = "" }) },
			[]problem{{"mcpServers.inventory.command", "must not be empty"}}},
		{"blank command", func(c *Config) { setServer(c, func(s *Server) { s.Command = "  " }) },
			[]problem{{"mcpServers.inventory.command", "must not be empty"}}},
		{"NUL in arg", func(c *Config) { setServer(c, func(s *Server) { s.Args = []string{"ok", "a\x00b"} }) },
			[]problem{{"mcpServers.inventory.args[1]", "NUL"}}},
		{"relative cwd", func(c *Config) { setServer(c, func(s *Server) { s.Cwd = "srv/inventory" }) },
			[]problem{{"mcpServers.inventory.cwd", "absolute"}}},
		{"empty watch path", func(c *Config) { setServer(c, func(s *Server) { s.Watch = []string{"dist", ""} }) },
			[]problem{{"mcpServers.inventory.watch[1]", "must not be empty"}}},
		{"relative watch without cwd", func(c *Config) { setServer(c, func(s *Server) { s.Cwd = "" }) },
			[]problem{{"mcpServers.inventory.watch[0]", "needs a cwd"}}},
		{"restart unknown", func(c *Config) { setServer(c, func(s *Server) { s.Restart = "always" }) },
			[]problem{{"mcpServers.inventory.restart", `not "always"`}}},
		{"restart on-change", func(c *Config) { setServer(c, func(s *Server) { s.Restart = RestartOnChange }) }, nil},
		{"policy unknown", func(c *Config) { setServer(c, func(s *Server) { s.Tools["lookup"] = ToolPolicy{Policy: "maybe"} }) },
			[]problem{{"mcpServers.inventory.tools.lookup.policy", `not "maybe"`}}},
		{"policy empty", func(c *Config) { setServer(c, func(s *Server) { s.Tools["lookup"] = ToolPolicy{} }) },
			[]problem{{"mcpServers.inventory.tools.lookup.policy", `not ""`}}},
		{"server requests", func(c *Config) {
			setServer(c, func(s *Server) {
				s.ServerRequests = map[string]Policy{RequestSampling: PolicyAllow, RequestRoots: PolicyDeny}
			})
		}, nil},
		{"server request policy unknown", func(c *Config) {
			setServer(c, func(s *Server) { s.ServerRequests = map[string]Policy{RequestElicitation: "ask"} })
		}, []problem{{"mcpServers.inventory.serverRequests.elicitation", `not "ask"`}}},
		{"server request kind unknown", func(c *Config) {
			setServer(c, func(s *Server) { s.ServerRequests = map[string]Policy{"tasks": PolicyAllow} })
		}, []problem{{"mcpServers.inventory.serverRequests.tasks", "unknown kind of server request"}}},
		{"tool name empty", func(c *Config) { setServer(c, func(s *Server) { s.Tools[""] = ToolPolicy{Policy: PolicyAllow} }) },
			[]problem{{`mcpServers.inventory.tools.""`, "tool name must not be empty"}}},
		{"undefined credential", func(c *Config) { setServer(c, func(s *Server) { s.Credentials = []string{"api", "nope"} }) },
			[]problem{{"mcpServers.inventory.credentials[1]", `"nope" is not defined`}}},
		{"credential listed twice", func(c *Config) { setServer(c, func(s *Server) { s.Credentials = []string{"api", "api"} }) },
			[]problem{{"mcpServers.inventory.credentials[1]", "listed twice"}}},
		{"two credentials one variable", func(c *Config) {
			c.Credentials["api2"] = Credential{Inject: InjectEnv, EnvVar: "API_TOKEN"}
			setServer(c, func(s *Server) { s.Credentials = []string{"api", "api2"} })
		}, []problem{{"mcpServers.inventory.credentials[1]", `"api" and "api2" both set API_TOKEN`}}},
		{"env sets credential variable", func(c *Config) { setServer(c, func(s *Server) { s.Env["API_TOKEN"] = "hunter2" }) },
			[]problem{{"mcpServers.inventory.env.API_TOKEN", `credential "api" injects it`}}},
		{"env name invalid", func(c *Config) { setServer(c, func(s *Server) { s.Env["1BAD"] = "x" }) },
			[]problem{{"mcpServers.inventory.env.1BAD", "name \"1BAD\" is invalid"}}},
		{"env name with dash", func(c *Config) { setServer(c, func(s *Server) { s.Env["A-B"] = "x" }) },
			[]problem{{"mcpServers.inventory.env.A-B", "invalid"}}},
		{"env name with equals", func(c *Config) { setServer(c, func(s *Server) { s.Env["A=B"] = "x" }) },
			[]problem{{`mcpServers.inventory.env."A=B"`, "invalid"}}},
		{"env value NUL", func(c *Config) { setServer(c, func(s *Server) { s.Env["X"] = "a\x00" }) },
			[]problem{{"mcpServers.inventory.env.X", "NUL"}}},
		{"negative startup timeout", func(c *Config) { setServer(c, func(s *Server) { s.StartupTimeout = -1 }) },
			[]problem{{"mcpServers.inventory.startupTimeout", "negative"}}},
		{"credential name invalid", func(c *Config) { c.Credentials["bad name"] = Credential{Inject: InjectMeta} },
			[]problem{{`credentials."bad name"`, "scope name"}}},
		{"inject unknown", func(c *Config) { c.Credentials["api"] = Credential{Inject: "file", EnvVar: "API_TOKEN"} },
			[]problem{{"credentials.api.inject", `not "file"`}}},
		{"inject missing", func(c *Config) { c.Credentials["x"] = Credential{} },
			[]problem{{"credentials.x.inject", `not ""`}}},
		{"env without envVar", func(c *Config) { c.Credentials["api"] = Credential{Inject: InjectEnv} },
			[]problem{{"credentials.api.envVar", "needs envVar"}}},
		{"envVar invalid", func(c *Config) { c.Credentials["api"] = Credential{Inject: InjectEnv, EnvVar: "API TOKEN"} },
			[]problem{{"credentials.api.envVar", "invalid"}}},
		{"meta with envVar", func(c *Config) { c.Credentials["sig"] = Credential{Inject: InjectMeta, EnvVar: "SIG"} },
			[]problem{{"credentials.sig.envVar", "not used with inject \"meta\""}}},
		{"negative settings", func(c *Config) {
			c.Settings.ApprovalTimeout = Duration(-time.Second)
			c.Settings.HoldTimeout = -1
		}, []problem{{"settings.approvalTimeout", "negative, got -1s"}, {"settings.holdTimeout", "negative"}}},
		{"several problems sorted by path", func(c *Config) {
			c.Servers["b"] = Server{Command: "", Restart: "x"}
			c.Servers["a"] = Server{}
		}, []problem{
			{"mcpServers.a.command", "empty"},
			{"mcpServers.b.command", "empty"},
			{"mcpServers.b.restart", `not "x"`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.modify(c)
			got := problemsOf(t, c.Validate())
			if diff := cmp.Diff(tt.want, got, reasonContains); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func setServer(c *Config, f func(s *Server)) {
	s := c.Servers["inventory"]
	f(&s)
	c.Servers["inventory"] = s
}

func TestPolicyAndDefaults(t *testing.T) {
	s := validConfig().Servers["inventory"]
	s.Tools["blank"] = ToolPolicy{}
	got := []Policy{s.Policy("lookup"), s.Policy("drop"), s.Policy("unlisted"), s.Policy("blank"), Server{}.Policy("x")}
	want := []Policy{PolicyAllow, PolicyDeny, PolicyApprove, PolicyApprove, PolicyApprove}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Policy (-want +got):\n%s", diff)
	}
	if got := (Server{}).RestartMode(); got != RestartOnChange {
		t.Errorf("default RestartMode = %q, want %q", got, RestartOnChange)
	}
	if got := (Server{Restart: RestartManual}).RestartMode(); got != RestartManual {
		t.Errorf("RestartMode = %q, want %q", got, RestartManual)
	}
	var st Settings
	if st.ApprovalTimeoutOrDefault() != DefaultApprovalTimeout || st.HoldTimeoutOrDefault() != DefaultHoldTimeout ||
		(Server{}).StartupTimeoutOrDefault() != DefaultStartupTimeout {
		t.Errorf("zero settings do not give the defaults")
	}
	st = Settings{ApprovalTimeout: Duration(5 * time.Second), HoldTimeout: Duration(time.Second)}
	if st.ApprovalTimeoutOrDefault() != 5*time.Second || st.HoldTimeoutOrDefault() != time.Second ||
		(Server{StartupTimeout: Duration(time.Hour)}).StartupTimeoutOrDefault() != time.Hour {
		t.Errorf("set values are not returned")
	}
}

func TestAddServer(t *testing.T) {
	c := validConfig()
	add := Server{Command: "python3", Args: []string{"-m", "srv"}, Credentials: []string{"api"}}
	if err := c.AddServer("py", add); err != nil {
		t.Fatalf("AddServer: %v", err)
	}
	if diff := cmp.Diff(add, c.Servers["py"]); diff != "" {
		t.Errorf("added server (-want +got):\n%s", diff)
	}
	if err := c.AddServer("py", Server{Command: "other"}); !errors.Is(err, ErrExists) {
		t.Errorf("adding a taken label: err = %v, want ErrExists", err)
	}
	before := len(c.Servers)
	for _, tc := range []struct {
		label string
		s     Server
		want  []problem
	}{
		{"bad label!", Server{Command: "x"}, []problem{{`mcpServers."bad label!"`, "label"}}},
		{"", Server{Command: "x"}, []problem{{`mcpServers.""`, "label"}}},
		{"nocmd", Server{}, []problem{{"mcpServers.nocmd.command", "empty"}}},
		{"nocred", Server{Command: "x", Credentials: []string{"missing"}}, []problem{{"mcpServers.nocred.credentials[0]", "not defined"}}},
	} {
		got := problemsOf(t, c.AddServer(tc.label, tc.s))
		if diff := cmp.Diff(tc.want, got, reasonContains); diff != "" {
			t.Errorf("AddServer(%q) problems (-want +got):\n%s", tc.label, diff)
		}
	}
	if len(c.Servers) != before {
		t.Errorf("failed AddServer changed the config: %d servers, want %d", len(c.Servers), before)
	}

	var empty Config
	if err := empty.AddServer("first", Server{Command: "x"}); err != nil || len(empty.Servers) != 1 {
		t.Errorf("AddServer on a zero Config: err=%v servers=%v", err, empty.Servers)
	}
}

func TestRemoveServer(t *testing.T) {
	c := validConfig()
	if err := c.RemoveServer("inventory"); err != nil {
		t.Fatalf("RemoveServer: %v", err)
	}
	if _, ok := c.Servers["inventory"]; ok {
		t.Errorf("server still present after RemoveServer")
	}
	if err := c.RemoveServer("inventory"); !errors.Is(err, ErrNotFound) {
		t.Errorf("removing twice: err = %v, want ErrNotFound", err)
	}
	if len(c.Credentials) != 3 {
		t.Errorf("RemoveServer dropped credentials: %v", c.Credentials)
	}
}

func TestValidationErrorText(t *testing.T) {
	one := &ValidationError{File: "c.json", Problems: []Problem{{Path: "mcpServers.a.restart", Line: 7, Column: 12, Reason: "bad"}}}
	if got, want := one.Error(), "c.json:7:12: mcpServers.a.restart: bad"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	two := &ValidationError{Problems: []Problem{{Path: "a", Reason: "r1"}, {Path: "b", Reason: "r2"}}}
	if got, want := two.Error(), "2 problems in configuration\n\ta: r1\n\tb: r2"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
