package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/control"
)

// oneRun connects to label, sends line, reads its answer and leaves; it
// returns once the daemon has forgotten the run.
func oneRun(t *testing.T, d *Daemon, socket, label, line string) {
	t.Helper()
	c, err := control.Connect(socket, label, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Reader.ReadString('\n'); err != nil {
		t.Fatalf("no answer to %s: %v", line, err)
	}
	c.Close()
	run := string(c.Reply.Run)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rep := d.Status()
		live := false
		for _, r := range rep.Runs {
			live = live || string(r.Run) == run
		}
		if !live {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still live 10 s after its agent left", run)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHealthChecksAreCounted: runs that only say hello and leave (as
// `claude mcp list` does) are counted per server with the last one, not
// listed among the ended runs; a run that called a tool is listed, and at
// most KeepEnded (10 by default) of those are kept.
func TestHealthChecksAreCounted(t *testing.T) {
	dirs := shortHome(t)
	if err := dirs.Ensure(); err != nil {
		t.Fatal(err)
	}
	saveServers(t, dirs.ConfigFile(), "x")
	d, err := New(Options{Dirs: dirs, Peers: selfPeers{}, DrainTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, d, dirs)
	for range 3 {
		oneRun(t, d, dirs.Socket(), "x", `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	}
	rep := d.Status()
	if len(rep.Ended) != 0 || len(rep.Checks) != 1 || rep.Checks[0].Label != "x" || rep.Checks[0].Count != 3 || rep.Checks[0].Last.EndedAt == nil {
		t.Fatalf("after 3 checks: ended %d, checks %+v; want none ended and 3 checks of x", len(rep.Ended), rep.Checks)
	}
	for range 12 {
		oneRun(t, d, dirs.Socket(), "x", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}`)
	}
	rep = d.Status()
	if len(rep.Ended) != 10 || rep.Checks[0].Count != 3 {
		t.Errorf("after 12 runs that called: %d ended (want 10), %d checks (want still 3)", len(rep.Ended), rep.Checks[0].Count)
	}
	for _, r := range rep.Ended {
		if r.Check || !strings.Contains(string(r.State), "ended") {
			t.Errorf("ended run %s: check %v state %s", r.Run, r.Check, r.State)
		}
	}
}
