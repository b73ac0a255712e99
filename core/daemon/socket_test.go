//go:build unix

package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/identity"
)

// TestListenRefusesAnotherUsersSocket: a socket path held by another
// uid's file is neither removed nor dialled; the daemon does not start and
// says whose it is. Needs root, to give the file away.
func TestListenRefusesAnotherUsersSocket(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to create a file owned by another uid")
	}
	sock := filepath.Join(t.TempDir(), "portcullis.sock")
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(sock, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	ln, err := listen(sock)
	if err == nil {
		ln.Close()
		t.Fatal("listen took over another user's socket path")
	}
	if !errors.Is(err, ErrSocketTaken) || !strings.Contains(err.Error(), "taken by uid 65534") {
		t.Errorf("listen: %v, want ErrSocketTaken naming uid 65534", err)
	}
	if _, err := os.Lstat(sock); err != nil {
		t.Errorf("the other user's file was removed: %v", err)
	}
}

// TestStopNeedsThePerson: a stop sent on the socket by a process of a
// supervised server's tree is refused, and the daemon goes on; the
// person's stop cancels it.
func TestStopNeedsThePerson(t *testing.T) {
	self := os.Getpid()
	for _, tc := range []struct {
		name    string
		chain   []identity.Observed
		stopped bool
	}{
		{"a server process", []identity.Observed{proc(910, 60), proc(self, 10), proc(1, 1)}, false},
		{"the person's terminal", []identity.Observed{proc(900, 50), proc(800, 40), proc(1, 1)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d := &Daemon{opts: Options{Peers: &fakeLineage{chain: tc.chain}}, log: slog.New(slog.DiscardHandler), uid: os.Getuid(),
				children: map[int]child{910: {PID: 910, StartTime: 60, Label: "srv", Epoch: "01EPOCH"}}, cancel: cancel}
			c1, c2 := net.Pipe()
			defer c1.Close()
			go d.handle(ctx, c2)
			if _, err := c1.Write([]byte(`{"op":"stop","version":` + strconv.Itoa(control.Version) + "}\n")); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(c1).ReadBytes('\n')
			if err != nil {
				t.Fatal(err)
			}
			var r control.Reply
			if err := json.Unmarshal(line, &r); err != nil {
				t.Fatal(err)
			}
			if tc.stopped {
				if !r.OK {
					t.Fatalf("the person's stop: reply %+v", r)
				}
				select { // the reply goes out just before the cancel
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the person's stop did not stop the daemon")
				}
				return
			}
			if r.OK || r.Code != codeNotPerson || !strings.Contains(r.Error, "refused to stop the Portcullis daemon") || ctx.Err() != nil {
				t.Fatalf("a server's stop: reply %+v, daemon cancelled %v; want a not_a_person refusal", r, ctx.Err() != nil)
			}
		})
	}
}
