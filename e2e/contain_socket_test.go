package e2e

// Issue 15, item 5: the socket cannot be squatted. Another user who
// creates the runtime directory first and listens on the socket path gets
// nothing: the CLI and the shim refuse before sending anything, and the
// daemon does not start.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/harness"
)

// throwawayUser creates a system user for the test and removes it when
// the test ends; it returns its uid and gid.
func throwawayUser(t *testing.T) (uid, gid uint32) {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := "pcsquat" + hex.EncodeToString(b)
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v\n%s", name, err, out)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := strconv.ParseUint(u.Uid, 10, 32)
	g, _ := strconv.ParseUint(u.Gid, 10, 32)
	return uint32(id), uint32(g)
}

func TestContainSocketSquatting(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("useradd: Linux")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to create a throwaway user (CI runs as root)")
	}
	for _, tool := range []string{"useradd", "userdel", "socat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (scripts/test-deps.sh installs socat)", tool)
		}
	}
	uid, gid := throwawayUser(t)
	// A data directory where anyone may create entries, as /tmp is: the
	// squatter creates its runtime directory, run/, first.
	dir, err := os.MkdirTemp("", "pc-squat-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	got := filepath.Join(dir, "impostor-received")
	sock := filepath.Join(dir, "run", "portcullis.sock")
	imp := exec.Command("/bin/sh", "-c", `mkdir -m 777 "$1/run" && exec socat UNIX-LISTEN:"$1/run/portcullis.sock",fork,mode=777 SYSTEM:"cat >> '$2'"`, "sh", dir, got)
	imp.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	var impOut bytes.Buffer
	imp.Stdout, imp.Stderr = &impOut, &impOut
	if err := imp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = imp.Process.Kill(); _ = imp.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Lstat(sock); err == nil && fi.Mode().Type() == os.ModeSocket {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the impostor did not listen within 10 s: %s", impOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	h, err := harness.NewHome(portcullis, dir)
	if err != nil {
		t.Fatal(err)
	}
	wantUID := "belongs to uid " + strconv.Itoa(int(uid))

	// The CLI.
	for _, args := range [][]string{{"status"}, {"approvals"}} {
		r, err := h.Run(testContext(t, 30*time.Second), args...)
		if err == nil {
			t.Errorf("portcullis %s talked to the impostor: %q", args[0], r.Stdout)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, wantUID) || !strings.Contains(msg, "nothing was sent") {
			t.Errorf("portcullis %s: %v, want a refusal naming uid %d", args[0], err, uid)
		}
	}

	// The shim: the agent's request is answered with the refusal.
	shim := h.ConnectCommand("echo")
	shim.Env = append(shim.Env, "PORTCULLIS_START_WAIT=2s")
	shim.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n")
	var out, serr bytes.Buffer
	shim.Stdout, shim.Stderr = &out, &serr
	runErr := shim.Run()
	if runErr == nil || !strings.Contains(out.String(), `"id":1,"error"`) || !strings.Contains(out.String(), wantUID) {
		t.Errorf("the shim (err %v) answered %q (stderr %q), want a JSON-RPC error naming uid %d", runErr, out.String(), serr.String(), uid)
	}

	// The daemon does not start in the other user's directory.
	d := h.Command(testContext(t, 30*time.Second), "daemon")
	dout, err := d.CombinedOutput()
	if err == nil || !strings.Contains(string(dout), "owned by uid "+strconv.Itoa(int(uid))) {
		t.Errorf("portcullis daemon: %v\n%s\nwant a refusal naming uid %d", err, dout, uid)
	}

	if b, _ := os.ReadFile(got); len(b) > 0 {
		t.Errorf("the impostor received %q", b)
	}
}
