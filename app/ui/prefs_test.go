package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/loginitem"
	"github.com/portcullis/portcullis/core/secrets"
)

const prefsConfig = `{
  "mcpServers": {
    "inv": {
      "command": "node",
      "args": ["dist/server.js"],
      "cwd": "/src/inventory",
      "env": {"LOG_LEVEL": "debug"},
      "watch": ["dist"],
      "startupTimeout": "45s",
      "tools": {"legacy_tool": {"policy": "deny"}}
    }
  },
  "credentials": {
    "api": {"inject": "env", "envVar": "INV_TOKEN"}
  }
}
`

// fakeLogin is a loginitem.Item in memory; fail makes Enable and Disable
// fail.
type fakeLogin struct {
	on    bool
	fail  error
	calls []string
}

var _ loginitem.Item = (*fakeLogin)(nil)

func (f *fakeLogin) Enabled() (bool, error) { return f.on, nil }
func (f *fakeLogin) Enable() error {
	f.calls = append(f.calls, "enable")
	if f.fail != nil {
		return f.fail
	}
	f.on = true
	return nil
}
func (f *fakeLogin) Disable() error {
	f.calls = append(f.calls, "disable")
	if f.fail != nil {
		return f.fail
	}
	f.on = false
	return nil
}

type prefsFixture struct {
	p      *prefs
	path   string
	store  *secrets.Memory
	login  *fakeLogin
	saved  int
	window fyne.Window
}

// newPrefsFixture writes cfg (when not empty) to a config file in a
// temporary directory and opens the Preferences window on it, with a catalog
// store holding one revision of "inv".
func newPrefsFixture(t *testing.T, cfg string) *prefsFixture {
	t.Helper()
	a := test.NewTempApp(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "portcullis", "config.json")
	if cfg != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fetched := time.Date(2026, 11, 30, 9, 30, 0, 0, time.UTC)
	cats, err := catalog.OpenStore(filepath.Join(dir, "catalogs"), catalog.WithClock(func() time.Time { return fetched }))
	if err != nil {
		t.Fatal(err)
	}
	tools := []catalog.Tool{
		{Name: "inventory_lookup", Raw: json.RawMessage(`{"name":"inventory_lookup","inputSchema":{"type":"object"}}`)},
		{Name: "inventory_adjust", Raw: json.RawMessage(`{"name":"inventory_adjust","inputSchema":{"type":"object"}}`)},
	}
	if _, _, err := cats.Update("inv", "01JQ7R4S4S0QJ7GZP1S2XYZW", tools); err != nil {
		t.Fatal(err)
	}
	f := &prefsFixture{path: path, store: &secrets.Memory{}, login: &fakeLogin{}}
	f.p = newPrefs(a, PrefsDeps{ConfigFile: path, Catalogs: cats, Secrets: f.store, Login: f.login,
		OnSaved: func() { f.saved++ }}, uiOptions{inline: true, loc: time.UTC, home: "/home/you"})
	f.window = f.p.win
	t.Cleanup(func() {
		// A test may have closed the window already (the test driver
		// fails on a second Close).
		if slices.Contains(a.Driver().AllWindows(), f.window) {
			f.window.Close()
		}
	})
	return f
}

func (f *prefsFixture) read(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *prefsFixture) load(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Load(f.path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// problems returns the problem texts shown under each field that has some.
func problems(fields map[string]*prefsField) map[string]string {
	out := map[string]string{}
	for name, f := range fields {
		if p := f.problemText(); p != "" {
			out[name] = p
		}
	}
	return out
}

// wantProblems checks that exactly the fields in want show problems, each
// containing the wanted text.
func wantProblems(t *testing.T, fields map[string]*prefsField, want map[string]string) {
	t.Helper()
	got := problems(fields)
	for name, sub := range want {
		if !strings.Contains(got[name], sub) {
			t.Errorf("field %q shows %q, want it to contain %q", name, got[name], sub)
		}
	}
	for name, text := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("field %q shows unexpected problems: %q", name, text)
		}
	}
}

// tapButton taps the button labelled text on the canvas or in one of its
// overlays (dialogs).
// pressKey sends key to w as the driver does when no widget has the
// keyboard.
func pressKey(w fyne.Window, key fyne.KeyName) {
	w.Canvas().OnTypedKey()(&fyne.KeyEvent{Name: key})
}

func tapButton(t *testing.T, c fyne.Canvas, text string) {
	t.Helper()
	roots := []fyne.CanvasObject{c.Content()}
	roots = append(roots, c.Overlays().List()...)
	for i := len(roots) - 1; i >= 0; i-- { // overlays first
		for _, o := range test.LaidOutObjects(roots[i]) {
			if b, ok := o.(*widget.Button); ok && b.Text == text && b.Visible() {
				test.Tap(b)
				return
			}
		}
	}
	t.Fatalf("no button %q on the canvas", text)
}

// allText returns every text the window holds or draws: widget texts
// (labels, entries, selects, checks) and rendered text, including overlays.
func allText(c fyne.Canvas) string {
	var b strings.Builder
	roots := append([]fyne.CanvasObject{c.Content()}, c.Overlays().List()...)
	for _, r := range roots {
		for _, o := range test.LaidOutObjects(r) {
			switch w := o.(type) {
			case *widget.Entry:
				b.WriteString(w.Text + "\n" + w.PlaceHolder + "\n")
			case *formEntry:
				b.WriteString(w.Text + "\n" + w.PlaceHolder + "\n")
			case *widget.Label:
				b.WriteString(w.Text + "\n")
			case *widget.Select:
				b.WriteString(w.Selected + "\n")
			case *widget.Check:
				b.WriteString(w.Text + "\n")
			}
		}
	}
	b.WriteString(test.RenderToMarkup(c))
	return b.String()
}

func TestPrefsLoadsServer(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	s := f.p.servers
	if !s.editing || s.orig != "inv" {
		t.Fatalf("editing %v %q, want the first server inv", s.editing, s.orig)
	}
	got := map[string]string{"label": s.label.Text, "command": s.command.Text, "args": s.args.Text, "cwd": s.cwd.Text,
		"env": s.env.Text, "watch": s.watch.Text, "restart": s.restart.Selected}
	want := map[string]string{"label": "inv", "command": "node", "args": "dist/server.js", "cwd": "/src/inventory",
		"env": "LOG_LEVEL=debug", "watch": "dist", "restart": "on-change"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("editor fields (-want +got):\n%s", diff)
	}
	var tools []string
	for _, r := range s.tools {
		tools = append(tools, r.name+"="+r.policy.Selected)
	}
	// Catalog tools in server order, then the one only the file names.
	if diff := cmp.Diff([]string{"inventory_lookup=approve", "inventory_adjust=approve", "legacy_tool=deny"}, tools); diff != "" {
		t.Errorf("tool policies (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"api"}, s.creds.Options); diff != "" {
		t.Errorf("credential choices (-want +got):\n%s", diff)
	}
	wantProblems(t, s.fields, nil)
}

func TestPrefsEditServer(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	s := f.p.servers
	before := f.read(t)

	// Invalid edits show their problems next to the fields as they are typed.
	s.cwd.SetText("")
	test.Type(s.cwd, "relative/dir")
	s.env.SetText("LOG_LEVEL=debug\nINV_TOKEN=oops\nnot a pair")
	s.creds.SetSelected([]string{"api"})
	wantProblems(t, s.fields, map[string]string{
		fCwd: `Working directory must be an absolute path, not "relative/dir"`,
		fEnv: "line 3: write NAME=value",
	})
	if got := s.fields[fEnv].problemText(); !strings.Contains(got, `INV_TOKEN must not be set here: credential scope "api" sets it`) {
		t.Errorf("env problems %q lack the collision with credential api", got)
	}
	test.AssertRendersToMarkup(t, "prefs_servers_invalid.xml", f.window.Canvas())

	// Saving refuses and leaves the file alone.
	tapButton(t, f.window.Canvas(), "Save")
	if !bytes.Equal(f.read(t), before) {
		t.Error("the file changed although the edit is invalid")
	}
	if _, err := os.Stat(f.path + config.LastGoodSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a backup appeared although nothing was saved: %v", err)
	}
	if !strings.Contains(f.p.status.Text, "Not saved") || f.p.status.Importance != widget.DangerImportance {
		t.Errorf("status %q (importance %v), want a red Not saved", f.p.status.Text, f.p.status.Importance)
	}
	if f.saved != 0 {
		t.Errorf("OnSaved called %d times for an invalid edit", f.saved)
	}

	// Fixed, it saves atomically with a backup, keeping what the editor
	// does not show (startupTimeout) and the explicit policy of a tool the
	// catalog no longer lists.
	s.cwd.SetText("/src/inventory")
	s.env.SetText("LOG_LEVEL=info")
	s.args.SetText("dist/server.js\n\n--port=0\n")
	s.restart.SetSelected(config.RestartManual)
	s.tools[1].policy.SetSelected(string(config.PolicyDeny))  // inventory_adjust
	s.tools[0].policy.SetSelected(string(config.PolicyAllow)) // inventory_lookup
	if got := s.requests[config.RequestRoots].Selected; got != string(config.PolicyAllow) {
		t.Errorf("roots shows %q, want its default allow", got)
	}
	s.requests[config.RequestSampling].SetSelected(string(config.PolicyDeny))
	wantProblems(t, s.fields, nil)
	tapButton(t, f.window.Canvas(), "Save")
	if f.p.status.Importance != widget.SuccessImportance {
		t.Fatalf("status %q, want success", f.p.status.Text)
	}
	got := f.load(t).Servers["inv"]
	want := config.Server{Command: "node", Args: []string{"dist/server.js", "--port=0"}, Cwd: "/src/inventory",
		Env: map[string]string{"LOG_LEVEL": "info"}, Credentials: []string{"api"}, Watch: []string{"dist"},
		Restart: "manual", StartupTimeout: config.Duration(45 * time.Second),
		Tools: map[string]config.ToolPolicy{"inventory_adjust": {Policy: "deny"}, "inventory_lookup": {Policy: "allow"},
			"legacy_tool": {Policy: "deny"}},
		ServerRequests: map[string]config.Policy{config.RequestSampling: config.PolicyDeny}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("saved server (-want +got):\n%s", diff)
	}
	if last, err := os.ReadFile(f.path + config.LastGoodSuffix); err != nil || !bytes.Equal(last, before) {
		t.Errorf("backup = %q, %v; want the previous file", last, err)
	}
	if f.saved != 1 {
		t.Errorf("OnSaved called %d times, want 1", f.saved)
	}
}

func TestPrefsAddAndRemoveServer(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	s := f.p.servers
	c := f.window.Canvas()
	tapButton(t, c, "Add")
	if !s.isNew || s.label.Text != "" {
		t.Fatalf("Add did not open an empty editor")
	}
	test.Type(s.label, "inv")
	wantProblems(t, s.fields, map[string]string{fLabel: "already exists", fCommand: "Command must not be empty"})
	s.label.SetText("new.server") // a label the problem paths quote
	s.watch.SetText("build")
	wantProblems(t, s.fields, map[string]string{fCommand: "must not be empty", fWatch: `line 1: relative path "build" needs a Working directory`})
	before := f.read(t)
	tapButton(t, c, "Save")
	if !bytes.Equal(f.read(t), before) {
		t.Fatal("an invalid new server was written")
	}
	test.Type(s.command, "python3")
	s.watch.SetText("/abs/build")
	s.newTool.SetText("run_query")
	tapButton(t, c, "Add policy")
	s.tools[len(s.tools)-1].policy.SetSelected(string(config.PolicyAllow))
	wantProblems(t, s.fields, nil)
	tapButton(t, c, "Save")
	cfg := f.load(t)
	want := config.Server{Command: "python3", Watch: []string{"/abs/build"},
		Tools: map[string]config.ToolPolicy{"run_query": {Policy: "allow"}}}
	if diff := cmp.Diff(want, cfg.Servers["new.server"]); diff != "" {
		t.Errorf("added server (-want +got):\n%s", diff)
	}
	if _, ok := cfg.Servers["inv"]; !ok {
		t.Error("adding a server lost the other one")
	}
	if diff := cmp.Diff([]string{"inv", "new.server"}, s.labels); diff != "" {
		t.Errorf("server list (-want +got):\n%s", diff)
	}
	if s.isNew || s.orig != "new.server" {
		t.Errorf("after saving, editing %q (new %v), want new.server", s.orig, s.isNew)
	}

	// Remove asks first; Cancel, or Escape, keeps the server.
	tapButton(t, c, "Remove")
	tapButton(t, c, "Cancel")
	if _, ok := f.load(t).Servers["new.server"]; !ok {
		t.Fatal("Cancel removed the server")
	}
	tapButton(t, c, "Remove")
	pressKey(f.window, fyne.KeyEscape)
	if _, ok := f.load(t).Servers["new.server"]; !ok || c.Overlays().Top() != nil {
		t.Fatalf("Escape over the question: server kept %v, dialog %v; want kept and no dialog", ok, c.Overlays().Top() != nil)
	}
	tapButton(t, c, "Remove")
	tapButton(t, c, "Remove") // the dialog's confirm button
	if _, ok := f.load(t).Servers["new.server"]; ok {
		t.Error("the server is still in the file")
	}
	if diff := cmp.Diff([]string{"inv"}, s.labels); diff != "" {
		t.Errorf("server list after removal (-want +got):\n%s", diff)
	}
	if f.saved != 2 {
		t.Errorf("OnSaved called %d times, want 2", f.saved)
	}
}

// TestPrefsKeepsConcurrentChanges: a save applies the edit to the file as it
// is on disk, so a server another process added meanwhile survives.
func TestPrefsKeepsConcurrentChanges(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	other := f.load(t)
	if err := other.AddServer("cli-added", config.Server{Command: "deno"}); err != nil {
		t.Fatal(err)
	}
	if err := config.Save(f.path, other); err != nil {
		t.Fatal(err)
	}
	f.p.servers.command.SetText("bun")
	tapButton(t, f.window.Canvas(), "Save")
	got := f.load(t)
	if got.Servers["inv"].Command != "bun" || got.Servers["cli-added"].Command != "deno" {
		t.Errorf("servers after save: %+v", got.Servers)
	}
}

func TestPrefsBrokenFile(t *testing.T) {
	broken := `{"mcpServers": {"inv": {"command": "node",}}}`
	f := newPrefsFixture(t, broken)
	if !f.p.banner.Visible() || !strings.Contains(f.p.banner.Text, "cannot be used") {
		t.Errorf("banner %q, want the file's error", f.p.banner.Text)
	}
	if f.p.servers.editing || !f.p.servers.addBtn.Disabled() {
		t.Error("servers can be edited while the file is broken")
	}
	f.p.tabs.SelectIndex(2)
	f.p.general.approve.SetText("90s")
	if !f.p.general.saveBtn.Disabled() {
		t.Error("General can be saved while the file is broken")
	}
	// Even forced, a save reads the file afresh and refuses.
	f.p.general.save()
	if got := string(f.read(t)); got != broken {
		t.Errorf("broken file rewritten:\n%s", got)
	}
	if !strings.Contains(f.p.status.Text, "Not saved") {
		t.Errorf("status %q, want Not saved", f.p.status.Text)
	}
	// Fixed on disk, a reload makes everything editable again.
	if err := os.WriteFile(f.path, []byte(prefsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	f.p.reload()
	if f.p.banner.Visible() || !f.p.servers.editing || f.p.general.saveBtn.Disabled() {
		t.Error("still locked after the file was fixed and reloaded")
	}
}

func TestPrefsMissingFileCreatesIt(t *testing.T) {
	f := newPrefsFixture(t, "")
	s := f.p.servers
	if s.editing {
		t.Fatal("editing a server of an empty configuration")
	}
	tapButton(t, f.window.Canvas(), "Add")
	s.label.SetText("echo")
	s.command.SetText("/usr/bin/echo-server")
	tapButton(t, f.window.Canvas(), "Save")
	if got := f.load(t).Servers["echo"].Command; got != "/usr/bin/echo-server" {
		t.Errorf("saved command %q", got)
	}
	if fi, err := os.Stat(f.path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config file: %v, %v; want mode 0600", fi, err)
	}
}

func TestPrefsCredentials(t *testing.T) {
	const secret = "s3cr3t-Value-9f2c1d"
	const replaced = "another-Secret-77aa"
	f := newPrefsFixture(t, prefsConfig)
	cr := f.p.creds
	c := f.window.Canvas()
	f.p.tabs.SelectIndex(1)
	if cr.orig != "api" || !strings.Contains(cr.state.Text, "Not stored") {
		t.Fatalf("editing %q, state %q; want api, not stored", cr.orig, cr.state.Text)
	}

	// A new scope needs a valid variable and a secret.
	tapButton(t, c, "Add")
	test.Type(cr.scope, "deploy-key")
	test.Type(cr.envVar, "1BAD")
	wantProblems(t, cr.fields, map[string]string{fEnvVar: "is invalid"})
	cr.envVar.SetText("DEPLOY_KEY")
	before := f.read(t)
	tapButton(t, c, "Save")
	wantProblems(t, cr.fields, map[string]string{fSecret: "Enter the secret"})
	if !bytes.Equal(f.read(t), before) || f.store.Len() != 0 {
		t.Fatal("a scope without secret was saved")
	}

	// A store that refuses changes nothing.
	f.store.Fail(secrets.ErrLocked)
	test.Type(cr.secret, secret)
	tapButton(t, c, "Save")
	if !bytes.Equal(f.read(t), before) {
		t.Fatal("the configuration changed although the store refused the secret")
	}
	if got := cr.fields[fSecret].problemText(); !strings.Contains(got, "locked") {
		t.Errorf("secret problems %q, want the store's error", got)
	}
	f.store.Fail(nil)

	tapButton(t, c, "Save")
	if v, err := f.store.Get("deploy-key"); err != nil || string(v) != secret {
		t.Fatalf("store holds %q, %v", v, err)
	}
	if diff := cmp.Diff(config.Credential{Inject: "env", EnvVar: "DEPLOY_KEY"}, f.load(t).Credentials["deploy-key"]); diff != "" {
		t.Errorf("saved scope (-want +got):\n%s", diff)
	}
	if cr.secret.Text != "" {
		t.Error("the password entry still holds the secret after saving")
	}
	if !strings.Contains(cr.state.Text, "Stored") {
		t.Errorf("state %q, want Stored", cr.state.Text)
	}
	if strings.Contains(allText(c), secret) {
		t.Error("the secret appears in the window")
	}
	test.AssertRendersToMarkup(t, "prefs_credentials.xml", c)

	// Replace the secret and switch to _meta with approval on every use.
	cr.inject.SetSelected(injectMetaText)
	if !cr.envVar.Disabled() {
		t.Error("the variable entry is enabled for _meta injection")
	}
	cr.ask.SetChecked(true)
	test.Type(cr.secret, replaced)
	tapButton(t, c, "Save")
	if v, _ := f.store.Get("deploy-key"); string(v) != replaced {
		t.Errorf("store holds %q after replacing", v)
	}
	if diff := cmp.Diff(config.Credential{Inject: "meta", AskEveryUse: true}, f.load(t).Credentials["deploy-key"]); diff != "" {
		t.Errorf("saved scope (-want +got):\n%s", diff)
	}
	if text := allText(c); strings.Contains(text, secret) || strings.Contains(text, replaced) {
		t.Error("a secret appears in the window")
	}

	// Remove the secret, keep the scope.
	tapButton(t, c, "Remove secret")
	if f.store.Len() == 0 {
		t.Fatal("the secret went before the person confirmed")
	}
	tapButton(t, c, "Keep it")
	if f.store.Len() == 0 {
		t.Fatal("Keep it removed the secret")
	}
	tapButton(t, c, "Remove secret")
	tapButton(t, c, "Remove secret") // the dialog's
	if f.store.Len() != 0 || !strings.Contains(cr.state.Text, "Not stored") {
		t.Errorf("after Remove secret: %d stored, state %q", f.store.Len(), cr.state.Text)
	}
	if _, ok := f.load(t).Credentials["deploy-key"]; !ok {
		t.Error("Remove secret deleted the scope")
	}

	// A scope a server uses cannot be deleted; an unused one can.
	if err := f.store.Set("api", []byte("x-api-secret")); err != nil {
		t.Fatal(err)
	}
	cfg := f.load(t)
	inv := cfg.Servers["inv"]
	inv.Credentials = []string{"api"}
	cfg.Servers["inv"] = inv
	if err := config.Save(f.path, cfg); err != nil {
		t.Fatal(err)
	}
	f.p.reload()
	f.p.tabs.SelectIndex(1)
	cr.edit("api")
	tapButton(t, c, "Delete scope")
	if !strings.Contains(f.p.status.Text, "still used by inv") {
		t.Errorf("status %q, want a refusal naming inv", f.p.status.Text)
	}
	cr.edit("deploy-key")
	tapButton(t, c, "Delete scope")
	tapButton(t, c, "Delete")
	if _, ok := f.load(t).Credentials["deploy-key"]; ok {
		t.Error("the scope is still in the file")
	}
	if _, err := f.store.Get("api"); err != nil {
		t.Errorf("deleting deploy-key touched api's secret: %v", err)
	}
}

func TestPrefsCredentialCollision(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	cr := f.p.creds
	// inv sets LOG_LEVEL; a credential it uses may not set it too.
	cfg := f.load(t)
	inv := cfg.Servers["inv"]
	inv.Credentials = []string{"api"}
	cfg.Servers["inv"] = inv
	if err := config.Save(f.path, cfg); err != nil {
		t.Fatal(err)
	}
	f.p.reload()
	cr.edit("api")
	cr.envVar.SetText("LOG_LEVEL")
	if got := cr.other.Text; !strings.Contains(got, `Server “inv”, Environment: LOG_LEVEL must not be set here: credential scope "api"`) || !cr.other.Visible() {
		t.Errorf("other problems %q, want the collision with inv's env", got)
	}
}

func TestPrefsGeneral(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	g := f.p.general
	c := f.window.Canvas()
	f.p.tabs.SelectIndex(2)

	// Launch at login is saved with Save, like the rest of the tab.
	g.login.SetChecked(true)
	if f.login.on || len(f.login.calls) != 0 {
		t.Errorf("ticking launch at login applied it before Save: on=%v calls %v", f.login.on, f.login.calls)
	}
	tapButton(t, c, "Save")
	if !f.login.on || !strings.Contains(f.p.status.Text, "will open") {
		t.Errorf("after Save: login on=%v, status %q", f.login.on, f.p.status.Text)
	}
	if f.saved != 0 {
		t.Errorf("OnSaved called %d times although config.json did not change", f.saved)
	}
	f.login.fail = errors.New("disk full")
	g.login.SetChecked(false)
	tapButton(t, c, "Save")
	if !g.login.Checked || !f.login.on {
		t.Error("the box shows off although disabling failed")
	}
	wantProblems(t, g.fields, map[string]string{fLogin: "disk full"})
	if !strings.Contains(f.p.status.Text, "launch at login was not changed") || f.p.status.Importance != widget.DangerImportance {
		t.Errorf("status %q (importance %v), want a red refusal", f.p.status.Text, f.p.status.Importance)
	}
	if diff := cmp.Diff([]string{"enable", "disable"}, f.login.calls); diff != "" {
		t.Errorf("login calls (-want +got):\n%s", diff)
	}
	f.login.fail = nil
	g.reload()

	// Audit signing state comes from the credential store.
	if !strings.Contains(g.audit.Text, "Not signed yet") {
		t.Errorf("audit state %q, want not signed yet", g.audit.Text)
	}
	if err := f.store.Set(daemon.AuditKeyScope, []byte(strings.Repeat("ab", daemon.AuditKeySize))); err != nil {
		t.Fatal(err)
	}
	f.p.reload()
	if !strings.Contains(g.audit.Text, "Signed with HMAC-SHA256") {
		t.Errorf("audit state %q, want signed", g.audit.Text)
	}
	if strings.Contains(allText(c), strings.Repeat("ab", daemon.AuditKeySize)) {
		t.Error("the audit key appears in the window")
	}

	// Timeouts are checked as typed and saved as durations; zero is not
	// silently taken for the default.
	g.hold.SetText("0")
	wantProblems(t, g.fields, map[string]string{fHoldTimeout: "would mean the default"})
	g.hold.SetText("")
	before := f.read(t)
	test.Type(g.approve, "soon")
	g.hold.SetText("-5s")
	wantProblems(t, g.fields, map[string]string{fApprovalTimeout: "not a duration", fHoldTimeout: "must not be negative"})
	test.AssertRendersToMarkup(t, "prefs_general_invalid.xml", c)
	tapButton(t, c, "Save")
	if !bytes.Equal(f.read(t), before) {
		t.Fatal("invalid timeouts were written")
	}
	g.approve.SetText("90s")
	g.hold.SetText("")
	tapButton(t, c, "Save")
	got := f.load(t).Settings
	if diff := cmp.Diff(config.Settings{ApprovalTimeout: config.Duration(90 * time.Second)}, got); diff != "" {
		t.Errorf("settings (-want +got):\n%s", diff)
	}
	if f.saved != 1 {
		t.Errorf("OnSaved called %d times, want 1", f.saved)
	}
}

// TestPrefsAuditSigning: "Sign the audit log" is saved with the other
// general settings; turning it off asks first (and writes nothing when the
// person keeps signing), and the state under the box is the daemon's.
func TestPrefsAuditSigning(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	g := f.p.general
	c := f.window.Canvas()
	f.p.tabs.SelectIndex(2)
	// A daemon that applies the file's setting at once, or fails to.
	var signErr string
	f.p.deps.AuditStatus = func() daemon.AuditStatus {
		cfg, err := config.Load(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if signErr != "" {
			return daemon.AuditStatus{Note: "the audit log is not signed: " + signErr, SigningError: signErr}
		}
		if !cfg.Settings.AuditSigningOn() {
			return daemon.AuditStatus{Note: daemon.AuditSigningOffNote}
		}
		return daemon.AuditStatus{Signed: true}
	}
	f.p.reload()
	if !g.sign.Checked || !strings.HasPrefix(g.audit.Text, "Now: signed with HMAC-SHA256") {
		t.Fatalf("box %v, state %q; want ticked and signed", g.sign.Checked, g.audit.Text)
	}
	if hint := g.fields[fAudit].note.Text; !strings.Contains(hint, "forge them undetected") {
		t.Errorf("hint %q does not say what off means", hint)
	}

	// Off asks first; keeping signing writes nothing.
	before := f.read(t)
	g.sign.SetChecked(false)
	tapButton(t, c, "Save")
	if c.Overlays().Top() == nil {
		t.Fatal("turning signing off did not ask")
	}
	test.AssertRendersToMarkup(t, "prefs_general_signing_off.xml", c)
	tapButton(t, c, "Keep signing")
	if !bytes.Equal(f.read(t), before) || f.saved != 0 {
		t.Fatal("the file changed although the person kept signing")
	}
	if !g.sign.Checked || !strings.Contains(f.p.status.Text, "stays on") {
		t.Errorf("after Keep signing: box %v, status %q; want ticked again", g.sign.Checked, f.p.status.Text)
	}
	if f.p.status.Importance != widget.MediumImportance {
		t.Errorf("%q in importance %v, want plain (nothing was saved, nothing failed)", f.p.status.Text, f.p.status.Importance)
	}

	g.sign.SetChecked(false)
	tapButton(t, c, "Save")
	tapButton(t, c, "Turn off signing")
	if got := f.load(t).Settings.AuditSigning; got == nil || *got {
		t.Fatalf("settings.auditSigning = %v after turning it off, want false", got)
	}
	if !bytes.Contains(f.read(t), []byte(`"auditSigning": false`)) || f.saved != 1 {
		t.Errorf("file:\n%s\nsaved %d times", f.read(t), f.saved)
	}
	if !strings.Contains(f.p.status.Text, "Audit signing is off") || g.audit.Text != "Now: not signed, as set. Events are hash-chained all the same." {
		t.Errorf("status %q, state %q", f.p.status.Text, g.audit.Text)
	}

	// The next edit clears the "Saved" that no longer describes the tab.
	g.approve.SetText("90s")
	if f.p.status.Visible() {
		t.Errorf("status %q still shown after an unsaved edit", f.p.status.Text)
	}
	// Saving other settings keeps it off, without asking again.
	tapButton(t, c, "Save")
	if c.Overlays().Top() != nil || f.load(t).Settings.AuditSigningOn() || f.saved != 2 {
		t.Fatalf("saving a timeout with signing off: dialog %v, on %v", c.Overlays().Top() != nil, f.load(t).Settings.AuditSigningOn())
	}

	// On again, without asking: the key leaves the file (the default).
	g.sign.SetChecked(true)
	tapButton(t, c, "Save")
	if c.Overlays().Top() != nil {
		t.Fatal("turning signing on asked")
	}
	if got := f.load(t).Settings; got.AuditSigning != nil || got.ApprovalTimeout != config.Duration(90*time.Second) {
		t.Errorf("settings %+v, want auditSigning absent and the timeout kept", got)
	}
	if !strings.Contains(f.p.status.Text, "on again") || !strings.HasPrefix(g.audit.Text, "Now: signed") {
		t.Errorf("status %q, state %q", f.p.status.Text, g.audit.Text)
	}

	// A daemon that could not apply the setting says why.
	signErr = "settings.auditSigning is true but signing could not start: credential store is locked"
	f.p.reload()
	if g.audit.Text != "Not as set: "+signErr {
		t.Errorf("state %q, want the daemon's error", g.audit.Text)
	}
}

func TestPrefsWithoutLoginItem(t *testing.T) {
	a := test.NewTempApp(t)
	p := newPrefs(a, PrefsDeps{ConfigFile: filepath.Join(t.TempDir(), "config.json"), Secrets: &secrets.Memory{}},
		uiOptions{inline: true, loc: time.UTC})
	defer p.win.Close()
	if !p.general.login.Disabled() || !strings.Contains(p.general.fields[fLogin].problemText(), "not available") {
		t.Error("launch at login offered without a login item")
	}
}

func TestShowPreferencesOnce(t *testing.T) {
	a := test.NewTempApp(t)
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(prefsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	d := PrefsDeps{ConfigFile: path, Secrets: &secrets.Memory{}}
	w1 := ShowPreferences(a, d)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.AddServer("later", config.Server{Command: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := config.Save(path, cfg); err != nil {
		t.Fatal(err)
	}
	if w2 := ShowPreferences(a, d); w2 != w1 {
		t.Fatal("a second Preferences window opened")
	}
	// The reopened window shows the file as it is now.
	if !strings.Contains(allText(w1.Canvas()), "later") {
		t.Error("reopening did not reload the file")
	}
	w1.Close()
	w3 := ShowPreferences(a, d)
	defer w3.Close()
	if w3 == w1 {
		t.Error("a closed window was reused")
	}
}

func TestServerProblems(t *testing.T) {
	ps := []config.Problem{
		{Path: "mcpServers.inv.command", Reason: "command must not be empty"},
		{Path: "mcpServers.inv.watch[1]", Reason: "watch path must not be empty"},
		{Path: "mcpServers.inv.args[0]", Reason: "argument must not contain a NUL character"},
		{Path: "mcpServers.inv.tools.\"a.b\".policy", Reason: "policy must be …"},
		{Path: "mcpServers.inv.tools.run_query.policy", Reason: "bad policy"},
		{Path: "mcpServers.inv.env.LOG", Reason: "env must not set LOG"},
		{Path: "mcpServers.inv.credentials[0]", Reason: "credential \"x\" is not defined"},
		{Path: "mcpServers.inv.startupTimeout", Reason: "duration must not be negative"},
		{Path: "mcpServers.inventory.command", Reason: "another server"},
		{Path: "credentials.api.envVar", Reason: "bad var"},
	}
	got := serverProblems("inv", ps)
	want := problemSet{
		fCommand:     {"Command must not be empty"},
		fWatch:       {"line 2: watch path must not be empty"},
		fArgs:        {"line 1: argument must not contain a NUL character"},
		fTools:       {"a.b: policy must be …", "run_query: bad policy"},
		fEnv:         {"env must not set LOG"},
		fCredentials: {"credential \"x\" is not defined"},
		fOther: {"Server “inv”, startupTimeout in config.json: duration must not be negative",
			"Server “inventory”, Command: another server", "Credential scope “api”, Variable: bad var"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("serverProblems (-want +got):\n%s", diff)
	}
	// A label the paths quote.
	got = serverProblems("new.server", []config.Problem{
		{Path: `mcpServers."new.server"`, Reason: "bad label"},
		{Path: `mcpServers."new.server".watch[0]`, Reason: "relative"},
	})
	want = problemSet{fLabel: {"bad label"}, fWatch: {"line 1: relative"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("serverProblems with a quoted label (-want +got):\n%s", diff)
	}
}

// TestProblemPathsMatchConfig keeps pathKey in step with the paths
// config.Validate writes, for labels that need quoting and those that do not.
func TestProblemPathsMatchConfig(t *testing.T) {
	for _, label := range []string{"inv", "new.server", "a_b-c", "v1.2"} {
		c := &config.Config{Servers: map[string]config.Server{label: {Command: ""}}}
		var ve *config.ValidationError
		if !errors.As(c.Validate(), &ve) {
			t.Fatalf("%s: no validation error", label)
		}
		ps := serverProblems(label, ve.Problems)
		if len(ps[fCommand]) != 1 || len(ps) != 1 {
			t.Errorf("%s: problems %v, want one on the command", label, ps)
		}
	}
}

func TestCommandHint(t *testing.T) {
	for _, tt := range []struct{ command, cwd, want string }{
		{"", "", "looked up in PATH when the server starts, or the path"},
		{"node", "/src/inventory", "“node” is looked up in PATH when the server starts."},
		{"/opt/inventory/bin/server", "", "Runs the file /opt/inventory/bin/server."},
		{"./srv", "/src/inventory", "Runs the file /src/inventory/srv: a relative path starts at the Working directory"},
		{"bin/srv", "relative", "which must be an absolute path"},
	} {
		if got := commandHint(tt.command, tt.cwd); !strings.Contains(got, tt.want) {
			t.Errorf("commandHint(%q, %q) = %q, want it to contain %q", tt.command, tt.cwd, got, tt.want)
		}
	}
}

// A relative command holding a slash is resolved against the working
// directory and saved absolute; without a working directory it is refused
// (the app has no meaningful current directory). The hint says where the
// command is found.
func TestPrefsRelativeCommand(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	s := f.p.servers
	c := f.window.Canvas()
	hint := func() string { return s.fields[fCommand].note.Text }
	if !strings.Contains(hint(), "“node” is looked up in PATH") {
		t.Errorf("hint for node %q", hint())
	}
	s.command.SetText("/opt/inventory/bin/server")
	if want := "Runs the file /opt/inventory/bin/server, which does not exist (yet): the server cannot start until it does."; hint() != want {
		t.Errorf("hint %q, want %q", hint(), want)
	}
	s.command.SetText("/bin/sh")
	if want := "Runs the file /bin/sh."; hint() != want {
		t.Errorf("hint %q, want %q", hint(), want)
	}

	before := f.read(t)
	s.cwd.SetText("")
	s.watch.SetText("/src/inventory/dist")
	s.command.SetText("./srv")
	wantProblems(t, s.fields, map[string]string{fCommand: relativeCommandProblem})
	if s.fields[fCommand].note.Importance != widget.DangerImportance || hint() != relativeCommandProblem {
		t.Errorf("command note %q (importance %v), want the problem in red in the hint's place", hint(), s.fields[fCommand].note.Importance)
	}
	tapButton(t, c, "Save")
	if !bytes.Equal(f.read(t), before) {
		t.Fatal("a relative command without a working directory was written")
	}

	s.cwd.SetText("/src/inventory")
	wantProblems(t, s.fields, nil)
	if !strings.Contains(hint(), "Runs the file /src/inventory/srv") {
		t.Errorf("hint %q, want the resolved path", hint())
	}
	if f.p.status.Visible() {
		t.Errorf("status %q still shown once the fields are valid", f.p.status.Text)
	}
	tapButton(t, c, "Save")
	if got := f.load(t).Servers["inv"].Command; got != "/src/inventory/srv" {
		t.Errorf("saved command %q, want /src/inventory/srv", got)
	}
	if !strings.Contains(f.p.status.Text, "Command ./srv is stored as /src/inventory/srv") || f.p.status.Importance != widget.SuccessImportance {
		t.Errorf("status %q, want a success naming the stored command", f.p.status.Text)
	}
	if s.command.Text != "/src/inventory/srv" {
		t.Errorf("editor shows %q after saving, want the stored command", s.command.Text)
	}
}

func TestCwdPlaceholder(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	if got, want := f.p.servers.cwd.PlaceHolder, "e.g. "+filepath.Join("/home/you", "src", "inventory"); got != want {
		t.Errorf("placeholder %q, want %q", got, want)
	}
	if got := cwdExample(""); got != filepath.FromSlash("/path/to/inventory") {
		t.Errorf("cwdExample without a home = %q", got)
	}
}

// "Not saved: correct the fields marked in red." goes once no field is
// marked any more, in each tab; a "Saved" goes at the next edit.
func TestPrefsStatusClearsWhenFixed(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	c := f.window.Canvas()
	s := f.p.servers
	s.cwd.SetText("relative")
	tapButton(t, c, "Save")
	if f.p.status.Text != notSavedFields || !f.p.status.Visible() {
		t.Fatalf("status %q, want %q", f.p.status.Text, notSavedFields)
	}
	s.cwd.SetText("/src/other")
	if f.p.status.Visible() {
		t.Errorf("status %q stays after the fields were corrected", f.p.status.Text)
	}
	// A "Saved" goes at the next edit: it no longer describes the tab.
	f.p.setStatus("Saved server “inv”.", false)
	s.cwd.SetText("/src/inventory")
	if f.p.status.Visible() {
		t.Errorf("the success message %q stays beside an unsaved edit", f.p.status.Text)
	}

	f.p.tabs.SelectIndex(2)
	g := f.p.general
	g.approve.SetText("soon")
	tapButton(t, c, "Save")
	if f.p.status.Text != notSavedFields {
		t.Fatalf("general: status %q", f.p.status.Text)
	}
	g.approve.SetText("2m")
	if f.p.status.Visible() {
		t.Errorf("general: status %q stays after the fields were corrected", f.p.status.Text)
	}

	f.p.tabs.SelectIndex(1)
	cr := f.p.creds
	cr.edit("api")
	cr.envVar.SetText("")
	tapButton(t, c, "Save")
	if f.p.status.Text != notSavedFields {
		t.Fatalf("credentials: status %q", f.p.status.Text)
	}
	wantProblems(t, cr.fields, map[string]string{fEnvVar: "name the environment variable to set"})
	cr.envVar.SetText("INV_TOKEN")
	if f.p.status.Visible() {
		t.Errorf("credentials: status %q stays after the fields were corrected", f.p.status.Text)
	}
}

// A problem takes the place of the hint, so the fields below do not move
// as problems come and go.
func TestPrefsProblemsKeepLayout(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	s := f.p.servers
	d := fyne.CurrentApp().Driver()
	below := func() fyne.Position {
		f.window.Content().Refresh()
		return d.AbsolutePositionForObject(s.env)
	}
	start := below()
	if start.Y <= 0 {
		t.Fatalf("the environment field is at %v: not laid out", start)
	}
	test.Type(s.cwd, "x") // "/src/inventoryx": valid
	s.cwd.SetText("src")
	if s.fields[fCwd].problemText() == "" {
		t.Fatal("no problem for a relative working directory")
	}
	if got := below(); got != start {
		t.Errorf("the environment field moved from %v to %v when a problem appeared", start, got)
	}
	s.cwd.SetText("/src/inventory")
	if got := below(); got != start {
		t.Errorf("the environment field moved from %v to %v when the problem went", start, got)
	}
	if n := s.fields[fCwd].note; n.Text != s.fields[fCwd].hint || n.Importance != widget.MediumImportance {
		t.Errorf("cwd note %q (importance %v), want the hint back", n.Text, n.Importance)
	}
}

// Environment entries that look like secrets are saved, with a warning that
// points to the Credentials tab.
func TestPrefsEnvSecretWarning(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	s := f.p.servers
	s.env.SetText("LOG_LEVEL=debug\nSECRET_TOKEN=abc")
	wantProblems(t, s.fields, nil)
	w := s.fields[fEnv].warningText()
	for _, want := range []string{"line 2: SECRET_TOKEN looks like a secret (name contains SECRET)", "plain text in config.json", "Credentials tab"} {
		if !strings.Contains(w, want) {
			t.Errorf("env warning %q lacks %q", w, want)
		}
	}
	if n := s.fields[fEnv].note; n.Text != w || n.Importance != widget.WarningImportance {
		t.Errorf("env note %q (importance %v), want the warning", n.Text, n.Importance)
	}
	s.env.SetText("GITHUB=ghp_0123456789abcdefghij")
	if w := s.fields[fEnv].warningText(); !strings.Contains(w, "GITHUB looks like a secret (starts with ghp_)") {
		t.Errorf("env warning %q, want the value's shape", w)
	}
	tapButton(t, f.window.Canvas(), "Save")
	if got := f.load(t).Servers["inv"].Env["GITHUB"]; got != "ghp_0123456789abcdefghij" {
		t.Errorf("a warned value was not saved: %q", got)
	}
	// Loading the server again still warns.
	if w := s.fields[fEnv].warningText(); !strings.Contains(w, "GITHUB looks like a secret") {
		t.Errorf("env warning after reload %q", w)
	}
	s.env.SetText("LOG_LEVEL=debug")
	if w := s.fields[fEnv].warningText(); w != "" {
		t.Errorf("warning %q for a harmless environment", w)
	}
}

func TestProblemWording(t *testing.T) {
	for _, pr := range []config.Problem{
		{Path: "mcpServers.inv.cwd", Reason: `cwd must be an absolute path, not "src"`},
		{Path: "mcpServers.inv.watch[0]", Reason: `relative watch path "dist" needs a cwd to be relative to; set cwd or use an absolute path`},
		{Path: "mcpServers.inv.credentials[0]", Reason: `credential "x" is not defined under "credentials"`},
		{Path: "credentials.api.envVar", Reason: `inject "env" needs envVar, the variable to set`},
		{Path: "credentials.api.envVar", Reason: `envVar is not used with inject "meta"; remove it`},
	} {
		got := fieldReason(pr.Reason)
		for _, key := range []string{"cwd", "envVar", `"credentials"`, "inject \""} {
			if strings.Contains(got, key) {
				t.Errorf("%q words %s with the key %s: %q", pr.Reason, pr.Path, key, got)
			}
		}
	}
	// The problems config.Validate really writes for the editor's fields.
	c := &config.Config{Servers: map[string]config.Server{"inv": {Command: "node", Cwd: "src", Watch: []string{"dist"}}}}
	var ve *config.ValidationError
	if !errors.As(c.Validate(), &ve) {
		t.Fatal("no validation error")
	}
	for f, msgs := range serverProblems("inv", ve.Problems) {
		for _, m := range msgs {
			if strings.Contains(m, "cwd") {
				t.Errorf("field %q: %q names the key cwd", f, m)
			}
		}
	}
}

// recordingApp records the windows it makes, to see them centred.
type recordingApp struct {
	fyne.App
	wins []*recordingWindow
}

type recordingWindow struct {
	fyne.Window
	centred bool
}

func (a *recordingApp) NewWindow(title string) fyne.Window {
	w := &recordingWindow{Window: a.App.NewWindow(title)}
	a.wins = append(a.wins, w)
	return w
}

func (w *recordingWindow) CenterOnScreen() {
	w.centred = true
	w.Window.CenterOnScreen()
}

func TestWindowsCentred(t *testing.T) {
	a := &recordingApp{App: test.NewTempApp(t)}
	p := newPrefs(a, PrefsDeps{ConfigFile: filepath.Join(t.TempDir(), "config.json"), Secrets: &secrets.Memory{}},
		uiOptions{inline: true, loc: time.UTC})
	defer p.win.Close()
	v := newAuditView(a, AuditDeps{Dir: filepath.Join(t.TempDir(), "audit")}, uiOptions{inline: true, loc: time.UTC})
	defer v.win.Close()
	if len(a.wins) != 2 {
		t.Fatalf("%d windows made, want 2", len(a.wins))
	}
	for _, w := range a.wins {
		if !w.centred {
			t.Errorf("window %q is not centred on screen", w.Title())
		}
	}
}

// TestPrefsUnsavedEditsAsk: choosing another server, or Add, while the
// edited one has unsaved changes asks first; Keep editing keeps the edits
// (and the server selected), Discard moves on.
func TestPrefsUnsavedEditsAsk(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	s := f.p.servers
	tapButton(t, f.window.Canvas(), "Add")
	test.Type(s.label, "pub")
	test.Type(s.command, "/usr/bin/publish")
	tapButton(t, f.window.Canvas(), "Save")
	if !strings.HasPrefix(f.p.status.Text, "Saved") {
		t.Fatalf("saving pub: %q", f.p.status.Text)
	}
	s.list.Select(slices.Index(s.labels, "inv"))
	if s.orig != "inv" || f.window.Canvas().Overlays().Top() != nil {
		t.Fatalf("selecting inv with nothing unsaved: editing %q, dialog %v", s.orig, f.window.Canvas().Overlays().Top() != nil)
	}
	s.command.SetText("/usr/bin/node2")
	s.list.Select(slices.Index(s.labels, "pub"))
	if f.window.Canvas().Overlays().Top() == nil {
		t.Fatal("no question before unsaved edits of inv are dropped")
	}
	// Escape answers the question the safe way, like Keep editing. The
	// entry typed into before has no focus over the dialog, so the key
	// reaches the window.
	if fo := f.window.Canvas().Focused(); fo != nil {
		t.Errorf("%T has the keyboard over the dialog; Escape would not reach the window", fo)
	}
	pressKey(f.window, fyne.KeyEscape)
	if f.window.Canvas().Overlays().Top() != nil || s.orig != "inv" || s.command.Text != "/usr/bin/node2" {
		t.Errorf("after Escape: dialog %v, editing %q with command %q; want no dialog and inv with the edit",
			f.window.Canvas().Overlays().Top() != nil, s.orig, s.command.Text)
	}
	s.list.Select(slices.Index(s.labels, "pub"))
	tapButton(t, f.window.Canvas(), "Keep editing")
	if s.orig != "inv" || s.command.Text != "/usr/bin/node2" {
		t.Errorf("after Keep editing: editing %q with command %q; want inv with the edit", s.orig, s.command.Text)
	}
	pressKey(f.window, fyne.KeyEscape) // no question: Escape would close the window, so it asks about the edits first
	if f.window.Canvas().Overlays().Top() == nil {
		t.Fatal("Escape with unsaved edits closes without asking")
	}
	pressKey(f.window, fyne.KeyEscape) // and the question's Escape keeps editing
	if f.window.Canvas().Overlays().Top() != nil || s.orig != "inv" || s.command.Text != "/usr/bin/node2" {
		t.Errorf("Escape over the closing question: dialog %v, editing %q with command %q", f.window.Canvas().Overlays().Top() != nil, s.orig, s.command.Text)
	}
	tapButton(t, f.window.Canvas(), "Add")
	tapButton(t, f.window.Canvas(), "Discard")
	if !s.isNew || s.command.Text != "" {
		t.Errorf("after Discard: new %v, command %q; want an empty new server", s.isNew, s.command.Text)
	}
	if !bytes.Contains(f.read(t), []byte(`"command": "node"`)) {
		t.Errorf("the discarded edit reached the file:\n%s", f.read(t))
	}

	// The question also offers Save: a valid edit is saved and the editor
	// moves on; an invalid one stays, with the reason.
	s.list.Select(slices.Index(s.labels, "inv"))
	s.command.SetText("/usr/bin/node3")
	s.list.Select(slices.Index(s.labels, "pub"))
	tapButton(t, f.window.Canvas(), "Save") // the question's, over the editor's
	if f.window.Canvas().Overlays().Top() != nil || s.orig != "pub" {
		t.Errorf("after Save in the question: dialog %v, editing %q; want pub", f.window.Canvas().Overlays().Top() != nil, s.orig)
	}
	if !bytes.Contains(f.read(t), []byte(`"command": "/usr/bin/node3"`)) {
		t.Errorf("Save in the question did not save inv:\n%s", f.read(t))
	}
	s.cwd.SetText("relative")
	s.list.Select(slices.Index(s.labels, "inv"))
	tapButton(t, f.window.Canvas(), "Save")
	if s.orig != "pub" || s.cwd.Text != "relative" || f.p.status.Text != notSavedFields {
		t.Errorf("Save of an invalid edit in the question: editing %q, cwd %q, status %q; want pub kept with the edit", s.orig, s.cwd.Text, f.p.status.Text)
	}
}

// TestQuestionIcons: the answer that keeps things as they are carries a
// check mark, the destructive one a warning (or delete) icon in the
// danger colour; a dismissal (Escape) is keep, and an answer runs once.
func TestQuestionIcons(t *testing.T) {
	a := test.NewTempApp(t)
	win := a.NewWindow("q")
	defer win.Close()
	var kept, removed int
	d := askDialog("Remove?", "It goes.", win, keepChoice("Keep it", func() { kept++ }), destroyChoice("Remove", theme.DeleteIcon(), func() { removed++ }))
	d.Show()
	var buttons []*widget.Button
	for _, o := range test.LaidOutObjects(win.Canvas().Overlays().Top()) {
		if b, ok := o.(*widget.Button); ok {
			buttons = append(buttons, b)
		}
	}
	if len(buttons) != 2 {
		t.Fatalf("%d buttons, want 2", len(buttons))
	}
	if b := buttons[0]; b.Text != "Keep it" || b.Icon.Name() != theme.ConfirmIcon().Name() || b.Importance == widget.DangerImportance {
		t.Errorf("keep button %q icon %s importance %v; want the check mark, not danger", b.Text, b.Icon.Name(), b.Importance)
	}
	if b := buttons[1]; b.Text != "Remove" || b.Icon.Name() != theme.DeleteIcon().Name() || b.Importance != widget.DangerImportance {
		t.Errorf("destructive button %q icon %s importance %v; want delete, danger", b.Text, b.Icon.Name(), b.Importance)
	}
	test.Tap(buttons[1])
	if removed != 1 || kept != 0 {
		t.Errorf("Remove tapped: removed %d, kept %d; want 1, 0", removed, kept)
	}
	d = askDialog("Remove?", "It goes.", win, keepChoice("Keep it", func() { kept++ }), destroyChoice("Remove", nil, func() { removed++ }))
	d.Show()
	d.Dismiss() // Escape
	if removed != 1 || kept != 1 {
		t.Errorf("dismissed: removed %d, kept %d; want 1, 1", removed, kept)
	}
	if destroyChoice("x", nil, nil).Icon.Name() != theme.WarningIcon().Name() {
		t.Error("a destructive choice without an icon of its own has no warning icon")
	}
}

// TestPrefsTabsFollowSaves: a scope created in the Credentials tab is offered
// at once in the Servers tab, and a server ticking it shows at once under
// "Used by" in the Credentials tab.
func TestPrefsTabsFollowSaves(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	c, s := f.p.creds, f.p.servers
	f.p.tabs.SelectIndex(1)
	tapButton(t, f.window.Canvas(), "Add")
	test.Type(c.scope, "newscope")
	c.inject.SetSelected(injectMetaText)
	test.Type(c.secret, "s3cret-value")
	tapButton(t, f.window.Canvas(), "Save")
	if !slices.Contains(s.creds.Options, "newscope") {
		t.Fatalf("the Servers tab offers %v after newscope was saved", s.creds.Options)
	}
	f.p.tabs.SelectIndex(0)
	s.creds.SetSelected(append(slices.Clone(s.creds.Selected), "newscope"))
	tapButton(t, f.window.Canvas(), "Save")
	if !strings.Contains(c.usedBy.Text, "inv") {
		t.Errorf("Used by of newscope reads %q after inv ticked it", c.usedBy.Text)
	}
}

// TestShowPreferencesAt: the tray's server rows open Preferences on that
// server's page, in the open window too.
func TestShowPreferencesAt(t *testing.T) {
	cfg := strings.Replace(prefsConfig, `"mcpServers": {`, `"mcpServers": {"aaa": {"command": "node"},`, 1)
	f := newPrefsFixture(t, cfg)
	a := fyne.CurrentApp()
	f.p.servers.edit("aaa")
	f.p.tabs.SelectIndex(2)
	if f.p.servers.orig != "aaa" {
		t.Fatalf("the fixture edits %q, want aaa", f.p.servers.orig)
	}
	ShowPreferencesAt(a, f.p.deps, "inv")
	if f.p.tabs.SelectedIndex() != 0 || f.p.servers.orig != "inv" || !f.p.servers.editing {
		t.Errorf("after ShowPreferencesAt(inv): tab %d, editing %v %q; want Servers, inv", f.p.tabs.SelectedIndex(), f.p.servers.editing, f.p.servers.orig)
	}
}

// TestPrefsExamplesDim: the examples in empty fields say "e.g." and are
// drawn dimmer than the theme's placeholders, between them and the field's
// background, so that they do not read as values.
func TestPrefsExamplesDim(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	s, c := f.p.servers, f.p.creds
	for name, e := range map[string]*formEntry{"label": s.label, "command": s.command, "args": s.args, "cwd": s.cwd,
		"env": s.env, "watch": s.watch, "scope": c.scope, "env var": c.envVar} {
		if !strings.HasPrefix(e.PlaceHolder, "e.g. ") {
			t.Errorf("the %s field's example %q does not say e.g.", name, e.PlaceHolder)
		}
	}
	tapButton(t, f.window.Canvas(), "Add") // empty fields: the examples show
	v := fyne.CurrentApp().Settings().ThemeVariant()
	base := theme.Current()
	var got color.Color
	for _, o := range test.LaidOutObjects(f.window.Content()) {
		if tx, ok := o.(*canvas.Text); ok && tx.Text == s.command.PlaceHolder {
			got = tx.Color
		}
	}
	if got == nil {
		t.Fatalf("the command field's example %q is not drawn", s.command.PlaceHolder)
	}
	ph, bg := base.Color(theme.ColorNamePlaceHolder, v), base.Color(theme.ColorNameInputBackground, v)
	between := func(x, a, b uint32) bool { return min(a, b) <= x && x <= max(a, b) }
	gr, gg, gb, _ := got.RGBA()
	pr, pg, pb, _ := ph.RGBA()
	br, bgg, bb, _ := bg.RGBA()
	if got == ph || !between(gr, pr, br) || !between(gg, pg, bgg) || !between(gb, pb, bb) {
		t.Errorf("placeholder colour %v in Preferences, theme's %v, background %v: want one between them", got, ph, bg)
	}
}

// TestPrefsGeneralUnsavedEditsAsk: closing the window with unsaved edits
// on the General tab asks first, like the Servers tab: Keep editing keeps
// the window and the edit, Save writes it and closes, Discard drops it
// (launch at login included) and closes; with nothing unsaved the window
// closes at once.
func TestPrefsGeneralUnsavedEditsAsk(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	g := f.p.general
	closed := 0
	f.window.SetOnClosed(func() { closed++ })
	question := func() bool { return f.window.Canvas().Overlays().Top() != nil }

	g.approve.SetText("2m")
	f.p.tabs.SelectIndex(0) // the question shows the tab it is about
	pressKey(f.window, fyne.KeyEscape)
	if !question() || closed != 0 {
		t.Fatalf("Escape with an unsaved approval timeout: question %v, closed %d; want a question", question(), closed)
	}
	if f.p.tabs.Selected() != g.item {
		t.Errorf("the question shows tab %q, want General", f.p.tabs.Selected().Text)
	}
	tapButton(t, f.window.Canvas(), "Keep editing")
	if question() || closed != 0 || g.approve.Text != "2m" {
		t.Errorf("after Keep editing: question %v, closed %d, field %q", question(), closed, g.approve.Text)
	}
	pressKey(f.window, fyne.KeyEscape)
	tapButton(t, f.window.Canvas(), "Save")
	if closed != 1 || !bytes.Contains(f.read(t), []byte(`"approvalTimeout": "2m0s"`)) {
		t.Errorf("after Save in the question: closed %d, file:\n%s", closed, f.read(t))
	}

	f = newPrefsFixture(t, prefsConfig)
	g = f.p.general
	closed = 0
	f.window.SetOnClosed(func() { closed++ })
	before := f.read(t)
	g.login.SetChecked(true)
	pressKey(f.window, fyne.KeyEscape)
	if !question() {
		t.Fatal("Escape with launch at login ticked but not saved closes without asking")
	}
	tapButton(t, f.window.Canvas(), "Discard")
	if closed != 1 || f.login.on || len(f.login.calls) != 0 || !bytes.Equal(f.read(t), before) {
		t.Errorf("after Discard: closed %d, login on %v (calls %v), file changed %v", closed, f.login.on, f.login.calls, !bytes.Equal(f.read(t), before))
	}

	f = newPrefsFixture(t, prefsConfig)
	closed = 0
	f.window.SetOnClosed(func() { closed++ })
	f.p.general.hold.SetText("not a duration")
	f.p.general.hold.SetText("") // typed and erased: nothing to save
	pressKey(f.window, fyne.KeyEscape)
	if question() || closed != 1 {
		t.Errorf("Escape with nothing unsaved: question %v, closed %d; want closed at once", question(), closed)
	}
}

// TestPrefsManagedFloors: with a managed policy (approvalAuthentication
// always, sandbox standard, inv's inventory_lookup always asks), the
// General tab says what is managed, and Preferences refuses to save
// approvalAuthentication below always or inventory_lookup as allow, with
// the reason; the file is not written. A change above the floors saves.
func TestPrefsManagedFloors(t *testing.T) {
	f := newPrefsFixture(t, `{"mcpServers":{"inv":{"command":"node","sandbox":"standard"}},"settings":{"approvalAuthentication":"always"}}`)
	f.p.deps.Managed = func() config.ManagedState {
		return config.ManagedState{File: "/etc/portcullis/managed.json", Policy: &config.Managed{
			ApprovalAuthentication: config.AuthAlways, Sandbox: config.SandboxStandard, AlwaysAsk: []string{"inv/inventory_lookup"}}}
	}
	f.p.reload()
	g := f.p.general
	c := f.window.Canvas()
	f.p.tabs.SelectIndex(2)
	if want := "Managed by your organisation (/etc/portcullis/managed.json): approvalAuthentication at least always; every server's sandbox at least standard; always ask: inv/inventory_lookup."; g.managed.Text != want {
		t.Errorf("General tab says %q, want %q", g.managed.Text, want)
	}
	if g.auth.Selected != config.AuthAlways {
		t.Errorf("approval authentication shows %q, want always", g.auth.Selected)
	}
	before := f.read(t)
	for _, v := range []string{config.AuthCredentials, config.AuthOff} {
		g.auth.SetSelected(v)
		tapButton(t, c, "Save")
		if !strings.Contains(f.p.status.Text, "refused by the managed policy") || !strings.Contains(f.p.status.Text, "floor always") ||
			f.p.status.Importance != widget.DangerImportance {
			t.Errorf("saving approvalAuthentication %s: status %q (importance %v), want a red refusal naming the floor", v, f.p.status.Text, f.p.status.Importance)
		}
		if !bytes.Equal(f.read(t), before) {
			t.Fatalf("saving approvalAuthentication %s below the floor wrote the file", v)
		}
	}
	g.revert()

	// A tool that always asks cannot be allowed.
	f.p.tabs.SelectIndex(0)
	s := f.p.servers
	s.edit("inv")
	for _, tr := range s.tools {
		if tr.name == "inventory_lookup" {
			tr.policy.SetSelected(string(config.PolicyAllow))
		}
	}
	tapButton(t, c, "Save")
	if !strings.Contains(f.p.status.Text, "refused by the managed policy") || !strings.Contains(f.p.status.Text, "always asks") {
		t.Errorf("saving inventory_lookup allow: status %q, want a refusal naming the managed policy", f.p.status.Text)
	}
	if !bytes.Equal(f.read(t), before) {
		t.Fatal("allowing a tool that always asks wrote the file")
	}
	// Above the floors: saved.
	for _, tr := range s.tools {
		if tr.name == "inventory_lookup" {
			tr.policy.SetSelected(string(config.PolicyDeny))
		}
	}
	tapButton(t, c, "Save")
	if got := f.load(t).Servers["inv"].Policy("inventory_lookup"); got != config.PolicyDeny {
		t.Errorf("after saving deny: inventory_lookup is %s in the file (status %q)", got, f.p.status.Text)
	}
}
