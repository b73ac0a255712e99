package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	if echoBin, err = harness.BuildServer(ctx, repoRoot, dir, "echo", ""); err != nil {
		return err
	}
	inventoryBin, err = harness.BuildServer(ctx, repoRoot, dir, "inventory", "")
	return err
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
