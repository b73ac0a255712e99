package ui

import (
	"strings"
	"testing"

	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/daemon"
)

// wantMessage checks that m shows with the colour of imp and, but for plain
// notes, the icon of that kind, left of the text.
func wantMessage(t *testing.T, what string, m *messageLine, imp widget.Importance) {
	t.Helper()
	if !m.box.Visible() || m.Text == "" {
		t.Errorf("%s: hidden or empty", what)
		return
	}
	if m.Importance != imp {
		t.Errorf("%s %q: importance %v, want %v", what, m.Text, m.Importance, imp)
	}
	want := messageIcon(imp)
	switch {
	case want == nil && m.icon.Visible():
		t.Errorf("%s %q: an icon on a plain note", what, m.Text)
	case want != nil && (!m.icon.Visible() || m.icon.Resource == nil || m.icon.Resource.Name() != want.Name()):
		t.Errorf("%s %q: icon %v, want %s", what, m.Text, m.icon.Resource, want.Name())
	case want != nil && m.box.Objects[len(m.box.Objects)-1] != m.icon:
		// container.NewBorder keeps the centre first and the left object last.
		t.Errorf("%s: the icon is not beside the text", what)
	case want != nil && (m.icon.Size().Width <= 0 || m.Label.Position().X < m.icon.Size().Width):
		t.Errorf("%s %q: icon drawn %v wide, text at x=%v: the icon does not show before the text", what, m.Text, m.icon.Size().Width, m.Label.Position().X)
	}
}

// Every error in Preferences is drawn one way, and states in their colours.
func TestPrefsOneMessageStyle(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	s := f.p.servers
	c := f.window.Canvas()

	s.label.SetText("no spaces allowed")
	s.env.SetText("INV_TOKEN=x")
	wantMessage(t, "label problem", s.fields[fLabel].note, widget.DangerImportance)
	tapButton(t, c, "Save")
	wantMessage(t, "status after a refused save", f.p.status, widget.DangerImportance)

	s.label.SetText("inv")
	s.env.SetText("LOG_LEVEL=info")
	tapButton(t, c, "Save")
	wantMessage(t, "status after a save", f.p.status, widget.SuccessImportance)

	f.p.setNote("Not saved: audit signing stays on.")
	wantMessage(t, "a note", f.p.status, widget.MediumImportance)
	if hint := s.fields[fArgs].note; hint.icon.Visible() {
		t.Errorf("hint %q carries an icon", hint.Text)
	}

	// The audit state: not signed while on is a warning, signed a success,
	// a signing error an error, off as set plain.
	g := f.p.general
	f.p.tabs.SelectIndex(2)
	if !strings.Contains(g.audit.Text, "Not signed yet") {
		t.Fatalf("audit state %q, want not signed yet", g.audit.Text)
	}
	wantMessage(t, "audit not signed yet", g.audit, widget.WarningImportance)
	if err := f.store.Set(daemon.AuditKeyScope, []byte(strings.Repeat("ab", daemon.AuditKeySize))); err != nil {
		t.Fatal(err)
	}
	f.p.reload()
	wantMessage(t, "audit signed", g.audit, widget.SuccessImportance)
	for st, imp := range map[daemon.AuditStatus]widget.Importance{
		{SigningError: "the key is locked"}:           widget.DangerImportance,
		{Signed: true}:                                widget.SuccessImportance,
		{Note: "the audit log is not signed: no key"}: widget.WarningImportance,
	} {
		if _, got := auditStatusText(st, true); got != imp {
			t.Errorf("audit %+v with signing on: importance %v, want %v", st, got, imp)
		}
	}
	if _, got := auditStatusText(daemon.AuditStatus{}, false); got != widget.MediumImportance {
		t.Errorf("audit off as set: importance %v, want plain", got)
	}

	// A file that cannot be used: the banner is an error like the others.
	b := newPrefsFixture(t, "{")
	wantMessage(t, "banner", b.p.banner, widget.DangerImportance)
}

// Revert on the General tab shows the saved values again and changes
// nothing: not the file, not launch at login.
func TestPrefsGeneralRevert(t *testing.T) {
	f := newPrefsFixture(t, `{"mcpServers": {}, "settings": {"approvalTimeout": "90s"}}`)
	g := f.p.general
	c := f.window.Canvas()
	f.p.tabs.SelectIndex(2)
	before := f.read(t)

	g.approve.SetText("5m")
	g.hold.SetText("soon")
	g.sign.SetChecked(false)
	g.login.SetChecked(true)
	tapButton(t, c, "Revert")
	got := map[string]any{"approve": g.approve.Text, "hold": g.hold.Text, "sign": g.sign.Checked, "login": g.login.Checked}
	want := map[string]any{"approve": "1m30s", "hold": "", "sign": true, "login": false}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s after Revert: %v, want the saved %v", k, got[k], w)
		}
	}
	wantProblems(t, g.fields, nil)
	if string(f.read(t)) != string(before) || len(f.login.calls) != 0 || f.saved != 0 {
		t.Errorf("Revert changed something: file changed %v, login calls %v, OnSaved %d", string(f.read(t)) != string(before), f.login.calls, f.saved)
	}
	if f.p.status.Visible() {
		t.Errorf("status %q shown after Revert", f.p.status.Text)
	}
	// Nothing was applied on the way either: Save after the edit again.
	g.login.SetChecked(true)
	tapButton(t, c, "Save")
	if diff := len(f.login.calls); diff != 1 || !f.login.on {
		t.Errorf("Save applied launch at login %d times (on=%v), want once", diff, f.login.on)
	}
}
