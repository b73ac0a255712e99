package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestManagedApply(t *testing.T) {
	m := &Managed{
		ApprovalAuthentication: AuthAlways,
		Sandbox:                SandboxStandard,
		AlwaysAsk:              []string{"fs/write_file", "*/delete", "shell"},
		ServersNotAllowed:      []string{"@evil/mcp", "bad"},
		Telemetry:              &Telemetry{Endpoint: "https://otel.example.com"},
	}
	allow := ToolPolicy{Policy: PolicyAllow}
	cfg := &Config{
		Servers: map[string]Server{
			"fs":    {Command: "node", Sandbox: SandboxOff, Tools: map[string]ToolPolicy{"write_file": allow, "read_file": allow, "delete": allow}},
			"shell": {Command: "sh", Sandbox: SandboxStrict, Tools: map[string]ToolPolicy{"run": allow}},
			"npx":   {Command: "npx", Args: []string{"-y", "@evil/mcp@1.2.3"}},
			"b":     {Command: "/usr/local/bin/bad"},
			"ok":    {Command: "ok"},
		},
		Settings: Settings{ApprovalAuthentication: AuthOff, Telemetry: &Telemetry{Endpoint: "http://127.0.0.1:1", Arguments: []string{"fs"}}},
	}
	before := cfg.Clone()
	out, floors := m.Apply(cfg)
	if diff := cmp.Diff(before, cfg); diff != "" {
		t.Fatalf("Apply modified its argument (-before +after):\n%s", diff)
	}
	want := &Config{
		Servers: map[string]Server{
			"fs":    {Command: "node", Sandbox: SandboxStandard, Tools: map[string]ToolPolicy{"write_file": {Policy: PolicyApprove}, "read_file": allow, "delete": {Policy: PolicyApprove}}},
			"shell": {Command: "sh", Sandbox: SandboxStrict, Tools: map[string]ToolPolicy{"run": {Policy: PolicyApprove}}},
			"ok":    {Command: "ok", Sandbox: SandboxStandard},
		},
		Settings: Settings{ApprovalAuthentication: AuthAlways, Telemetry: &Telemetry{Endpoint: "https://otel.example.com", Arguments: []string{"fs"}}},
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("Apply (-want +got):\n%s", diff)
	}
	var got []string
	for _, f := range floors {
		mark := "implicit"
		if f.Lowered {
			mark = "lowered"
		}
		got = append(got, f.Field+" "+mark)
	}
	wantFloors := []string{
		"settings.approvalAuthentication lowered",
		"mcpServers.b lowered",
		"mcpServers.fs.sandbox lowered",
		"mcpServers.fs.tools.delete.policy lowered",
		"mcpServers.fs.tools.write_file.policy lowered",
		"mcpServers.npx lowered",
		"mcpServers.ok.sandbox implicit",
		"mcpServers.shell.tools.run.policy lowered",
		"settings.telemetry lowered",
	}
	if diff := cmp.Diff(wantFloors, got); diff != "" {
		t.Errorf("floors (-want +got):\n%s", diff)
	}
	// What Apply made is at every floor: nothing is below, nothing moves.
	if b := m.Below(out); len(b) != 0 {
		t.Errorf("Below(Apply(cfg)) = %v, want none", b)
	}
	if again, _ := m.Apply(out); !cmp.Equal(again, out) {
		t.Errorf("Apply is not idempotent: %s", cmp.Diff(out, again))
	}
}

func TestManagedBelow(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Managed
		cfg  Config
		want int
	}{
		{"auth unset against credentials is the default made explicit", Managed{ApprovalAuthentication: AuthCredentials}, Config{}, 0},
		{"auth unset against always", Managed{ApprovalAuthentication: AuthAlways}, Config{}, 1},
		{"auth credentials against always", Managed{ApprovalAuthentication: AuthAlways}, Config{Settings: Settings{ApprovalAuthentication: AuthCredentials}}, 1},
		{"auth always against credentials", Managed{ApprovalAuthentication: AuthCredentials}, Config{Settings: Settings{ApprovalAuthentication: AuthAlways}}, 0},
		{"sandbox unset against standard", Managed{Sandbox: SandboxStandard}, Config{Servers: map[string]Server{"a": {Command: "a"}}}, 0},
		{"sandbox unset against strict", Managed{Sandbox: SandboxStrict}, Config{Servers: map[string]Server{"a": {Command: "a"}}}, 1},
		{"sandbox off against standard", Managed{Sandbox: SandboxStandard}, Config{Servers: map[string]Server{"a": {Command: "a", Sandbox: SandboxOff}}}, 1},
		{"deny is not below always ask", Managed{AlwaysAsk: []string{"*"}}, Config{Servers: map[string]Server{"a": {Command: "a", Tools: map[string]ToolPolicy{"t": {Policy: PolicyDeny}}}}}, 0},
		{"allow of another tool", Managed{AlwaysAsk: []string{"a/x"}}, Config{Servers: map[string]Server{"a": {Command: "a", Tools: map[string]ToolPolicy{"t": {Policy: PolicyAllow}}}}}, 0},
		{"allow under lockdown", Lockdown, Config{Servers: map[string]Server{"a": {Command: "a", Tools: map[string]ToolPolicy{"t": {Policy: PolicyAllow}}}}}, 2},
		{"telemetry turned off", Managed{Telemetry: &Telemetry{Endpoint: "http://c:4318"}}, Config{}, 1},
		{"telemetry with own arguments", Managed{Telemetry: &Telemetry{Endpoint: "http://c:4318"}}, Config{Settings: Settings{Telemetry: &Telemetry{Endpoint: "http://c:4318", Arguments: []string{"a"}}}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.Below(&tc.cfg); len(got) != tc.want {
				t.Errorf("Below = %v, want %d floors", got, tc.want)
			}
		})
	}
	var none *Managed
	if got := none.Below(&Config{Settings: Settings{ApprovalAuthentication: AuthOff}}); len(got) != 0 {
		t.Errorf("nil policy: Below = %v", got)
	}
}

func TestParseManaged(t *testing.T) {
	m, err := ParseManaged([]byte(`{"approvalAuthentication":"always","sandbox":"standard","alwaysAsk":["fs/write_file","*"],"serversNotAllowed":["x"],"telemetry":{"endpoint":"http://127.0.0.1:4318"}}`), "managed.json")
	if err != nil {
		t.Fatal(err)
	}
	if m.ApprovalAuthentication != AuthAlways || m.Sandbox != SandboxStandard || len(m.AlwaysAsk) != 2 {
		t.Errorf("parsed %+v", m)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"approvalAuthentication":"off"}`, `managed.json:1:2: approvalAuthentication: is "off": a floor must be`},
		{`{"sandbox":"off"}`, `sandbox: is "off"`},
		{`{"sandbx":"strict"}`, `unknown key`},
		{`{"alwaysAsk":["a/"]}`, `alwaysAsk[0]: is "a/"`},
		{`{"telemetry":{"endpoint":"ftp://x"}}`, `telemetry.endpoint: is "ftp://x"`},
		{`{"telemetry":{"endpoint":"http://x","arguments":["a"]}}`, `telemetry.arguments: a managed policy cannot export argument values`},
		{``, `the file is empty`},
		{`{"sandbox":"strict"`, `managed.json:1:`},
	} {
		_, err := ParseManaged([]byte(tc.in), "managed.json")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseManaged(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

// TestReadManagedTrust: the file is trusted only when root alone can
// change it and every directory above it; otherwise it sets no floor and
// says why. A malformed trusted file puts Lockdown in force.
func TestReadManagedTrust(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the managed policy file must be root's")
	}
	good := `{"approvalAuthentication":"always"}`
	setup := func(t *testing.T) (dir, file string) {
		// Under /var/tmp, which everyone may write (mode 1777).
		base, err := os.MkdirTemp("/var/tmp", "pcmanaged-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(base) })
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(base, "portcullis")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		file = filepath.Join(dir, "managed.json")
		if err := os.WriteFile(file, []byte(good), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir, file
	}
	t.Run("missing", func(t *testing.T) {
		st := readManaged(filepath.Join(t.TempDir(), "none.json"))
		if st.Policy != nil || st.Ignored != "" || st.Error != "" {
			t.Errorf("missing file: %+v", st)
		}
	})
	t.Run("world-writable directory above", func(t *testing.T) {
		_, file := setup(t)
		st := readManaged(file)
		if st.Policy != nil || !strings.Contains(st.Ignored, "writable by its group or others") {
			t.Errorf("file under /var/tmp (mode 1777): %+v", st)
		}
	})
	// From here on, a chain of directories root alone writes: under
	// /root.
	rootOnly := func(t *testing.T) (dir, file string) {
		fi, err := os.Stat("/root")
		if err != nil || fi.Mode().Perm()&0o022 != 0 {
			t.Skip("no root-only directory /root here")
		}
		base, err := os.MkdirTemp("/root", "pcmanaged-")
		if err != nil {
			t.Skip(err)
		}
		t.Cleanup(func() { os.RemoveAll(base) })
		dir = filepath.Join(base, "portcullis")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		file = filepath.Join(dir, "managed.json")
		if err := os.WriteFile(file, []byte(good), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir, file
	}
	t.Run("trusted", func(t *testing.T) {
		_, file := rootOnly(t)
		st := readManaged(file)
		if st.Policy == nil || st.Policy.ApprovalAuthentication != AuthAlways || st.Ignored != "" || st.Error != "" {
			t.Errorf("root-only file: %+v", st)
		}
	})
	t.Run("not root's", func(t *testing.T) {
		_, file := rootOnly(t)
		if err := os.Chown(file, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		st := readManaged(file)
		if st.Policy != nil || !strings.Contains(st.Ignored, "owned by uid 65534, not root") {
			t.Errorf("file of uid 65534: %+v", st)
		}
	})
	t.Run("group-writable file", func(t *testing.T) {
		_, file := rootOnly(t)
		if err := os.Chmod(file, 0o664); err != nil {
			t.Fatal(err)
		}
		st := readManaged(file)
		if st.Policy != nil || !strings.Contains(st.Ignored, "writable by its group or others") {
			t.Errorf("file of mode 0664: %+v", st)
		}
	})
	t.Run("directory of another user", func(t *testing.T) {
		dir, file := rootOnly(t)
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		st := readManaged(file)
		if st.Policy != nil || !strings.Contains(st.Ignored, "owned by uid 65534") {
			t.Errorf("directory of uid 65534: %+v", st)
		}
	})
	t.Run("symbolic link to a file others can write", func(t *testing.T) {
		_, file := rootOnly(t)
		other := filepath.Join(t.TempDir(), "agent.json")
		if err := os.WriteFile(other, []byte(`{}`), 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(other, 0o666); err != nil {
			t.Fatal(err)
		}
		os.Remove(file)
		if err := os.Symlink(other, file); err != nil {
			t.Fatal(err)
		}
		st := readManaged(file)
		if st.Policy != nil || st.Ignored == "" {
			t.Errorf("link to a file in a temporary directory: %+v", st)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		_, file := rootOnly(t)
		if err := os.WriteFile(file, []byte(`{"approvalAuthentication": "alway"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		st := readManaged(file)
		if st.Error == "" || st.Policy == nil || !cmp.Equal(*st.Policy, Lockdown) {
			t.Errorf("malformed file: %+v, want Lockdown in force with the error", st)
		}
	})
}
