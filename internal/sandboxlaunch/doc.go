// Package sandboxlaunch is the sandbox's launcher on Linux: the code that
// runs inside a server's fresh user and mount namespaces, covers the
// hidden paths and execs the server (docs/DESIGN.md, "Processes": the
// sandbox). The small portcullis-sandbox executable (cmd/portcullis-sandbox)
// is nothing but this package's Main, so that a sandboxed launch does not
// pay the initialization of the whole portcullis executable; it imports
// only the standard library and golang.org/x/sys/unix, and must stay so
// (launch_test.go checks it).
package sandboxlaunch

import "fmt"

// Name is the launcher executable's file name, found beside the portcullis
// executable.
const Name = "portcullis-sandbox"

// HiddenNote is the file each hidden directory holds, so that a server
// that looks there is told why it is empty.
const HiddenNote = "HIDDEN-BY-PORTCULLIS.txt"

// ProbeArg, as the launcher's only argument, makes it check that it can
// confine a server here (make the mounts private, mount a tmpfs) and exit
// 0, or say what the kernel refused and exit 126.
const ProbeArg = "--probe"

// ExecFdArg, as the launcher's first argument ("--exec-fd=N"), names a
// descriptor it inherited, the write end of a pipe, that it marks
// close-on-exec at once: the daemon's read end then ends exactly when the
// launcher execs the server (or exits), with no polling and without the
// server inheriting it.
const ExecFdArg = "--exec-fd="

// ExitRefused is the launcher's exit status when it could not confine the
// server (the server did not run).
const ExitRefused = 126

// EntrySymbol is the launcher's entry point on linux/amd64, to be given to
// the linker: go build -ldflags=-E=_rt0_portcullis_sandbox.
const EntrySymbol = "_rt0_portcullis_sandbox"

// UnshareArg, as the launcher's first argument, makes its entry point move
// it into new user and mount namespaces of its own; UnshareNetArg adds a
// network namespace (the strict level). The rest of the arguments are as
// without it.
const (
	UnshareArg    = "-U"
	UnshareNetArg = "-N"
)

// ExitNoEntry is the launcher's exit status when it was asked to make its
// own namespaces but was not built with its entry point.
const ExitNoEntry = 125

// ErrNoEntry is the error of a launcher asked to make its own namespaces
// without its entry point.
var ErrNoEntry = fmt.Errorf("the sandbox launcher was built without its entry point (go build -ldflags=-E=%s); make launcher builds it so", EntrySymbol)

// HiddenText is HiddenNote's content for directory dir.
func HiddenText(dir string) string { return dir + hiddenTail }

// hiddenTail is HiddenText after the directory's path.
const hiddenTail = " is hidden from this MCP server by Portcullis's sandbox: it holds Portcullis's own files (configuration, audit log, control socket).\nIf the server needs it, the person can run: portcullis servers edit LABEL --sandbox off\n"
