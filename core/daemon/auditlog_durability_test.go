package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/paths"
)

// TestAuditDurabilityFollowsSettings: settings.auditDurability reaches the
// open audit log at start, and when the file is loaded again.
func TestAuditDurabilityFollowsSettings(t *testing.T) {
	save := func(dirs paths.Dirs, v string) {
		t.Helper()
		cfg := &config.Config{Settings: config.Settings{AuditDurability: v}}
		if err := config.Save(dirs.ConfigFile(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	serve := func(dirs paths.Dirs) (*Daemon, *audit.Log) {
		t.Helper()
		d, err := New(Options{Dirs: dirs, Peers: selfPeers{}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		served := startDaemon(t, ctx, d)
		t.Cleanup(func() { cancel(); <-served })
		d.mu.Lock()
		defer d.mu.Unlock()
		return d, d.audit
	}
	for _, tc := range []struct{ start, then string }{
		{config.DurabilityStrict, ""},
		{config.DurabilityAuthority, config.DurabilityStrict},
	} {
		dirs := shortHome(t)
		if err := dirs.Ensure(); err != nil {
			t.Fatal(err)
		}
		save(dirs, tc.start)
		d, al := serve(dirs)
		if got := al.Durability(); string(got) != tc.start {
			t.Fatalf("durability at start = %q, want %q", got, tc.start)
		}
		if tc.then == "" {
			continue
		}
		save(dirs, tc.then)
		if _, err := d.load(true); err != nil {
			t.Fatal(err)
		}
		if got := al.Durability(); string(got) != tc.then {
			t.Fatalf("durability after the file says %q = %q", tc.then, got)
		}
	}
}
