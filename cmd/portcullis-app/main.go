// Command portcullis-app is the full Portcullis program: the menu-bar app,
// the daemon and every command (package app). People and agents run it
// through the front, `portcullis` (the top-level package main), installed
// beside it, which runs `portcullis connect` itself and execs this program
// for everything else with the same arguments. See README.md.
package main

import (
	"os"

	"github.com/portcullis/portcullis/internal/quietinit"

	"github.com/portcullis/portcullis/app"
)

func main() {
	quietinit.Restore()
	os.Exit(app.Main(os.Args[1:]))
}
