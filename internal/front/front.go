// Package front is the `portcullis` executable that agents and people run
// (the top-level package main): a small program that starts in a few
// milliseconds because it links only what `portcullis connect` needs
// (internal/connect: core/shim, core/control, core/paths, core/config,
// platform/spawn). It runs `connect LABEL` itself; for every other command,
// and for no command (the menu-bar app), it replaces itself with the full
// program, portcullis-app, installed beside it (docs/DESIGN.md,
// "Processes"). The daemon a connect starts is the full program too.
package front

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/shim"
	"github.com/portcullis/portcullis/internal/connect"
)

const (
	// Name is the front's executable name, the one agents' configurations,
	// login items and people run.
	Name = "portcullis"
	// AppName is the full program's executable name, installed in the
	// front's directory.
	AppName = "portcullis-app"
)

// Main runs the front with args (the command line without the program
// name) and returns the exit code; for any command but a well-formed
// `connect LABEL` it does not return unless the full program cannot be
// run.
func Main(args []string) int {
	self, selfErr := executable()
	if label, ok := connectLabel(args); ok {
		// The full program prints an unusable data directory as it always
		// did; a front does not word it twice.
		if dirs, err := paths.Resolve(); err == nil {
			return runConnect(label, dirs, self, selfErr)
		}
	}
	if selfErr != nil {
		fmt.Fprintf(os.Stderr, "portcullis: finding the portcullis executable: %v\n", selfErr)
		return 1
	}
	err := execApp(AppPath(self), os.Args[0], args)
	fmt.Fprintf(os.Stderr, "portcullis: %v\n", err)
	return 1
}

// connectLabel returns the label of a command line that is exactly
// `connect LABEL`, as the full program's connect parses it (package flag:
// no flags, one argument, "--" ends the flags); false for anything else,
// which the full program runs (and words its help, or its usage error).
func connectLabel(args []string) (string, bool) {
	if len(args) == 0 || args[0] != "connect" {
		return "", false
	}
	fs := flag.NewFlagSet("connect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 1 {
		return "", false
	}
	return fs.Arg(0), true
}

// runConnect runs `portcullis connect label` as the full program does
// (app's runConnect): the same shim, the same messages and exit codes; a
// daemon it starts is the full program beside self.
func runConnect(label string, dirs paths.Dirs, self string, selfErr error) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var daemon func() (string, error)
	if selfErr == nil {
		daemon = func() (string, error) {
			app := AppPath(self)
			if err := checkApp(app); err != nil {
				return "", &shim.StartError{
					Reason: "no daemon was running, and none can start: " + err.Error(),
					Retry:  "ask the person to reinstall Portcullis (make install puts both there), then reconnect the agent",
				}
			}
			return app, nil
		}
	}
	code := connect.Run(ctx, connect.Options{
		Dirs:   dirs,
		Label:  label,
		Daemon: daemon,
		Stdin:  os.Stdin,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
	})
	if code != 0 {
		return 1 // as the full program's errExit1
	}
	return 0
}

// executable returns the running executable's path with symbolic links
// resolved: a link to the front (in ~/bin, say) finds the full program
// beside the file it links to.
func executable() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	return exe, err
}

// AppPath returns the full program's path for the front at front: AppName
// in the same directory.
func AppPath(front string) string { return filepath.Join(filepath.Dir(front), AppName) }

// checkApp returns an error naming app when it is not an executable file.
func checkApp(app string) error {
	fi, err := os.Stat(app)
	if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return nil
	}
	return errors.New(notFound(app))
}

// notFound says that the full program app is missing, and where it
// belongs.
func notFound(app string) string {
	return fmt.Sprintf("%s not found (the full program, which runs every command but connect, belongs beside %s)",
		app, filepath.Join(filepath.Dir(app), Name))
}

// FrontOf returns what agents' configurations and login items should run
// for the full program at exe: the front beside it when exe is the full
// program (named AppName) and a front is there; otherwise exe itself (a
// full program built alone, or an older single-binary install).
func FrontOf(exe string) string {
	if filepath.Base(exe) != AppName {
		return exe
	}
	front := filepath.Join(filepath.Dir(exe), Name)
	if fi, err := os.Stat(front); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return front
	}
	return exe
}
