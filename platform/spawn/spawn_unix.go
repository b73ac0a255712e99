//go:build unix

package spawn

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
// output appended to logFile. That daemon stays a child of the caller until
// either ends, so that a daemon that exits at once (it refuses its
// configuration or its audit key) is seen on Started.Exited, and its reason
// read with Started.Output, instead of being waited for in vain.
//
// env is the daemon's whole environment (see DaemonEnv).
func StartDaemon(exe, logFile string, env []string) (*Started, error) {
	if bundle, ok := BundleOf(exe); ok {
		if err := exec.Command("/usr/bin/open", "-g", "-j", bundle).Run(); err != nil {
			return nil, err
		}
		return &Started{}, nil
	}
	if err := os.MkdirAll(filepath.Dir(logFile), 0o700); err != nil {
		return nil, fmt.Errorf("daemon log directory: %w", err)
	}
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("daemon log: %w", err)
	}
	defer out.Close()
	st := &Started{Log: logFile}
	if fi, err := out.Stat(); err == nil {
		st.LogFrom = fi.Size()
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	cmd := exec.Command(exe, "daemon")
	cmd.Env = env
	// Files, not pipes: the daemon outlives the caller, and a write to a
	// pipe whose reader is gone would kill it (SIGPIPE).
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s daemon: %w", exe, err)
	}
	// The daemon outlives us (reparented to init when we exit); while we
	// run, Wait reaps it if it ends and tells how.
	exited := make(chan error, 1)
	go func() {
		exited <- cmd.Wait()
		close(exited)
	}()
	st.Exited = exited
	return st, nil
}

// BundleOf returns the .app bundle that holds exe, if any.
func BundleOf(exe string) (string, bool) {
	const marker = ".app/Contents/MacOS/"
	i := strings.Index(exe, marker)
	if i < 0 {
		return "", false
	}
	return exe[:i+len(".app")], true
}
