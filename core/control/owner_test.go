//go:build unix

package control

import (
	"bufio"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// listenAt listens on dir/s.sock and answers every hello with an OK reply,
// counting the connections it accepted.
func listenAt(t *testing.T, dir string) (string, *atomic.Int32) {
	t.Helper()
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	n := new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_, _ = bufio.NewReader(c).ReadBytes('\n')
			_, _ = c.Write([]byte(`{"ok":true}` + "\n"))
			c.Close()
		}
	}()
	return sock, n
}

// TestDialRefusesForeignSocket: Dial sends nothing through a socket whose
// directory others may write in, that is reached through a symbolic link,
// or (as root) whose directory or socket belongs to another uid; it talks
// to a daemon of its own user in a private directory.
func TestDialRefusesForeignSocket(t *testing.T) {
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	sock, _ := listenAt(t, private)
	if _, err := Dial(sock, Hello{Op: OpPing}, 5*time.Second); err != nil {
		t.Fatalf("a private directory of this user: %v", err)
	}

	open := t.TempDir()
	openSock, accepted := listenAt(t, open)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := Dial(openSock, Hello{Op: OpPing}, 5*time.Second)
	if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), "other users may write in it") {
		t.Errorf("a directory others may write in: %v, want ErrForeign", err)
	}

	link := filepath.Join(t.TempDir(), "run")
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(filepath.Join(link, "s.sock"), Hello{Op: OpPing}, 5*time.Second); !errors.Is(err, ErrForeign) {
		t.Errorf("a directory reached through a symbolic link: %v, want ErrForeign", err)
	}

	if _, err := Dial(filepath.Join(t.TempDir(), "gone", "s.sock"), Hello{Op: OpPing}, time.Second); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("no directory: %v, want ErrNoDaemon (the shim then starts a daemon)", err)
	}

	if os.Getuid() == 0 {
		if err := os.Chmod(open, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(open, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := Dial(openSock, Hello{Op: OpPing}, 5*time.Second)
		if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Errorf("a directory of uid 65534: %v, want ErrForeign naming the uid", err)
		}
		if err := os.Chown(open, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(openSock, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Dial(openSock, Hello{Op: OpPing}, 5*time.Second); !errors.Is(err, ErrForeign) {
			t.Errorf("a socket of uid 65534: %v, want ErrForeign", err)
		}
	} else {
		t.Log("not root: the checks of another uid's directory and socket did not run")
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the refused socket got %d connections, want none", n)
	}
}

// TestPeerUIDIsOurs: the kernel's answer for a connection to our own
// listener is our uid.
func TestPeerUIDIsOurs(t *testing.T) {
	sock, _ := listenAt(t, t.TempDir())
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	uid, pid, err := PeerCred(c)
	if err != nil || uid != os.Getuid() || pid != os.Getpid() {
		t.Fatalf("PeerCred = %d, %d, %v; want %d, %d", uid, pid, err, os.Getuid(), os.Getpid())
	}
	if err := checkPeer(c, sock); err != nil {
		t.Fatal(err)
	}
}
