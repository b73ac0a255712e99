package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/paths"
)

// selfPeers says every peer is this process, of this user.
type selfPeers struct{}

var _ PeerInfo = selfPeers{}

func (selfPeers) Peer(net.Conn) (uid, pid int, err error) { return os.Getuid(), os.Getpid(), nil }
func (selfPeers) Parent(int) (ppid int, exe string, err error) {
	return os.Getppid(), "/usr/bin/agent", nil
}

// shortHome is a data directory whose socket path fits in sockaddr_un.
func shortHome(t *testing.T) paths.Dirs {
	t.Helper()
	dir, err := os.MkdirTemp("", "pcd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return paths.Dirs{Config: filepath.Join(dir, "c"), State: filepath.Join(dir, "s"), Runtime: filepath.Join(dir, "r")}
}

// serve runs d until the test ends, and returns its socket once it answers.
func serve(t *testing.T, d *Daemon, dirs paths.Dirs) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	var err error
	done := false
	stop = func() error {
		if !done {
			done = true
			cancel()
			err = <-served
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := control.Call(dirs.Socket(), control.Hello{Op: control.OpPing}, time.Second); err == nil {
			return stop
		}
		select {
		case err := <-served:
			t.Fatalf("Serve returned before it answered: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not answer within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConnectReplySendsDrainTimeout: the reply to connect carries the
// daemon's own drain timeout, so that the shim waits as long as this
// daemon drains, not as long as a default one.
func TestConnectReplySendsDrainTimeout(t *testing.T) {
	dirs := shortHome(t)
	if err := dirs.Ensure(); err != nil {
		t.Fatal(err)
	}
	saveServers(t, dirs.ConfigFile(), "x")
	d, err := New(Options{Dirs: dirs, Peers: selfPeers{}, DrainTimeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, d, dirs)
	c, err := control.Connect(dirs.Socket(), "x", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Reply.Run == "" {
		t.Errorf("reply to connect %+v names no run", c.Reply)
	}
	if got := c.Reply.DrainTimeout(); got != 1500*time.Millisecond {
		t.Errorf("the reply to connect says a drain timeout of %s, want the daemon's 1.5s", got)
	}
}

// TestConnectOlderShimOffersStdio: a shim of an older build offers the
// agent's stdin and stdout in its Hello ("pass": "stdio") and relays
// unless the Reply asks for them ("pass" in the Reply). The daemon never
// asks: its Reply has no "pass", and the agent's JSON-RPC goes over the
// connection as from a shim of this build.
func TestConnectOlderShimOffersStdio(t *testing.T) {
	dirs := shortHome(t)
	if err := dirs.Ensure(); err != nil {
		t.Fatal(err)
	}
	saveServers(t, dirs.ConfigFile(), "x")
	d, err := New(Options{Dirs: dirs, Peers: selfPeers{}, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, d, dirs)
	c, err := net.Dial("unix", dirs.Socket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	hello := fmt.Sprintf(`{"version":%d,"op":%q,"label":"x","pass":"stdio"}`+"\n", control.Version, control.OpConnect)
	if _, err := c.Write([]byte(hello)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	line, err := br.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(line, &r); err != nil || r["ok"] != true {
		t.Fatalf("reply to an older shim's connect: %s (%v)", line, err)
	}
	if p, ok := r["pass"]; ok {
		t.Errorf("the reply asks for the agent's stdio (pass %v): the older shim would hand it over to a daemon that no longer reads it", p)
	}
	if _, err := c.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := br.ReadString('\n'); err != nil || l != `{"jsonrpc":"2.0","id":1,"result":{}}`+"\n" {
		t.Errorf("the older shim's relayed ping was answered %q (%v)", l, err)
	}
}
