package ui

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
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
// timeouts, audit signing) — and returns it. Edits are checked with
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
	return p.win
}

// uiOptions are test hooks of the windows.
type uiOptions struct {
	// inline runs background work synchronously on the calling goroutine.
	inline bool
	// loc is the time zone of displayed times (nil: time.Local).
	loc *time.Location
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
	singletons[key] = singleton{w, reload}
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

	banner  *widget.Label // a file that cannot be used
	status  *widget.Label // outcome of the last action
	tabs    *container.AppTabs
	servers *serversTab
	creds   *credsTab
	general *generalTab
}

func newPrefs(a fyne.App, d PrefsDeps, o uiOptions) *prefs {
	p := &prefs{deps: d, opts: o, win: a.NewWindow("Portcullis Preferences")}
	p.banner = newMessageLabel()
	p.status = newMessageLabel()
	p.servers = newServersTab(p)
	p.creds = newCredsTab(p)
	p.general = newGeneralTab(p)
	p.tabs = container.NewAppTabs(
		container.NewTabItem("Servers", p.servers.content),
		container.NewTabItem("Credentials", p.creds.content),
		container.NewTabItem("General", p.general.content),
	)
	p.tabs.OnSelected = func(*container.TabItem) { p.setStatus("", false) }
	p.win.SetContent(container.NewBorder(p.banner, container.NewPadded(p.status), nil, nil, p.tabs))
	p.win.Resize(prefsSize)
	p.reload()
	registerSingleton(a, "prefs", p.win, p.reload)
	return p
}

// reload reads the configuration file and refreshes every tab.
func (p *prefs) reload() {
	c, err := config.Load(p.deps.ConfigFile)
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist):
		p.cfg, p.loadErr = c, nil
		setMessageLabel(p.banner, "", false)
	default:
		p.cfg, p.loadErr = nil, err
		setMessageLabel(p.banner, fmt.Sprintf("%s cannot be used, so nothing can be saved until it is fixed in an editor "+
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

// update reads the file afresh, applies change to it and saves it with
// config.Save. It returns change's error, a *config.ValidationError (nothing
// is written then), or an error reading or writing the file. On success it
// refreshes every tab and calls OnSaved.
func (p *prefs) update(change func(c *config.Config) error) error {
	c, err := config.Load(p.deps.ConfigFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if c.Credentials == nil {
		c.Credentials = map[string]config.Credential{}
	}
	if err := change(c); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p.deps.ConfigFile), 0o700); err != nil {
		return fmt.Errorf("saving configuration: %w", err)
	}
	if err := config.Save(p.deps.ConfigFile, c); err != nil {
		return err
	}
	p.cfg, p.loadErr = c, nil
	setMessageLabel(p.banner, "", false)
	p.servers.refreshList()
	p.creds.refreshList()
	if p.deps.OnSaved != nil {
		p.deps.OnSaved()
	}
	return nil
}

// setStatus shows text in the window's status line, in red when bad.
func (p *prefs) setStatus(text string, bad bool) { setMessageLabel(p.status, text, bad) }

// newMessageLabel returns a wrapping label for messages, hidden while empty.
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

// prefsField is one row of a form: a caption, the input, an optional hint and the
// problems found with the value, shown in red under it.
type prefsField struct {
	caption string
	input   fyne.CanvasObject
	hint    *widget.Label
	errs    *widget.Label
}

func newPrefsField(caption string, input fyne.CanvasObject, hint string) *prefsField {
	f := &prefsField{caption: caption, input: input, errs: newMessageLabel()}
	if hint != "" {
		f.hint = widget.NewLabel(hint)
		f.hint.Wrapping = fyne.TextWrapWord
		f.hint.SizeName = theme.SizeNameCaptionText
	}
	return f
}

// setProblems shows msgs (one per line) under the field, or clears them.
func (f *prefsField) setProblems(msgs []string) {
	setMessageLabel(f.errs, strings.Join(msgs, "\n"), true)
}

// problems returns the text shown under the field ("" when none).
func (f *prefsField) problems() string {
	if !f.errs.Visible() {
		return ""
	}
	return f.errs.Text
}

// prefsForm lays fields out in two aligned columns: captions right-aligned at the
// top of their row, inputs with their hint and problems on the right.
func prefsForm(fields ...*prefsField) *fyne.Container {
	var objs []fyne.CanvasObject
	for _, f := range fields {
		caption := widget.NewLabelWithStyle(f.caption, fyne.TextAlignTrailing, fyne.TextStyle{Bold: true})
		right := container.New(layout.NewCustomPaddedVBoxLayout(0), f.input)
		if f.hint != nil {
			right.Add(f.hint)
		}
		right.Add(f.errs)
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
