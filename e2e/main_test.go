package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/harness"
)

// Built once per test binary by TestMain.
var (
	repoRoot     string // the repository root
	portcullis   string // CGO_ENABLED=0 go build -tags ci
	echoBin      string // testdata/servers/echo
	inventoryBin string // testdata/servers/inventory
	npmDir       string // node_modules of testdata/npm; "" when npmErr is set
	npmErr       error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "portcullis-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	npmDir, npmErr = harness.NPM(repoRoot)
	return m.Run()
}

func build(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	if repoRoot, err = harness.RepoRoot(); err != nil {
		return err
	}
	if portcullis, err = harness.BuildPortcullis(ctx, repoRoot, dir); err != nil {
		return err
	}
	// Tests that run the daemon inside this test binary (ui_test.go) find
	// the sandbox's launcher beside it, as beside portcullis.
	if err := besideTestBinary(filepath.Join(dir, "portcullis-sandbox")); err != nil {
		return err
	}
	if echoBin, err = harness.BuildServer(ctx, repoRoot, dir, "echo", ""); err != nil {
		return err
	}
	inventoryBin, err = harness.BuildServer(ctx, repoRoot, dir, "inventory", "")
	return err
}

// besideTestBinary copies the executable file src into the directory of
// this test binary (go test's temporary build directory), unless one of
// that name is there.
func besideTestBinary(src string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dst := filepath.Join(filepath.Dir(exe), filepath.Base(src))
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// needNPM skips t when the npm MCP peers are not installed; `make test`
// installs them, so in CI nothing skips.
func needNPM(t *testing.T) string {
	t.Helper()
	if npmErr != nil {
		if errors.Is(npmErr, harness.ErrNoNPM) {
			t.Skipf("skipping: %v", npmErr)
		}
		t.Fatal(npmErr)
	}
	return npmDir
}
