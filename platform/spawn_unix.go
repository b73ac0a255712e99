//go:build unix

package platform

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// StartDaemon starts a Portcullis daemon in the background and returns at
// once, without waiting for it to listen. On macOS, when exe lies inside an
// application bundle, the bundle is opened (the menu-bar app hosts the
// daemon); elsewhere `exe daemon` runs in a new session, detached from the
// caller's terminal and process group, with stdin from /dev/null and its
// output appended to logFile.
func StartDaemon(exe, logFile string) error {
	if bundle, ok := bundleOf(exe); ok {
		return exec.Command("/usr/bin/open", "-g", "-j", bundle).Run()
	}
	if err := os.MkdirAll(filepath.Dir(logFile), 0o700); err != nil {
		return fmt.Errorf("daemon log directory: %w", err)
	}
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("daemon log: %w", err)
	}
	defer out.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	cmd := exec.Command(exe, "daemon")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s daemon: %w", exe, err)
	}
	// The daemon outlives us; it is reparented to init when we exit.
	return cmd.Process.Release()
}

// bundleOf returns the .app bundle that holds exe, if any.
func bundleOf(exe string) (string, bool) {
	const marker = ".app/Contents/MacOS/"
	i := strings.Index(exe, marker)
	if i < 0 {
		return "", false
	}
	return exe[:i+len(".app")], true
}
