package ui

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"image"
	"strings"
	"sync"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
	qrcode "github.com/skip2/go-qrcode"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/daemon"
)

const testKey = "PCVK1-0001-ABCDEFGHIJKLMNOPQRSTUVWXYZ234567ABCDEFGHIJKLMNOPQRSTUV"

// sameImage reports whether a and b have the same size and pixels.
func sameImage(a, b image.Image) bool {
	if a.Bounds() != b.Bounds() {
		return false
	}
	for y := a.Bounds().Min.Y; y < a.Bounds().Max.Y; y++ {
		for x := a.Bounds().Min.X; x < a.Bounds().Max.X; x++ {
			r1, g1, b1, a1 := a.At(x, y).RGBA()
			r2, g2, b2, a2 := b.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 || a1 != a2 {
				return false
			}
		}
	}
	return true
}

// TestKeyWindow: the window shows the key's text and a QR code made from
// exactly that text; "I wrote it down" closes it; closing otherwise asks
// first, and "Keep it open" keeps it.
func TestKeyWindow(t *testing.T) {
	a := test.NewTempApp(t)
	k, err := showKeyWindow(a, testKey, daemon.AuthStatus{Mode: "cli", Mechanism: "polkit", Available: true, OSAuthenticated: true, Meaning: "Approvals are OS-authenticated: …"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.ReplaceAll(k.key.Text, "\n", ""); got != testKey {
		t.Errorf("the window shows the key %q, want %q", k.key.Text, testKey)
	}

	// The key and the whole QR code are in view without scrolling (a
	// window sized to its scrolling content's minimum showed neither).
	canvasSize := k.win.Canvas().Size()
	for name, o := range map[string]fyne.CanvasObject{"key": k.key, "QR code": k.qr} {
		pos := a.Driver().AbsolutePositionForObject(o)
		if o.Size().Height <= 0 || pos.Y+o.Size().Height > canvasSize.Height {
			t.Errorf("the %s is not in view: at y %v, height %v, in a window %v high", name, pos.Y, o.Size().Height, canvasSize.Height)
		}
	}
	want, err := qrcode.New(testKey, qrcode.Medium)
	if err != nil {
		t.Fatal(err)
	}
	if !sameImage(k.qr.Image, want.Image(keyQRSize)) {
		t.Error("the QR code shown is not the QR code of the key text")
	}
	other, _ := qrcode.New(testKey+"X", qrcode.Medium)
	if sameImage(k.qr.Image, other.Image(keyQRSize)) {
		t.Error("the QR code of another key is the same: the comparison proves nothing")
	}

	closed := false
	k.win.SetOnClosed(func() { closed = true })
	k.win.Canvas().OnTypedKey()(&fyne.KeyEvent{Name: fyne.KeyEscape})
	if closed || k.win.Canvas().Overlays().Top() == nil {
		t.Fatalf("Escape: closed %v, question shown %v; want a question, the window open", closed, k.win.Canvas().Overlays().Top() != nil)
	}
	tapButton(t, k.win.Canvas(), "Keep it open")
	if closed {
		t.Fatal("Keep it open closed the window")
	}
	test.Tap(k.done)
	if !closed {
		t.Error("I wrote it down did not close the window")
	}
}

// TestKeyWindowApprovals: the first-run window says plainly whether
// approvals are OS-authenticated, the mode in force, why not, what that
// means and the step that turns it on.
func TestKeyWindowApprovals(t *testing.T) {
	a := test.NewTempApp(t)
	st := daemon.AuthStatus{Mode: "off", Mechanism: "polkit", Reason: daemon.AuthReasonNoAction,
		Unavailable: "polkit does not know the action dev.portcullis.approve: it is not installed in /usr/share/polkit-1/actions; install it with: sudo install -m 0644 /p/share/polkit-1/actions/dev.portcullis.approve.policy /usr/share/polkit-1/actions/",
		Meaning:     "Approvals are not OS-authenticated (polkit does not know Portcullis's action (it is not installed)): they resist only code that stays in the process trees Portcullis sees."}
	k, err := showKeyWindow(a, testKey, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Approvals: NOT OS-authenticated (settings.approvalAuthentication off, the default)", st.Meaning, "Why: " + st.Unavailable} {
		if !strings.Contains(k.auth.Text, w) {
			t.Errorf("the window says %q, lacking %q", k.auth.Text, w)
		}
	}
	if k.auth.Importance != widget.WarningImportance {
		t.Errorf("importance %v, want a warning", k.auth.Importance)
	}
	st = daemon.AuthStatus{Mode: "cli", Mechanism: "polkit", Available: true, OSAuthenticated: true, Meaning: "Approvals are OS-authenticated: every approval …"}
	if got, want := approvalsText(st), "Approvals: OS-authenticated by polkit (settings.approvalAuthentication cli, the default). "+st.Meaning; got != want {
		t.Errorf("approvalsText = %q, want %q", got, want)
	}
}

// keysDaemon is a fake daemon whose audit log is sealed once its keys are
// set up.
type keysDaemon struct {
	*fakeDaemon
	mu     sync.Mutex
	sealed bool
	calls  int
	notYet int // calls answered ErrKeysNotYet first
}

func (d *keysDaemon) Status() daemon.StatusReport {
	rep := d.fakeDaemon.Status()
	d.mu.Lock()
	rep.Audit.Sealed = d.sealed
	d.mu.Unlock()
	return rep
}

func (d *keysDaemon) setup() (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if d.notYet > 0 {
		d.notYet--
		return "", fmt.Errorf("%w: starting", ErrKeysNotYet)
	}
	if d.sealed {
		return "", nil
	}
	d.sealed = true
	return testKey, nil
}

// TestTraySetsUpKeysOnce: on first start (a log with no sealing keys, not
// open at the first try) the tray sets the keys up and shows the key
// window, once.
func TestTraySetsUpKeysOnce(t *testing.T) {
	a := test.NewTempApp(t)
	d := &keysDaemon{fakeDaemon: newFakeDaemon(), notYet: 1}
	tr := NewTray(a, Options{Daemon: d, Approvals: newFakeApprovals(), Notifier: &fakeNotifier{added: make(chan struct{}, 4)},
		SetupKeys: d.setup, Quit: func() {}})
	refreshed := make(chan struct{}, 64)
	tr.refreshed = func() { refreshed <- struct{}{} }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.After(10 * time.Second)
	for {
		var k *KeyWindow
		runFyne(func() { k = tr.Keys() })
		if k != nil {
			if strings.ReplaceAll(k.key.Text, "\n", "") != testKey {
				t.Errorf("key window shows %q", k.key.Text)
			}
			break
		}
		select {
		case <-refreshed:
		case <-deadline:
			t.Fatal("the key window never showed")
		case <-time.After(1500 * time.Millisecond): // the tray retries on its one-second tick
		}
	}
	d.ch <- struct{}{} // more status changes: no second setup
	<-refreshed
	d.mu.Lock()
	calls := d.calls
	d.mu.Unlock()
	if calls != 2 {
		t.Errorf("SetupKeys called %d times, want 2 (not open yet, then set up)", calls)
	}
}

// TestKeyLines: the key is shown in lines that break between its groups,
// each line but the last ending in its group's dash (the label broke a
// line inside a group, which read as two groups), and the text as shown
// reads back as the key.
func TestKeyLines(t *testing.T) {
	key := audit.VerificationKey{Epoch: 1, Public: ed25519.PublicKey(make([]byte, ed25519.PublicKeySize))}.String()
	shown := keyLines(key)
	lines := strings.Split(shown, "\n")
	if len(lines) < 2 {
		t.Fatalf("the key %q is on one line: the label would break it inside a group", shown)
	}
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasSuffix(l, "-") {
			t.Errorf("line %q of the key ends inside a group", l)
		}
	}
	if got := strings.ReplaceAll(shown, "\n", ""); got != key {
		t.Errorf("lines %q joined are %q, want %q", lines, got, key)
	}
	if vk, err := audit.ParseVerificationKey(shown); err != nil || vk.String() != key {
		t.Errorf("the key as shown reads back as %v, %v", vk, err)
	}
}
