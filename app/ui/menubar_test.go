package ui

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/authz"
)

// The menu bar of the app process shows no window itself: a request
// raised is announced, and its notification, the menu's entries and a
// quit with agent runs connected ask the window process (Open) for the
// window, naming what to show.
func TestMenuBarAsksTheWindowProcess(t *testing.T) {
	fa := newFakeApprovals()
	fd := newFakeDaemon()
	notes := &fakeNotifier{added: make(chan struct{}, 4)}
	var mu sync.Mutex
	var opened []Command
	m := NewMenuBar(MenuBarOptions{
		Daemon: fd, Approvals: fa, Notifier: notes, NoSystemTray: true,
		Open: func(c Command) {
			mu.Lock()
			opened = append(opened, c)
			mu.Unlock()
		},
		Quit: func() { t.Error("Quit with nothing asked") },
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	defer func() { cancel(); <-done }()

	r := request("apr_1", 0, authz.Card{AgentRun: "run1", ServerLabel: "pub", Tool: "publish"})
	fa.mu.Lock()
	fa.pending = append(fa.pending, r)
	fa.mu.Unlock()
	fa.ch <- authz.Event{Kind: authz.EventRaised, Request: r}
	select {
	case <-notes.added:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification for the raised request")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.ContainsFunc(m.Entries(), func(e menuEntry) bool { return e.Kind == entryApprovals && !e.Disabled }) {
		if time.Now().After(deadline) {
			t.Fatalf("menu after the request: %+v, want an enabled approvals entry", m.Entries())
		}
		time.Sleep(10 * time.Millisecond)
	}
	notes.all()[0].click()
	for _, e := range m.Entries() {
		if e.Kind == entryApprovals || e.Kind == entryPrefs || e.Kind == entryAudit {
			m.action(e)()
		}
	}
	m.action(menuEntry{Kind: entryServer, Server: "pub"})()
	want := []Command{{Op: CmdRequest, Request: "apr_1"}, {Op: CmdApprovals}, {Op: CmdPrefs}, {Op: CmdAudit}, {Op: CmdServer, Server: "pub"}}
	mu.Lock()
	got := slices.Clone(opened)
	mu.Unlock()
	if !slices.EqualFunc(got, want, func(a, b Command) bool { return a.Op == b.Op && a.Request == b.Request && a.Server == b.Server }) {
		t.Fatalf("asked of the window process: %+v, want %+v", got, want)
	}
}
