//go:build !darwin && !windows

package ui

import (
	"testing"

	"fyne.io/fyne/v2/test"
)

// TestTrayMenuKeepsUnderscores: the panel reads "_" in a dbusmenu label
// as the access key mark; the tray sends "__" so that a recent decision
// on publish_preview reads publish_preview, not publishpreview (seen in
// xfce4-panel).
func TestTrayMenuKeepsUnderscores(t *testing.T) {
	tr := NewTray(test.NewTempApp(t), Options{Daemon: newFakeDaemon(), Approvals: newFakeApprovals(), Notifier: &fakeNotifier{}})
	items := tr.buildMenu([]menuEntry{{Kind: entryServer, Label: "inventory_local — idle", Server: "inventory_local"}})
	if got, want := items[0].Label, "inventory__local — idle"; got != want {
		t.Errorf("menu label %q, want %q", got, want)
	}
}
