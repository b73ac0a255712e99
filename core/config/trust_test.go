package config

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func trustBase() *Config {
	return &Config{
		Servers: map[string]Server{
			"cred": {Command: "/bin/srv", Args: []string{"a"}, Cwd: "/tmp", Env: map[string]string{"K": "v"},
				Credentials: []string{"tok"}, Watch: []string{"/tmp/dist"}, Ignore: []string{"state/", "*.db"},
				Tools: map[string]ToolPolicy{"read": {Policy: PolicyAllow}, "gone": {Policy: PolicyDeny}}},
			"plain": {Command: "/bin/plain", Tools: map[string]ToolPolicy{"write": {Policy: PolicyDeny}}},
		},
		Credentials: map[string]Credential{
			"tok":   {Inject: InjectEnv, EnvVar: "TOK", AskEveryUse: true},
			"other": {Inject: InjectMeta},
		},
	}
}

// TestSplitTrust: each kind of widening change is held and put back as it
// is in force; each narrowing or neutral change applies at once.
func TestSplitTrust(t *testing.T) {
	for _, tt := range splitTrustCases() {
		t.Run(tt.name, func(t *testing.T) { tt.run(t) })
	}
}

type splitCase struct {
	name  string
	edit  func(c *Config)
	held  []Widening
	check func(t *testing.T, in *Config) // what is in force afterwards
}

func splitTrustCases() []splitCase {
	no := false
	return []splitCase{{
		// An ignore pattern narrows what is measured: added by a hand
		// edit (or an agent's), it waits for the person; the one already
		// in force stays, one removed goes at once.
		name: "ignore patterns added to a configured server",
		edit: func(c *Config) {
			s := c.Servers["plain"]
			s.Ignore = []string{"state/", "**/*"}
			c.Servers["plain"] = s
		},
		held: []Widening{{Kind: WidenIgnore, Server: "plain", Text: "plain: ignore patterns added: state/, **/* (files they match are measured no more, unless they are code)"}},
		check: func(t *testing.T, in *Config) {
			if got := in.Servers["plain"].Ignore; got != nil {
				t.Errorf("ignore in force %v, want none until confirmed", got)
			}
		},
	}, {
		name: "ignore pattern removed, another kept",
		edit: func(c *Config) {
			s := c.Servers["cred"]
			s.Ignore = []string{"state/"}
			c.Servers["cred"] = s
		},
		check: func(t *testing.T, in *Config) {
			if got := in.Servers["cred"].Ignore; !slices.Equal(got, []string{"state/"}) {
				t.Errorf("ignore in force %v, want [state/]", got)
			}
		},
	}, {
		name: "sampling approve → allow, roots allow → deny",
		edit: func(c *Config) {
			s := c.Servers["plain"]
			s.ServerRequests = map[string]Policy{RequestSampling: PolicyAllow, RequestRoots: PolicyDeny}
			c.Servers["plain"] = s
		},
		held: []Widening{{Kind: WidenServerRequest, Server: "plain", Tool: RequestSampling, Text: "plain: sampling requests to the agent approve → allow"}},
		check: func(t *testing.T, in *Config) {
			s := in.Servers["plain"]
			if p := s.RequestPolicy(RequestSampling); p != PolicyApprove {
				t.Errorf("sampling policy in force %s, want approve", p)
			}
			if p := s.RequestPolicy(RequestRoots); p != PolicyDeny {
				t.Errorf("roots policy in force %s, want deny (narrowing applies at once)", p)
			}
		},
	}, {
		name: "a new server whose elicitation requests are allowed",
		edit: func(c *Config) {
			c.Servers["new"] = Server{Command: "/bin/new", ServerRequests: map[string]Policy{RequestElicitation: PolicyAllow, RequestSampling: PolicyDeny}}
		},
		held: []Widening{{Kind: WidenServerRequest, Server: "new", Tool: RequestElicitation, Text: "new: elicitation requests to the agent approve → allow"}},
		check: func(t *testing.T, in *Config) {
			s := in.Servers["new"]
			if p := s.RequestPolicy(RequestElicitation); p != PolicyApprove {
				t.Errorf("elicitation policy in force %s, want the default approve", p)
			}
			if p := s.RequestPolicy(RequestSampling); p != PolicyDeny {
				t.Errorf("sampling policy in force %s, want deny", p)
			}
		},
	}, {
		name: "approve → allow",
		edit: func(c *Config) { c.Servers["plain"].Tools["other"] = ToolPolicy{Policy: PolicyAllow} },
		held: []Widening{{Kind: WidenPolicy, Server: "plain", Tool: "other", Text: "plain: tool other approve → allow"}},
		check: func(t *testing.T, in *Config) {
			if p := in.Servers["plain"].Policy("other"); p != PolicyApprove {
				t.Errorf("policy in force %s, want approve", p)
			}
		},
	}, {
		name: "deny → approve, by removing the entry",
		edit: func(c *Config) { delete(c.Servers["plain"].Tools, "write") },
		held: []Widening{{Kind: WidenPolicy, Server: "plain", Tool: "write", Text: "plain: tool write deny → approve"}},
		check: func(t *testing.T, in *Config) {
			if p := in.Servers["plain"].Policy("write"); p != PolicyDeny {
				t.Errorf("policy in force %s, want deny", p)
			}
		},
	}, {
		name: "deny → allow",
		edit: func(c *Config) { c.Servers["plain"].Tools["write"] = ToolPolicy{Policy: PolicyAllow} },
		held: []Widening{{Kind: WidenPolicy, Server: "plain", Tool: "write", Text: "plain: tool write deny → allow"}},
	}, {
		name: "allow → approve and approve → deny apply at once",
		edit: func(c *Config) {
			delete(c.Servers["cred"].Tools, "read")
			c.Servers["plain"].Tools["x"] = ToolPolicy{Policy: PolicyDeny}
		},
		check: func(t *testing.T, in *Config) {
			if p := in.Servers["cred"].Policy("read"); p != PolicyApprove {
				t.Errorf("read %s, want approve", p)
			}
			if p := in.Servers["plain"].Policy("x"); p != PolicyDeny {
				t.Errorf("x %s, want deny", p)
			}
		},
	}, {
		name: "credential scope added to a server",
		edit: func(c *Config) {
			s := c.Servers["plain"]
			s.Credentials = []string{"other"}
			c.Servers["plain"] = s
		},
		held: []Widening{{Kind: WidenCredential, Server: "plain", Scope: "other", Text: "plain: credential scope other added"}},
		check: func(t *testing.T, in *Config) {
			if len(in.Servers["plain"].Credentials) != 0 {
				t.Errorf("credentials in force %v, want none", in.Servers["plain"].Credentials)
			}
		},
	}, {
		name: "credential scope removed applies at once, and so does a launch change then",
		edit: func(c *Config) {
			s := c.Servers["cred"]
			s.Credentials, s.Command = nil, "/bin/evil"
			c.Servers["cred"] = s
		},
		check: func(t *testing.T, in *Config) {
			if s := in.Servers["cred"]; len(s.Credentials) != 0 || s.Command != "/bin/evil" {
				t.Errorf("in force %+v", s)
			}
		},
	}, {
		name: "new server with a credential and an allowed tool",
		edit: func(c *Config) {
			c.Servers["new"] = Server{Command: "/bin/new", Credentials: []string{"tok"},
				Tools: map[string]ToolPolicy{"t": {Policy: PolicyAllow}, "d": {Policy: PolicyDeny}}}
		},
		held: []Widening{
			{Kind: WidenCredential, Server: "new", Scope: "tok", Text: "new: credential scope tok added"},
			{Kind: WidenPolicy, Server: "new", Tool: "t", Text: "new: tool t approve → allow"},
		},
		check: func(t *testing.T, in *Config) {
			s, ok := in.Servers["new"]
			if !ok || len(s.Credentials) != 0 || s.Policy("t") != PolicyApprove || s.Policy("d") != PolicyDeny {
				t.Errorf("new server in force %+v (present %t), want it without credentials, t approve, d deny", s, ok)
			}
		},
	}, {
		name: "new server without credentials or allowed tools applies at once",
		edit: func(c *Config) { c.Servers["new"] = Server{Command: "/bin/new"} },
	}, {
		name: "server removed applies at once",
		edit: func(c *Config) { delete(c.Servers, "cred") },
	}, {
		name: "command of a server with credentials",
		edit: func(c *Config) {
			s := c.Servers["cred"]
			s.Command = "/bin/evil"
			c.Servers["cred"] = s
		},
		held: []Widening{{Kind: WidenLaunch, Server: "cred", Text: "cred: command /bin/srv → /bin/evil changed, and the server receives credentials tok"}},
		check: func(t *testing.T, in *Config) {
			if s := in.Servers["cred"]; s.Command != "/bin/srv" {
				t.Errorf("command in force %s", s.Command)
			}
		},
	}, {
		name: "arguments, working directory, environment and watch of a server with credentials",
		edit: func(c *Config) {
			s := c.Servers["cred"]
			s.Args, s.Cwd, s.Env, s.Watch = []string{"b"}, "/", map[string]string{"K": "v", "NODE_OPTIONS": "--require x"}, nil
			c.Servers["cred"] = s
		},
		held: []Widening{{Kind: WidenLaunch, Server: "cred", Text: "cred: arguments, working directory, environment (NODE_OPTIONS), watched paths changed, and the server receives credentials tok"}},
		check: func(t *testing.T, in *Config) {
			s := in.Servers["cred"]
			if !slices.Equal(s.Args, []string{"a"}) || s.Cwd != "/tmp" || len(s.Env) != 1 || len(s.Watch) != 1 {
				t.Errorf("launch in force %+v", s)
			}
		},
	}, {
		name: "command of a server without credentials applies at once",
		edit: func(c *Config) {
			s := c.Servers["plain"]
			s.Command, s.Env = "/bin/other", map[string]string{"A": "b"}
			c.Servers["plain"] = s
		},
	}, {
		name: "how a used credential is injected, and askEveryUse off",
		edit: func(c *Config) { c.Credentials["tok"] = Credential{Inject: InjectEnv, EnvVar: "OTHER"} },
		held: []Widening{{Kind: WidenCredentialUse, Scope: "tok", Text: "credential tok: injected env $TOK → env $OTHER, askEveryUse true → false"}},
		check: func(t *testing.T, in *Config) {
			if c := in.Credentials["tok"]; c.EnvVar != "TOK" || !c.AskEveryUse {
				t.Errorf("credential in force %+v", c)
			}
		},
	}, {
		name: "an unused credential's definition, and askEveryUse on, apply at once",
		edit: func(c *Config) {
			c.Credentials["other"] = Credential{Inject: InjectEnv, EnvVar: "O"}
			c.Credentials["new"] = Credential{Inject: InjectMeta}
		},
	}, {
		name: "audit signing turned off",
		edit: func(c *Config) { c.Settings.AuditSigning = &no },
		held: []Widening{{Kind: WidenAuditSigning, Text: "settings: auditSigning true → false"}},
		check: func(t *testing.T, in *Config) {
			if !in.Settings.AuditSigningOn() {
				t.Error("audit signing off in force")
			}
		},
	}, {
		name: "timeouts apply at once",
		edit: func(c *Config) { c.Settings.ApprovalTimeout = Duration(1e12) },
	}}
}

func (tt splitCase) run(t *testing.T) {
	applied := trustBase()
	edited := trustBase()
	tt.edit(edited)
	before := edited.Clone()
	in, held := SplitTrust(applied, edited)
	if diff := cmp.Diff(tt.held, held); diff != "" {
		t.Errorf("held (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, edited); diff != "" {
		t.Errorf("SplitTrust modified edited:\n%s", diff)
	}
	if diff := cmp.Diff(trustBase(), applied); diff != "" {
		t.Errorf("SplitTrust modified applied:\n%s", diff)
	}
	if err := in.Validate(); err != nil {
		t.Errorf("in force does not validate: %v", err)
	}
	if len(tt.held) == 0 {
		if diff := cmp.Diff(edited, in); diff != "" {
			t.Errorf("nothing held, yet in force differs from the edit:\n%s", diff)
		}
	}
	// What is in force widens nothing over applied.
	if _, again := SplitTrust(applied, in); len(again) != 0 {
		t.Errorf("in force still widens: %v", again)
	}
	if tt.check != nil {
		tt.check(t, in)
	}
}

// TestSplitTrustPairs: any two of the edits above together leave, in
// force, a configuration that validates and widens nothing.
func TestSplitTrustPairs(t *testing.T) {
	cases := splitTrustCases()
	for i, a := range cases {
		for _, b := range cases[i+1:] {
			edited := trustBase()
			a.edit(edited)
			b.edit(edited)
			if edited.Validate() != nil {
				continue
			}
			in, _ := SplitTrust(trustBase(), edited)
			if err := in.Validate(); err != nil {
				t.Errorf("%s + %s: in force does not validate: %v", a.name, b.name, err)
			}
			if _, again := SplitTrust(trustBase(), in); len(again) != 0 {
				t.Errorf("%s + %s: in force still widens: %v", a.name, b.name, again)
			}
		}
	}
}

func TestCloneIsDeep(t *testing.T) {
	c := trustBase()
	d := c.Clone()
	d.Servers["cred"].Tools["read"] = ToolPolicy{Policy: PolicyDeny}
	d.Servers["cred"].Env["K"] = "w"
	d.Credentials["tok"] = Credential{Inject: InjectMeta}
	if diff := cmp.Diff(trustBase(), c); diff != "" {
		t.Errorf("editing the clone changed the original:\n%s", diff)
	}
}
