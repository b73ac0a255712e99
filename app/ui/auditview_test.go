package ui

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	stdcmp "cmp"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/audit"
)

const (
	runA   = "01JQ7R4S4S0QJ7GZP1S2AAAAAA"
	runB   = "01JQ7R4S4S0QJ7GZP1S2BBBBBB"
	epoch1 = "01JQ7R4S4S0QJ7GZP1S2EPOCH1"
	epoch2 = "01JQ7R4S4S0QJ7GZP1S2EPOCH2"
)

var auditKey = []byte("0123456789abcdef0123456789abcdef")

// writeAuditLog writes a small log of two agent runs on two servers into a
// new directory and returns it: run A on "inv" with a grant, two calls and a
// refusal, run B on "docs" with a call allowed by policy, still open.
func writeAuditLog(t *testing.T, key []byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "audit")
	var mu sync.Mutex
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(1500 * time.Millisecond)
		return now
	}
	l, err := audit.Open(audit.Options{Dir: dir, Key: key, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	events := []struct {
		typ    string
		fields any
	}{
		{audit.TypeRunStarted, audit.RunStarted{AgentRun: runA, ServerLabel: "inv",
			Agent: audit.Agent{Name: "claude-code", Version: "2.1.0", Executable: "/usr/local/bin/claude", PID: 4242}}},
		{audit.TypeServerStarted, audit.ServerStarted{ServerLabel: "inv", AgentRun: runA, Epoch: epoch1, PID: 5000}},
		{audit.TypeApprovalGranted, audit.ApprovalGranted{Request: "req-1", AgentRun: runA, ServerLabel: "inv", Epoch: epoch1,
			ToolScope: []string{"inventory_adjust"}, CredentialScope: []string{"api"}, ExpiresWhen: "agent-run-ends"}},
		{audit.TypeToolCalled, audit.ToolCalled{Call: "1", AgentRun: runA, ServerLabel: "inv", Epoch: epoch1, CatalogRevision: 12,
			Tool: "inventory_adjust", ArgsDigest: "sha256:9f2c", ArgKeys: []string{"count", "sku"}, Decision: "grant", Grant: "req-1"}},
		{audit.TypeToolCompleted, audit.ToolCompleted{Call: "1", AgentRun: runA, ServerLabel: "inv", Epoch: epoch1,
			Tool: "inventory_adjust", Outcome: "ok", DurationMS: 12.5}},
		{audit.TypeRunStarted, audit.RunStarted{AgentRun: runB, ServerLabel: "docs", Agent: audit.Agent{Executable: "/Applications/Cursor.app/Contents/MacOS/Cursor"}}},
		{audit.TypeToolCalled, audit.ToolCalled{Call: "7", AgentRun: runB, ServerLabel: "docs", Epoch: epoch2, CatalogRevision: 3,
			Tool: "search", ArgsDigest: "sha256:aa01", ArgKeys: []string{"q"}, Decision: "allow"}},
		{audit.TypeAuthorizationDenied, audit.AuthorizationDenied{Call: "2", AgentRun: runA, ServerLabel: "inv", Tool: "inventory_adjust",
			Reason: "authorization_stale", ApprovedEpoch: epoch1, CurrentEpoch: epoch2, CatalogRevision: 13}},
		{audit.TypeToolCalled, audit.ToolCalled{Call: "3", AgentRun: runA, ServerLabel: "inv", Epoch: epoch2, CatalogRevision: 13,
			Tool: "inventory_lookup", ArgsDigest: "sha256:77", ArgKeys: []string{"sku"}, Decision: "allow"}},
		{audit.TypeToolCompleted, audit.ToolCompleted{Call: "3", AgentRun: runA, ServerLabel: "inv", Epoch: epoch2,
			Tool: "inventory_lookup", Outcome: "error", DurationMS: 250, Error: "no such sku"}},
		{audit.TypeRunEnded, audit.RunEnded{AgentRun: runA, ServerLabel: "inv", Reason: "agent disconnected"}},
	}
	for _, e := range events {
		if _, err := l.Append(context.Background(), e.typ, e.fields); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func newTestAuditView(t *testing.T, d AuditDeps) *auditView {
	t.Helper()
	a := test.NewTempApp(t)
	v := newAuditView(a, d, uiOptions{inline: true, loc: time.UTC})
	t.Cleanup(v.win.Close)
	return v
}

// tableText returns the cells of a table as the viewer renders them.
func tableText[T any](v *auditView, cols []auditColumn[T], rows []T) [][]string {
	var out [][]string
	for _, r := range rows {
		var line []string
		for _, c := range cols {
			line = append(line, c.text(v, r))
		}
		out = append(out, line)
	}
	return out
}

func TestAuditViewerTables(t *testing.T) {
	dir := writeAuditLog(t, auditKey)
	v := newTestAuditView(t, AuditDeps{Dir: dir, Key: auditKey})

	wantSessions := [][]string{ // newest first
		{"2026-11-30 08:00:09", "S2BBBBBB", "docs", "Cursor", "1", "0", "0", "open"},
		{"2026-11-30 08:00:01", "S2AAAAAA", "inv", "claude-code 2.1.0 (pid 4242)", "2", "1", "1", "2026-11-30 08:00:16 agent disconnected"},
	}
	if diff := cmp.Diff(wantSessions, tableText(v, sessionColumns, v.sessions)); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}
	wantCalls := [][]string{
		{"2026-11-30 08:00:13", "inv", "S2AAAAAA", "inventory_lookup", "allow", "error: no such sku", "250.0", "S2EPOCH2", "13"},
		{"2026-11-30 08:00:12", "inv", "S2AAAAAA", "inventory_adjust", "denied", "refused: authorization_stale", "", "S2EPOCH2", "13"},
		{"2026-11-30 08:00:10", "docs", "S2BBBBBB", "search", "allow", "no answer recorded", "", "S2EPOCH2", "3"},
		{"2026-11-30 08:00:06", "inv", "S2AAAAAA", "inventory_adjust", "grant", "ok", "12.5", "S2EPOCH1", "12"},
	}
	if diff := cmp.Diff(wantCalls, tableText(v, callColumns, v.calls)); diff != "" {
		t.Errorf("activity (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{allServers, "docs", "inv"}, v.server.Options); diff != "" {
		t.Errorf("server choices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{allRuns, runA, runB}, v.run.Options); diff != "" {
		t.Errorf("run choices (-want +got):\n%s", diff)
	}
	test.AssertRendersToMarkup(t, "auditview_sessions.xml", v.win.Canvas())
	v.tabs.SelectIndex(1)
	test.AssertRendersToMarkup(t, "auditview_activity.xml", v.win.Canvas())
	v.tabs.SelectIndex(0)

}

func TestAuditViewerFilter(t *testing.T) {
	dir := writeAuditLog(t, nil)
	v := newTestAuditView(t, AuditDeps{Dir: dir})

	v.server.SetSelected("inv")
	if len(v.sessions) != 1 || v.sessions[0].AgentRun != runA {
		t.Errorf("sessions for inv: %+v", v.sessions)
	}
	for _, c := range v.calls {
		if c.ServerLabel != "inv" {
			t.Errorf("call of %s shown for inv", c.ServerLabel)
		}
	}
	if len(v.calls) != 3 {
		t.Errorf("%d calls for inv, want 3", len(v.calls))
	}
	if diff := cmp.Diff([]string{allRuns, runA}, v.run.Options); diff != "" {
		t.Errorf("run choices for inv (-want +got):\n%s", diff)
	}

	v.server.SetSelected(allServers)
	v.run.SetSelected(runB)
	if len(v.sessions) != 1 || v.sessions[0].AgentRun != runB || len(v.calls) != 1 || v.calls[0].Tool != "search" {
		t.Errorf("run B: sessions %+v, calls %+v", v.sessions, v.calls)
	}
	// A new server choice resets the run choice.
	v.server.SetSelected("inv")
	if v.run.Selected != allRuns || len(v.calls) != 3 {
		t.Errorf("after choosing inv: run %q, %d calls", v.run.Selected, len(v.calls))
	}
}

func TestAuditViewerVerify(t *testing.T) {
	dir := writeAuditLog(t, auditKey)
	v := newTestAuditView(t, AuditDeps{Dir: dir, Key: auditKey})
	test.Tap(v.verifyBtn)
	if got := v.verifyMsg.Text; !strings.Contains(got, "OK: 11 events") || !strings.Contains(got, "signatures checked") {
		t.Errorf("verify message %q", got)
	}
	if v.verifyMsg.Importance != widget.SuccessImportance {
		t.Errorf("verify importance %v, want success", v.verifyMsg.Importance)
	}

	// Without the key the chain is still checked, and the message says so.
	v.deps.Key = nil
	test.Tap(v.verifyBtn)
	if got := v.verifyMsg.Text; !strings.Contains(got, "OK: 11 events") || !strings.Contains(got, "signatures not checked") {
		t.Errorf("verify message without key %q", got)
	}
	v.deps.Key = auditKey

	// Edit one event (the denied call's reason) in place.
	path := filepath.Join(dir, "audit-000001.jsonl")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(data, []byte(`"reason":"authorization_stale"`), []byte(`"reason":"approval_denied"`), 1)
	if bytes.Equal(tampered, data) {
		t.Fatal("the event to tamper with is not in the log")
	}
	if err := os.WriteFile(path, tampered, 0o600); err != nil {
		t.Fatal(err)
	}
	test.Tap(v.verifyBtn)
	got := v.verifyMsg.Text
	if !strings.Contains(got, "Verification failed at seq 8") || !strings.Contains(got, "an event was edited") {
		t.Errorf("verify message after tampering %q, want seq 8 edited", got)
	}
	if v.verifyMsg.Importance != widget.DangerImportance {
		t.Errorf("verify importance %v, want danger (red)", v.verifyMsg.Importance)
	}
	test.AssertRendersToMarkup(t, "auditview_verify_failed.xml", v.win.Canvas())

	// Refresh reads the edited log.
	test.Tap(v.refreshBtn)
	if v.calls[1].Reason != "approval_denied" {
		t.Errorf("after Refresh, refusal reason %q", v.calls[1].Reason)
	}
}

func TestAuditViewerNoLog(t *testing.T) {
	v := newTestAuditView(t, AuditDeps{Dir: filepath.Join(t.TempDir(), "audit")})
	if !strings.Contains(v.info.Text, "No audit log yet") || !v.verifyBtn.Disabled() {
		t.Errorf("info %q, verify disabled %v", v.info.Text, v.verifyBtn.Disabled())
	}
	if len(v.sessions) != 0 || len(v.calls) != 0 {
		t.Error("rows shown without a log")
	}
}

func TestVerifyText(t *testing.T) {
	tests := []struct {
		name string
		rep  audit.Report
		err  error
		want string
		imp  widget.Importance
	}{
		{"signed", audit.Report{Events: 5, Files: 1, Signed: true}, nil,
			"OK: 5 events in 1 file, hash chain intact; signatures checked.", widget.SuccessImportance},
		{"unsigned prefix", audit.Report{Events: 9, Files: 2, Signed: true, Unsigned: 3}, nil,
			"OK: 9 events in 2 files, hash chain intact; signatures checked (3 older events from before signing began carry none).", widget.SuccessImportance},
		{"signing off and on again, then off", audit.Report{Events: 12, Files: 1, Signed: true,
			SigningOff: []audit.SigningOff{{Disabled: 3, Enabled: 6, Reason: "settings.auditSigning is false"}, {Disabled: 9}}}, nil,
			"OK: 12 events in 1 file, hash chain intact; signatures checked. Signing was off from seq 3 to 6: the events between carry no signature. " +
				"Signing was turned off at seq 9: the events after it carry no signature, so someone who could write the log could have forged them.", widget.SuccessImportance},
		{"no key", audit.Report{Events: 2, Files: 1}, nil,
			"OK: 2 events in 1 file, hash chain intact; signatures not checked (no key).", widget.SuccessImportance},
		{"torn", audit.Report{Events: 2, Files: 1, Problem: audit.ProblemTorn, Detail: "audit-000001.jsonl: 17 bytes"}, nil,
			"OK: 2 events in 1 file, hash chain intact; signatures not checked (no key). The last line is torn (a crash while writing): audit-000001.jsonl: 17 bytes", widget.WarningImportance},
		{"broken", audit.Report{Events: 3, FirstBad: 4, Problem: audit.ProblemDeleted, Detail: "seq 4 to 6 are missing."},
			audit.ErrBroken, "Verification failed at seq 4: events were deleted. seq 4 to 6 are missing. (3 events before it verified.)", widget.DangerImportance},
		{"bad signature", audit.Report{FirstBad: 1, Problem: audit.ProblemBadSignature, Detail: "wrong sig."},
			audit.ErrBroken, "Verification failed at seq 1: a signature is missing or wrong. wrong sig. (0 events before it verified.)", widget.DangerImportance},
		{"unreadable", audit.Report{}, os.ErrPermission, "Cannot verify the audit log: permission denied", widget.DangerImportance},
	}
	for _, tt := range tests {
		got, imp := verifyText(tt.rep, tt.err)
		if got != tt.want || imp != tt.imp {
			t.Errorf("%s: verifyText = %q, %v; want %q, %v", tt.name, got, imp, tt.want, tt.imp)
		}
	}
}

// columnsFit checks that the columns fit a table width wide, and that each
// fixed column shows its title and every value of rows in full.
func columnsFit[T any](t *testing.T, name string, tbl *widget.Table, v *auditView, cols []auditColumn[T], rows []T, width float32) {
	t.Helper()
	th := tbl.Theme()
	widths := auditColumnWidths(th, cols, width)
	total := float32(len(cols)) * th.Size(theme.SizeNamePadding)
	for i, c := range cols {
		total += widths[i]
		need := widget.NewLabelWithStyle(c.title, fyne.TextAlignLeading, fyne.TextStyle{Bold: true}).MinSize().Width
		for _, r := range rows {
			if c.flex == 0 {
				need = max(need, widget.NewLabel(c.text(v, r)).MinSize().Width)
			}
		}
		if widths[i] < need {
			t.Errorf("%s: column %q is %v wide, needs %v", name, c.title, widths[i], need)
		}
	}
	if total > width {
		t.Errorf("%s: columns take %v of %v", name, total, width)
	}
}

// The columns fit the table at the window's default size, short IDs and
// counts are never cut, and the columns follow the width of the window.
func TestAuditColumnsFit(t *testing.T) {
	dir := writeAuditLog(t, auditKey)
	v := newTestAuditView(t, AuditDeps{Dir: dir, Key: auditKey})
	width := v.sessTable.Size().Width
	if width < auditSize.Width-40 {
		t.Fatalf("table width %v at window width %v", width, auditSize.Width)
	}
	columnsFit(t, "sessions", v.sessTable, v, sessionColumns, v.sessions, width)
	columnsFit(t, "activity", v.callTable, v, callColumns, v.calls, width)

	narrow := auditColumnWidths(v.sessTable.Theme(), sessionColumns, width)
	wide := auditColumnWidths(v.sessTable.Theme(), sessionColumns, width+300)
	for i, c := range sessionColumns {
		if grew := wide[i] > narrow[i]; grew != (c.flex > 0) {
			t.Errorf("column %q: %v wide in a wider window, was %v", c.title, wide[i], narrow[i])
		}
	}
}

// visibleCells returns the texts of the cells of table t as drawn, row by
// row from the top (cells grouped by their position on screen), and for
// each whether it is drawn selected.
func visibleCells(t *testing.T, table *widget.Table) (texts [][]string, selected [][]bool) {
	t.Helper()
	d := fyne.CurrentApp().Driver()
	type cell struct {
		x, y float32
		text string
		sel  bool
	}
	var cells []cell
	var walk func(o fyne.CanvasObject)
	walk = func(o fyne.CanvasObject) {
		if !o.Visible() {
			return
		}
		if c, ok := o.(*fyne.Container); ok {
			if _, ok := c.Layout.(auditCellLayout); ok {
				ac := cellOf(c)
				pos := d.AbsolutePositionForObject(c)
				_, _, _, a := ac.bg.FillColor.RGBA()
				cells = append(cells, cell{pos.X, pos.Y, ac.label.Text, a != 0})
				return
			}
			for _, o := range c.Objects {
				walk(o)
			}
			return
		}
		if w, ok := o.(fyne.Widget); ok {
			for _, o := range test.WidgetRenderer(w).Objects() {
				walk(o)
			}
		}
	}
	walk(table)
	slices.SortFunc(cells, func(a, b cell) int { return stdcmp.Or(cmpFloat(a.y, b.y), cmpFloat(a.x, b.x)) })
	lastY := float32(-1)
	for _, c := range cells {
		if c.y != lastY {
			texts, selected = append(texts, nil), append(selected, nil)
			lastY = c.y
		}
		texts[len(texts)-1] = append(texts[len(texts)-1], c.text)
		selected[len(selected)-1] = append(selected[len(selected)-1], c.sel)
	}
	return texts, selected
}

func cmpFloat(a, b float32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestAuditViewerRowSelection: selecting a cell selects its whole row: every
// column of that row is drawn selected, no cell of another row is, and the
// table's one-cell selection is gone; the arrow keys and Space move the row.
func TestAuditViewerRowSelection(t *testing.T) {
	dir := writeAuditLog(t, auditKey)
	v := newTestAuditView(t, AuditDeps{Dir: dir, Key: auditKey})
	v.tabs.SelectIndex(1)
	v.callTable.Select(widget.TableCellID{Row: 1, Col: 3})
	check := func(wantRow int) {
		t.Helper()
		texts, selected := visibleCells(t, v.callTable)
		if len(texts) != len(v.calls) {
			t.Fatalf("%d rows drawn, want %d: %q", len(texts), len(v.calls), texts)
		}
		for r := range texts {
			if len(texts[r]) != len(callColumns) {
				t.Fatalf("row %d has %d cells, want %d: %q", r, len(texts[r]), len(callColumns), texts[r])
			}
			for c, sel := range selected[r] {
				if sel != (r == wantRow) {
					t.Errorf("row %d column %q (%q): selected %v, want %v", r, callColumns[c].title, texts[r][c], sel, r == wantRow)
				}
			}
		}
		if want := v.calls[wantRow].Tool; texts[wantRow][3] != want {
			t.Errorf("selected row shows tool %q, want %q", texts[wantRow][3], want)
		}
	}
	check(1)
	if got := detailValue(t, v, "Decision"); got != "Refused: authorization_stale" {
		t.Errorf("detail decision %q is not the selected row's", got)
	}
	// Only the row is drawn selected: the table holds no selected cell of
	// its own (whose marker would cover one cell).
	var unselected []widget.TableCellID
	v.callTable.OnUnselected = func(id widget.TableCellID) { unselected = append(unselected, id) }
	v.callTable.UnselectAll()
	if len(unselected) != 0 {
		t.Errorf("the table still held a selected cell %v", unselected)
	}
	v.callTable.OnUnselected = nil

	// Keyboard: Down then Space selects the next row, whole.
	v.win.Canvas().Focus(v.callTable)
	v.callTable.TypedKey(&fyne.KeyEvent{Name: fyne.KeyDown})
	v.callTable.TypedKey(&fyne.KeyEvent{Name: fyne.KeySpace})
	check(2)
	if got := detailValue(t, v, "Tool"); got != "search" {
		t.Errorf("detail tool %q, want row 2's (search)", got)
	}
}

// detailRows returns the rows of the detail pane as drawn: each field's
// name, its value, and what its Copy button puts on the clipboard ("" when
// it has none). It fails the test unless the pane is a two-column form.
func detailRows(t *testing.T, v *auditView) [][3]string {
	t.Helper()
	if len(v.detail.Objects) != 1 {
		t.Fatalf("detail pane holds %d objects, want 1", len(v.detail.Objects))
	}
	form, ok := v.detail.Objects[0].(*fyne.Container)
	if !ok {
		t.Fatalf("detail pane shows %T, not a table of fields", v.detail.Objects[0])
	}
	if _, ok := form.Layout.(interface {
		MinSize([]fyne.CanvasObject) fyne.Size
	}); !ok || len(form.Objects)%2 != 0 {
		t.Fatalf("detail pane is not two columns: layout %T, %d objects", form.Layout, len(form.Objects))
	}
	if fmt.Sprintf("%T", form.Layout) != fmt.Sprintf("%T", layout.NewFormLayout()) {
		t.Fatalf("detail pane layout %T, want a form layout", form.Layout)
	}
	var rows [][3]string
	for i := 0; i < len(form.Objects); i += 2 {
		name, ok := form.Objects[i].(*widget.Label)
		if !ok || !name.TextStyle.Bold {
			t.Fatalf("detail row %d: name is %T, not a bold label", i/2, form.Objects[i])
		}
		var row [3]string
		row[0] = name.Text
		switch val := form.Objects[i+1].(type) {
		case *widget.Label:
			row[1] = val.Text
		case *fyne.Container:
			var btn *widget.Button
			for _, o := range val.Objects {
				switch o := o.(type) {
				case *widget.Label:
					row[1] = o.Text
				case *widget.Button:
					btn = o
				}
			}
			if btn == nil {
				t.Fatalf("detail row %q: a container with no Copy button", name.Text)
			}
			fyne.CurrentApp().Clipboard().SetContent("")
			test.Tap(btn)
			row[2] = fyne.CurrentApp().Clipboard().Content()
		default:
			t.Fatalf("detail row %q: value is %T", name.Text, val)
		}
		rows = append(rows, row)
	}
	return rows
}

// detailValue returns the value of the detail pane's field name.
func detailValue(t *testing.T, v *auditView, name string) string {
	t.Helper()
	for _, r := range detailRows(t, v) {
		if r[0] == name {
			return r[1]
		}
	}
	t.Fatalf("detail pane has no field %q", name)
	return ""
}

// TestAuditViewerDetail: the detail pane shows the selected row as a table
// of fields, the IDs shortened with a Copy button for the whole ID, every
// column's text whole.
func TestAuditViewerDetail(t *testing.T) {
	dir := writeAuditLog(t, auditKey)
	v := newTestAuditView(t, AuditDeps{Dir: dir, Key: auditKey})
	if len(v.detail.Objects) != 1 || v.detail.Objects[0].(*widget.Label).Text != detailHint {
		t.Errorf("detail pane before a selection: %v, want the hint", v.detail.Objects)
	}
	v.tabs.SelectIndex(1)
	v.callTable.Select(widget.TableCellID{Row: 1, Col: 0})
	wantCall := [][3]string{
		{"Call", "2", ""},
		{"Time", "2026-11-30 08:00:12 (seq 8)", ""},
		{"Server", "inv", ""},
		{"Tool", "inventory_adjust", ""},
		{"Agent run", "S2AAAAAA…", runA},
		{"Epoch", "S2EPOCH2…", epoch2},
		{"Catalog revision", "13", ""},
		{"Decision", "Refused: authorization_stale", ""},
		{"Outcome", "refused: authorization_stale", ""},
	}
	if diff := cmp.Diff(wantCall, detailRows(t, v)); diff != "" {
		t.Errorf("refused call detail (-want +got):\n%s", diff)
	}
	v.callTable.Select(widget.TableCellID{Row: 3, Col: 5})
	wantGrantCall := [][3]string{
		{"Call", "1", ""},
		{"Time", "2026-11-30 08:00:06 (seq 4)", ""},
		{"Server", "inv", ""},
		{"Tool", "inventory_adjust", ""},
		{"Agent run", "S2AAAAAA…", runA},
		{"Epoch", "S2EPOCH1…", epoch1},
		{"Catalog revision", "12", ""},
		{"Decision", "Allowed by a grant", ""},
		{"Grant request", "req-1", ""},
		{"Arguments", "9f2c", "sha256:9f2c"},
		{"Argument keys", "count, sku", ""},
		{"Outcome", "ok", ""},
		{"Duration", "12.5 ms (completed at seq 5)", ""},
	}
	if diff := cmp.Diff(wantGrantCall, detailRows(t, v)); diff != "" {
		t.Errorf("granted call detail (-want +got):\n%s", diff)
	}
	test.AssertRendersToMarkup(t, "auditview_detail.xml", v.win.Canvas())

	v.tabs.SelectIndex(0)
	v.sessTable.Select(widget.TableCellID{Row: 1, Col: 2})
	wantSession := [][3]string{
		{"Agent run", "S2AAAAAA…", runA},
		{"Server", "inv", ""},
		{"Agent", "claude-code 2.1.0 (pid 4242)", ""},
		{"Executable", "/usr/local/bin/claude", ""},
		{"Started", "2026-11-30 08:00:01", ""},
		{"Ended", "2026-11-30 08:00:16 agent disconnected", ""},
		{"Calls", "2, 1 refused", ""},
		{"Events", "seq 1–11", ""},
		{"Grant", "seq 3 at 2026-11-30 08:00:04, until agent-run-ends: tools inventory_adjust; credentials api", ""},
		{"Grant request", "req-1", ""},
		{"Grant epoch", "S2EPOCH1…", epoch1},
	}
	if diff := cmp.Diff(wantSession, detailRows(t, v)); diff != "" {
		t.Errorf("session detail (-want +got):\n%s", diff)
	}
	// A long digest is shortened, with all of it on the clipboard.
	long := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	if f := digestField("Arguments", long); f.value != long[7:19]+"…" || f.full != long {
		t.Errorf("digestField(%q) = %+v", long, f)
	}
}

// renderedText returns the text a label draws (after truncation).
func renderedText(l *widget.Label) string {
	var b strings.Builder
	var walk func(o fyne.CanvasObject)
	walk = func(o fyne.CanvasObject) {
		switch o := o.(type) {
		case *canvas.Text:
			b.WriteString(o.Text)
		case fyne.Widget:
			for _, c := range test.WidgetRenderer(o).Objects() {
				walk(c)
			}
		}
	}
	walk(l)
	return b.String()
}

// TestAuditViewerTruncatedCell: a cell too narrow for its text draws it
// cut with an ellipsis, and selecting its row shows the text whole in the
// detail pane.
func TestAuditViewerTruncatedCell(t *testing.T) {
	dir := writeAuditLog(t, auditKey)
	v := newTestAuditView(t, AuditDeps{Dir: dir, Key: auditKey})
	const full = "2026-11-30 08:00:16 agent disconnected" // the Ended column of run A
	var cut *widget.Label
	var walk func(o fyne.CanvasObject)
	walk = func(o fyne.CanvasObject) {
		switch o := o.(type) {
		case *fyne.Container:
			if _, ok := o.Layout.(auditCellLayout); ok {
				if l := cellOf(o).label; l.Text == full {
					cut = l
				}
				return
			}
			for _, c := range o.Objects {
				walk(c)
			}
		case fyne.Widget:
			for _, c := range test.WidgetRenderer(o).Objects() {
				walk(c)
			}
		}
	}
	walk(v.sessTable)
	if cut == nil {
		t.Fatalf("no cell holds %q", full)
	}
	got := renderedText(cut)
	if !strings.HasSuffix(got, "…") || !strings.HasPrefix(full, strings.TrimSuffix(got, "…")) || got == full {
		t.Fatalf("cell draws %q for %q: want it cut with an ellipsis", got, full)
	}
	v.sessTable.Select(widget.TableCellID{Row: 1, Col: 0})
	if got := detailValue(t, v, "Ended"); got != full {
		t.Errorf("detail Ended %q, want the whole cell text %q", got, full)
	}
}
