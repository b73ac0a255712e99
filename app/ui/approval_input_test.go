package ui

import (
	"fmt"
	"slices"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/daemon"
)

// fakeInput answers Judge with what the test sets, counting the calls.
type fakeInput struct {
	v     daemon.WindowInput
	calls int
	by    []string // how each judged decision's button was activated
}

func (f *fakeInput) Judge(_ uint64, by string) daemon.WindowInput {
	f.calls++
	f.by = append(f.by, by)
	return f.v
}

// TestApprovalFromSyntheticInput: the window judges the press behind an
// approve button and hands that to the daemon; when the daemon refuses it
// (synthetic input), the card stays, shows why, and nothing is decided; a
// later click of the person's device approves. Deny is never judged.
func TestApprovalFromSyntheticInput(t *testing.T) {
	w, f := newTestWindow(t, request("apr_1", 0, rebuildCard()), request("apr_2", 1, rebuildCard()))
	in := &fakeInput{v: daemon.WindowInput{Origin: daemon.InputSynthetic, Device: "Virtual core XTEST pointer"}}
	w.input = in
	refusal := fmt.Errorf("%w: the window says so", daemon.ErrSyntheticInput)
	f.refuseInput = map[daemon.InputOrigin]error{daemon.InputSynthetic: refusal}

	test.Tap(w.approveRun)
	ids, cur := w.Queue()
	if len(f.decisions()) != 0 || !slices.Equal(ids, []string{"apr_1", "apr_2"}) || cur != 0 || !w.Visible() {
		t.Fatalf("after a synthetic click: decisions %+v, queue %v shown %d; want nothing decided, the card shown", f.decisions(), ids, cur)
	}
	if !w.notice.Visible() || w.notice.Text != refusal.Error() {
		t.Errorf("the card's notice %q (shown %v), want the refusal", w.notice.Text, w.notice.Visible())
	}
	test.Tap(w.approveOnce)
	if in.calls != 2 || len(f.decisions()) != 0 {
		t.Errorf("Approve once from synthetic input: %d judged, decisions %+v", in.calls, f.decisions())
	}
	// The person's own click.
	in.v = daemon.WindowInput{Origin: daemon.InputDevice, Device: "Logitech USB Optical Mouse"}
	test.Tap(w.approveOnce)
	if got := f.decisions(); len(got) != 1 || got[0].ID != "apr_1" || got[0].Choice != authz.ApproveOnce || len(f.inputs) != 1 || f.inputs[0] != in.v {
		t.Fatalf("after a device's click: decisions %+v, inputs %+v", got, f.inputs)
	}
	if w.notice.Visible() {
		t.Error("the notice of apr_1 stays on apr_2's card")
	}
	// Deny goes ahead whatever the press, and asks nothing.
	in.v = daemon.WindowInput{Origin: daemon.InputSynthetic}
	test.Tap(w.deny)
	if got := f.decisions(); len(got) != 2 || got[1].Choice != authz.Deny || in.calls != 3 {
		t.Errorf("deny: decisions %+v, judged %d times", got, in.calls)
	}
	// Each judgement was asked for a click (test.Tap is the pointer's tap).
	if !slices.Equal(in.by, []string{"button", "button", "button"}) {
		t.Errorf("judged by %q, want three clicks", in.by)
	}
}

// TestApprovalByKeyIsJudgedAsAKey: Space on the focused approve button
// asks the input check for a key press, not a click: a key the person
// typed into the window never answers for a click sent to it, nor the
// other way round (platform.JudgePresses).
func TestApprovalByKeyIsJudgedAsAKey(t *testing.T) {
	w, f := newTestWindow(t, request("apr_1", 0, rebuildCard()))
	in := &fakeInput{v: daemon.WindowInput{Origin: daemon.InputDevice, Device: "AT keyboard"}}
	w.input = in
	w.approveOnce.TypedKey(&fyne.KeyEvent{Name: fyne.KeySpace})
	if !slices.Equal(in.by, []string{"key"}) || len(f.decisions()) != 1 {
		t.Fatalf("Space on Approve once: judged by %q, decisions %+v; want one key judgement and the decision", in.by, f.decisions())
	}
}

// TestApprovalCardSaysInputUnknown: where the window cannot tell the
// person's presses, every card says so (and what approving asks for); a
// window without an input check hands the daemon an unknown press.
func TestApprovalCardSaysInputUnknown(t *testing.T) {
	w, f := newTestWindow(t)
	w.inputNote = func() string {
		return "This window cannot tell your clicks from synthetic input (macOS): approving asks LocalAuthentication to confirm it is you."
	}
	f.pending = []authz.Request{request("apr_1", 0, rebuildCard())}
	w.sync(f.Pending())
	if !w.noteLabel.Visible() || w.noteLabel.Text != w.inputNote() {
		t.Errorf("the card's note %q (shown %v)", w.noteLabel.Text, w.noteLabel.Visible())
	}
	test.Tap(w.approveOnce)
	if len(f.inputs) != 1 || f.inputs[0].Origin != daemon.InputUnknown {
		t.Errorf("inputs %+v, want one unknown", f.inputs)
	}
}
