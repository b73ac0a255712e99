package ui

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/secrets"
)

// How a credential reaches a server, as the Inject choice shows it.
const (
	injectEnvText  = "Environment variable"
	injectMetaText = "Each tool call's _meta"
)

// Fields of the credential editor.
const (
	fScope  = "scope"
	fInject = "inject"
	fEnvVar = "envVar"
	fSecret = "secret"
)

// credCaptions are the captions of the editor's fields, by key of a
// credential in config.json.
var credCaptions = map[string]string{"inject": "Inject into", "envVar": "Variable", "askEveryUse": "Approval"}

// credsTab lists the credential scopes and edits one at a time. Secret
// values go from the password entry straight to the credential store; they
// are never read back into a widget.
type credsTab struct {
	p       *prefs
	content fyne.CanvasObject

	scopes []string
	list   *widget.List

	editing bool
	isNew   bool
	orig    string
	loading bool
	busy    bool // a credential store operation runs

	editorPanel *fyne.Container
	placeholder fyne.CanvasObject
	editor      *fyne.Container
	title       *widget.Label
	scope       *formEntry
	inject      *widget.RadioGroup
	envVar      *formEntry
	ask         *widget.Check
	state       *widget.Label // whether the store holds a secret
	secret      *formEntry
	usedBy      *widget.Label
	fields      map[string]*prefsField
	other       *messageLine
	saveBtn     *widget.Button
	clearBtn    *widget.Button
	deleteBtn   *widget.Button
	addBtn      *widget.Button
}

func newCredsTab(p *prefs) *credsTab {
	t := &credsTab{p: p}
	t.list = nameList(func() []string { return t.scopes }, "credential-scope-template", func(name string) {
		if t.isNew || t.orig != name || !t.editing {
			t.edit(name)
		}
	})
	t.addBtn = widget.NewButtonWithIcon("Add", theme.ContentAddIcon(), t.startNew)

	changed := func(string) { t.changed() }
	t.title = prefsHeading("")
	t.scope = newFormEntry()
	t.scope.SetPlaceHolder(example("inventory-api-staging"))
	t.scope.OnChanged = changed
	t.inject = widget.NewRadioGroup([]string{injectEnvText, injectMetaText}, changed)
	t.inject.Horizontal = true
	t.inject.Required = true
	t.envVar = newFormEntry()
	t.envVar.SetPlaceHolder(example("INVENTORY_TOKEN"))
	t.envVar.OnChanged = changed
	t.ask = widget.NewCheck("Ask me every time it is used", func(bool) { t.changed() })
	t.state = widget.NewLabel("")
	t.secret = newFormPasswordEntry()
	// No "reveal" button: the secret is never shown, not even while typed.
	t.secret.ActionItem = layout.NewSpacer()
	t.secret.SetPlaceHolder("Paste or type the secret; it is never shown")
	t.secret.OnSubmitted = func(string) { t.save() }
	t.secret.OnChanged = changed // clears a refusal of the secret; the value is not checked as typed
	t.usedBy = widget.NewLabel("")
	t.usedBy.Wrapping = fyne.TextWrapWord
	t.fields = map[string]*prefsField{
		fScope:  newPrefsField("Scope", t.scope, "Servers list this name under Credentials."),
		fInject: newPrefsField(credCaptions["inject"], t.inject, "An environment variable of an approved server process, or params._meta of each approved tool call."),
		fEnvVar: newPrefsField(credCaptions["envVar"], t.envVar, "The environment variable that holds the secret in the server process."),
		"ask":   newPrefsField(credCaptions["askEveryUse"], t.ask, "Otherwise one approval per agent run and server epoch covers it."),
		fSecret: newPrefsField("Secret", container.NewVBox(t.state, t.secret), "Stored in the system's credential store, never in config.json."),
		"used":  newPrefsField("Used by", t.usedBy, ""),
	}
	t.other = newMessageLine("")
	t.saveBtn = widget.NewButtonWithIcon("Save", theme.DocumentSaveIcon(), t.save)
	t.saveBtn.Importance = widget.HighImportance
	t.clearBtn = widget.NewButton("Remove secret", t.confirmRemoveSecret)
	t.deleteBtn = widget.NewButtonWithIcon("Delete scope", theme.DeleteIcon(), t.confirmDelete)
	t.deleteBtn.Importance = widget.DangerImportance

	f := t.fields
	t.editor = container.NewVBox(t.title,
		prefsForm(f[fScope], f[fInject], f[fEnvVar], f["ask"], f[fSecret], f["used"]), t.other.box)
	ph := widget.NewLabel("Select a credential scope, or add one.")
	t.placeholder = container.NewCenter(ph)
	t.editorPanel = container.NewStack(t.placeholder)
	buttons := container.NewHBox(t.deleteBtn, layout.NewSpacer(), t.clearBtn, t.saveBtn)
	right := container.NewBorder(nil, buttons, nil, nil, t.editorPanel)
	left := container.NewBorder(prefsHeading("Credential scopes"), t.addBtn, nil, nil, t.list)
	split := container.NewHSplit(left, container.NewPadded(right))
	split.Offset = 0.24
	t.content = split
	t.showEditor(false)
	return t
}

func (t *credsTab) showEditor(on bool) {
	t.editing = on
	if on {
		// Both ways: on a narrow screen (1280×800 at scale 2) the form
		// scrolls sideways instead of widening the window past it.
		t.editorPanel.Objects = []fyne.CanvasObject{formScroll(container.NewScroll(container.NewPadded(t.editor)))}
	} else {
		t.editorPanel.Objects = []fyne.CanvasObject{t.placeholder}
	}
	t.editorPanel.Refresh()
	t.updateButtons()
}

func (t *credsTab) updateButtons() {
	enable := func(b *widget.Button, on bool) {
		if on {
			b.Enable()
		} else {
			b.Disable()
		}
	}
	enable(t.saveBtn, t.editing && !t.busy)
	enable(t.clearBtn, t.editing && !t.isNew && !t.busy)
	enable(t.deleteBtn, t.editing && !t.isNew && !t.busy)
	enable(t.addBtn, t.p.cfg != nil)
}

func (t *credsTab) refreshList() {
	t.scopes = slices.Sorted(maps.Keys(t.p.config().Credentials))
	t.list.Refresh()
	if i := slices.Index(t.scopes, t.orig); t.editing && !t.isNew && i >= 0 {
		t.list.Select(i) // keep the highlight on the edited scope
	}
}

func (t *credsTab) reload() {
	t.refreshList()
	want := t.orig
	if _, ok := t.p.config().Credentials[want]; !ok || t.isNew {
		want = ""
		if len(t.scopes) > 0 {
			want = t.scopes[0]
		}
	}
	if want == "" || t.p.cfg == nil {
		t.list.UnselectAll()
		t.isNew, t.orig = false, ""
		t.showEditor(false)
		return
	}
	t.edit(want)
}

func (t *credsTab) edit(scope string) {
	t.isNew = false
	t.load(scope, t.p.config().Credentials[scope])
	if i := slices.Index(t.scopes, scope); i >= 0 {
		t.list.Select(i)
	}
}

func (t *credsTab) startNew() {
	t.list.UnselectAll()
	t.isNew = true
	t.load("", config.Credential{Inject: config.InjectEnv})
	t.p.win.Canvas().Focus(t.scope)
}

func (t *credsTab) load(scope string, c config.Credential) {
	t.loading = true
	defer func() { t.loading = false }()
	t.orig = scope
	if t.isNew {
		t.title.SetText("New credential scope")
		t.scope.Enable()
	} else {
		t.title.SetText("Credential scope “" + scope + "”")
		t.scope.Disable()
	}
	t.scope.SetText(scope)
	if c.Inject == config.InjectMeta {
		t.inject.SetSelected(injectMetaText)
	} else {
		t.inject.SetSelected(injectEnvText)
	}
	t.envVar.SetText(c.EnvVar)
	t.ask.SetChecked(c.AskEveryUse)
	t.secret.SetText("")
	t.showProblems(problemSet{})
	t.syncEnvVar()
	t.refreshUsedBy()
	t.showEditor(true)
	t.refreshState()
}

// refreshUsedBy shows which servers use the scope in the editor, as the
// file says now (a save in the Servers tab changes it).
func (t *credsTab) refreshUsedBy() {
	if users := serversUsing(t.p.config(), t.orig); len(users) > 0 {
		t.usedBy.SetText(strings.Join(users, ", "))
	} else {
		t.usedBy.SetText("No server yet: tick it under Credentials in a server's settings.")
	}
}

// syncEnvVar enables the variable entry only for environment injection.
func (t *credsTab) syncEnvVar() {
	if t.inject.Selected == injectMetaText {
		t.envVar.Disable()
	} else {
		t.envVar.Enable()
	}
}

// refreshState asks the credential store, off the UI goroutine, whether it
// holds a secret for the edited scope. The value is dropped at once.
func (t *credsTab) refreshState() {
	if t.isNew {
		t.state.SetText("Not stored yet.")
		t.secret.SetPlaceHolder("Paste or type the secret; it is never shown")
		return
	}
	scope := t.orig
	t.state.SetText("Checking the credential store…")
	var text string
	t.p.opts.run(func() { text = secretStateText(t.p.deps.Secrets, scope) }, func() {
		if t.editing && !t.isNew && t.orig == scope {
			t.state.SetText(text)
		}
	})
}

// secretStateText says whether store holds a usable secret for scope,
// without keeping or showing it.
func secretStateText(store secrets.Store, scope string) string {
	if store == nil {
		return "No credential store is available."
	}
	v, err := store.Get(scope)
	clear(v)
	switch {
	case err == nil:
		return "Stored. Type a new value to replace it."
	case errors.Is(err, secrets.ErrNotFound):
		return "Not stored: servers cannot receive it until you enter it."
	case errors.Is(err, secrets.ErrEmpty):
		return "The stored value is empty and is not used: enter a new one."
	}
	msg := "Unknown: " + err.Error()
	if h := secrets.Hint(err); h != "" {
		msg += "\n" + h
	}
	return msg
}

func (t *credsTab) changed() {
	if t.loading || !t.editing {
		return
	}
	t.p.edited()
	t.syncEnvVar()
	t.check()
}

// candidate returns the edited scope name and settings.
func (t *credsTab) candidate() (string, config.Credential) {
	c := config.Credential{Inject: config.InjectEnv, EnvVar: strings.TrimSpace(t.envVar.Text), AskEveryUse: t.ask.Checked}
	if t.inject.Selected == injectMetaText {
		c = config.Credential{Inject: config.InjectMeta, AskEveryUse: t.ask.Checked}
	}
	return strings.TrimSpace(t.scope.Text), c
}

// apply puts the scope into c.
func (t *credsTab) apply(c *config.Config, scope string, cred config.Credential) error {
	if t.isNew && mapHas(c.Credentials, scope) {
		return &scopeTakenError{scope}
	}
	if !t.isNew && !mapHas(c.Credentials, scope) {
		return fmt.Errorf("credential scope “%s” was removed from %s meanwhile", scope, t.p.deps.ConfigFile)
	}
	c.Credentials[scope] = cred
	return nil
}

type scopeTakenError struct{ scope string }

func (e *scopeTakenError) Error() string {
	return fmt.Sprintf("a credential scope called “%s” already exists", e.scope)
}

// credProblems sorts configuration problems into the editor's fields:
// those of the scope itself, and the others (such as a server whose env
// now collides with the variable) with their path.
func credProblems(scope string, problems []config.Problem) problemSet {
	ps := problemSet{}
	base := "credentials." + pathKey(scope)
	for _, pr := range problems {
		seg, _, ok := splitProblemPath(base, pr.Path)
		switch {
		case ok && seg == "":
			ps.add(fScope, fieldReason(pr.Reason))
		case ok && seg == "envVar":
			ps.add(fEnvVar, fieldReason(pr.Reason))
		case ok && seg == "inject":
			ps.add(fInject, fieldReason(pr.Reason))
		default:
			ps.add(fOther, problemLine(pr))
		}
	}
	return ps
}

func (t *credsTab) check() bool {
	scope, cred := t.candidate()
	c := *t.p.config()
	c.Credentials = maps.Clone(c.Credentials)
	if c.Credentials == nil {
		c.Credentials = map[string]config.Credential{}
	}
	ps := problemSet{}
	if err := t.apply(&c, scope, cred); err != nil {
		var st *scopeTakenError
		if errors.As(err, &st) {
			ps.add(fScope, err.Error())
		} else {
			ps.add(fOther, err.Error())
		}
	} else if err := c.Validate(); err != nil {
		var ve *config.ValidationError
		if errors.As(err, &ve) {
			ps = credProblems(scope, ve.Problems)
		} else {
			ps.add(fOther, err.Error())
		}
	}
	t.showProblems(ps)
	if len(ps) == 0 {
		t.p.fieldsValid()
	}
	return len(ps) == 0
}

func (t *credsTab) showProblems(ps problemSet) {
	for name, f := range t.fields {
		f.setProblems(ps[name])
	}
	setMessage(t.other, strings.Join(ps[fOther], "\n"), true)
}

// save stores the typed secret, if any, in the credential store and then
// the scope's settings in the file. A new scope needs a secret. If the store
// refuses the secret, nothing changes.
func (t *credsTab) save() {
	if !t.editing || t.busy {
		return
	}
	if !t.check() {
		t.p.setStatus(notSavedFields, true)
		return
	}
	scope, cred := t.candidate()
	secret := []byte(t.secret.Text)
	if len(secret) > 0 && secrets.CheckSecret(secret) != nil {
		t.showProblems(problemSet{fSecret: {"The secret is only white space."}})
		t.p.setStatus(notSavedFields, true)
		return
	}
	if t.isNew && len(secret) == 0 {
		t.showProblems(problemSet{fSecret: {"Enter the secret of the new scope."}})
		t.p.setStatus(notSavedFields, true)
		return
	}
	writeConfig := func() {
		err := t.p.update(func(c *config.Config) error { return t.apply(c, scope, cred) })
		var ve *config.ValidationError
		switch {
		case errors.As(err, &ve):
			t.showProblems(credProblems(scope, ve.Problems))
			t.p.setStatus(notSavedFields, true)
			return
		case err != nil && len(secret) > 0:
			t.p.setStatus("The secret is stored, but saving the scope's settings failed: "+err.Error(), true)
			return
		case err != nil:
			t.p.setStatus("Not saved: "+err.Error(), true)
			return
		}
		t.edit(scope)
		if len(secret) > 0 {
			t.p.setStatus("Stored the secret of “"+scope+"” and saved its settings.", false)
		} else {
			t.p.setStatus("Saved the settings of “"+scope+"”.", false)
		}
	}
	if len(secret) == 0 {
		writeConfig()
		return
	}
	t.setBusy(true)
	var err error
	t.p.opts.run(func() {
		if t.p.deps.Secrets == nil {
			err = errors.New("no credential store is available")
		} else {
			err = t.p.deps.Secrets.Set(scope, secret)
		}
		clear(secret)
	}, func() {
		t.setBusy(false)
		if err != nil {
			t.showProblems(problemSet{fSecret: {storeErrorText(err)}})
			t.p.setStatus("Nothing was changed: the credential store refused the secret.", true)
			return
		}
		t.secret.SetText("")
		writeConfig()
	})
}

func (t *credsTab) setBusy(b bool) {
	t.busy = b
	t.updateButtons()
}

// storeErrorText is a credential store error with its advice.
func storeErrorText(err error) string {
	if h := secrets.Hint(err); h != "" {
		return err.Error() + "\n" + h
	}
	return err.Error()
}

// confirmRemoveSecret asks before the secret goes: it cannot be shown, so
// it cannot be typed back from the window.
func (t *credsTab) confirmRemoveSecret() {
	if !t.editing || t.isNew || t.busy {
		return
	}
	d := askDialog("Remove the secret?",
		"The secret of “"+t.orig+"” is deleted from the credential store; servers that use the scope cannot get it until you set it again.", t.p.win,
		keepChoice("Keep it", nil), destroyChoice("Remove secret", theme.DeleteIcon(), t.removeSecret))
	t.p.ask(d)
}

// removeSecret deletes the stored secret and keeps the scope.
func (t *credsTab) removeSecret() {
	if !t.editing || t.isNew || t.busy {
		return
	}
	scope := t.orig
	t.setBusy(true)
	var err error
	t.p.opts.run(func() {
		if t.p.deps.Secrets == nil {
			err = errors.New("no credential store is available")
			return
		}
		err = t.p.deps.Secrets.Delete(scope)
	}, func() {
		t.setBusy(false)
		switch {
		case errors.Is(err, secrets.ErrNotFound):
			t.p.setStatus("No secret was stored for “"+scope+"”.", false)
		case err != nil:
			t.p.setStatus("Not removed: "+storeErrorText(err), true)
		default:
			t.p.setStatus("Removed the secret of “"+scope+"”; the scope stays until you delete it.", false)
		}
		t.refreshState()
	})
}

func (t *credsTab) confirmDelete() {
	if !t.editing || t.isNew || t.busy {
		return
	}
	scope := t.orig
	if users := serversUsing(t.p.config(), scope); len(users) > 0 {
		t.p.setStatus(fmt.Sprintf("“%s” is still used by %s: untick it in their settings first.", scope, strings.Join(users, ", ")), true)
		return
	}
	d := askDialog("Delete credential scope",
		fmt.Sprintf("Delete “%s” and its secret?", scope), t.p.win,
		keepChoice("Cancel", nil), destroyChoice("Delete", theme.DeleteIcon(), func() { t.deleteScope(scope) }))
	t.p.ask(d)
}

// deleteScope removes the secret from the store (if there is one) and then
// the scope from the file. It refuses while a server uses the scope.
func (t *credsTab) deleteScope(scope string) {
	t.setBusy(true)
	var err error
	t.p.opts.run(func() {
		if t.p.deps.Secrets == nil {
			err = errors.New("no credential store is available")
			return
		}
		err = t.p.deps.Secrets.Delete(scope)
	}, func() {
		t.setBusy(false)
		if err != nil && !errors.Is(err, secrets.ErrNotFound) {
			t.p.setStatus("Nothing was changed: "+storeErrorText(err), true)
			return
		}
		err := t.p.update(func(c *config.Config) error {
			if users := serversUsing(c, scope); len(users) > 0 {
				return fmt.Errorf("“%s” is still used by %s", scope, strings.Join(users, ", "))
			}
			delete(c.Credentials, scope)
			return nil
		})
		if err != nil {
			t.p.setStatus("The secret is deleted, but removing the scope failed: "+err.Error(), true)
			return
		}
		t.orig, t.isNew = "", false
		t.reload()
		t.p.setStatus("Deleted credential scope “"+scope+"”.", false)
	})
}

// serversUsing returns the sorted labels of the servers that list scope.
func serversUsing(c *config.Config, scope string) []string {
	var users []string
	for label, s := range c.Servers {
		if slices.Contains(s.Credentials, scope) {
			users = append(users, label)
		}
	}
	slices.Sort(users)
	return users
}
