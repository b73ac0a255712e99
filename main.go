// Command portcullis supervises local MCP servers for AI agents: it stands
// between an agent and each stdio server, keeps the catalog revision, the
// execution epoch and the approval scope apart, and asks a person before new
// code receives old trust. See README.md.
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
