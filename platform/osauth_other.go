//go:build !linux && !darwin

package platform

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"

	"github.com/portcullis/portcullis/core/daemon"
)

// unsupportedAuth is the Authenticator of a system without one.
type unsupportedAuth struct{}

// NewAuthenticator returns an Authenticator that is never available.
func NewAuthenticator() daemon.Authenticator { return unsupportedAuth{} }

func (unsupportedAuth) Mechanism() string { return "none" }
func (unsupportedAuth) Available() error {
	return &daemon.UnavailableError{Reason: daemon.AuthReasonUnsupported, Text: fmt.Sprintf("operating-system authentication is not supported on %s", runtime.GOOS)}
}
func (unsupportedAuth) Authenticate(context.Context, daemon.AuthSubject, string) error {
	return fmt.Errorf("operating-system authentication is not supported on %s", runtime.GOOS)
}

// TerminalAgent is not available on this system.
type TerminalAgent struct{}

// StartTerminalAgent fails on this system.
func StartTerminalAgent(int, func(*exec.Cmd)) (*TerminalAgent, error) {
	return nil, fmt.Errorf("operating-system authentication is not supported on %s", runtime.GOOS)
}

// Stop does nothing.
func (*TerminalAgent) Stop() {}
