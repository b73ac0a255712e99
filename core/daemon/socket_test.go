//go:build unix

package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
