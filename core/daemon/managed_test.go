package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/paths"
)

// TestManagedFloorsInForce: with a managed policy (approvalAuthentication
// always, srv's tool write always asks, server bad not allowed), the
// configuration in force is at the floors from the start whatever the
// file says, a hand edit below them is neither in force nor held, the
// person's edits below a floor are refused (ErrManagedFloor, nothing
// written) and one above them is made; status names what is overridden.
func TestManagedFloorsInForce(t *testing.T) {
	dir := t.TempDir()
	dirs := paths.Dirs{Config: filepath.Join(dir, "config"), State: filepath.Join(dir, "state"), Runtime: filepath.Join(dir, "run")}
	if err := dirs.Ensure(); err != nil {
		t.Fatal(err)
	}
	low := &config.Config{
		Servers: map[string]config.Server{
			"srv": {Command: "/bin/true", Tools: map[string]config.ToolPolicy{"write": {Policy: config.PolicyAllow}, "read": {Policy: config.PolicyAllow}}},
			"bad": {Command: "/usr/bin/bad-mcp"},
		},
		Settings: config.Settings{ApprovalAuthentication: config.AuthOff},
	}
	if err := config.Save(dirs.ConfigFile(), low); err != nil {
		t.Fatal(err)
	}
	managed := config.ManagedState{File: "/etc/portcullis/managed.json", Policy: &config.Managed{
		ApprovalAuthentication: config.AuthAlways, AlwaysAsk: []string{"srv/write"}, ServersNotAllowed: []string{"bad-mcp"}}}
	d, err := New(Options{Dirs: dirs, ReadManaged: func() config.ManagedState { return managed }})
	if err != nil {
		t.Fatal(err)
	}
	read := config.PolicyAllow // not managed: as the file says
	check := func(when string) {
		t.Helper()
		cfg, _ := d.config()
		if cfg.Settings.ApprovalAuthentication != config.AuthAlways || cfg.Servers["srv"].Policy("write") != config.PolicyApprove ||
			cfg.Servers["srv"].Policy("read") != read {
			t.Errorf("%s: in force approvalAuthentication %q, write %s, read %s; want always, approve, %s",
				when, cfg.Settings.ApprovalAuthentication, cfg.Servers["srv"].Policy("write"), cfg.Servers["srv"].Policy("read"), read)
		}
		if _, ok := cfg.Servers["bad"]; ok {
			t.Errorf("%s: server bad, not allowed, is in force", when)
		}
		if d.authStatus().Mode != config.AuthAlways {
			t.Errorf("%s: authentication mode %q", when, d.authStatus().Mode)
		}
	}
	check("at start")
	if st := d.Status().Managed; st == nil || len(st.Overridden) != 3 {
		t.Errorf("status managed %+v, want approvalAuthentication, server bad and tool write overridden", st)
	}

	// The person's tools: below a floor is refused, nothing written.
	before, _ := os.ReadFile(dirs.ConfigFile())
	for name, change := range map[string]func(*config.Config) error{
		"approvalAuthentication credentials": func(c *config.Config) error {
			c.Settings.ApprovalAuthentication = config.AuthCredentials
			return nil
		},
		"write allow": func(c *config.Config) error {
			c.Servers["srv"].Tools["write"] = config.ToolPolicy{Policy: config.PolicyAllow}
			return nil
		},
		"bad added": func(c *config.Config) error {
			c.Servers["bad2"] = config.Server{Command: "bad-mcp"}
			return nil
		},
	} {
		if _, err := d.EditConfig("test", change); !errors.Is(err, config.ErrManagedFloor) {
			t.Errorf("EditConfig %s: %v, want ErrManagedFloor", name, err)
		}
		if after, _ := os.ReadFile(dirs.ConfigFile()); string(after) != string(before) {
			t.Fatalf("EditConfig %s below a floor wrote the file", name)
		}
	}
	if _, err := d.EditConfig("test", func(c *config.Config) error {
		c.Servers["srv"].Tools["read"] = config.ToolPolicy{Policy: config.PolicyDeny}
		return nil
	}); err != nil {
		t.Fatalf("EditConfig above the floors: %v", err)
	}
	read = config.PolicyDeny
	check("after the person's edits")

	// By hand, below the floors again: nothing held, the floors in force.
	low.Servers["srv"].Tools["read"] = config.ToolPolicy{Policy: config.PolicyDeny}
	if err := config.Save(dirs.ConfigFile(), low); err != nil {
		t.Fatal(err)
	}
	check("after a hand edit")
	if p := d.PendingChange(); p != nil {
		t.Errorf("a hand edit below the floors is held: %+v", p)
	}
}

// TestManagedPolicyEditedWhileRunning: an administrator's edit of the
// managed policy is in force at the next configuration check although
// config.json did not change; a floor lifted again widens what agents may
// do, so it waits for the person like any other widening.
func TestManagedPolicyEditedWhileRunning(t *testing.T) {
	dir := t.TempDir()
	dirs := paths.Dirs{Config: filepath.Join(dir, "config"), State: filepath.Join(dir, "state"), Runtime: filepath.Join(dir, "run")}
	if err := dirs.Ensure(); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Servers: map[string]config.Server{
		"srv": {Command: "/bin/true", Tools: map[string]config.ToolPolicy{"write": {Policy: config.PolicyAllow}}},
	}}
	if err := config.Save(dirs.ConfigFile(), cfg); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	managed := config.ManagedState{File: "/etc/portcullis/managed.json"}
	set := func(m config.ManagedState) {
		mu.Lock()
		managed = m
		mu.Unlock()
	}
	d, err := New(Options{Dirs: dirs, ReadManaged: func() config.ManagedState {
		mu.Lock()
		defer mu.Unlock()
		return managed
	}})
	if err != nil {
		t.Fatal(err)
	}
	write := func() config.Policy {
		t.Helper()
		c, err := d.load(false)
		if err != nil {
			t.Fatal(err)
		}
		return c.Servers["srv"].Policy("write")
	}
	if p := write(); p != config.PolicyAllow {
		t.Fatalf("no managed policy: write is %s, want allow", p)
	}
	set(config.ManagedState{File: "/etc/portcullis/managed.json", Policy: &config.Managed{AlwaysAsk: []string{"srv/write"}}})
	if p := write(); p != config.PolicyApprove {
		t.Errorf("after the managed policy says srv/write always asks: write is %s, want approve", p)
	}
	if st := d.Status().Managed; st == nil || len(st.Overridden) != 1 {
		t.Errorf("status managed %+v, want the tool write overridden", st)
	}
	set(config.ManagedState{File: "/etc/portcullis/managed.json"})
	if p := write(); p != config.PolicyApprove {
		t.Errorf("after the floor was lifted: write is %s at once, want approve until the person confirms", p)
	}
	if d.PendingChange() == nil {
		t.Error("the floor lifted: no change waits for the person")
	}
}
