//go:build linux

package platform

import (
	"bufio"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"
)

// notifyBus starts a dbus-daemon of its own for t (a real session bus that
// nobody else uses) and returns its address. It skips when dbus-daemon is
// not installed (scripts/test-deps.sh installs it).
func notifyBus(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("skipping: dbus-daemon not installed")
	}
	sock := filepath.Join(t.TempDir(), "bus")
	cmd := exec.Command(bin, "--session", "--nofork", "--print-address=1", "--address=unix:path="+sock)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(l)
	}()
	select {
	case addr := <-line:
		if addr == "" {
			t.Fatal("dbus-daemon printed no address")
		}
		return addr
	case <-time.After(10 * time.Second):
		t.Fatal("dbus-daemon did not start within 10s")
		return ""
	}
}

// fakeNotifications is a notification server (org.freedesktop.Notifications,
// Desktop Notifications Specification 1.2) on a real bus: it records Notify
// calls and emits signals when the test says so.
type fakeNotifications struct {
	conn   *dbus.Conn
	mu     sync.Mutex
	got    []notifyCall // guarded by mu
	closed []uint32     // guarded by mu; CloseNotification calls
}

type notifyCall struct {
	App, Summary, Body string
	Actions            []string
	Replaces           uint32
}

func (f *fakeNotifications) Notify(app string, replaces uint32, icon, summary, body string, actions []string, hints map[string]dbus.Variant, timeout int32) (uint32, *dbus.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, notifyCall{app, summary, body, actions, replaces})
	if replaces != 0 {
		return replaces, nil // the spec: the replaced notification keeps its id
	}
	return uint32(len(f.got)), nil
}

func (f *fakeNotifications) CloseNotification(id uint32) *dbus.Error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = append(f.closed, id)
	return nil
}

func (f *fakeNotifications) closedIDs() []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint32(nil), f.closed...)
}

func (f *fakeNotifications) calls() []notifyCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]notifyCall(nil), f.got...)
}

func connect(t *testing.T, addr string) *dbus.Conn {
	t.Helper()
	c, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func startFakeNotifications(t *testing.T, addr string) *fakeNotifications {
	t.Helper()
	f := &fakeNotifications{conn: connect(t, addr)}
	if err := f.conn.Export(f, notifyPath, notifyIface); err != nil {
		t.Fatal(err)
	}
	reply, err := f.conn.RequestName(notifyName, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("owning %s: reply %v, %v", notifyName, reply, err)
	}
	return f
}

func emit(t *testing.T, c *dbus.Conn, signal string, args ...any) {
	t.Helper()
	if err := c.Emit(notifyPath, notifyIface+"."+signal, args...); err != nil {
		t.Fatal(err)
	}
}

// clicked returns a click handler that counts into ch.
func clicked(ch chan string, name string) func() { return func() { ch <- name } }

func waitClick(t *testing.T, ch chan string) string {
	t.Helper()
	select {
	case n := <-ch:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no click handler ran within 10s")
		return ""
	}
}

func TestNotifierClick(t *testing.T) {
	addr := notifyBus(t)
	srv := startFakeNotifications(t, addr)
	n := NewNotifier(NotifierOptions{Address: addr})
	t.Cleanup(func() { n.Close() })
	clicks := make(chan string, 8)

	for _, name := range []string{"one", "two", "three", "four"} {
		if err := n.Notify("apr_"+name, "Portcullis: approval needed", "body "+name, clicked(clicks, name)); err != nil {
			t.Fatal(err)
		}
	}
	want := notifyCall{App: "Portcullis", Summary: "Portcullis: approval needed", Body: "body one",
		Actions: []string{"default", "Review", "review", "Review"}}
	if d := cmp.Diff(want, srv.calls()[0]); d != "" {
		t.Errorf("Notify call (-want +got):\n%s", d)
	}

	// A click on notification 1 (the "default" action) runs its handler.
	emit(t, srv.conn, "ActionInvoked", uint32(1), "default")
	if got := waitClick(t, clicks); got != "one" {
		t.Fatalf("clicked %q, want one", got)
	}
	// Another bus client forging ActionInvoked for notification 2 is
	// ignored; notification 2 closed by the server forgets its handler; an
	// unknown action is ignored; the Review button of notification 3 runs
	// its handler, once.
	forger := connect(t, addr)
	emit(t, forger, "ActionInvoked", uint32(2), "default")
	emit(t, srv.conn, "NotificationClosed", uint32(2), uint32(2))
	emit(t, srv.conn, "ActionInvoked", uint32(2), "default")
	emit(t, srv.conn, "ActionInvoked", uint32(4), "other")
	emit(t, srv.conn, "ActionInvoked", uint32(1), "default") // already clicked
	emit(t, srv.conn, "ActionInvoked", uint32(3), "review")
	emit(t, srv.conn, "ActionInvoked", uint32(3), "default")
	if got := waitClick(t, clicks); got != "three" {
		t.Fatalf("clicked %q, want three", got)
	}
	emit(t, srv.conn, "ActionInvoked", uint32(4), "default")
	if got := waitClick(t, clicks); got != "four" {
		t.Fatalf("clicked %q, want four (a forged, closed, repeated or unknown action ran a handler)", got)
	}
}

func TestNotifierNoServer(t *testing.T) {
	addr := notifyBus(t)
	n := NewNotifier(NotifierOptions{Address: addr})
	t.Cleanup(func() { n.Close() })
	err := n.Notify("k", "t", "b", func() {})
	if !errors.Is(err, ErrNoNotifications) {
		t.Fatalf("Notify without a notification server: %v, want ErrNoNotifications", err)
	}
}

// TestNotifierWithdraw: withdrawing a key closes its notification on the
// server (CloseNotification) and drops its click handler; a second
// notification under a key replaces the first; withdrawing an unknown key,
// or one already withdrawn, sends nothing.
func TestNotifierWithdraw(t *testing.T) {
	addr := notifyBus(t)
	srv := startFakeNotifications(t, addr)
	n := NewNotifier(NotifierOptions{Address: addr})
	t.Cleanup(func() { n.Close() })
	clicks := make(chan string, 8)

	if err := n.Notify("apr_1", "t", "one", clicked(clicks, "one")); err != nil { // id 1
		t.Fatal(err)
	}
	if err := n.Notify("apr_2", "t", "two", clicked(clicks, "two")); err != nil { // id 2
		t.Fatal(err)
	}
	if err := n.Notify("apr_2", "t", "two again", clicked(clicks, "two again")); err != nil { // replaces 2
		t.Fatal(err)
	}
	if got := srv.calls()[2].Replaces; got != 2 {
		t.Errorf("the second notification of apr_2 replaces %d, want 2", got)
	}
	for _, k := range []string{"apr_1", "apr_1", "unknown"} {
		if err := n.Withdraw(k); err != nil {
			t.Fatalf("Withdraw(%s): %v", k, err)
		}
	}
	if d := cmp.Diff([]uint32{1}, srv.closedIDs()); d != "" {
		t.Errorf("CloseNotification calls (-want +got):\n%s", d)
	}
	// A click on the withdrawn notification (a server that shows it
	// still) runs nothing; one on apr_2 runs its latest handler.
	emit(t, srv.conn, "ActionInvoked", uint32(1), "default")
	emit(t, srv.conn, "ActionInvoked", uint32(2), "default")
	if got := waitClick(t, clicks); got != "two again" {
		t.Fatalf("clicked %q, want \"two again\"", got)
	}
	if err := n.Withdraw("apr_2"); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]uint32{1}, srv.closedIDs()); d != "" {
		t.Errorf("a clicked notification (the server closes it) was closed again (-want +got):\n%s", d)
	}
}
