// Command demo plays the scripted, headless Portcullis demo (`make demo`):
// see package internal/demoscript. Set PORTCULLIS_DEMO_LOG=1 to see the
// daemon's log as well.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/portcullis/portcullis/internal/demoscript"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := demoscript.Options{Out: os.Stdout}
	if os.Getenv("PORTCULLIS_DEMO_LOG") != "" {
		o.DaemonLog = os.Stderr
	}
	if err := demoscript.Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
