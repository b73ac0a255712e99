package platform

import (
	"fmt"
	"os"
)

// Sandbox levels (config.Server.Sandbox).
const (
	SandboxStandard = "standard" // the daemon's directories and the session bus's socket hidden
	SandboxStrict   = "strict"   // standard, and no network (Linux: a network namespace of its own)
)

// sandboxArg is the first argument with which the portcullis executable,
// started by a Sandbox, becomes the sandbox's launcher (RunSandboxIfAsked).
const sandboxArg = "__portcullis-sandbox"

// HiddenNote is the file each hidden directory holds, so that a server
// that looks there is told why it is empty.
const HiddenNote = "HIDDEN-BY-PORTCULLIS.txt"

// hiddenText is HiddenNote's content for directory dir.
func hiddenText(dir string) string {
	return fmt.Sprintf("%s is hidden from this MCP server by Portcullis's sandbox: it holds Portcullis's own files (configuration, audit log, control socket).\nIf the server needs it, the person can run: portcullis servers add LABEL --sandbox off ...\n", dir)
}

// RunSandboxIfAsked turns this process into a sandbox's launcher when
// the portcullis executable was started by a Sandbox (first argument
// sandboxArg): it confines itself and execs the server, and never
// returns. main calls it first.
func RunSandboxIfAsked() {
	if len(os.Args) < 2 || os.Args[1] != sandboxArg {
		return
	}
	err := sandboxExec(os.Args[2:])
	fmt.Fprintf(os.Stderr, "portcullis sandbox: %v\n", err)
	os.Exit(126)
}
