package ui

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/secrets"
)

// TestPrefsSavesThroughDaemon: with PrefsDeps.Edit set to the daemon's
// EditConfig (as the app wires it), a tool allowed in the window is in
// force at once, not held as an edit from outside; the same change written
// to the file by something else is held.
func TestPrefsSavesThroughDaemon(t *testing.T) {
	dir := t.TempDir()
	dirs := paths.Dirs{Config: filepath.Join(dir, "c"), State: filepath.Join(dir, "s"), Runtime: filepath.Join(dir, "r")}
	if err := dirs.Ensure(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dirs.ConfigFile(), []byte(prefsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Options{Dirs: dirs})
	if err != nil {
		t.Fatal(err)
	}
	a := test.NewTempApp(t)
	p := newPrefs(a, PrefsDeps{ConfigFile: dirs.ConfigFile(), Secrets: &secrets.Memory{},
		Edit: func(_ uint64, change func(*config.Config) error) (*config.Config, error) {
			return d.EditConfig("app (Preferences)", change)
		}},
		uiOptions{inline: true, loc: time.UTC, home: "/home/you"})
	t.Cleanup(p.win.Close)

	s := p.servers
	s.tools[0].policy.SetSelected(string(config.PolicyAllow)) // legacy_tool, deny → allow
	tapButton(t, p.win.Canvas(), "Save")
	if p.status.Importance != widget.SuccessImportance {
		t.Fatalf("status %q, want success", p.status.Text)
	}
	if pc := d.PendingChange(); pc != nil {
		t.Errorf("the window's save is held as an edit from outside: %+v", pc)
	}
	cfg, err := config.Load(dirs.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Servers["inv"].Policy("legacy_tool"); got != config.PolicyAllow {
		t.Errorf("config.json says legacy_tool %s, want allow", got)
	}

	// The same kind of change by something else is held.
	srv := cfg.Servers["inv"]
	srv.Tools["other"] = config.ToolPolicy{Policy: config.PolicyAllow}
	cfg.Servers["inv"] = srv
	if err := config.Save(dirs.ConfigFile(), cfg); err != nil {
		t.Fatal(err)
	}
	if pc := d.PendingChange(); pc == nil || len(pc.Held) != 1 || pc.Held[0].Tool != "other" {
		t.Errorf("an outside edit allowing other: pending %+v, want it held", pc)
	}
}
