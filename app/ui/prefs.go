package ui

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/loginitem"
	"github.com/portcullis/portcullis/core/secrets"
)

// PrefsDeps is what the Preferences window reads and writes.
type PrefsDeps struct {
	// ConfigFile is the path of config.json (paths.Dirs.ConfigFile()). It is
	// read when the window opens and rewritten atomically by every save
	// (config.Save, which keeps config.json.last-good); its directory is
	// created (mode 0700) when missing.
	ConfigFile string
	// Catalogs gives the latest catalog revision of each server label, whose
	// tool names are offered for per-tool policies. May be nil.
	Catalogs *catalog.Store
	// Secrets is the credential store (Keychain, Secret Service) where the
	// Credentials tab puts secret values. Required.
	Secrets secrets.Store
	// Login is the "launch at login" setting (platform.NewLoginItem); nil
	// where the system has none, and the General tab says so.
	Login loginitem.Item
	// AuditStatus returns the daemon's audit signing state (the audit part
	// of `portcullis status`), which the General tab shows under "Sign the
	// audit log"; nil: the tab tells it from the key's presence in Secrets.
	AuditStatus func() daemon.AuditStatus
	// Edit, when not nil, makes every save: change edits a copy of the
	// configuration in force and Edit records, writes and puts it in force
	// (daemon.EditConfig, the window being the person's), returning the
	// configuration saved. window is the Preferences window's handle on
	// the display server (the press behind Save is judged for it; 0 when
	// unknown). Nil: the window writes ConfigFile itself.
	Edit func(window uint64, change func(*config.Config) error) (*config.Config, error)
	// Managed reads the managed policy an organisation set
	// (config.ReadManaged when nil): the General tab shows its floors,
	// and a save below one is refused with the reason.
	Managed func() config.ManagedState
	// OnSaved, when not nil, is called on the UI goroutine after each
	// successful write of ConfigFile. The daemon re-reads the file at each
	// agent connection and server launch, so nothing else is needed for a
	// change to apply; running servers are not disturbed.
	OnSaved func()
}

// Preferences window size, in Fyne units.
var prefsSize = fyne.NewSize(920, 640)

// ShowPreferences opens the Preferences window with three tabs — Servers
// (add, edit, remove servers: command, arguments, working directory,
// environment, watched paths, restart policy, per-tool policy, credential
// scopes), Credentials (set, replace or remove a scope's secret, which is
// never shown, and how it is injected) and General (launch at login,
// timeouts, audit signing on or off, which asks before turning it off) —
// and returns it. Edits are checked with
// config.Validate as they are typed, each problem shown under its field, and
// saved with config.Save onto a fresh read of the file, so that a concurrent
// change to another server (from the CLI, say) is kept. An invalid edit is
// never written.
//
// Only one Preferences window exists per app: calling ShowPreferences while
// it is open reloads it from disk and brings it to the front. Call it on the
// UI goroutine (a menu item's action is).
func ShowPreferences(a fyne.App, d PrefsDeps) fyne.Window {
	if w := reopenSingleton(a, "prefs"); w != nil {
		return w
	}
	p := newPrefs(a, d, uiOptions{})
	p.win.Show()
	fitWindow(p.win, prefsSize) // the canvas knows its scale once shown
	p.win.CenterOnScreen()
	return p.win
}

// ShowPreferencesAt shows Preferences (as ShowPreferences) on the page of
// server label: the tray's server rows open it. Unsaved edits of another
// server are asked about first.
func ShowPreferencesAt(a fyne.App, d PrefsDeps, label string) fyne.Window {
	w := ShowPreferences(a, d)
	singletonsMu.Lock()
	p := singletons[singletonKey{a, "prefs"}].prefs
	singletonsMu.Unlock()
	if p != nil {
		p.showServer(label)
	}
	return w
}

// showServer selects the Servers tab and server label in it.
func (p *prefs) showServer(label string) {
	p.tabs.SelectIndex(0)
	if _, ok := p.config().Servers[label]; !ok {
		return
	}
	if p.servers.editing && p.servers.orig == label && !p.servers.isNew {
		return
	}
	p.servers.leave(func() { p.servers.edit(label) })
}

// uiOptions are test hooks of the windows.
type uiOptions struct {
	// inline runs background work synchronously on the calling goroutine.
	inline bool
	// loc is the time zone of displayed times (nil: time.Local).
	loc *time.Location
	// home is the home directory examples are drawn from ("": the user's).
	home string
}

// homeDir returns the home directory of the person, for examples of paths
// (placeholders); "" when unknown.
func (o uiOptions) homeDir() string {
	if o.home != "" {
		return o.home
	}
	h, _ := os.UserHomeDir()
	return h
}

// local converts t to the display time zone.
func (o uiOptions) local(t time.Time) time.Time {
	if o.loc == nil {
		return t.Local()
	}
	return t.In(o.loc)
}

// run calls work off the UI goroutine and then done on it; with inline (and
// under the headless driver, see headless) both run at once on the caller's
// goroutine.
func (o uiOptions) run(work, done func()) {
	if o.inline || headless {
		work()
		done()
		return
	}
	go func() {
		work()
		fyne.Do(done)
	}()
}

// singletons are the open one-per-app windows; reload refreshes one from disk.
var (
	singletonsMu sync.Mutex
	singletons   = map[singletonKey]singleton{}
)

type singletonKey struct {
	app  fyne.App
	kind string
}

type singleton struct {
	win    fyne.Window
	reload func()
	prefs  *prefs // the Preferences of a "prefs" window
}

// reopenSingleton reloads and shows the open window of kind, or returns nil.
func reopenSingleton(a fyne.App, kind string) fyne.Window {
	singletonsMu.Lock()
	s, ok := singletons[singletonKey{a, kind}]
	singletonsMu.Unlock()
	if !ok {
		return nil
	}
	s.reload()
	s.win.Show()
	s.win.RequestFocus()
	return s.win
}

// registerSingleton records w as the open window of kind until it closes.
func registerSingleton(a fyne.App, kind string, w fyne.Window, reload func()) {
	key := singletonKey{a, kind}
	singletonsMu.Lock()
	singletons[key] = singleton{win: w, reload: reload}
	singletonsMu.Unlock()
	w.SetOnClosed(func() {
		singletonsMu.Lock()
		delete(singletons, key)
		singletonsMu.Unlock()
	})
}

// prefs is the Preferences window.
type prefs struct {
	deps PrefsDeps
	opts uiOptions
	win  fyne.Window

	cfg     *config.Config // as last read or written; nil while the file is unusable
	loadErr error          // why cfg is nil

	banner  *messageLine // a file that cannot be used
	status  *messageLine // outcome of the last action
	tabs    *container.AppTabs
	servers *serversTab
	creds   *credsTab
	general *generalTab

	dialogs []dialog.Dialog // shown by ask, oldest first; Escape dismisses the last
}

func newPrefs(a fyne.App, d PrefsDeps, o uiOptions) *prefs {
	p := &prefs{deps: d, opts: o, win: a.NewWindow("Portcullis Preferences")}
	p.banner = newMessageLine("")
	p.status = newMessageLine("")
	p.servers = newServersTab(p)
	p.creds = newCredsTab(p)
	p.general = newGeneralTab(p)
	p.tabs = container.NewAppTabs(
		container.NewTabItem("Servers", p.servers.content),
		container.NewTabItem("Credentials", p.creds.content),
		p.general.item,
	)
	p.tabs.OnSelected = func(*container.TabItem) { p.setStatus("", false) }
	// The status area keeps the height of two lines whether a message shows
	// or not, so that the buttons above it do not move under the cursor.
	room := canvas.NewRectangle(color.Transparent)
	room.SetMinSize(fyne.NewSize(0, widget.NewLabel("1\n2").MinSize().Height))
	p.win.SetContent(container.NewThemeOverride(
		container.NewBorder(p.banner.box, container.NewPadded(container.NewStack(room, p.status.box)), nil, nil, p.tabs),
		examplesTheme{}))
	fitWindow(p.win, prefsSize)
	p.win.CenterOnScreen()
	// Escape, Ctrl/Cmd+W and the window's close button close the window,
	// asking first about unsaved edits (a server's, then General's).
	closeOnKeys(p.win, p.escape, func() { p.leave(p.win.Close) })
	p.win.SetCloseIntercept(func() { p.leave(p.win.Close) })
	p.reload()
	registerSingleton(a, "prefs", p.win, p.reload)
	singletonsMu.Lock()
	if sg, ok := singletons[singletonKey{a, "prefs"}]; ok {
		sg.prefs = p
		singletons[singletonKey{a, "prefs"}] = sg
	}
	singletonsMu.Unlock()
	return p
}

// leave runs next once no edit would be lost: it asks about a server's
// unsaved edits, then about the General tab's.
func (p *prefs) leave(next func()) {
	p.servers.leave(func() { p.general.leave(next) })
}

// ask shows d, a question over the window whose dismiss button is the safe
// answer (Keep editing, Cancel…): Escape answers it that way.
func (p *prefs) ask(d dialog.Dialog) {
	p.dialogs = append(p.dialogs, d)
	d.SetOnClosed(func() {
		if i := slices.Index(p.dialogs, d); i >= 0 {
			p.dialogs = slices.Delete(p.dialogs, i, i+1)
		}
	})
	d.Show()
}

// escape dismisses the question shown last, if any, and reports whether
// there was one (the Escape key; a dialog's buttons take no keys unless
// tabbed to). Without one, Escape closes the window.
func (p *prefs) escape() bool {
	if n := len(p.dialogs); n > 0 {
		p.dialogs[n-1].Dismiss()
		return true
	}
	return false
}

// reload reads the configuration file and refreshes every tab.
func (p *prefs) reload() {
	c, err := config.LoadForEdit(p.deps.ConfigFile)
	switch {
	case err == nil:
		p.cfg, p.loadErr = c, nil
		setMessage(p.banner, "", false)
	default:
		p.cfg, p.loadErr = nil, err
		setMessage(p.banner, fmt.Sprintf("%s cannot be used, so nothing can be saved until it is fixed in an editor "+
			"(or replaced by %s%s):\n%v", filepath.Base(p.deps.ConfigFile), filepath.Base(p.deps.ConfigFile), config.LastGoodSuffix, err), true)
	}
	p.setStatus("", false)
	p.servers.reload()
	p.creds.reload()
	p.general.reload()
}

// config returns the configuration as last read, or an empty one while the
// file is unusable.
func (p *prefs) config() *config.Config {
	if p.cfg == nil {
		return &config.Config{Servers: map[string]config.Server{}}
	}
	return p.cfg
}

// save applies change to the configuration and saves it: through
// PrefsDeps.Edit when set (the daemon makes the change from the
// configuration in force), else onto a fresh read of the file with
// config.Save.
func (p *prefs) save(change func(c *config.Config) error) (*config.Config, error) {
	m := p.managed()
	withCreds := func(c *config.Config) error {
		if c.Credentials == nil {
			c.Credentials = map[string]config.Credential{}
		}
		if err := change(c); err != nil {
			return err
		}
		// The daemon refuses it too; here the reason shows at once.
		if below := m.Policy.Below(c); len(below) > 0 {
			return m.Explain(below)
		}
		return nil
	}
	if p.deps.Edit != nil {
		return p.deps.Edit(nativeHandle(p.win), withCreds)
	}
	c, err := config.LoadForEdit(p.deps.ConfigFile)
	if err != nil {
		return nil, err
	}
	// From the file raised to the floors, as the daemon has it in force.
	c, _ = m.Apply(c)
	if err := withCreds(c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p.deps.ConfigFile), 0o700); err != nil {
		return nil, fmt.Errorf("saving configuration: %w", err)
	}
	if err := config.Save(p.deps.ConfigFile, c); err != nil {
		return nil, err
	}
	return c, nil
}

// managed is the managed policy (PrefsDeps.Managed).
func (p *prefs) managed() config.ManagedState {
	if p.deps.Managed != nil {
		return p.deps.Managed()
	}
	return config.ReadManaged()
}

// update reads the file afresh, applies change to it and saves it with
// config.Save. It returns change's error, a *config.ValidationError (nothing
// is written then), or an error reading or writing the file. On success it
// refreshes every tab and calls OnSaved.
func (p *prefs) update(change func(c *config.Config) error) error {
	c, err := p.save(change)
	if err != nil {
		return err
	}
	p.cfg, p.loadErr = c, nil
	setMessage(p.banner, "", false)
	p.servers.refreshList()
	p.creds.refreshList()
	// What one tab saved shows in the other at once, without touching
	// edits in progress there.
	p.servers.refreshScopes()
	p.creds.refreshUsedBy()
	if p.deps.OnSaved != nil {
		p.deps.OnSaved()
	}
	return nil
}

// setStatus shows text in the window's status line, in red when bad, else
// in green (something was done).
func (p *prefs) setStatus(text string, bad bool) { setMessage(p.status, text, bad) }

// setNote shows text in the window's status line in the plain text colour:
// nothing failed and nothing was done ("Not saved: audit signing stays
// on.", the person's own choice).
func (p *prefs) setNote(text string) { p.status.set(text, widget.MediumImportance) }

// edited clears a "Saved" status at the person's next edit: it no longer
// describes what the window shows.
func (p *prefs) edited() {
	if p.status.Visible() && p.status.Importance == widget.SuccessImportance {
		p.setStatus("", false)
	}
}

// notSavedFields is the status of a save refused for invalid fields.
const notSavedFields = "Not saved: correct the fields marked in red."

// fieldsValid clears the status of a save refused for invalid fields once
// the person has corrected them: it no longer describes the window.
func (p *prefs) fieldsValid() {
	if p.status.Visible() && p.status.Text == notSavedFields {
		p.setStatus("", false)
	}
}

// messageLine is how Preferences shows every message: the file's banner,
// the status line, the problems under a form and the note under each field.
// An error is drawn in the error colour after the error icon, a warning in
// the warning colour after the warning icon, a success in the success colour
// after a check mark; a plain note (a hint, or "nothing was done") in the
// text colour without an icon. Layouts hold box; the label is embedded so
// that its Text and Importance read as the message's.
type messageLine struct {
	*widget.Label
	icon *widget.Icon
	box  *fyne.Container
}

// newMessageLine returns an empty, hidden message in text of the theme
// size (0 for the normal text size).
func newMessageLine(size fyne.ThemeSizeName) *messageLine {
	m := &messageLine{Label: widget.NewLabel(""), icon: widget.NewIcon(nil)}
	m.Wrapping = fyne.TextWrapWord
	if size != "" {
		m.SizeName = size
	}
	m.box = container.NewBorder(nil, nil, m.icon, nil, m.Label)
	m.set("", widget.MediumImportance)
	return m
}

// messageIcon is the icon of a message of importance imp, nil for none.
func messageIcon(imp widget.Importance) fyne.Resource {
	switch imp {
	case widget.DangerImportance:
		return theme.NewErrorThemedResource(theme.ErrorIcon())
	case widget.WarningImportance:
		return theme.NewWarningThemedResource(theme.WarningIcon())
	case widget.SuccessImportance:
		return theme.NewSuccessThemedResource(theme.ConfirmIcon())
	}
	return nil
}

// set shows text with the colour and icon of imp, or hides the message when
// text is empty.
func (m *messageLine) set(text string, imp widget.Importance) {
	m.Importance = imp
	m.SetText(text)
	if res := messageIcon(imp); res != nil {
		m.icon.SetResource(res)
		m.icon.Show()
	} else {
		m.icon.Hide()
	}
	if text == "" {
		m.Hide()
		m.box.Hide()
		return
	}
	m.Show()
	m.box.Show()
	m.box.Refresh() // lays the icon, shown or hidden just now, out again
}

// newMessageLabel returns a wrapping label for messages, hidden while empty.
// (The audit viewer's; Preferences uses messageLine.)
func newMessageLabel() *widget.Label {
	l := widget.NewLabel("")
	l.Wrapping = fyne.TextWrapWord
	l.Hide()
	return l
}

// setMessageLabel sets l's text and colour (red when bad, else green) and hides
// it when text is empty.
func setMessageLabel(l *widget.Label, text string, bad bool) {
	l.Importance = widget.SuccessImportance
	if bad {
		l.Importance = widget.DangerImportance
	}
	l.SetText(text)
	if text == "" {
		l.Hide()
	} else {
		l.Show()
	}
}

// setMessage shows text in m as an error when bad, else as a success.
func setMessage(m *messageLine, text string, bad bool) {
	imp := widget.SuccessImportance
	if bad {
		imp = widget.DangerImportance
	}
	m.set(text, imp)
}

// prefsField is one row of a form: a caption, the input, and one note line
// under the input. The note shows the hint, or in its place the problems
// found with the value (in the error colour) or warnings (in the warning
// colour), so that live validation does not move the fields below.
type prefsField struct {
	caption  string
	input    fyne.CanvasObject
	hint     string
	problems []string
	warnings []string
	note     *messageLine
}

func newPrefsField(caption string, input fyne.CanvasObject, hint string) *prefsField {
	f := &prefsField{caption: caption, input: input, hint: hint, note: newMessageLine(theme.SizeNameCaptionText)}
	f.show()
	return f
}

// setHint changes the text the note shows while the value has no problems
// or warnings.
func (f *prefsField) setHint(hint string) {
	f.hint = hint
	f.show()
}

// setProblems shows msgs (one per line) in the note, or clears them.
func (f *prefsField) setProblems(msgs []string) {
	f.problems = slices.Clone(msgs)
	f.show()
}

// setWarnings shows msgs (one per line) in the note when there are no
// problems, or clears them. A warning does not prevent saving.
func (f *prefsField) setWarnings(msgs []string) {
	f.warnings = slices.Clone(msgs)
	f.show()
}

// show puts the problems, else the warnings, else the hint in the note. A
// field without a hint keeps its note hidden while there is nothing to say.
func (f *prefsField) show() {
	text, imp := f.hint, widget.MediumImportance
	switch {
	case len(f.problems) > 0:
		text, imp = strings.Join(f.problems, "\n"), widget.DangerImportance
	case len(f.warnings) > 0:
		text, imp = strings.Join(f.warnings, "\n"), widget.WarningImportance
	}
	f.note.set(text, imp)
}

// problemText returns the problem text shown under the field ("" when none).
func (f *prefsField) problemText() string { return strings.Join(f.problems, "\n") }

// warningText returns the warnings shown under the field ("" when none, or
// when problems hide them).
func (f *prefsField) warningText() string {
	if len(f.problems) > 0 {
		return ""
	}
	return strings.Join(f.warnings, "\n")
}

// prefsForm lays fields out in two aligned columns: captions right-aligned at the
// top of their row, inputs with their note on the right.
func prefsForm(fields ...*prefsField) *fyne.Container {
	var objs []fyne.CanvasObject
	for _, f := range fields {
		caption := widget.NewLabelWithStyle(f.caption, fyne.TextAlignTrailing, fyne.TextStyle{Bold: true})
		right := container.New(layout.NewCustomPaddedVBoxLayout(0), f.input, f.note.box)
		objs = append(objs, container.NewVBox(caption), right)
	}
	return container.New(layout.NewFormLayout(), objs...)
}

// prefsHeading returns a bold label for the top of a pane.
func prefsHeading(text string) *widget.Label {
	return widget.NewLabelWithStyle(text, fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
}

// bareKey matches the map keys config.Problem.Path writes unquoted.
var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// pathKey writes key as a segment of config.Problem.Path does: bare when made
// of letters, digits, '_' and '-', else Go-quoted.
func pathKey(key string) string {
	if bareKey.MatchString(key) {
		return key
	}
	return strconv.Quote(key)
}

// splitProblemPath splits a problem path below base into its first segment
// (a key, without a leading '.') and the rest ("[2]", ".name.policy"). ok is
// false when path is not base or below it; for base itself seg is "".
func splitProblemPath(base, path string) (seg, rest string, ok bool) {
	if path == base {
		return "", "", true
	}
	r, found := strings.CutPrefix(path, base+".")
	if !found {
		return "", "", false
	}
	if strings.HasPrefix(r, `"`) { // a quoted key
		if q, err := strconv.QuotedPrefix(r); err == nil {
			k, _ := strconv.Unquote(q)
			return k, r[len(q):], true
		}
	}
	i := strings.IndexAny(r, ".[")
	if i < 0 {
		return r, "", true
	}
	return r[:i], r[i:], true
}

// entryLines splits a multi-line entry into its non-empty lines.
func entryLines(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		l = strings.TrimRight(l, "\r\n")
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// lineOf turns an index suffix such as "[2]" into "line 3: ", or "".
func lineOf(rest string) string {
	if !strings.HasPrefix(rest, "[") {
		return ""
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return ""
	}
	n, err := strconv.Atoi(rest[1:end])
	if err != nil {
		return ""
	}
	return fmt.Sprintf("line %d: ", n+1)
}

// nameList is the list on the left of a preferences tab (server labels,
// credential scopes): names gives the current names, template sizes the rows,
// and pick runs with the name a person selects.
func nameList(names func() []string, template string, pick func(name string)) *widget.List {
	l := widget.NewList(
		func() int { return len(names()) },
		func() fyne.CanvasObject { return widget.NewLabel(template) },
		func(id widget.ListItemID, o fyne.CanvasObject) { o.(*widget.Label).SetText(names()[id]) },
	)
	l.OnSelected = func(id widget.ListItemID) {
		if ns := names(); id >= 0 && id < len(ns) {
			pick(ns[id])
		}
	}
	return l
}

// reasonRewrites put the problems config.Validate words with the keys of
// config.json ("cwd", "envVar") into the words of the Preferences window,
// which names fields by their captions.
var reasonRewrites = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`^cwd must be an absolute path, not (.*)$`), "Working directory must be an absolute path, not $1"},
	{regexp.MustCompile(`^relative watch path (.*) needs a cwd to be relative to; set cwd or use an absolute path$`),
		"relative path $1 needs a Working directory to be relative to: set one, or use an absolute path"},
	{regexp.MustCompile(`^command must (.*)$`), "Command must $1"},
	{regexp.MustCompile(`^restart must be (.*)$`), "Restart must be $1"},
	{regexp.MustCompile(`^credential (".*") is not defined under "credentials"$`), "credential scope $1 does not exist: add it in the Credentials tab"},
	{regexp.MustCompile(`^credentials (".*") and (".*") both set (.*)$`), "credential scopes $1 and $2 both set $3"},
	{regexp.MustCompile(`^env must not set (\S+): credential (".*") injects it from the keychain$`),
		"$1 must not be set here: credential scope $2 sets it from the credential store"},
	{regexp.MustCompile(`^inject "env" needs envVar, the variable to set$`), "name the environment variable to set"},
	{regexp.MustCompile(`^envVar is not used with inject "meta"; remove it$`), "Variable is not used when injecting into _meta: clear it"},
	{regexp.MustCompile(`^inject must be (.*)$`), "Inject into must be $1"},
}

// fieldReason words a config.Problem's reason for the window.
func fieldReason(reason string) string {
	for _, r := range reasonRewrites {
		if r.re.MatchString(reason) {
			return r.re.ReplaceAllString(reason, r.repl)
		}
	}
	return reason
}

// problemLine words a problem that belongs to no field of the tab showing
// it: the server, scope or setting it concerns by name and caption, else
// its path in config.json.
func problemLine(pr config.Problem) string {
	reason := fieldReason(pr.Reason)
	in := func(base string, captions map[string]string) (name, where string, ok bool) {
		name, rest, ok := splitProblemPath(base, pr.Path)
		if !ok || name == "" {
			return "", "", false
		}
		seg, rest, _ := splitProblemPath("x", "x"+rest)
		if seg == "" {
			return name, "", true
		}
		c, known := captions[seg]
		if !known {
			return name, ", " + seg + rest + " in config.json", true
		}
		if strings.HasPrefix(rest, ".") {
			if sub, _, ok := splitProblemPath("x", "x"+rest); ok && sub != "" && !strings.Contains(reason, sub) {
				c += " " + sub
			}
		}
		return name, ", " + c + " " + strings.TrimSuffix(lineOf(rest), ": "), true
	}
	if name, where, ok := in("mcpServers", serverCaptions); ok {
		return "Server “" + name + "”" + strings.TrimRight(where, " ") + ": " + reason
	}
	if name, where, ok := in("credentials", credCaptions); ok {
		return "Credential scope “" + name + "”" + strings.TrimRight(where, " ") + ": " + reason
	}
	if seg, _, ok := splitProblemPath("settings", pr.Path); ok && generalCaptions[seg] != "" {
		return "General, " + generalCaptions[seg] + ": " + reason
	}
	return pr.String()
}
