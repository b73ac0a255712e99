//go:build darwin

package platform

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"

	"github.com/portcullis/portcullis/core/daemon"
)

// localAuth is the daemon's Authenticator on macOS: LocalAuthentication's
// LAContext evaluates LAPolicyDeviceOwnerAuthentication (Touch ID, or the
// account password), through the Objective-C runtime with purego, so that
// a CGO_ENABLED=0 build type-checks it. NOT YET RUN on a Mac: it
// type-checks only (see the README's trust model).
//
// LocalAuthentication authenticates the user of the daemon's own process
// (the system shows its dialog for the app), not of the subject that asked:
// on macOS the subject's ancestry (requirePerson) is what ties the
// decision to the person's terminal or window.
type localAuth struct{}

var _ daemon.Authenticator = localAuth{}

// NewAuthenticator returns LocalAuthentication's Authenticator.
func NewAuthenticator() daemon.Authenticator { return localAuth{} }

// LocalAuthentication constants (LAPublicDefines.h).
const (
	laPolicyDeviceOwnerAuthentication = 2  // biometrics, Apple Watch or the account password
	laErrorUserCancel                 = -2 // the person pressed Cancel
	laErrorSystemCancel               = -4
	laErrorAppCancel                  = -9
)

var (
	loadLA    sync.Once
	loadLAErr error
)

func loadLocalAuthentication() error {
	loadLA.Do(func() {
		_, loadLAErr = purego.Dlopen("/System/Library/Frameworks/LocalAuthentication.framework/LocalAuthentication", purego.RTLD_GLOBAL|purego.RTLD_NOW)
		if loadLAErr == nil && objc.GetClass("LAContext") == 0 {
			loadLAErr = errors.New("the LAContext class is missing")
		}
	})
	return loadLAErr
}

func newLAContext() objc.ID {
	return objc.ID(objc.GetClass("LAContext")).Send(objc.RegisterName("alloc")).Send(objc.RegisterName("init"))
}

func (localAuth) Mechanism() string { return "LocalAuthentication" }

// Available asks LAContext canEvaluatePolicy:error: for the device owner
// policy.
func (localAuth) Available() error {
	if err := loadLocalAuthentication(); err != nil {
		return fmt.Errorf("LocalAuthentication cannot be loaded: %w", err)
	}
	ctx := newLAContext()
	defer ctx.Send(objc.RegisterName("release"))
	if !objc.Send[bool](ctx, objc.RegisterName("canEvaluatePolicy:error:"), laPolicyDeviceOwnerAuthentication, objc.ID(0)) {
		return errors.New("this Mac cannot authenticate its owner now (no password or Touch ID set up for this session)")
	}
	return nil
}

// Authenticate runs LAContext evaluatePolicy:localizedReason:reply: with
// reason and waits for its reply (or ctx).
func (localAuth) Authenticate(ctx context.Context, _ daemon.AuthSubject, reason string) error {
	if err := loadLocalAuthentication(); err != nil {
		return fmt.Errorf("LocalAuthentication cannot be loaded: %w", err)
	}
	type answer struct {
		ok   bool
		code int
		desc string
	}
	done := make(chan answer, 1)
	block := objc.NewBlock(func(_ objc.Block, success bool, nserr objc.ID) {
		a := answer{ok: success}
		if nserr != 0 {
			a.code = objc.Send[int](nserr, objc.RegisterName("code"))
			desc := nserr.Send(objc.RegisterName("localizedDescription"))
			a.desc = objc.Send[string](desc, objc.RegisterName("UTF8String"))
		}
		done <- a
	})
	defer block.Release()
	la := newLAContext()
	defer la.Send(objc.RegisterName("release"))
	text := objc.ID(objc.GetClass("NSString")).Send(objc.RegisterName("stringWithUTF8String:"), "Portcullis: "+reason)
	la.Send(objc.RegisterName("evaluatePolicy:localizedReason:reply:"), laPolicyDeviceOwnerAuthentication, text, block)
	select {
	case a := <-done:
		switch {
		case a.ok:
			return nil
		case a.code == laErrorUserCancel || a.code == laErrorSystemCancel || a.code == laErrorAppCancel:
			return fmt.Errorf("%w: LocalAuthentication: %s", daemon.ErrAuthDismissed, a.desc)
		}
		return fmt.Errorf("%w: LocalAuthentication error %d: %s", daemon.ErrAuthFailed, a.code, a.desc)
	case <-ctx.Done():
		la.Send(objc.RegisterName("invalidate"))
		return ctx.Err()
	}
}

// TerminalAgent does nothing on macOS: LocalAuthentication shows the
// system's own dialog.
type TerminalAgent struct{}

// StartTerminalAgent returns at once on macOS: no agent is needed.
func StartTerminalAgent(int, func(*exec.Cmd)) (*TerminalAgent, error) { return &TerminalAgent{}, nil }

// Stop does nothing.
func (*TerminalAgent) Stop() {}
