package ui

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/secrets"
)

// Fields of the General tab.
const (
	fLogin           = "login"
	fApprovalTimeout = "approvalTimeout"
	fHoldTimeout     = "holdTimeout"
	fAudit           = "audit"
	fAuth            = "approvalAuthentication"
)

// generalCaptions are the captions of the tab's fields, by key of the
// settings in config.json.
var generalCaptions = map[string]string{"approvalTimeout": "Approval timeout", "holdTimeout": "Hold timeout"}

// generalTab holds the daemon-wide settings, launch at login, and audit
// signing with its state.
type generalTab struct {
	p       *prefs
	content fyne.CanvasObject
	item    *container.TabItem // the tab, holding content

	loading   bool
	login     *widget.Check
	approve   *formEntry
	hold      *formEntry
	sign      *widget.Check  // settings.auditSigning
	auth      *widget.Select // settings.approvalAuthentication; none selected: absent
	managed   *messageLine   // what the managed policy sets, "" when none
	audit     *messageLine   // the state of audit signing now, in its colour
	fields    map[string]*prefsField
	saveBtn   *widget.Button
	revertBtn *widget.Button

	// loginOn is launch at login as the system said it when last read: the
	// box differs from it when the person changed it and did not save.
	loginOn bool

	// auditWait is how long reloadAudit waits, after a save that changed
	// settings.auditSigning, for the daemon to apply it.
	auditWait time.Duration
}

// signingOffHint says what turning audit signing off means.
const signingOffHint = "When off, the events recorded from then on carry no signature: someone who can write the log file could forge them undetected."

func newGeneralTab(p *prefs) *generalTab {
	t := &generalTab{p: p}
	t.login = widget.NewCheck("Open Portcullis when I log in", func(bool) { t.changed() })
	t.approve = newFormEntry()
	t.approve.SetPlaceHolder(config.DefaultApprovalTimeout.String() + " (default)")
	t.approve.OnChanged = func(string) { t.changed() }
	t.hold = newFormEntry()
	t.hold.SetPlaceHolder(config.DefaultHoldTimeout.String() + " (default)")
	t.hold.OnChanged = func(string) { t.changed() }
	t.sign = widget.NewCheck("Sign the audit log", func(bool) { t.changed() })
	t.audit = newMessageLine("")
	t.auth = widget.NewSelect([]string{config.AuthOff, config.AuthCredentials, config.AuthAlways}, func(string) { t.changed() })
	t.auth.PlaceHolder = "credentials where the system can (default)"
	t.managed = newMessageLine("")
	t.auditWait = 5 * time.Second
	t.fields = map[string]*prefsField{
		fLogin: newPrefsField("Startup", t.login, "Saved with the settings below."),
		fApprovalTimeout: newPrefsField(generalCaptions["approvalTimeout"], t.approve,
			"How long a tool call waits for your decision before it is refused, such as 90s or 2m. Applies to requests from now on."),
		fHoldTimeout: newPrefsField(generalCaptions["holdTimeout"], t.hold,
			"How long a tool call is held while a rebuilt server starts. Applies to agents that connect from now on."),
		fAudit: newPrefsField("Audit log", container.New(layout.NewCustomPaddedVBoxLayout(0), t.sign, t.audit.box), signingOffHint),
		fAuth: newPrefsField("Authenticate approvals", container.New(layout.NewCustomPaddedVBoxLayout(0), t.auth, t.managed.box),
			"When the system's own authentication (polkit, Touch ID) must succeed before an approval is granted: off, for grants that carry credentials, or always."),
	}
	t.saveBtn = widget.NewButtonWithIcon("Save", theme.DocumentSaveIcon(), t.save)
	t.saveBtn.Importance = widget.HighImportance
	t.revertBtn = widget.NewButton("Revert", t.revert)
	f := t.fields
	body := container.NewVBox(prefsForm(f[fLogin], f[fApprovalTimeout], f[fHoldTimeout], f[fAuth], f[fAudit]))
	t.content = container.NewPadded(container.NewBorder(nil, container.NewHBox(layout.NewSpacer(), t.revertBtn, t.saveBtn), nil, nil,
		formScroll(container.NewVScroll(body))))
	t.item = container.NewTabItem("General", t.content)
	return t
}

func (t *generalTab) reload() {
	t.loading = true
	defer func() { t.loading = false }()
	s := t.p.config().Settings
	t.approve.SetText(durationText(s.ApprovalTimeout))
	t.hold.SetText(durationText(s.HoldTimeout))
	t.sign.SetChecked(s.AuditSigningOn())
	if s.ApprovalAuthentication == "" {
		t.auth.ClearSelected()
	} else {
		t.auth.SetSelected(s.ApprovalAuthentication)
	}
	t.reloadManaged()
	for _, f := range t.fields {
		f.setProblems(nil)
	}
	if t.p.cfg == nil {
		t.saveBtn.Disable()
		t.sign.Disable()
	} else {
		t.saveBtn.Enable()
		t.sign.Enable()
	}
	t.reloadLogin()
	t.reloadAudit(false)
}

// durationText shows a configured duration, or "" for the default.
func durationText(d config.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func (t *generalTab) reloadLogin() {
	t.loading = true
	defer func() { t.loading = false }()
	if t.p.deps.Login == nil {
		t.login.SetChecked(false)
		t.login.Disable()
		t.fields[fLogin].setProblems([]string{"Launch at login is not available on this system."})
		return
	}
	t.login.Enable()
	on, err := t.p.deps.Login.Enabled()
	t.login.SetChecked(on)
	t.loginOn = on
	if err != nil {
		t.fields[fLogin].setProblems([]string{err.Error()})
	} else {
		t.fields[fLogin].setProblems(nil)
	}
}

// applyLogin turns launch at login on or off as the box says, when that
// differs from the system's state; it returns what it did ("" for nothing).
// On failure the box shows the actual state again and the field the error.
func (t *generalTab) applyLogin() (string, error) {
	li := t.p.deps.Login
	if li == nil {
		return "", nil
	}
	on := t.login.Checked
	if was, err := li.Enabled(); err == nil && was == on {
		return "", nil
	}
	var err error
	if on {
		err = li.Enable()
	} else {
		err = li.Disable()
	}
	t.reloadLogin()
	if err != nil {
		t.fields[fLogin].setProblems([]string{err.Error()})
		return "", err
	}
	if on {
		return "Portcullis will open when you log in.", nil
	}
	return "Portcullis will no longer open when you log in.", nil
}

// revert shows the saved settings and the system's launch at login again,
// dropping the edits.
func (t *generalTab) revert() {
	t.reload()
	t.p.setStatus("", false)
}

// unsaved reports whether the tab holds edits that Save would write: a
// duration that differs from the file's (or does not parse), the signing box,
// or launch at login against the system's state. While the file cannot be
// used nothing can be saved, and nothing counts as unsaved.
func (t *generalTab) unsaved() bool {
	if t.p.cfg == nil {
		return false
	}
	s, ps := t.candidate()
	cur := t.p.config().Settings
	switch {
	case len(ps) > 0, s.ApprovalTimeout != cur.ApprovalTimeout, s.HoldTimeout != cur.HoldTimeout,
		s.AuditSigningOn() != cur.AuditSigningOn(), s.ApprovalAuthentication != cur.ApprovalAuthentication:
		return true
	}
	return t.p.deps.Login != nil && !t.login.Disabled() && t.login.Checked != t.loginOn
}

// leave runs next (closing the window) at once when nothing is unsaved;
// otherwise it shows the General tab and asks first: Keep editing stays,
// Discard drops the edits and goes on, Save saves and goes on (and stays,
// with the reason, when the save is refused or asks a question of its own).
func (t *generalTab) leave(next func()) {
	if !t.unsaved() {
		next()
		return
	}
	t.p.tabs.Select(t.item)
	save := choice{Text: "Save", Icon: theme.DocumentSaveIcon(), Importance: widget.HighImportance, Do: func() {
		t.save()
		if !t.unsaved() {
			next()
		}
	}}
	d := askDialog("Save your changes?",
		"Your changes to the general settings are not saved.", t.p.win,
		keepChoice("Keep editing", func() {}), destroyChoice("Discard", theme.DeleteIcon(), func() { t.revert(); next() }), save)
	t.p.ask(d)
}

// reloadAudit shows the state of audit signing, asking the daemon (or,
// without one, the credential store) off the UI goroutine. After a save that
// changed settings.auditSigning (wait), it first waits up to auditWait for
// the daemon to apply the setting, which it does once its file watcher sees
// the change.
func (t *generalTab) reloadAudit(wait bool) {
	t.audit.set("Checking…", widget.MediumImportance)
	on := t.p.config().Settings.AuditSigningOn()
	var text string
	var imp widget.Importance
	status, store, patience := t.p.deps.AuditStatus, t.p.deps.Secrets, t.auditWait
	t.p.opts.run(func() {
		if status == nil {
			text, imp = auditKeyText(store, on)
			return
		}
		st := status()
		for deadline := time.Now().Add(patience); wait && st.Signed != on && st.SigningError == "" && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			st = status()
		}
		text, imp = auditStatusText(st, on)
	}, func() { t.audit.set(text, imp) })
}

// auditStatusText describes the daemon's audit signing (the audit part of
// `portcullis status`) for settings.auditSigning on or off, with the colour
// of that state: success when signed as set, danger when signing failed,
// warning when the state differs from the setting, plain when off as set.
func auditStatusText(st daemon.AuditStatus, on bool) (string, widget.Importance) {
	switch {
	case st.SigningError != "":
		return "Not as set: " + st.SigningError, widget.DangerImportance
	case st.Signed && !on:
		return "Now: still signed; the daemon turns signing off once it reads the saved setting.", widget.WarningImportance
	case st.Signed:
		return "Now: signed with HMAC-SHA256; the key is kept in the credential store as " + daemon.AuditKeyScope + ".", widget.SuccessImportance
	case on:
		return "Now: not signed. " + upperFirst(strings.TrimPrefix(st.Note, "the audit log is not signed: ")) + ".", widget.WarningImportance
	}
	return "Now: not signed, as set. Events are hash-chained all the same.", widget.MediumImportance
}

// upperFirst returns s with its first letter in upper case.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// auditKeyText describes audit signing from the key's presence in store,
// for settings.auditSigning on or off, when no daemon can be asked; the key
// itself is dropped at once. The importance is the state's colour, as in
// auditStatusText.
func auditKeyText(store secrets.Store, on bool) (string, widget.Importance) {
	if !on {
		return "Not signed, as set. Events are hash-chained all the same.", widget.MediumImportance
	}
	if store == nil {
		return "Not signed: no credential store is available. Events are hash-chained all the same.", widget.WarningImportance
	}
	key, err := daemon.ReadAuditKey(store)
	clear(key)
	switch {
	case err == nil:
		return "Signed with HMAC-SHA256; the key is kept in the credential store as " + daemon.AuditKeyScope + ".", widget.SuccessImportance
	case errors.Is(err, secrets.ErrNotFound):
		return "Not signed yet: Portcullis creates the key at its next start. Events are hash-chained all the same.", widget.WarningImportance
	}
	return "Unknown: " + storeErrorText(err), widget.DangerImportance
}

func (t *generalTab) changed() {
	if t.loading {
		return
	}
	t.p.edited()
	t.check()
}

// candidate parses the duration fields; ps holds the ones that do not parse.
func (t *generalTab) candidate() (config.Settings, problemSet) {
	ps := problemSet{}
	s := t.p.config().Settings
	parse := func(e *formEntry, name string) config.Duration {
		txt := strings.TrimSpace(e.Text)
		if txt == "" {
			return 0
		}
		d, err := time.ParseDuration(txt)
		if err != nil {
			ps.add(name, fmt.Sprintf("%q is not a duration: write it like 90s, 2m or 1m30s", txt))
			return 0
		}
		if d == 0 {
			// 0 in the file means "the default": say so rather than
			// store something else than what was typed.
			ps.add(name, fmt.Sprintf("%q would mean the default: leave the field empty for the default, or write a duration above zero", txt))
			return 0
		}
		return config.Duration(d)
	}
	s.ApprovalTimeout = parse(t.approve, fApprovalTimeout)
	s.HoldTimeout = parse(t.hold, fHoldTimeout)
	s.AuditSigning = signingSetting(s.AuditSigning, t.sign.Checked)
	s.ApprovalAuthentication = t.auth.Selected
	return s, ps
}

// reloadManaged shows what the managed policy sets, under the setting it
// bears on most.
func (t *generalTab) reloadManaged() {
	text, imp := managedText(t.p.managed())
	t.managed.set(text, imp)
}

// managedText says what the managed policy m sets, for the General tab.
func managedText(m config.ManagedState) (string, widget.Importance) {
	switch {
	case m.Ignored != "":
		return fmt.Sprintf("The managed policy %s is ignored: %s.", m.File, m.Ignored), widget.WarningImportance
	case m.Error != "":
		return fmt.Sprintf("The managed policy %s is malformed: every tool asks and approvals need the system's authentication until it is fixed (%s).", m.File, m.Error), widget.DangerImportance
	case m.Policy == nil:
		return "", widget.MediumImportance
	}
	return fmt.Sprintf("Managed by your organisation (%s): %s.", m.File, strings.Join(m.Policy.Summary(), "; ")), widget.MediumImportance
}

// signingSetting is settings.auditSigning for the box ticked (on) or not,
// when the file says cur: unchanged when it means on already, else absent
// (the default, on) or false.
func signingSetting(cur *bool, on bool) *bool {
	switch {
	case on == (cur == nil || *cur):
		return cur
	case on:
		return nil
	}
	return new(false)
}

// generalProblems maps problems of settings.* to the fields.
func generalProblems(problems []config.Problem) problemSet {
	ps := problemSet{}
	for _, pr := range problems {
		seg, _, ok := splitProblemPath("settings", pr.Path)
		switch {
		case ok && seg == "approvalTimeout":
			ps.add(fApprovalTimeout, fieldReason(pr.Reason))
		case ok && seg == "holdTimeout":
			ps.add(fHoldTimeout, fieldReason(pr.Reason))
		default:
			ps.add(fOther, problemLine(pr))
		}
	}
	return ps
}

func (t *generalTab) check() bool {
	s, ps := t.candidate()
	c := *t.p.config()
	c.Settings = s
	var ve *config.ValidationError
	if err := c.Validate(); errors.As(err, &ve) {
		for name, msgs := range generalProblems(ve.Problems) {
			ps[name] = append(ps[name], msgs...)
		}
	}
	t.showProblems(ps)
	if len(ps) == 0 {
		t.p.fieldsValid()
	}
	return len(ps) == 0
}

func (t *generalTab) showProblems(ps problemSet) {
	t.fields[fApprovalTimeout].setProblems(ps[fApprovalTimeout])
	t.fields[fHoldTimeout].setProblems(ps[fHoldTimeout])
}

// save writes the settings, after asking when they turn audit signing off.
func (t *generalTab) save() {
	if !t.check() {
		t.p.setStatus(notSavedFields, true)
		return
	}
	s, _ := t.candidate()
	if !s.AuditSigningOn() && t.p.config().Settings.AuditSigningOn() {
		d := askDialog("Turn off audit signing?",
			"Events recorded after this carry no signature: someone who can write the audit log file could then add or change them undetected. "+
				"The log records, signed, where signing stopped.", t.p.win,
			keepChoice("Keep signing", func() {
				t.sign.SetChecked(true) // as the person chose, and as the file says
				t.p.setNote("Not saved: audit signing stays on.")
			}),
			destroyChoice("Turn off signing", nil, func() { t.write(s) }))
		t.p.ask(d)
		return
	}
	t.write(s)
}

// write saves the settings s (from candidate) onto a fresh read of the file
// when they differ from the saved ones, then applies launch at login.
func (t *generalTab) write(s config.Settings) {
	cur := t.p.config().Settings
	if cur.ApprovalTimeout == s.ApprovalTimeout && cur.HoldTimeout == s.HoldTimeout && cur.AuditSigningOn() == s.AuditSigningOn() &&
		cur.ApprovalAuthentication == s.ApprovalAuthentication {
		switch msg, err := t.applyLogin(); {
		case err != nil:
			t.p.setStatus("Not saved: launch at login was not changed: "+err.Error(), true)
		case msg == "":
			t.p.setNote("Nothing to save: the general settings are as saved.")
		default:
			t.p.setStatus(msg, false)
		}
		return
	}
	was := cur.AuditSigningOn()
	err := t.p.update(func(c *config.Config) error {
		c.Settings.ApprovalTimeout, c.Settings.HoldTimeout = s.ApprovalTimeout, s.HoldTimeout
		c.Settings.AuditSigning = signingSetting(c.Settings.AuditSigning, s.AuditSigningOn())
		c.Settings.ApprovalAuthentication = s.ApprovalAuthentication
		return nil
	})
	var ve *config.ValidationError
	switch {
	case errors.As(err, &ve):
		t.showProblems(generalProblems(ve.Problems))
		t.p.setStatus(notSavedFields, true)
		return
	case err != nil:
		t.p.setStatus("Not saved: "+err.Error(), true)
		return
	}
	msg := "Saved the general settings."
	switch {
	case s.AuditSigningOn() != was && !s.AuditSigningOn():
		msg += " Audit signing is off: the log records that, signed, and signs no event after it."
		t.reloadAudit(true)
	case s.AuditSigningOn() != was:
		msg += " Audit signing is on again from the next event."
		t.reloadAudit(true)
	}
	switch lmsg, lerr := t.applyLogin(); {
	case lerr != nil:
		t.p.setStatus(msg+" Launch at login was not changed: "+lerr.Error(), true)
	case lmsg != "":
		t.p.setStatus(msg+" "+lmsg, false)
	default:
		t.p.setStatus(msg, false)
	}
}
