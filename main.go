// Command portcullis supervises local MCP servers for AI agents: it stands
// between an agent and each stdio server, keeps the catalog revision, the
// execution epoch and the approval scope apart, and asks a person before new
// code receives old trust. See README.md.
//
// This executable is the front (package internal/front): it runs
// `portcullis connect LABEL`, which agents launch, itself, and starts in a
// few milliseconds; every other command is the full program,
// portcullis-app (cmd/portcullis-app), installed beside it.
package main

import (
	"os"

	"github.com/portcullis/portcullis/internal/front"
)

func main() { os.Exit(front.Main(os.Args[1:])) }
