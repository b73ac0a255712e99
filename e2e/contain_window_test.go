//go:build ci

package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/app/ui"
	"github.com/portcullis/portcullis/core/gateway"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/test"
)

// TestContainSpoofedTextInTheWindow (issue 15, Done means: the window's
// card): the menu-bar app in this process, the faulty -spoof server, an
// agent that calls the tool whose name moves the cursor to read
// "read_file". The approval window's card, Details unfolded, holds no raw
// control, bidi or zero-width character, shows the real name escaped, and
// flags the homoglyph; the person denies it there and the call is refused.
func TestContainSpoofedTextInTheWindow(t *testing.T) {
	home := newHome(t)
	addServer(t, home, "spoof", faultyBin(t), "-spoof")
	tray := runAppUI(t, home).Tray

	ag := startRaw(t, home, "spoof")
	ag.handshake("1")
	ag.call("2", "tools/list", nil, 30*time.Second)
	runOf(t, home, ag.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	ag.request("3", "tools/call", toolCall(spoofCursor, nil))
	drawn := windowTexts(t, tray, spoofHomoglyph+" ⚠ "+spoofHomoglyphFlag) // the scope's rows may be drawn after its heading
	card := pressInWindow(t, tray, "Deny")
	wantSafe(t, "the approval window's card", card+"\n"+drawn, false,
		"wants to run `"+spoofCursorShown+"` on spoof",
		"Scope: “Approve for this run” grants "+spoofCursorShown,
		spoofHomoglyph+" ⚠ "+spoofHomoglyphFlag)
	m, _ := ag.await("3", 30*time.Second)
	if !strings.Contains(m.Raw, "approval_denied") {
		t.Errorf("the denied call answered %s", m.Raw)
	}
}

// windowTexts waits until the approval window shows a request holding every
// text of want (at most 30 s; then it returns what it shows) and returns
// every text drawn in it, the tool ticks' labels included (canvas texts,
// whatever widget draws them), one per line.
func windowTexts(t *testing.T, tray *ui.Tray, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := ""
	for {
		var parts []string
		fyne.DoAndWait(func() {
			if ids, _ := tray.Approval.Queue(); !tray.Approval.Visible() || len(ids) == 0 {
				return
			}
			for _, o := range test.LaidOutObjects(tray.Approval.Window().Content()) {
				if txt, ok := o.(*canvas.Text); ok {
					parts = append(parts, txt.Text)
				}
			}
		})
		if len(parts) > 0 {
			last = strings.Join(parts, "\n")
			if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(last, w) }) {
				return last
			}
		}
		if time.Now().After(deadline) {
			if last != "" {
				return last // the caller says what is missing
			}
			t.Fatal("the approval window did not show a request within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
