// Command portcullis-sandbox is the sandbox's launcher on Linux: the
// Portcullis daemon starts it in a server's fresh user and mount
// namespaces; it hides Portcullis's own directories from the server and
// execs it (package internal/sandboxlaunch). It is installed beside the
// portcullis executable and is not meant to be run by hand.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/portcullis/portcullis/internal/sandboxlaunch"
)

func main() {
	err := sandboxlaunch.Main(os.Args[1:])
	if err == nil {
		os.Exit(0) // the probe: confinement works here
	}
	fmt.Fprintf(os.Stderr, "portcullis sandbox: %v\n", err)
	if errors.Is(err, sandboxlaunch.ErrNoEntry) {
		os.Exit(sandboxlaunch.ExitNoEntry)
	}
	os.Exit(sandboxlaunch.ExitRefused)
}
