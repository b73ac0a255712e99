package ui

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/daemon"
)

// linked serves deps on one end of a pipe and returns the window
// process's side of it.
func linked(t *testing.T, deps LinkDeps) *Remote {
	t.Helper()
	a, b := net.Pipe()
	go ServeLink(a, deps)
	r := NewRemote(b)
	t.Cleanup(func() { r.Close() })
	return r
}

// The window's decisions reach the app's approvals through the link as
// they were made, and the app's refusals come back as the errors the
// window tells apart; pending requests, commands and events flow the
// other way.
func TestLinkCarriesDecisionsAndEvents(t *testing.T) {
	req := request("apr_1", 0, authz.Card{AgentRun: "run1", ServerLabel: "pub", Tool: "publish"})
	fa := newFakeApprovals(req)
	batches := make(chan Batch, 1)
	r := linked(t, LinkDeps{
		Daemon:    newFakeDaemon(),
		Approvals: fa,
		Next: func(closed <-chan struct{}) Batch {
			select {
			case b := <-batches:
				return b
			case <-closed:
				return Batch{}
			}
		},
	})
	if got := r.Pending(); len(got) != 1 || got[0].ID != "apr_1" || got[0].Card.Tool != req.Card.Tool {
		t.Fatalf("Pending over the link = %+v, want apr_1", got)
	}
	if err := r.Decide("apr_1", authz.Decision{Choice: authz.ApproveOnce, By: "app"}); err != nil {
		t.Fatal(err)
	}
	got := fa.decisions()
	if len(got) != 1 || got[0].ID != "apr_1" || got[0].Choice != authz.ApproveOnce || got[0].By != "app" {
		t.Fatalf("decisions made through the link = %+v, want apr_1 approved once by the app", got)
	}
	if err := r.Decide("apr_1", authz.Decision{Choice: authz.Deny, By: "app"}); !errors.Is(err, authz.ErrNoRequest) {
		t.Fatalf("Decide of a request no longer pending = %v, want ErrNoRequest", err)
	}
	events, stop := r.Subscribe()
	defer stop()
	changes, stopChanges := r.Changes()
	defer stopChanges()
	go func() { _ = r.Run() }()
	batches <- Batch{Changed: true, Events: []authz.Event{{Kind: authz.EventResolved, Request: req}}, Commands: []Command{{Op: CmdServer, Server: "pub"}}}
	select {
	case ev := <-events:
		if ev.Kind != authz.EventResolved || ev.Request.ID != "apr_1" {
			t.Fatalf("event over the link = %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event over the link")
	}
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Fatal("no change over the link")
	}
	select {
	case c := <-r.Commands():
		if c.Op != CmdServer || c.Server != "pub" {
			t.Fatalf("command over the link = %+v", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no command over the link")
	}
}

// Preferences in the window process edit the configuration in force and
// the app puts the result in force, refusing an edit made from another
// configuration than the one in force.
func TestLinkEditsFromTheConfigurationInForce(t *testing.T) {
	var gotBase string
	var gotCfg *config.Config
	r := linked(t, LinkDeps{
		Daemon:    newFakeDaemon(),
		Approvals: newFakeApprovals(),
		ConfigState: func() daemon.ConfigState {
			return daemon.ConfigState{File: "config.json", Config: []byte(`{"mcpServers":{}}`), Digest: "sha256:abc"}
		},
		EditFrom: func(base string, edited []byte, _ daemon.WindowInput) (*config.Config, error) {
			gotBase = base
			c, err := config.Parse(edited, "edited")
			gotCfg = c
			return c, err
		},
	})
	_, err := r.Edit(0, func(c *config.Config) error {
		return c.AddServer("pub", config.Server{Command: "/bin/true"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if gotBase != "sha256:abc" || gotCfg == nil || gotCfg.Servers["pub"].Command != "/bin/true" {
		t.Fatalf("edit reached the app from %q as %+v; want from sha256:abc with server pub", gotBase, gotCfg)
	}
}
