package ui

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/install"
)

// Fields of the server editor, as problems name them.
const (
	fLabel       = "label"
	fCommand     = "command"
	fArgs        = "args"
	fCwd         = "cwd"
	fEnv         = "env"
	fWatch       = "watch"
	fRestart     = "restart"
	fTools       = "tools"
	fCredentials = "credentials"
	fRequests    = "serverRequests"
	fOther       = "" // problems that belong to no field
)

// serverFieldOf maps the first segment of a problem path below a server to
// the editor prefsField that shows it.
var serverFieldOf = map[string]string{
	"": fLabel, "command": fCommand, "args": fArgs, "cwd": fCwd, "env": fEnv,
	"watch": fWatch, "restart": fRestart, "tools": fTools, "credentials": fCredentials,
	"serverRequests": fRequests,
}

// serverCaptions are the captions of the editor's fields, by key of a
// server in config.json.
var serverCaptions = map[string]string{
	"command": "Command", "args": "Arguments", "cwd": "Working directory", "env": "Environment",
	"watch": "Watch", "restart": "Restart", "tools": "Tool policies", "credentials": "Credentials",
	"serverRequests": "Requests to the agent",
}

// problemSet collects problem texts per field.
type problemSet map[string][]string

func (ps problemSet) add(name, msg string) { ps[name] = append(ps[name], msg) }

// serverProblems sorts the problems of a configuration into the fields of
// the editor of the server called label; problems elsewhere go to fOther
// with their path.
func serverProblems(label string, problems []config.Problem) problemSet {
	ps := problemSet{}
	base := "mcpServers." + pathKey(label)
	for _, pr := range problems {
		seg, rest, ok := splitProblemPath(base, pr.Path)
		f, known := serverFieldOf[seg]
		if !ok || !known {
			ps.add(fOther, problemLine(pr))
			continue
		}
		prefix := ""
		if f == fArgs || f == fWatch {
			prefix = lineOf(rest)
		}
		if f == fTools {
			if tool, _, ok := splitProblemPath("x", "x"+rest); ok && tool != "" {
				prefix = tool + ": "
			}
		}
		ps.add(f, prefix+fieldReason(pr.Reason))
	}
	return ps
}

// restart options and tool policies, as written in the file.
var (
	restartOptions = []string{config.RestartOnChange, config.RestartManual}
	policyOptions  = []string{string(config.PolicyAllow), string(config.PolicyApprove), string(config.PolicyDeny)}
)

// toolRow is the policy of one tool in the editor.
type toolRow struct {
	name   string
	policy *widget.RadioGroup
	// keep writes the policy even when it is the default "approve": the
	// tool was in the file already, or the person added it by name.
	keep bool
}

// serversTab lists the servers and edits one at a time.
type serversTab struct {
	p       *prefs
	content fyne.CanvasObject

	labels    []string
	list      *widget.List
	addBtn    *widget.Button
	removeBtn *widget.Button

	// The server being edited: orig is its label in the file ("" for a new
	// one), base its settings as read (kept for fields the editor does not
	// show, such as startupTimeout).
	editing bool
	isNew   bool
	orig    string
	base    config.Server
	loading bool // fields are being filled in: no change events
	touched bool // the person changed something since loading

	editor      *fyne.Container
	placeholder fyne.CanvasObject
	title       *widget.Label
	label       *formEntry
	command     *formEntry
	args        *formEntry
	cwd         *formEntry
	env         *formEntry
	watch       *formEntry
	restart     *widget.RadioGroup
	tools       []*toolRow
	toolsGrid   *fyne.Container
	toolsNote   *widget.Label
	newTool     *formEntry
	creds       *widget.CheckGroup
	requests    map[string]*widget.RadioGroup // by config.RequestKinds
	fields      map[string]*prefsField
	other       *messageLine // problems that belong to no field
	saveBtn     *widget.Button
	revertBtn   *widget.Button
	cwdChooser  *widget.Button
	editorPanel *fyne.Container
}

func newServersTab(p *prefs) *serversTab {
	t := &serversTab{p: p}
	t.list = nameList(func() []string { return t.labels }, "server-label-template", func(name string) {
		if t.isNew || t.orig != name || !t.editing {
			t.leave(func() { t.edit(name) })
		}
	})
	t.addBtn = widget.NewButtonWithIcon("Add", theme.ContentAddIcon(), func() { t.leave(t.startNew) })
	t.removeBtn = widget.NewButtonWithIcon("Remove", theme.ContentRemoveIcon(), t.confirmRemove)

	changed := func(string) { t.changed() }
	entry := func(placeholder string) *formEntry {
		e := newFormEntry()
		e.SetPlaceHolder(placeholder)
		e.OnChanged = changed
		return e
	}
	multi := func(placeholder string) *formEntry {
		e := newFormMultiLineEntry()
		e.SetPlaceHolder(placeholder)
		e.SetMinRowsVisible(3)
		e.OnChanged = changed
		return e
	}
	t.title = prefsHeading("")
	t.label = entry(example("inventory-local"))
	t.command = entry(example("node"))
	t.args = multi(example("dist/server.js"))
	t.cwd = entry(example(cwdExample(p.opts.homeDir())))
	t.cwdChooser = widget.NewButtonWithIcon("", theme.FolderOpenIcon(), t.chooseCwd)
	t.env = multi(example("LOG_LEVEL=debug"))
	t.watch = multi(example("dist\npackage-lock.json"))
	t.restart = widget.NewRadioGroup(restartOptions, changed)
	t.restart.Horizontal = true
	t.restart.Required = true
	t.toolsGrid = container.New(layout.NewFormLayout())
	t.toolsNote = widget.NewLabel("")
	t.toolsNote.Wrapping = fyne.TextWrapWord
	t.toolsNote.SizeName = theme.SizeNameCaptionText
	t.newTool = newFormEntry()
	t.newTool.SetPlaceHolder("tool name")
	t.newTool.OnSubmitted = func(string) { t.addTool() }
	addTool := widget.NewButtonWithIcon("Add policy", theme.ContentAddIcon(), t.addTool)
	t.creds = widget.NewCheckGroup(nil, func([]string) { t.changed() })
	t.creds.Horizontal = true
	t.requests = map[string]*widget.RadioGroup{}
	requests := container.New(layout.NewFormLayout())
	for _, kind := range config.RequestKinds {
		r := widget.NewRadioGroup(policyOptions, changed)
		r.Horizontal, r.Required = true, true
		t.requests[kind] = r
		requests.Add(widget.NewLabel(kind))
		requests.Add(r)
	}

	t.fields = map[string]*prefsField{
		fLabel:   newPrefsField("Label", t.label, "The name agents connect to: portcullis connect LABEL."),
		fCommand: newPrefsField(serverCaptions["command"], t.command, commandHint("", "")),
		fArgs:    newPrefsField(serverCaptions["args"], t.args, "One argument per line."),
		fCwd: newPrefsField(serverCaptions["cwd"], container.NewBorder(nil, nil, nil, t.cwdChooser, t.cwd),
			"Absolute path; a relative Command and relative Watch paths start here."),
		fEnv:     newPrefsField(serverCaptions["env"], t.env, "One NAME=value per line. Secrets belong in the Credentials tab."),
		fWatch:   newPrefsField(serverCaptions["watch"], t.watch, "Files or directories whose change means a new build, one per line."),
		fRestart: newPrefsField(serverCaptions["restart"], t.restart, "on-change replaces the server when a build completes; manual only reports it."),
		fTools: newPrefsField(serverCaptions["tools"], container.NewVBox(t.toolsNote, t.toolsGrid,
			container.NewBorder(nil, nil, nil, addTool, t.newTool)),
			"allow: no approval; approve: asked once per agent run and epoch; deny: hidden and refused."),
		fCredentials: newPrefsField(serverCaptions["credentials"], t.creds, noScopesHint),
		fRequests: newPrefsField(serverCaptions["serverRequests"], requests,
			"What the server may ask the agent: sampling (a completion of its model), elicitation (you, for information), roots (its folders). approve shows each on a card."),
	}
	t.other = newMessageLine("")
	t.saveBtn = widget.NewButtonWithIcon("Save", theme.DocumentSaveIcon(), t.save)
	t.saveBtn.Importance = widget.HighImportance
	t.revertBtn = widget.NewButton("Revert", t.revert)

	f := t.fields
	t.editor = container.NewVBox(t.title,
		prefsForm(f[fLabel], f[fCommand], f[fArgs], f[fCwd], f[fEnv], f[fWatch], f[fRestart], f[fTools], f[fCredentials], f[fRequests]),
		t.other.box)
	ph := widget.NewLabel("Select a server, or add one.")
	ph.Alignment = fyne.TextAlignCenter
	t.placeholder = container.NewCenter(ph)
	buttons := container.NewHBox(layout.NewSpacer(), t.revertBtn, t.saveBtn)
	t.editorPanel = container.NewStack(t.placeholder)
	right := container.NewBorder(nil, buttons, nil, nil, t.editorPanel)

	left := container.NewBorder(prefsHeading("Servers"), container.NewGridWithColumns(2, t.addBtn, t.removeBtn), nil, nil, t.list)
	split := container.NewHSplit(left, container.NewPadded(right))
	split.Offset = 0.24
	t.content = split
	t.showEditor(false)
	return t
}

// showEditor switches the right pane between the editor and the placeholder.
func (t *serversTab) showEditor(on bool) {
	t.editing = on
	if on {
		// Both ways: on a narrow screen (1280×800 at scale 2) the form
		// scrolls sideways instead of widening the window past it.
		t.editorPanel.Objects = []fyne.CanvasObject{formScroll(container.NewScroll(container.NewPadded(t.editor)))}
		t.saveBtn.Enable()
		t.revertBtn.Enable()
	} else {
		t.editorPanel.Objects = []fyne.CanvasObject{t.placeholder}
		t.saveBtn.Disable()
		t.revertBtn.Disable()
	}
	t.editorPanel.Refresh()
	if on && !t.isNew {
		t.removeBtn.Enable()
	} else {
		t.removeBtn.Disable()
	}
}

// refreshList re-reads the labels from the configuration.
func (t *serversTab) refreshList() {
	t.labels = slices.Sorted(maps.Keys(t.p.config().Servers))
	t.list.Refresh()
	if i := slices.Index(t.labels, t.orig); t.editing && !t.isNew && i >= 0 {
		t.list.Select(i) // keep the highlight on the edited server
	}
}

// reload shows the configuration as read: the server being edited again,
// or the first one.
func (t *serversTab) reload() {
	t.refreshList()
	if t.p.cfg == nil {
		t.addBtn.Disable()
		t.list.UnselectAll()
		t.showEditor(false)
		return
	}
	t.addBtn.Enable()
	want := t.orig
	if _, ok := t.p.cfg.Servers[want]; !ok || t.isNew {
		want = ""
		if len(t.labels) > 0 {
			want = t.labels[0]
		}
	}
	if want == "" {
		t.list.UnselectAll()
		t.isNew, t.orig = false, ""
		t.showEditor(false)
		return
	}
	t.edit(want)
}

// edit loads the server called label into the editor and selects it.
func (t *serversTab) edit(label string) {
	t.isNew = false
	t.load(label, t.p.config().Servers[label])
	if i := slices.Index(t.labels, label); i >= 0 {
		t.list.Select(i)
	}
}

// leave runs next (another server, or a new one, in the editor) at once when
// the editor holds no unsaved change; otherwise it asks first, and keeping
// the edits selects the edited server again.
func (t *serversTab) leave(next func()) {
	if !t.editing || !t.touched {
		next()
		return
	}
	what := "the new server"
	if !t.isNew {
		what = "“" + t.orig + "”"
	}
	stay := func() {
		if i := slices.Index(t.labels, t.orig); i >= 0 && !t.isNew {
			t.list.Select(i)
		} else {
			t.list.UnselectAll()
		}
	}
	save := choice{Text: "Save", Icon: theme.DocumentSaveIcon(), Importance: widget.HighImportance, Do: func() {
		t.save()
		if t.touched { // not saved: the status says why, the editor stays
			stay()
			return
		}
		next()
	}}
	d := askDialog("Save your changes?",
		"Your changes to "+what+" are not saved.", t.p.win,
		keepChoice("Keep editing", stay), destroyChoice("Discard", theme.DeleteIcon(), next), save)
	t.p.ask(d)
}

// refreshScopes offers the credential scopes the file defines now (a save
// in the Credentials tab changes them), keeping the ticks of the editor.
func (t *serversTab) refreshScopes() {
	scopes := slices.Sorted(maps.Keys(t.p.config().Credentials))
	t.creds.Options = scopes
	t.creds.Refresh()
	if len(scopes) == 0 {
		t.fields[fCredentials].setHint(noScopesHint)
	} else {
		t.fields[fCredentials].setHint("Secrets this server may receive, each after your approval.")
	}
}

// startNew empties the editor for a new server.
func (t *serversTab) startNew() {
	t.list.UnselectAll()
	t.isNew = true
	t.load("", config.Server{})
	t.p.win.Canvas().Focus(t.label)
}

// load fills the editor with s, the server called label in the file.
func (t *serversTab) load(label string, s config.Server) {
	t.loading = true
	defer func() { t.loading = false }()
	t.orig, t.base, t.touched = label, s, false
	if t.isNew {
		t.title.SetText("New server")
	} else {
		t.title.SetText("Server “" + label + "”")
	}
	t.label.SetText(label)
	t.command.SetText(s.Command)
	t.args.SetText(strings.Join(s.Args, "\n"))
	t.cwd.SetText(s.Cwd)
	var env []string
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		env = append(env, k+"="+s.Env[k])
	}
	t.env.SetText(strings.Join(env, "\n"))
	t.watch.SetText(strings.Join(s.Watch, "\n"))
	t.restart.SetSelected(s.RestartMode())
	t.loadTools(label, s)
	t.refreshScopes()
	t.creds.SetSelected(slices.Clone(s.Credentials))
	for kind, r := range t.requests {
		r.SetSelected(string(s.RequestPolicy(kind)))
	}
	t.newTool.SetText("")
	t.showProblems(problemSet{})
	t.showNotes()
	t.showEditor(true)
}

// loadTools builds one policy row per tool: the tools of the latest catalog
// revision of label, in server order, then those only the file names.
func (t *serversTab) loadTools(label string, s config.Server) {
	t.tools = nil
	t.toolsGrid.Objects = nil
	var names []string
	if t.p.deps.Catalogs != nil && label != "" {
		if cat, ok := t.p.deps.Catalogs.Current(label); ok {
			names = cat.Names()
			t.toolsNote.SetText(fmt.Sprintf("Tools of catalog revision %d, fetched %s.", cat.Revision, t.p.opts.local(cat.FetchedAt).Format("2006-01-02 15:04")))
		}
	}
	if len(names) == 0 {
		t.toolsNote.SetText("No catalog yet: the tools appear here once an agent has connected. You can name tools below.")
	}
	known := map[string]bool{}
	for _, n := range names {
		known[n] = true
		t.addToolRow(n, string(s.Policy(n)), mapHas(s.Tools, n), "")
	}
	for _, n := range slices.Sorted(maps.Keys(s.Tools)) {
		if !known[n] {
			t.addToolRow(n, string(s.Policy(n)), true, "not in the latest catalog")
		}
	}
	t.toolsGrid.Refresh()
}

func mapHas[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

func (t *serversTab) addToolRow(name, policy string, keep bool, note string) {
	r := &toolRow{name: name, keep: keep}
	r.policy = widget.NewRadioGroup(policyOptions, func(string) { t.changed() })
	r.policy.Horizontal = true
	r.policy.Required = true
	r.policy.SetSelected(policy)
	caption := widget.NewLabel(name)
	var left fyne.CanvasObject = caption
	if note != "" {
		n := newMessageLine(theme.SizeNameCaptionText)
		n.set(note, widget.WarningImportance)
		left = container.New(layout.NewCustomPaddedVBoxLayout(0), caption, n.box)
	}
	t.tools = append(t.tools, r)
	t.toolsGrid.Add(left)
	t.toolsGrid.Add(r.policy)
}

// addTool adds a policy row for the tool named in the newTool entry.
func (t *serversTab) addTool() {
	name := strings.TrimSpace(t.newTool.Text)
	if name == "" || slices.ContainsFunc(t.tools, func(r *toolRow) bool { return r.name == name }) {
		return
	}
	t.addToolRow(name, string(config.PolicyApprove), true, "added")
	t.toolsGrid.Refresh()
	t.newTool.SetText("")
	t.changed()
}

func (t *serversTab) chooseCwd() {
	dialog.ShowFolderOpen(func(u fyne.ListableURI, err error) {
		if err == nil && u != nil {
			t.cwd.SetText(u.Path())
		}
	}, t.p.win)
}

// changed re-checks the edited server after each edit.
func (t *serversTab) changed() {
	if t.loading || !t.editing {
		return
	}
	t.touched = true
	t.p.edited()
	t.check()
}

// Hints of the editor that depend on what it shows.
const noScopesHint = "No credential scopes yet: add one in the Credentials tab."

// cwdExample is the placeholder of the working directory: a directory in
// home, the person's home directory ("" when unknown).
func cwdExample(home string) string {
	if home == "" || !filepath.IsAbs(home) {
		return filepath.Join(string(filepath.Separator), "path", "to", "inventory")
	}
	return filepath.Join(home, "src", "inventory")
}

// commandHint says where the server's program is found for the command and
// working directory typed, the way the daemon finds it: a bare name in PATH
// when the server starts, a path as that file, a relative one from the
// working directory (and saved as the absolute path it names).
func commandHint(command, cwd string) string {
	command, cwd = strings.TrimSpace(command), strings.TrimSpace(cwd)
	switch {
	case command == "":
		return "A program name, looked up in PATH when the server starts, or the path of the program."
	case !strings.ContainsRune(command, '/'):
		return "“" + command + "” is looked up in PATH when the server starts."
	case filepath.IsAbs(command):
		return "Runs the file " + command + "."
	case filepath.IsAbs(cwd):
		return "Runs the file " + filepath.Join(cwd, command) + ": a relative path starts at the Working directory, and is saved as the absolute path."
	}
	return "A relative path starts at the Working directory, which must be an absolute path."
}

// relativeCommandProblem is the refusal of a relative command holding a
// slash without a working directory to resolve it against: the app has no
// meaningful current directory.
const relativeCommandProblem = "a relative path needs a Working directory, or give an absolute path"

// showNotes updates the hints and warnings that follow what is typed: where
// the command is found, and environment values that look like secrets.
func (t *serversTab) showNotes() {
	t.fields[fCommand].setHint(commandHint(t.command.Text, t.cwd.Text))
	t.fields[fCommand].setWarnings(commandWarnings(t.command.Text, t.cwd.Text))
	t.fields[fEnv].setWarnings(t.envWarnings())
}

// commandWarnings says when the file a command with a path names does not
// exist (yet): the server could not start. A name looked up in PATH is not
// checked here, since the daemon's PATH decides.
func commandWarnings(command, cwd string) []string {
	command, cwd = strings.TrimSpace(command), strings.TrimSpace(cwd)
	if !strings.ContainsRune(command, '/') {
		return nil
	}
	p := command
	if !filepath.IsAbs(p) {
		if !filepath.IsAbs(cwd) {
			return nil // refused on its own
		}
		p = filepath.Join(cwd, p)
	}
	if _, err := os.Stat(p); err != nil {
		return []string{"Runs the file " + p + ", which does not exist (yet): the server cannot start until it does."}
	}
	return nil
}

// envWarnings are the lines of the environment whose name or value looks
// like a secret (install.Secret, as the CLI warns about): they would be
// stored in plain text in config.json.
func (t *serversTab) envWarnings() []string {
	var out []string
	n := 0
	for l := range strings.Lines(t.env.Text) {
		n++
		k, v, ok := strings.Cut(strings.TrimRight(l, "\r\n"), "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			continue
		}
		if secret, why := install.Secret(k, v); secret {
			out = append(out, fmt.Sprintf("line %d: %s looks like a secret (%s) and would be stored in plain text in config.json: "+
				"keep it in the Credentials tab instead, and tick that scope under Credentials.", n, k, why))
		}
	}
	return out
}

// candidate returns the edited server and its label, and the problems the
// editor finds itself (lines of the environment that are not NAME=value, a
// relative command without a working directory).
func (t *serversTab) candidate() (string, config.Server, problemSet) {
	ps := problemSet{}
	s := t.base
	s.Command = strings.TrimSpace(t.command.Text)
	s.Args = entryLines(t.args.Text)
	s.Cwd = strings.TrimSpace(t.cwd.Text)
	// A relative command holding a slash is saved as the absolute path it
	// names from the working directory, as "portcullis servers add" does;
	// a relative working directory is refused on its own field.
	if strings.ContainsRune(s.Command, '/') && !filepath.IsAbs(s.Command) {
		switch {
		case s.Cwd == "":
			ps.add(fCommand, relativeCommandProblem)
		case filepath.IsAbs(s.Cwd):
			s.Command = filepath.Join(s.Cwd, s.Command)
		}
	}
	s.Watch = entryLines(t.watch.Text)
	s.Env = nil
	n := 0
	for l := range strings.Lines(t.env.Text) {
		n++
		l = strings.TrimRight(l, "\r\n")
		if strings.TrimSpace(l) == "" {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		k = strings.TrimSpace(k)
		switch {
		case !ok || k == "":
			ps.add(fEnv, fmt.Sprintf("line %d: write NAME=value", n))
			continue
		case mapHas(s.Env, k):
			ps.add(fEnv, fmt.Sprintf("line %d: %s is set twice", n, k))
			continue
		}
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		s.Env[k] = v
	}
	if t.restart.Selected != t.base.RestartMode() {
		s.Restart = t.restart.Selected
	}
	s.Tools = nil
	for _, r := range t.tools {
		if config.Policy(r.policy.Selected) == config.PolicyApprove && !r.keep {
			continue
		}
		if s.Tools == nil {
			s.Tools = map[string]config.ToolPolicy{}
		}
		s.Tools[r.name] = config.ToolPolicy{Policy: config.Policy(r.policy.Selected)}
	}
	// A policy of a request kind is written only where it differs from
	// what the file says (or its default).
	s.ServerRequests = maps.Clone(t.base.ServerRequests)
	for _, kind := range config.RequestKinds {
		if p := config.Policy(t.requests[kind].Selected); p != t.base.RequestPolicy(kind) {
			if s.ServerRequests == nil {
				s.ServerRequests = map[string]config.Policy{}
			}
			s.ServerRequests[kind] = p
		}
	}
	// Keep the order of the scopes already listed; add new ones sorted.
	s.Credentials = nil
	for _, c := range t.base.Credentials {
		if slices.Contains(t.creds.Selected, c) {
			s.Credentials = append(s.Credentials, c)
		}
	}
	for _, c := range slices.Sorted(slices.Values(t.creds.Selected)) {
		if !slices.Contains(s.Credentials, c) {
			s.Credentials = append(s.Credentials, c)
		}
	}
	return strings.TrimSpace(t.label.Text), s, ps
}

// apply puts server s under label into c, replacing the edited server. It
// fails when label is taken by another server, or when the edited server
// has disappeared from the file meanwhile.
func (t *serversTab) apply(c *config.Config, label string, s config.Server) error {
	if c.Servers == nil {
		c.Servers = map[string]config.Server{}
	}
	if !t.isNew {
		if _, ok := c.Servers[t.orig]; !ok {
			return fmt.Errorf("server “%s” was removed from %s meanwhile; Revert to see the file as it is", t.orig, t.p.deps.ConfigFile)
		}
	}
	if (t.isNew || label != t.orig) && mapHas(c.Servers, label) {
		return &labelTakenError{label}
	}
	if !t.isNew {
		delete(c.Servers, t.orig)
	}
	c.Servers[label] = s
	return nil
}

// labelTakenError: another server already has the label.
type labelTakenError struct{ label string }

func (e *labelTakenError) Error() string {
	return fmt.Sprintf("a server called “%s” already exists", e.label)
}

// check validates the edited server against the configuration as read and
// shows the problems; it reports whether there are none.
func (t *serversTab) check() bool {
	label, s, ps := t.candidate()
	c := *t.p.config()
	c.Servers = maps.Clone(c.Servers)
	if err := t.apply(&c, label, s); err != nil {
		var lt *labelTakenError
		if !errors.As(err, &lt) {
			ps.add(fOther, err.Error())
			t.showProblems(ps)
			return false
		}
		ps.add(fLabel, err.Error())
		// Check the rest of the server all the same, in the taken
		// label's place.
		if !t.isNew {
			delete(c.Servers, t.orig)
		}
		c.Servers[label] = s
	}
	if err := c.Validate(); err != nil {
		var ve *config.ValidationError
		if !errors.As(err, &ve) {
			ps.add(fOther, err.Error())
		} else {
			for f, msgs := range serverProblems(label, ve.Problems) {
				ps[f] = append(ps[f], msgs...)
			}
		}
	}
	t.showProblems(ps)
	t.showNotes()
	if len(ps) == 0 {
		t.p.fieldsValid()
	}
	return len(ps) == 0
}

func (t *serversTab) showProblems(ps problemSet) {
	for name, f := range t.fields {
		f.setProblems(ps[name])
	}
	setMessage(t.other, strings.Join(ps[fOther], "\n"), true)
}

// save writes the edited server, unless it has problems.
func (t *serversTab) save() {
	if !t.editing {
		return
	}
	if !t.check() {
		t.p.setStatus(notSavedFields, true)
		return
	}
	label, s, _ := t.candidate()
	typedCommand := t.command.Text
	err := t.p.update(func(c *config.Config) error { return t.apply(c, label, s) })
	var ve *config.ValidationError
	var lt *labelTakenError
	switch {
	case errors.As(err, &ve):
		t.showProblems(serverProblems(label, ve.Problems))
		t.p.setStatus(notSavedFields, true)
		return
	case errors.As(err, &lt):
		t.showProblems(problemSet{fLabel: {err.Error()}})
		t.p.setStatus(notSavedFields, true)
		return
	case err != nil:
		t.p.setStatus("Not saved: "+err.Error(), true)
		return
	}
	t.edit(label)
	msg := "Saved server “" + label + "”."
	if cmd := strings.TrimSpace(typedCommand); cmd != s.Command {
		msg += " Command " + cmd + " is stored as " + s.Command + "."
	}
	t.p.setStatus(msg+" Tool policies apply at once, to agents already connected too; the command, environment and credentials at the server's next launch.", false)
}

// revert reloads the edited server from the file.
func (t *serversTab) revert() {
	t.p.reload()
}

func (t *serversTab) confirmRemove() {
	if !t.editing || t.isNew {
		return
	}
	label := t.orig
	d := askDialog("Remove server",
		fmt.Sprintf("Remove “%s” from the configuration?\nAgents can no longer connect to it. The previous file is kept as %s%s.",
			label, "config.json", config.LastGoodSuffix), t.p.win,
		keepChoice("Cancel", nil), destroyChoice("Remove", theme.DeleteIcon(), func() { t.remove(label) }))
	t.p.ask(d)
}

// remove deletes the server called label from the file.
func (t *serversTab) remove(label string) {
	err := t.p.update(func(c *config.Config) error { return c.RemoveServer(label) })
	if err != nil {
		t.p.setStatus("Not removed: "+err.Error(), true)
		return
	}
	t.orig, t.isNew = "", false
	t.reload()
	t.p.setStatus("Removed server “"+label+"”.", false)
}
