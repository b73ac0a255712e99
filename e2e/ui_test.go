//go:build ci

package e2e

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/app"
	"github.com/portcullis/portcullis/app/ui"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestApprovalWindowAfterRebuild runs the menu-bar app in this process (the
// real daemon, Fyne's headless driver) with a real go-sdk agent connected
// through `portcullis connect`. The agent's first call to publish_preview
// waits for approval: the approval window appears and the test presses
// "Approve for this run". Then the publish server is rebuilt as revision B:
// a new epoch, whose old grant is void. The agent refreshes its tools and
// calls again; the call is held, the window shows the new card (old → new
// epoch, catalog diff), the test presses "Approve for this run" once more,
// and the held call completes on the new process. Quit from the tray menu
// stops the daemon; the agent's shim waits for its next request.
func TestApprovalWindowAfterRebuild(t *testing.T) {
	home := newHome(t)
	binDir := t.TempDir()
	callLog := filepath.Join(t.TempDir(), "calls.jsonl")
	bin, _ := buildPublish(t, binDir, publishRevA)
	if err := home.AddServer(testContext(t, 30*time.Second), pubLabel,
		[]string{"--cwd", binDir, "--env", "PUBLISH_CALL_LOG=" + callLog, "--sandbox", "off"}, bin); err != nil { // the server's own pid tells the epochs apart
		t.Fatal(err)
	}

	u := runAppUI(t, home)
	tray := u.Tray

	agent := connectListChanged(t, home, pubLabel, "")
	if _, err := agent.Session.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}

	// First use: held until the person approves in the window.
	first := callAsync(t, agent.Session, "publish_preview", map[string]any{"branch": "main"})
	card := pressInWindow(t, tray, "Approve for this run")
	if !strings.Contains(card, "wants to run `publish_preview` on "+pubLabel+" — first use in this agent run") {
		t.Errorf("first approval card does not say why:\n%s", card)
	}
	if got := awaitText(t, first); got != "revision A published branch main to preview" {
		t.Fatalf("first call: %q", got)
	}
	before := waitRun(t, home, agent.PID(), 10*time.Second, "ready", readyOn(""))

	// Rebuild: a new epoch; the agent refreshes, calls, and is held.
	buildPublish(t, binDir, publishRevB)
	after := waitRun(t, home, agent.PID(), buildWait, "ready on a new epoch", readyOn(string(before.Epoch)))
	agent.waitListChanged(t, 1, 10*time.Second)
	if _, err := agent.Session.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	second := callAsync(t, agent.Session, "publish_preview", map[string]any{"branch": "main"})
	card = pressInWindow(t, tray, "Approve for this run")
	for _, want := range []string{"new code since you last approved", before.Epoch.Short() + " → " + after.Epoch.Short() + " (new code)", "Tools changed", "target"} {
		if !strings.Contains(card, want) {
			t.Errorf("approval card after the rebuild lacks %q:\n%s", want, card)
		}
	}
	if got := awaitText(t, second); got != "revision B published branch main to preview" {
		t.Fatalf("held call after approval: %q", got)
	}
	calls := readCalls(t, callLog)
	if len(calls) != 2 || calls[1].Revision != "B" || calls[1].PID != after.PID {
		t.Errorf("call log %+v: want the second call on revision B, pid %d", calls, after.PID)
	}

	// Quit from the menu: the daemon stops. The agent's shim stays, to
	// start a daemon again at the agent's next request, never while the
	// agent is idle: a quit is not undone behind the person's back.
	if err := u.Quit(t); err != nil {
		t.Error(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- agent.Session.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := home.Run(testContext(t, 10*time.Second), "status"); err != nil {
			break // no daemon answers
		}
		if time.Now().After(deadline) {
			t.Fatal("a daemon still answers 30 s after Quit")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // time for a shim that would wrongly start a daemon while idle
	select {
	case err := <-closed:
		t.Errorf("the agent's session ended with the app (%v): its shim should wait for the next request", err)
	default:
	}
	if _, err := home.Run(testContext(t, 10*time.Second), "status"); err == nil {
		t.Error("a daemon answers after Quit although the agent sent nothing: the shim started one while idle")
	}
}

// uiApp is the menu-bar app run in this process (Fyne's test driver).
type uiApp struct {
	Tray  *ui.Tray
	ended chan error
	logs  *harness.SyncBuffer
	quit  sync.Once
	err   error
}

// runAppUI runs the menu-bar app on home's data directory until Quit or the
// test's end (which quits it if the test did not, resets this process's
// child-subreaper flag, which the app's daemon sets, and logs the app's
// output when the test failed), once its daemon listens.
func runAppUI(t *testing.T, home *harness.Home) *uiApp {
	t.Helper()
	t.Setenv(paths.EnvHome, home.Dir)
	dirs, err := paths.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	u := &uiApp{ended: make(chan error, 1), logs: &harness.SyncBuffer{}}
	a := &app.App{Dirs: dirs, Stdin: strings.NewReader(""), Stdout: u.logs, Stderr: u.logs}
	fa := test.NewTempApp(t)
	trays := make(chan *ui.Tray, 1)
	go func() { u.ended <- a.RunUI(t.Context(), fa, func(tr *ui.Tray) { trays <- tr }) }()
	select {
	case u.Tray = <-trays:
	case err := <-u.ended:
		t.Fatalf("the app ended before its tray existed: %v\n%s", err, u.logs)
	case <-time.After(30 * time.Second):
		t.Fatal("no tray within 30s")
	}
	t.Cleanup(func() {
		if err := u.Quit(t); err != nil {
			t.Error(err)
		}
		if err := endSubreaper(); err != nil {
			t.Errorf("the test process stays a child subreaper: %v", err)
		}
		if t.Failed() {
			t.Logf("app log:\n%s", u.logs)
		}
	})
	waitSocket(t, home)
	return u
}

// Quit quits the app from its menu (once) and waits up to 60 s for RunUI
// to return; the error says what went wrong.
func (u *uiApp) Quit(t *testing.T) error {
	u.quit.Do(func() {
		quitApp(t, u.Tray)
		select {
		case err := <-u.ended:
			if err != nil {
				u.err = fmt.Errorf("RunUI after Quit: %w", err)
			}
		case <-time.After(60 * time.Second):
			u.err = errors.New("the app did not stop within 60s of Quit")
		}
	})
	return u.err
}

// quitApp quits from the menu; with an agent connected the app asks
// first, and the test answers "Quit and end them".
func quitApp(t *testing.T, tray *ui.Tray) {
	t.Helper()
	fyne.DoAndWait(func() {
		q := tray.Menu().Items[len(tray.Menu().Items)-1]
		if !q.IsQuit {
			t.Errorf("last menu item %q is not Quit", q.Label)
		}
		q.Action()
		if w := tray.QuitConfirmation(); w != nil {
			for _, o := range test.LaidOutObjects(w.Content()) {
				if b, ok := o.(*widget.Button); ok && b.Text == "Quit and end them" {
					test.Tap(b)
				}
			}
		}
	})
}

// waitSocket waits until the in-process daemon answers `portcullis status`,
// so that `portcullis connect` never starts a daemon of its own.
func waitSocket(t *testing.T, h *harness.Home) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := h.Status(testContext(t, 10*time.Second)); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the daemon did not answer within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type callResult struct {
	res *mcp.CallToolResult
	err error
}

func callAsync(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any) <-chan callResult {
	ch := make(chan callResult, 1)
	ctx := testContext(t, 2*time.Minute)
	go func() {
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		ch <- callResult{res, err}
	}()
	return ch
}

func awaitText(t *testing.T, ch <-chan callResult) string {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("call: %v", r.err)
		}
		if r.res.IsError {
			t.Fatalf("call: tool error %q", resultText(r.res))
		}
		return resultText(r.res)
	case <-time.After(60 * time.Second):
		t.Fatal("the held call did not complete within 60s of the approval")
		return ""
	}
}

// pressInWindow waits until the approval window shows a request, returns
// the text of its card, and taps the button labelled label, again while the
// request stays (approve buttons ignore clicks for a moment after a card
// appears, as a person's double click would be).
func pressInWindow(t *testing.T, tray *ui.Tray, label string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var text, shown string
		var btn *widget.Button
		fyne.DoAndWait(func() {
			ids, cur := tray.Approval.Queue()
			if !tray.Approval.Visible() || len(ids) == 0 {
				return
			}
			shown = ids[cur]
			btn = tray.Approval.Button(label)
			if d := tray.Approval.Button(ui.DetailsText); d != nil {
				test.Tap(d) // unfold the Details: epochs and digests
			}
			var parts []string
			for _, o := range test.LaidOutObjects(tray.Approval.Window().Content()) {
				switch w := o.(type) {
				case *widget.Label:
					parts = append(parts, w.Text)
				case *widget.RichText:
					parts = append(parts, w.String())
				case *widget.Check:
					parts = append(parts, w.Text)
				}
			}
			text = strings.Join(parts, "\n")
		})
		if btn != nil {
			for time.Now().Before(deadline) {
				fyne.DoAndWait(func() { test.Tap(btn) })
				gone := false
				fyne.DoAndWait(func() {
					ids, _ := tray.Approval.Queue()
					gone = !slices.Contains(ids, shown)
				})
				if gone {
					return text
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Fatalf("pressing %s did not decide request %s within 30s", label, shown)
		}
		if time.Now().After(deadline) {
			t.Fatal(errors.New("the approval window did not show a request with " + label + " within 30s"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
