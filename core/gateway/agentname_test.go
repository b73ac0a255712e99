package gateway

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// nameAtLaunch starts a bubble whose Launch asks the session for the
// agent's name first, waiting up to wait (as the daemon's launch card
// does), and sends what it got on the returned channel.
func nameAtLaunch(t *testing.T, wait time.Duration) (*rig, <-chan string) {
	t.Helper()
	names := make(chan string, 4)
	// The launch begins before newBubble returns: it gets the rig through
	// a channel (a variable assigned after would be a data race).
	rigs := make(chan *rig, 1)
	r := newBubble(t, func(o *Options) {
		launch := o.Launch
		o.Launch = func(ctx context.Context) (*Epoch, error) {
			r := <-rigs
			rigs <- r
			names <- r.sess.AgentName(ctx, wait)
			return launch(ctx)
		}
	})
	rigs <- r
	return r, names
}

// TestAgentNameWaitsForTheHandshake: the first launch starts as the agent
// connects, before its initialize is read; a launch that names the agent
// (the card of credentials at launch) gets the clientInfo's title once the
// initialize arrives, and "" after its wait when the agent sends nothing.
func TestAgentNameWaitsForTheHandshake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, names := nameAtLaunch(t, time.Minute)
		synctest.Wait()
		select {
		case n := <-names:
			t.Fatalf("AgentName returned %q before the agent sent anything", n)
		default:
		}
		r.agent.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"claude-code","title":"Claude Code","version":"2"}}}`)
		synctest.Wait()
		select {
		case n := <-names:
			if n != "Claude Code" {
				t.Errorf("AgentName = %q, want the clientInfo title %q", n, "Claude Code")
			}
		default:
			t.Fatal("AgentName still waits after the agent's initialize")
		}
		r.agent.wait(0, 10*time.Second)
	})
	synctest.Test(t, func(t *testing.T) {
		_, names := nameAtLaunch(t, 2*time.Second)
		start := time.Now()
		if n := <-names; n != "" {
			t.Errorf("AgentName = %q with no handshake, want \"\"", n)
		}
		if d := time.Since(start); d < 2*time.Second {
			t.Errorf("AgentName returned after %v, before its 2s wait", d)
		}
	})
}
