package ui

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/codediff"
	"github.com/portcullis/portcullis/core/ids"
)

type fakeCode map[ids.RequestID]codediff.Report

func (f fakeCode) CodeChanges(_ context.Context, id ids.RequestID) (codediff.Report, error) {
	r, ok := f[id]
	if !ok {
		return codediff.Report{}, errors.New("not pending")
	}
	return r, nil
}

// labelTexts are the texts of the labels laid out in o.
func labelTexts(o fyne.CanvasObject) []string {
	var out []string
	for _, x := range test.LaidOutObjects(o) {
		if l, ok := x.(*widget.Label); ok {
			out = append(out, l.Text)
		}
	}
	return out
}

// waitLabel waits (on the test driver) until a label of o holds want.
func waitLabel(t *testing.T, o func() fyne.CanvasObject, want string) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var got []string
		fyne.DoAndWait(func() { got = labelTexts(o()) })
		for _, l := range got {
			if strings.Contains(l, want) {
				return got
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no label holds %q; labels: %q", want, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// queueCode makes w fetch code reports only when the test calls the
// returned run: Fyne's test driver runs fyne.Do at once on the calling
// goroutine, so a fetch on a goroutine of its own would draw the card
// while the test does.
func queueCode(w *ApprovalWindow) (run func()) {
	var mu sync.Mutex
	var queued []func()
	w.codeAsync = func(f func()) {
		mu.Lock()
		defer mu.Unlock()
		queued = append(queued, f)
	}
	return func() {
		mu.Lock()
		fs := queued
		queued = nil
		mu.Unlock()
		for _, f := range fs {
			f()
		}
	}
}

// TestCardShowsCodeChanges: the card lists the files of the server's
// source tree changed since the approved code, and the diff dialog shows
// their lines; the tree's text is the server's, so a control character in
// a file name or a line is written out, never drawn raw.
func TestCardShowsCodeChanges(t *testing.T) {
	a := test.NewTempApp(t)
	f := newFakeApprovals(request("apr_1", 0, authz.Card{Reason: "new epoch", ServerLabel: "notes", CurrentEpoch: "01J000000000000000000EPOCHB", Tool: "write"}))
	w := newApprovalWindow(a, f, func() time.Time { return testNow }, slog.New(slog.DiscardHandler))
	w.code = fakeCode{"apr_1": {
		Label: "notes", Root: "/src/notes", Since: "01J000000000000000000EPOCHA", Epoch: "01J000000000000000000EPOCHB",
		Changes: []codediff.Change{
			{Path: "server.py", Kind: codediff.Modified, Added: 1, Diff: "--- a/server.py\n+++ b/server.py\n@@ -1 +1,2 @@\n import os\n+os.system('x')  # \x1b[2Jcalm\n"},
			{Path: "evil\x1b[31m.py", Kind: codediff.Added, Added: 1, Diff: "--- /dev/null\n+++ b/evil\x1b[31m.py\n@@ -0,0 +1 @@\n+pass\n"},
		},
	}}
	fetch := queueCode(w)
	fyne.DoAndWait(func() { w.sync(f.Pending()) })
	fetch()
	content := func() fyne.CanvasObject { return w.win.Content() }
	got := waitLabel(t, content, "2 files changed (+2 −0)")
	all := strings.Join(got, "\n")
	for _, want := range []string{"M server.py  +1 −0", `A evil\x1b[31m.py  +1 −0`, "since the code you approved for epoch"} {
		if !strings.Contains(all, want) {
			t.Errorf("card lacks %q:\n%s", want, all)
		}
	}
	if strings.ContainsRune(all, 0x1b) {
		t.Errorf("a raw escape reached the card: %q", all)
	}
	var diffButton *widget.Button
	fyne.DoAndWait(func() {
		for _, o := range test.LaidOutObjects(w.win.Content()) {
			if b, ok := o.(*widget.Button); ok && b.Text == "Show the code diff" {
				diffButton = b
			}
		}
	})
	if diffButton == nil {
		t.Fatal("no Show the code diff button")
	}
	fyne.DoAndWait(func() { test.Tap(diffButton) })
	var overlay []string
	fyne.DoAndWait(func() {
		if top := w.win.Canvas().Overlays().Top(); top != nil {
			overlay = labelTexts(top)
		}
	})
	text := strings.Join(overlay, "\n")
	if !strings.Contains(text, `+os.system('x')  # \x1b[2Jcalm`) || strings.ContainsRune(text, 0x1b) {
		t.Errorf("the diff dialog does not show the line escaped:\n%q", text)
	}
}

// heldCode answers once release is closed: the report arrives after the
// card was drawn and the window sized, as from a daemon still taking the
// snapshot.
type heldCode struct {
	fakeCode
	release chan struct{}
}

func (h heldCode) CodeChanges(ctx context.Context, id ids.RequestID) (codediff.Report, error) {
	<-h.release
	return h.fakeCode.CodeChanges(ctx, id)
}

// TestCodeReportResizesCard: a report arriving after the card popped up
// makes the window taller, so that its changed files and the diff button
// are seen without scrolling when the screen has room.
func TestCodeReportResizesCard(t *testing.T) {
	a := test.NewTempApp(t)
	f := newFakeApprovals(request("apr_1", 0, authz.Card{Reason: "new epoch", ServerLabel: "notes", CurrentEpoch: "01J000000000000000000EPOCHB", Tool: "write"}))
	w := newApprovalWindow(a, f, func() time.Time { return testNow }, slog.New(slog.DiscardHandler))
	var changes []codediff.Change
	for _, p := range []string{"server.py", "lib/a.py", "lib/b.py", "lib/c.py", "README.md"} {
		changes = append(changes, codediff.Change{Path: p, Kind: codediff.Modified, Added: 1, Diff: "--- a/" + p + "\n+++ b/" + p + "\n@@ -1 +1,2 @@\n x\n+y\n"})
	}
	held := heldCode{fakeCode: fakeCode{"apr_1": {Label: "notes", Root: "/src/notes", Since: "01J000000000000000000EPOCHA",
		Epoch: "01J000000000000000000EPOCHB", Changes: changes}}, release: make(chan struct{})}
	w.code = held
	fetch := queueCode(w)
	fyne.DoAndWait(func() { w.sync(f.Pending()) })
	var before float32
	fyne.DoAndWait(func() { before = w.win.Canvas().Size().Height })
	close(held.release)
	fetch()
	waitLabel(t, func() fyne.CanvasObject { return w.win.Content() }, "5 files changed")
	fyne.DoAndWait(func() {
		if h := w.win.Canvas().Size().Height; h <= before+0.5 {
			t.Errorf("the window stayed %v high after the code report arrived (%v before)", h, before)
		}
		var button *widget.Button
		for _, o := range test.LaidOutObjects(w.win.Content()) {
			if b, ok := o.(*widget.Button); ok && b.Text == "Show the code diff" {
				button = b
			}
		}
		if button == nil {
			t.Fatal("no Show the code diff button")
		}
		p, s := a.Driver().AbsolutePositionForObject(button), button.Size()
		if bottom := a.Driver().AbsolutePositionForObject(w.bottom).Y; p.Y+s.Height > bottom+0.5 {
			t.Errorf("the diff button ends at %v, below the card's scrolled middle (which ends at %v)", p.Y+s.Height, bottom)
		}
	})
}

// TestEscapeClosesDiffDenyingNothing: Escape over the diff dialog closes
// it, as over the window's other dialogs; the request behind it stays
// pending (a person closing the diff has not answered the card).
func TestEscapeClosesDiffDenyingNothing(t *testing.T) {
	a := test.NewTempApp(t)
	f := newFakeApprovals(request("apr_1", 0, authz.Card{Reason: "new epoch", ServerLabel: "notes", CurrentEpoch: "01J000000000000000000EPOCHB", Tool: "write"}))
	w := newApprovalWindow(a, f, func() time.Time { return testNow }, slog.New(slog.DiscardHandler))
	rep := codediff.Report{Label: "notes", Root: "/src/notes", Since: "01J000000000000000000EPOCHA", Epoch: "01J000000000000000000EPOCHB",
		Changes: []codediff.Change{{Path: "server.py", Kind: codediff.Modified, Added: 1, Diff: "--- a/server.py\n+++ b/server.py\n@@ -1 +1,2 @@\n x\n+y\n"}}}
	w.code = fakeCode{"apr_1": rep}
	queueCode(w) // the card's own report is not needed here
	fyne.DoAndWait(func() {
		w.sync(f.Pending())
		w.showDiff(rep)
		if w.win.Canvas().Overlays().Top() == nil {
			t.Fatal("the diff dialog is not shown")
		}
		typeKey(w, fyne.KeyEscape)
		if got := f.decisions(); len(got) != 0 {
			t.Errorf("Escape over the diff decided %+v; want nothing", got)
		}
		if top := w.win.Canvas().Overlays().Top(); top != nil {
			t.Errorf("the diff dialog stays after Escape: %v", top)
		}
		typeKey(w, fyne.KeyEscape) // now over the card: denies it
		if got := f.decisions(); len(got) != 1 || got[0].Choice != authz.Deny {
			t.Errorf("Escape over the card decided %+v; want a deny", got)
		}
	})
}
