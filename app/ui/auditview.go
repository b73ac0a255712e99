package ui

import (
	"errors"
	"fmt"
	"image/color"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
)

// AuditDeps is what the audit viewer reads.
type AuditDeps struct {
	// Dir is the audit log directory (daemon.AuditDir).
	Dir string
	// Key is the HMAC-SHA256 key that signs the log (daemon.ReadAuditKey),
	// or nil: Verify then checks the hash chain only and says so.
	Key []byte
}

// Audit viewer size, in Fyne units, and how many rows each table keeps (the
// most recent ones).
var (
	auditSize = fyne.NewSize(1080, 680)
	auditRows = 10000
	// auditDetailHeight is the least height of the detail pane, which
	// scrolls when a row has more fields than fit; auditSplit the share of
	// the height the tables start with (the split is draggable).
	auditDetailHeight float32 = 80
	auditSplit                = 0.66
)

// Choices of the filters that mean "no filter".
const (
	allServers = "All servers"
	allRuns    = "All runs"
)

// ShowAuditViewer opens the audit viewer and returns it: the agent runs
// (audit.Sessions) and tool calls with refusals (audit.Activity) of the log
// in d.Dir as two tables, newest first, filtered by server label and agent
// run; a Verify button that checks the whole log with audit.Verify and
// shows the outcome (event count and whether signatures were checked, or
// the first bad sequence number and the problem, in red); and a Refresh
// button. Times are local, durations in milliseconds; epochs and run IDs are
// shortened in the tables (a cell too narrow for its text ends in an
// ellipsis), and selecting a cell selects its row and shows the row in full
// below, as a table of fields, each ID with a Copy button for all of it.
//
// The log is read off the UI goroutine, never written. Only one audit viewer
// exists per app: calling ShowAuditViewer again refreshes it and brings it to
// the front. Call it on the UI goroutine.
func ShowAuditViewer(a fyne.App, d AuditDeps) fyne.Window {
	if w := reopenSingleton(a, "audit"); w != nil {
		return w
	}
	v := newAuditView(a, d, uiOptions{})
	v.win.Show()
	fitWindow(v.win, auditSize) // the canvas knows its scale once shown
	v.win.CenterOnScreen()
	return v.win
}

// auditView is the audit viewer window.
type auditView struct {
	deps AuditDeps
	opts uiOptions
	win  fyne.Window

	all      []audit.Session // unfiltered, log order: the filter choices
	sessions []audit.Session // shown, newest first
	calls    []audit.Call    // shown, newest first

	server       *widget.Select
	run          *widget.Select
	refreshBtn   *widget.Button
	verifyBtn    *widget.Button
	verifyMsg    *widget.Label
	info         *widget.Label
	tabs         *container.AppTabs
	sessTable    *widget.Table
	callTable    *widget.Table
	sessRow      int             // selected row of sessTable, -1 for none
	callRow      int             // selected row of callTable, -1 for none
	detail       *fyne.Container // the detail pane's content (showDetail)
	detailScroll *container.Scroll
	loading      bool // filter choices are being set: no reload
}

// auditColumn is one column of a table: its title, the widest text it
// usually holds (sample), how much of the width left over it takes (flex: 0
// for a column of fixed-size values such as times, short IDs and counts),
// and the text of a row.
type auditColumn[T any] struct {
	title  string
	sample string
	flex   float32
	text   func(v *auditView, row T) string
}

// Samples of the widest values of the fixed columns. A short ID is 8
// characters of the ULID alphabet, whose widest letters are M and W.
const (
	sampleTime  = "2026-12-31 23:59:59"
	sampleShort = "MMMMMMMM"
	sampleCount = "99999"
)

var sessionColumns = []auditColumn[audit.Session]{
	{"Started", sampleTime, 0, func(v *auditView, s audit.Session) string { return v.when(s.Started) }},
	{"Agent run", sampleShort, 0, func(_ *auditView, s audit.Session) string { return s.AgentRun.Short() }},
	{"Server", "inventory-local", 1, func(_ *auditView, s audit.Session) string { return s.ServerLabel }},
	{"Agent", "claude-code 2.1.0", 2, func(_ *auditView, s audit.Session) string { return agentText(s.Agent) }},
	{"Calls", sampleCount, 0, func(_ *auditView, s audit.Session) string { return strconv.Itoa(s.Calls) }},
	{"Refused", sampleCount, 0, func(_ *auditView, s audit.Session) string { return strconv.Itoa(s.Denied) }},
	{"Grants", sampleCount, 0, func(_ *auditView, s audit.Session) string { return strconv.Itoa(len(s.Grants)) }},
	{"Ended", sampleTime, 2, func(v *auditView, s audit.Session) string {
		if s.Ended.IsZero() {
			return "open"
		}
		return strings.TrimSpace(v.when(s.Ended) + " " + s.EndReason)
	}},
}

var callColumns = []auditColumn[audit.Call]{
	{"Time", sampleTime, 0, func(v *auditView, c audit.Call) string { return v.when(c.TS) }},
	{"Server", "inventory-local", 1, func(_ *auditView, c audit.Call) string { return c.ServerLabel }},
	{"Agent run", sampleShort, 0, func(_ *auditView, c audit.Call) string { return c.AgentRun.Short() }},
	{"Tool", "inventory_lookup", 2, func(_ *auditView, c audit.Call) string { return c.Tool }},
	{"Decision", "denied", 0, func(_ *auditView, c audit.Call) string { return c.Decision }},
	{"Outcome", "refused: authorization_stale", 2, func(_ *auditView, c audit.Call) string { return outcomeText(c) }},
	{"ms", "99999.9", 0, func(_ *auditView, c audit.Call) string { return durationMS(c) }},
	{"Epoch", sampleShort, 0, func(_ *auditView, c audit.Call) string { return c.Epoch.Short() }},
	{"Rev", sampleCount, 0, func(_ *auditView, c audit.Call) string { return revText(c.CatalogRevision) }},
}

// auditColumnWidths sizes cols for a table width wide: each column as wide
// as its title and sample need, and what is left of the width shared among
// the flexible columns by their flex. When the width is too small, the
// flexible columns give up their samples' width, down to their titles';
// below that the table scrolls.
func auditColumnWidths[T any](th fyne.Theme, cols []auditColumn[T], width float32) []float32 {
	measure := func(l *widget.Label) float32 { return float32(math.Ceil(float64(l.MinSize().Width))) }
	widths := make([]float32, len(cols))
	floors := make([]float32, len(cols))
	var flex, fixed, need, floor float32
	for i, c := range cols {
		title := measure(widget.NewLabelWithStyle(c.title, fyne.TextAlignLeading, fyne.TextStyle{Bold: true}))
		widths[i] = max(title, measure(widget.NewLabel(c.sample)))
		if c.flex == 0 {
			fixed += widths[i]
			continue
		}
		floors[i] = title
		flex += c.flex
		need += widths[i]
		floor += title
	}
	// Each column is followed by a separator as wide as the padding.
	left := width - fixed - float32(len(cols))*th.Size(theme.SizeNamePadding)
	switch {
	case flex == 0:
	case left >= need:
		for i, c := range cols {
			widths[i] += float32(math.Floor(float64((left - need) * c.flex / flex)))
		}
	case left > floor:
		for i, c := range cols {
			if c.flex > 0 {
				widths[i] = floors[i] + float32(math.Floor(float64((left-floor)*(widths[i]-floors[i])/(need-floor))))
			}
		}
	default:
		for i, c := range cols {
			if c.flex > 0 {
				widths[i] = floors[i]
			}
		}
	}
	return widths
}

// auditTableLayout fits the columns of a table to its width whenever the
// width changes.
type auditTableLayout struct {
	table  *widget.Table
	widths func(width float32) []float32
	width  float32
}

func (l *auditTableLayout) Layout(objs []fyne.CanvasObject, size fyne.Size) {
	if size.Width != l.width {
		l.width = size.Width
		for i, w := range l.widths(size.Width) {
			l.table.SetColumnWidth(i, w)
		}
	}
	for _, o := range objs {
		o.Move(fyne.NewPos(0, 0))
		o.Resize(size)
	}
}

func (l *auditTableLayout) MinSize(objs []fyne.CanvasObject) fyne.Size {
	var m fyne.Size
	for _, o := range objs {
		m = m.Max(o.MinSize())
	}
	return m
}

func newAuditView(a fyne.App, d AuditDeps, o uiOptions) *auditView {
	v := &auditView{deps: d, opts: o, win: a.NewWindow("Portcullis Audit Log"), sessRow: -1, callRow: -1}
	v.server = widget.NewSelect([]string{allServers}, func(string) { v.filterChanged(true) })
	v.run = widget.NewSelect([]string{allRuns}, func(string) { v.filterChanged(false) })
	v.loading = true
	v.server.SetSelected(allServers)
	v.run.SetSelected(allRuns)
	v.loading = false
	v.refreshBtn = widget.NewButtonWithIcon("Refresh", theme.ViewRefreshIcon(), v.refresh)
	v.verifyBtn = widget.NewButtonWithIcon("Verify", theme.ConfirmIcon(), v.verify)
	v.verifyMsg = newMessageLabel()
	v.info = newMessageLabel()
	v.detail = container.NewStack()
	v.detailScroll = container.NewVScroll(v.detail)
	v.detailScroll.SetMinSize(fyne.NewSize(0, auditDetailHeight))

	v.sessTable = newAuditTable(v, sessionColumns, func() []audit.Session { return v.sessions }, &v.sessRow)
	v.sessTable.OnSelected = func(id widget.TableCellID) {
		if id.Row >= 0 && id.Row < len(v.sessions) {
			selectAuditRow(v.sessTable, &v.sessRow, id)
			v.showDetail(sessionDetail(v, v.sessions[id.Row]))
		}
	}
	v.callTable = newAuditTable(v, callColumns, func() []audit.Call { return v.calls }, &v.callRow)
	v.callTable.OnSelected = func(id widget.TableCellID) {
		if id.Row >= 0 && id.Row < len(v.calls) {
			selectAuditRow(v.callTable, &v.callRow, id)
			v.showDetail(callDetail(v, v.calls[id.Row]))
		}
	}
	v.tabs = container.NewAppTabs(
		container.NewTabItem("Sessions", fitAuditTable(v.sessTable, sessionColumns)),
		container.NewTabItem("Activity", fitAuditTable(v.callTable, callColumns)),
	)
	v.tabs.OnSelected = func(*container.TabItem) {
		// The detail pane shows no row: neither table shows one selected.
		v.sessRow, v.callRow = -1, -1
		v.sessTable.Refresh()
		v.callTable.Refresh()
		v.showDetail(nil)
	}

	filters := container.NewHBox(
		widget.NewLabel("Server"), container.NewGridWrap(fyne.NewSize(200, v.server.MinSize().Height), v.server),
		widget.NewLabel("Agent run"), container.NewGridWrap(fyne.NewSize(290, v.run.MinSize().Height), v.run),
	)
	top := container.NewVBox(
		// The filters scroll sideways on a narrow screen (1280×800 at
		// scale 2): Refresh and Verify stay in view.
		container.NewBorder(nil, nil, nil, container.NewHBox(v.refreshBtn, v.verifyBtn), container.NewHScroll(filters)),
		v.verifyMsg, v.info)
	// The tables above, the detail pane below, the split between them
	// draggable: on a small screen (scale 2) the person picks the share.
	split := container.NewVSplit(v.tabs, v.detailScroll)
	split.Offset = auditSplit
	v.win.SetContent(container.NewPadded(container.NewBorder(top, nil, nil, nil, split)))
	fitWindow(v.win, auditSize)
	v.win.CenterOnScreen()
	closeOnKeys(v.win, nil, nil)
	v.refresh()
	registerSingleton(a, "audit", v.win, v.refresh)
	return v
}

// selectAuditRow makes the row of id the selected row of t: every cell of
// it is drawn selected (auditCell), and the table's own one-cell selection
// is dropped so that only the row shows. The keyboard cursor stays on id, so
// the arrow keys and Space go on from there.
func selectAuditRow(t *widget.Table, row *int, id widget.TableCellID) {
	*row = id.Row
	t.Unselect(id)
	t.Refresh()
}

// auditCell is a cell of an audit table: its text, truncated with an
// ellipsis when the column is too narrow (the detail pane shows it whole),
// over a background that shows the selected row.
type auditCell struct {
	bg    *canvas.Rectangle
	label *widget.Label
}

// auditCellLayout lays out an auditCell's objects (background, label): the
// background reaches half the column separator's width beyond the cell on
// each side, so that a selected row is one band, not a row of boxes.
type auditCellLayout struct{ gap float32 }

func (l auditCellLayout) Layout(objs []fyne.CanvasObject, size fyne.Size) {
	objs[0].Move(fyne.NewPos(-l.gap/2, 0))
	objs[0].Resize(fyne.NewSize(size.Width+l.gap, size.Height))
	objs[1].Move(fyne.NewPos(0, 0))
	objs[1].Resize(size)
}

func (l auditCellLayout) MinSize(objs []fyne.CanvasObject) fyne.Size { return objs[1].MinSize() }

// cellOf returns the auditCell parts of a cell object made by newAuditTable.
func cellOf(o fyne.CanvasObject) auditCell {
	c := o.(*fyne.Container)
	return auditCell{bg: c.Objects[0].(*canvas.Rectangle), label: c.Objects[1].(*widget.Label)}
}

// newAuditTable returns a table with a header row showing rows() with cols;
// *selected is the row drawn selected (selectAuditRow).
func newAuditTable[T any](v *auditView, cols []auditColumn[T], rows func() []T, selected *int) *widget.Table {
	var t *widget.Table
	t = widget.NewTableWithHeaders(
		func() (int, int) { return len(rows()), len(cols) },
		func() fyne.CanvasObject {
			l := widget.NewLabel("")
			l.Truncation = fyne.TextTruncateEllipsis
			bg := canvas.NewRectangle(color.Transparent)
			return container.New(auditCellLayout{gap: t.Theme().Size(theme.SizeNamePadding)}, bg, l)
		},
		func(id widget.TableCellID, o fyne.CanvasObject) {
			c := cellOf(o)
			rs := rows()
			if id.Row < 0 || id.Row >= len(rs) || id.Col < 0 || id.Col >= len(cols) {
				c.label.SetText("")
				c.bg.FillColor = color.Transparent
				c.bg.Refresh()
				return
			}
			var fill color.Color = color.Transparent
			if id.Row == *selected {
				fill = t.Theme().Color(theme.ColorNameSelection, fyne.CurrentApp().Settings().ThemeVariant())
			}
			if c.bg.FillColor != fill {
				c.bg.FillColor = fill
				c.bg.Refresh()
			}
			c.label.SetText(cols[id.Col].text(v, rs[id.Row]))
		},
	)
	t.ShowHeaderColumn = false
	t.CreateHeader = func() fyne.CanvasObject {
		return widget.NewLabelWithStyle("", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	}
	t.UpdateHeader = func(id widget.TableCellID, o fyne.CanvasObject) {
		if id.Col >= 0 && id.Col < len(cols) {
			o.(*widget.Label).SetText(cols[id.Col].title)
		}
	}
	for i, w := range auditColumnWidths(t.Theme(), cols, auditSize.Width) {
		t.SetColumnWidth(i, w)
	}
	return t
}

// fitAuditTable returns t in a container that fits its columns cols to its
// width.
func fitAuditTable[T any](t *widget.Table, cols []auditColumn[T]) fyne.CanvasObject {
	return container.New(&auditTableLayout{table: t, widths: func(width float32) []float32 {
		return auditColumnWidths(t.Theme(), cols, width)
	}}, t)
}

// filter returns the log filter the Select widgets describe.
func (v *auditView) filter() audit.Filter {
	var f audit.Filter
	if s := v.server.Selected; s != allServers {
		f.Server = s
	}
	if r := v.run.Selected; r != allRuns {
		f.Run = ids.RunID(r)
	}
	return f
}

// filterChanged reloads the tables for a new choice; a new server resets
// the run choice to the runs of that server.
func (v *auditView) filterChanged(serverChanged bool) {
	if v.loading {
		return
	}
	if serverChanged {
		v.loading = true
		v.run.SetSelected(allRuns)
		v.loading = false
	}
	v.refresh()
}

// auditData is one read of the log.
type auditData struct {
	missing  bool
	all      []audit.Session
	sessions []audit.Session
	calls    []audit.Call
	err      error
}

// refresh reads the log off the UI goroutine and shows it.
func (v *auditView) refresh() {
	f := v.filter()
	dir := v.deps.Dir
	var d auditData
	v.refreshBtn.Disable()
	v.opts.run(func() { d = readAudit(dir, f) }, func() {
		v.refreshBtn.Enable()
		v.show(d)
	})
}

// readAudit reads the sessions and the calls matching f from the log in dir.
func readAudit(dir string, f audit.Filter) auditData {
	var d auditData
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		d.missing = true
		return d
	}
	d.all, d.err = audit.Sessions(dir, audit.Filter{})
	if d.err != nil {
		return d
	}
	for _, s := range d.all {
		if (f.Server == "" || s.ServerLabel == f.Server) && (f.Run == "" || s.AgentRun == f.Run) {
			d.sessions = append(d.sessions, s)
		}
	}
	if len(d.sessions) > auditRows {
		d.sessions = d.sessions[len(d.sessions)-auditRows:]
	}
	slices.Reverse(d.sessions)
	f.Limit = auditRows
	d.calls, d.err = audit.Activity(dir, f)
	slices.Reverse(d.calls)
	return d
}

// show puts a read of the log on screen.
func (v *auditView) show(d auditData) {
	v.all, v.sessions, v.calls = d.all, d.sessions, d.calls
	switch {
	case d.missing:
		setMessageLabel(v.info, "No audit log yet in "+v.deps.Dir+": Portcullis starts it when the daemon first runs.", false)
		v.info.Importance = widget.MediumImportance
		v.info.Refresh()
		v.verifyBtn.Disable()
	case d.err != nil:
		setMessageLabel(v.info, "Cannot read the audit log: "+d.err.Error(), true)
		v.verifyBtn.Enable()
	default:
		setMessageLabel(v.info, "", false)
		v.verifyBtn.Enable()
	}
	v.setChoices()
	v.sessTable.UnselectAll()
	v.callTable.UnselectAll()
	v.sessRow, v.callRow = -1, -1
	v.sessTable.Refresh()
	v.callTable.Refresh()
	v.tabs.Items[0].Text = fmt.Sprintf("Sessions (%d)", len(v.sessions))
	v.tabs.Items[1].Text = fmt.Sprintf("Activity (%d)", len(v.calls))
	v.tabs.Refresh()
	v.showDetail(nil)
}

// setChoices fills the filters with the servers and runs of the log,
// keeping the current choices.
func (v *auditView) setChoices() {
	servers := []string{allServers}
	runs := []string{allRuns}
	for _, s := range v.all {
		if !slices.Contains(servers, s.ServerLabel) {
			servers = append(servers, s.ServerLabel)
		}
		if v.server.Selected == allServers || v.server.Selected == s.ServerLabel {
			runs = append(runs, string(s.AgentRun))
		}
	}
	slices.Sort(servers[1:])
	v.server.Options = servers
	v.run.Options = runs
	v.server.Refresh()
	v.run.Refresh()
}

// detailHint is what the detail pane says while no row is selected.
const detailHint = "Select a row to see it in full."

// showDetail shows fields in the detail pane as a two-column table, names
// on the left, values on the right (selectable, wrapped); a shortened value
// has a Copy button for the whole of it. No fields: the hint.
func (v *auditView) showDetail(fields []detailField) {
	if len(fields) == 0 {
		hint := widget.NewLabel(detailHint)
		v.detail.Objects = []fyne.CanvasObject{hint}
		v.detail.Refresh()
		return
	}
	objs := make([]fyne.CanvasObject, 0, 2*len(fields))
	for _, f := range fields {
		name := widget.NewLabelWithStyle(f.name, fyne.TextAlignTrailing, fyne.TextStyle{Bold: true})
		value := widget.NewLabel(f.value)
		value.Wrapping = fyne.TextWrapWord
		value.Selectable = true
		var cell fyne.CanvasObject = value
		if f.full != "" {
			full := f.full
			copyBtn := widget.NewButtonWithIcon("Copy", theme.ContentCopyIcon(), func() {
				fyne.CurrentApp().Clipboard().SetContent(full)
			})
			copyBtn.Importance = widget.LowImportance
			value.Wrapping = fyne.TextWrapOff // a short ID, the button beside it
			cell = container.NewHBox(value, copyBtn)
		}
		objs = append(objs, name, cell)
	}
	v.detail.Objects = []fyne.CanvasObject{container.New(layout.NewFormLayout(), objs...)}
	v.detail.Refresh()
	v.detailScroll.ScrollToTop()
}

// verify checks the whole log off the UI goroutine and shows the outcome.
func (v *auditView) verify() {
	v.verifyBtn.Disable()
	setMessageLabel(v.verifyMsg, "Verifying…", false)
	v.verifyMsg.Importance = widget.MediumImportance
	v.verifyMsg.Refresh()
	var rep audit.Report
	var err error
	dir, key := v.deps.Dir, v.deps.Key
	v.opts.run(func() { rep, err = audit.Verify(dir, key) }, func() {
		v.verifyBtn.Enable()
		text, imp := verifyText(rep, err)
		setMessageLabel(v.verifyMsg, text, imp == widget.DangerImportance)
		v.verifyMsg.Importance = imp
		v.verifyMsg.Refresh()
	})
}

// verifyText says what audit.Verify found, and how prominently.
func verifyText(rep audit.Report, err error) (string, widget.Importance) {
	switch {
	case errors.Is(err, audit.ErrBroken):
		events := fmt.Sprintf("%d events", rep.Events)
		if rep.Events == 1 {
			events = "1 event"
		}
		return fmt.Sprintf("Verification failed at seq %d: %s. %s (%s before it verified.)",
			rep.FirstBad, problemText(rep.Problem), rep.Detail, events), widget.DangerImportance
	case err != nil:
		return "Cannot verify the audit log: " + err.Error(), widget.DangerImportance
	}
	var b strings.Builder
	fmt.Fprintf(&b, "OK: %d event", rep.Events)
	if rep.Events != 1 {
		b.WriteString("s")
	}
	fmt.Fprintf(&b, " in %d file", rep.Files)
	if rep.Files != 1 {
		b.WriteString("s")
	}
	b.WriteString(", hash chain intact")
	switch {
	case rep.Signed && rep.Unsigned > 0:
		fmt.Fprintf(&b, "; signatures checked (%d older events from before signing began carry none)", rep.Unsigned)
	case rep.Signed:
		b.WriteString("; signatures checked")
	default:
		b.WriteString("; signatures not checked (no key)")
	}
	b.WriteString(".")
	for _, so := range rep.SigningOff {
		if so.Enabled != 0 {
			fmt.Fprintf(&b, " Signing was off from seq %d to %d: the events between carry no signature.", so.Disabled, so.Enabled)
		} else {
			fmt.Fprintf(&b, " Signing was turned off at seq %d: the events after it carry no signature, so someone who could write the log could have forged them.", so.Disabled)
		}
	}
	if n := len(rep.Recovered); n > 0 {
		fmt.Fprintf(&b, " %d torn region(s) after crashes are accounted for by log_recovered events.", n)
	}
	imp := widget.SuccessImportance
	if rep.Problem == audit.ProblemTorn {
		fmt.Fprintf(&b, " The last line is torn (a crash while writing): %s", rep.Detail)
		imp = widget.WarningImportance
	}
	for _, w := range rep.Warnings {
		b.WriteString(" Note: " + w)
	}
	return b.String(), imp
}

// problemText explains a Report.Problem in words.
func problemText(p string) string {
	switch p {
	case audit.ProblemEdited:
		return "an event was edited"
	case audit.ProblemDeleted:
		return "events were deleted"
	case audit.ProblemReordered:
		return "events are out of order"
	case audit.ProblemTruncated:
		return "the log was truncated"
	case audit.ProblemBadSignature:
		return "a signature is missing or wrong"
	}
	return p
}

// when formats t in the viewer's time zone, or "—" for the zero time.
func (v *auditView) when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return v.opts.local(t).Format("2006-01-02 15:04:05")
}

func agentText(a audit.Agent) string {
	name := strings.TrimSpace(a.Name + " " + a.Version)
	if name == "" && a.Executable != "" {
		name = filepath.Base(a.Executable)
	}
	if a.PID != 0 {
		name = strings.TrimSpace(fmt.Sprintf("%s (pid %d)", name, a.PID))
	}
	if name == "" {
		return "—"
	}
	return name
}

func outcomeText(c audit.Call) string {
	switch {
	case c.Decision == "denied":
		return "refused: " + c.Reason
	case !c.Completed:
		return "no answer recorded"
	case c.Error != "":
		return c.Outcome + ": " + c.Error
	}
	return c.Outcome
}

func durationMS(c audit.Call) string {
	if !c.Completed {
		return ""
	}
	return strconv.FormatFloat(float64(c.Duration)/float64(time.Millisecond), 'f', 1, 64)
}

func revText(r uint64) string {
	if r == 0 {
		return ""
	}
	return strconv.FormatUint(r, 10)
}

// detailField is one row of the detail pane: a field's name and value.
// When the value is shortened (an ID or a digest), full is the whole of it,
// which the pane's Copy button puts on the clipboard.
type detailField struct {
	name, value, full string
}

// idField is the field of an ID, shortened as in the tables.
func idField(name, id, short string) detailField {
	if id == "" {
		return detailField{name: name, value: "—"}
	}
	if short == id {
		return detailField{name: name, value: id}
	}
	return detailField{name: name, value: short + "…", full: id}
}

// digestField is the field of a digest, shortened as everywhere
// (identity.ShortDigest).
func digestField(name, d string) detailField {
	if d == "" {
		return detailField{name: name, value: "—"}
	}
	if short := identity.ShortDigest(d); short != d {
		return detailField{name: name, value: short, full: d}
	}
	return detailField{name: name, value: d}
}

// sessionDetail is a session row in full: every column's text whole, and
// the rest the log records about the run.
func sessionDetail(v *auditView, s audit.Session) []detailField {
	seq := strconv.FormatUint(s.StartSeq, 10)
	if s.EndSeq != 0 {
		seq += "–" + strconv.FormatUint(s.EndSeq, 10)
	}
	f := []detailField{
		idField("Agent run", string(s.AgentRun), s.AgentRun.Short()),
		{name: "Server", value: s.ServerLabel},
		{name: "Agent", value: agentText(s.Agent)},
		{name: "Executable", value: auditOrDash(s.Agent.Executable)},
		{name: "Started", value: v.when(s.Started)},
		{name: "Ended", value: sessionColumns[len(sessionColumns)-1].text(v, s)},
		{name: "Calls", value: fmt.Sprintf("%d, %d refused", s.Calls, s.Denied)},
		{name: "Events", value: "seq " + seq},
	}
	for i, g := range s.Grants {
		n := fmt.Sprintf("Grant %d", i+1)
		if len(s.Grants) == 1 {
			n = "Grant"
		}
		text := fmt.Sprintf("seq %d at %s, until %s: tools %s", g.Seq, v.when(g.TS), g.ExpiresWhen, auditList(g.ToolScope))
		if len(g.CredentialScope) > 0 {
			text += "; credentials " + auditList(g.CredentialScope)
		}
		f = append(f, detailField{name: n, value: text},
			idField(n+" request", string(g.Request), g.Request.Short()),
			idField(n+" epoch", string(g.Epoch), g.Epoch.Short()))
	}
	return f
}

// callDetail is an activity row in full.
func callDetail(v *auditView, c audit.Call) []detailField {
	f := []detailField{
		idField("Call", string(c.Call), c.Call.Short()),
		{name: "Time", value: fmt.Sprintf("%s (seq %d)", v.when(c.TS), c.Seq)},
		{name: "Server", value: c.ServerLabel},
		{name: "Tool", value: c.Tool},
		idField("Agent run", string(c.AgentRun), c.AgentRun.Short()),
		idField("Epoch", string(c.Epoch), c.Epoch.Short()),
		{name: "Catalog revision", value: auditOrDash(revText(c.CatalogRevision))},
	}
	switch c.Decision {
	case "denied":
		f = append(f, detailField{name: "Decision", value: "Refused: " + c.Reason})
	case "grant":
		f = append(f, detailField{name: "Decision", value: "Allowed by a grant"},
			idField("Grant request", string(c.Grant), c.Grant.Short()))
	default:
		f = append(f, detailField{name: "Decision", value: "Allowed by policy (" + c.Decision + ")"})
	}
	if c.ArgsDigest != "" {
		f = append(f, digestField("Arguments", c.ArgsDigest), detailField{name: "Argument keys", value: auditList(c.ArgKeys)})
	}
	f = append(f, detailField{name: "Outcome", value: outcomeText(c)})
	if c.Completed {
		f = append(f, detailField{name: "Duration", value: durationMS(c) + " ms (completed at seq " + strconv.FormatUint(c.CompletedSeq, 10) + ")"})
	}
	return f
}

func auditList(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func auditOrDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
