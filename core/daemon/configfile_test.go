package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/paths"
)

// newTestDaemon returns a Daemon (not serving: no file watcher runs) over a
// data directory whose configuration has server "srv" with the given tool
// policies.
func newTestDaemon(t *testing.T, policies map[string]string) *Daemon {
	t.Helper()
	dir := t.TempDir()
	dirs := paths.Dirs{Config: filepath.Join(dir, "config"), State: filepath.Join(dir, "state"), Runtime: filepath.Join(dir, "run")}
	if err := dirs.Ensure(); err != nil {
		t.Fatal(err)
	}
	savePolicies(t, dirs.ConfigFile(), policies)
	d, err := New(Options{Dirs: dirs})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// rechecked returns the per-tool policy function of label, each answer
// after the configuration watcher's periodic re-check (a stat of the file,
// a read when it changed), as a running daemon does every configRecheck.
func rechecked(d *Daemon, label string) func(tool string) config.Policy {
	pol := d.policy(label)
	return func(tool string) config.Policy {
		_, _ = d.load(false)
		return pol(tool)
	}
}

func savePolicies(t *testing.T, path string, policies map[string]string) {
	t.Helper()
	srv := config.Server{Command: "/bin/true", Tools: map[string]config.ToolPolicy{}}
	for tool, p := range policies {
		srv.Tools[tool] = config.ToolPolicy{Policy: config.Policy(p)}
	}
	cfg := &config.Config{Servers: map[string]config.Server{"srv": srv}}
	if err := config.Save(path, cfg); err != nil {
		t.Fatal(err)
	}
}

// TestPolicyReadsTheFileAsItIsNow: after the watcher's re-check, a tool's
// policy is the one in the file on disk; a file that breaks (syntax,
// validation) or disappears keeps the last good policies in force.
func TestPolicyReadsTheFileAsItIsNow(t *testing.T) {
	d := newTestDaemon(t, map[string]string{"read": "allow", "write": "approve"})
	path := d.opts.Dirs.ConfigFile()
	pol := rechecked(d, "srv")
	check := func(when string, want map[string]string) {
		t.Helper()
		for tool, p := range want {
			if got := pol(tool); string(got) != p {
				t.Errorf("%s: policy of %s is %q, want %q", when, tool, got, p)
			}
		}
	}
	check("at start", map[string]string{"read": "allow", "write": "approve", "other": "approve"})

	savePolicies(t, path, map[string]string{"read": "deny", "write": "approve"})
	check("after servers policy read deny", map[string]string{"read": "deny", "write": "approve"})

	savePolicies(t, path, map[string]string{"read": "deny", "write": "deny"})
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	check("after write deny", map[string]string{"read": "deny", "write": "deny"})

	// Broken by hand, in place: every tool would be allowed if it parsed.
	broken := bytes.ReplaceAll(good, []byte(`"deny"`), []byte(`"allow"`))
	broken = append([]byte("{,"), broken[1:]...)
	if err := os.WriteFile(path, broken, 0o600); err != nil {
		t.Fatal(err)
	}
	check("with a file that does not parse", map[string]string{"read": "deny", "write": "deny"})
	if _, err := d.config(); err == nil {
		t.Error("config() does not report the broken file")
	}

	// Valid JSON, invalid configuration.
	invalid := bytes.ReplaceAll(good, []byte(`"deny"`), []byte(`"sure"`))
	if err := os.WriteFile(path, invalid, 0o600); err != nil {
		t.Fatal(err)
	}
	check("with a file that does not validate", map[string]string{"read": "deny", "write": "deny"})

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	check("with the file gone", map[string]string{"read": "deny", "write": "deny"})

	// The good file widens both tools over what is in force: held until
	// the person confirms.
	savePolicies(t, path, map[string]string{"read": "allow"})
	check("once a good file is back", map[string]string{"read": "deny", "write": "deny"})
	confirmHeld(t, d, config.WidenPolicy)
	check("once its change is confirmed", map[string]string{"read": "allow", "write": "approve"})
}

// TestPolicyEditInPlace: an edit that rewrites the file in place (same
// inode) is seen as well as config.Save's rename.
func TestPolicyEditInPlace(t *testing.T) {
	d := newTestDaemon(t, map[string]string{"read": "allow"})
	path := d.opts.Dirs.ConfigFile()
	pol := rechecked(d, "srv")
	if got := pol("read"); got != "allow" {
		t.Fatalf("policy %q, want allow", got)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// "allow" → "deny " keeps the size; the modification time moves on.
	edited := bytes.Replace(b, []byte(`"allow"`), []byte(`"deny" `), 1)
	if len(edited) != len(b) {
		t.Fatal("the edit changed the size")
	}
	info, _ := os.Stat(path)
	if err := os.WriteFile(path, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	// Some file systems keep modification times in coarse steps: make
	// sure this one moved, as any later edit's would.
	if after, _ := os.Stat(path); after.ModTime().Equal(info.ModTime()) {
		if err := os.Chtimes(path, time.Time{}, info.ModTime().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if got := pol("read"); got != "deny" {
		t.Errorf("after an edit in place, policy %q, want deny", got)
	}
}

// TestConfigWatcherAppliesChanges: while the daemon serves, a change of the
// file is read by itself (no call, no status) and announced to Changes
// subscribers.
func TestConfigWatcherAppliesChanges(t *testing.T) {
	d := newTestDaemon(t, map[string]string{"read": "allow"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes, stop := d.Changes()
	defer stop()
	go d.watchConfig(ctx)
	// The watcher is set up asynchronously: edit until it has seen one.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		p := "deny"
		if i%2 == 1 {
			p = "approve"
		}
		savePolicies(t, d.opts.Dirs.ConfigFile(), map[string]string{"read": p})
		select {
		case <-changes:
			if got := d.policy("srv")("read"); string(got) == p {
				return
			}
			// The signal was for an earlier edit: go on.
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			t.Fatal("the configuration watcher did not read the edited file within 10 s")
		}
	}
}

// TestPolicyCallDoesNotStat: a tool policy decision answers from the
// configuration in force and never reads the file itself: a hand edit
// reaches it through the configuration watcher, not through the call.
func TestPolicyCallDoesNotStat(t *testing.T) {
	d := newTestDaemon(t, map[string]string{"read": "allow"})
	pol := d.policy("srv")
	savePolicies(t, d.opts.Dirs.ConfigFile(), map[string]string{"read": "deny"})
	if got := pol("read"); got != config.PolicyAllow {
		t.Errorf("policy %q before any re-check, want allow: the call read the file", got)
	}
	if _, err := d.load(false); err != nil {
		t.Fatal(err)
	}
	if got := pol("read"); got != config.PolicyDeny {
		t.Errorf("policy %q after the re-check, want deny", got)
	}
}

// TestHandEditReachesPolicyWithoutEvent: a hand edit that denies a tool is
// in force within the watcher's periodic re-check even when the file
// watcher never reports it (a missed event), with no tool call asking.
func TestHandEditReachesPolicyWithoutEvent(t *testing.T) {
	d := newTestDaemon(t, map[string]string{"read": "allow"})
	d.newWatcher = func(time.Duration, *slog.Logger) (fileWatcher, error) {
		return newFakeWatcher(func(ctx context.Context) error { <-ctx.Done(); return nil }), nil // never an event
	}
	d.recheck = 10 * time.Millisecond
	changes, stop := d.Changes()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.watchConfig(ctx) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("watchConfig: %v", err)
		}
	}()
	savePolicies(t, d.opts.Dirs.ConfigFile(), map[string]string{"read": "deny"})
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Fatal("the hand edit was not in force within 10 s without a watcher event")
	}
	if got := d.policy("srv")("read"); got != config.PolicyDeny {
		t.Errorf("policy %q after the re-check, want deny", got)
	}
}

// TestPolicyOfRemovedServerIsKept: an agent run whose server label left the
// configuration (`portcullis servers remove`, a config.json replaced by a
// valid `{}`) keeps the tool policies it had — a denied tool stays denied,
// an allowed one allowed, nothing falls back to the default — and a label
// that comes back has its new policies. The authority's ToolDenied hook
// answers the same way.
func TestPolicyOfRemovedServerIsKept(t *testing.T) {
	d := newTestDaemon(t, map[string]string{"read": "allow", "write": "deny"})
	path := d.opts.Dirs.ConfigFile()
	pol := rechecked(d, "srv")
	check := func(when string, want map[string]string) {
		t.Helper()
		for tool, p := range want {
			if got := pol(tool); string(got) != p {
				t.Errorf("%s: policy of %s is %q, want %q", when, tool, got, p)
			}
		}
	}
	check("at start", map[string]string{"read": "allow", "write": "deny", "other": "approve"})

	// A later edit, then the removal (`servers remove` saves a file
	// without the label).
	savePolicies(t, path, map[string]string{"read": "allow", "write": "deny", "other": "deny"})
	if _, err := d.config(); err != nil {
		t.Fatal(err)
	}
	if err := config.Save(path, &config.Config{Servers: map[string]config.Server{"else": {Command: "/bin/true"}}}); err != nil {
		t.Fatal(err)
	}
	check("after servers remove", map[string]string{"read": "allow", "write": "deny", "other": "deny", "new": "approve"})

	// A valid `{}` written by hand.
	if err := os.WriteFile(path, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("with config.json `{}`", map[string]string{"read": "allow", "write": "deny", "other": "deny"})
	if _, err := d.config(); err != nil {
		t.Fatalf("`{}` does not load: %v", err)
	}
	// A request raised with write in its scope grants read only.
	id := d.authz.Raise(authz.Card{AgentRun: "RUN", ServerLabel: "srv", CurrentEpoch: "E", Tool: "read", ToolScope: []string{"read", "write"}})
	if err := d.authz.Decide(id, authz.Decision{Choice: authz.ApproveRun}); err != nil {
		t.Fatal(err)
	}
	if g, err := d.authz.Wait(context.Background(), id); err != nil || !slices.Equal(g.ToolScope, []string{"read"}) {
		t.Errorf("grant %+v (%v): want the tool scope [read], without the denied write", g, err)
	}

	// The label comes back with other policies: they apply, the one that
	// allows once confirmed.
	savePolicies(t, path, map[string]string{"write": "allow"})
	check("once srv is back", map[string]string{"read": "approve", "write": "approve", "other": "approve"})
	confirmHeld(t, d, config.WidenPolicy)
	check("once its change is confirmed", map[string]string{"read": "approve", "write": "allow", "other": "approve"})
}
