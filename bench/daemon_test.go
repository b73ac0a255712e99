package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/internal/harness"
)

// echoDaemon is a running `portcullis daemon` with the echo test server
// registered as "echo": what the connection, reconnection and idle
// benchmarks measure against.
type echoDaemon struct {
	home   *harness.Home
	daemon *harness.Daemon
	echo   string // the echo server's executable, for the direct path
}

// startEchoDaemon builds portcullis (or takes the executable that
// PORTCULLIS_BENCH_BINARY names, an older build for a comparison) and the
// echo test server, registers echo in a new PORTCULLIS_HOME named home
// under a temporary directory, sets the policy of the tools named by allow
// to allow (no approval), and starts the daemon with no agent run, its log
// written to logs (nil discards it). The caller stops the daemon.
func startEchoDaemon(ctx context.Context, b *testing.B, home string, logs io.Writer, allow ...string) *echoDaemon {
	b.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	pc := os.Getenv("PORTCULLIS_BENCH_BINARY")
	if pc == "" {
		if pc, err = harness.BuildPortcullis(ctx, root, dir); err != nil {
			b.Fatal(err)
		}
	}
	e := &echoDaemon{}
	if e.echo, err = harness.BuildServer(ctx, root, dir, "echo", ""); err != nil {
		b.Fatal(err)
	}
	if e.home, err = harness.NewHome(pc, filepath.Join(dir, home)); err != nil {
		b.Fatal(err)
	}
	if err := e.home.AddServer(ctx, "echo", nil, e.echo); err != nil {
		b.Fatal(err)
	}
	if len(allow) > 0 {
		if err := e.home.SetToolPolicy("echo", config.PolicyAllow, allow...); err != nil {
			b.Fatal(err)
		}
	}
	if e.daemon, err = e.home.StartDaemon(ctx, logs); err != nil {
		b.Fatal(err)
	}
	return e
}
