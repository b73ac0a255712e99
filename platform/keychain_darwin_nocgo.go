//go:build darwin && !cgo

package platform

import "github.com/portcullis/portcullis/core/secrets"

// noKeychain is the [secrets.Store] of a macOS build without cgo: the Keychain
// is reached through the Security framework, which needs cgo, so every
// operation fails with [secrets.ErrUnavailable].
type noKeychain struct{}

// NewSecretStore returns the credential store of this system. This macOS build
// was made without cgo and has no Keychain access: every operation of the
// store fails with an error matching [secrets.ErrUnavailable].
func NewSecretStore() secrets.Store { return noKeychain{} }

func (noKeychain) fail(op, scope string, secret []byte) error {
	if err := secrets.Precheck("macOS Keychain", op, scope, secret); err != nil {
		return err
	}
	return &secrets.Error{Store: "macOS Keychain", Op: op, Scope: scope, Kind: secrets.ErrUnavailable,
		Detail: "this build of Portcullis has no Keychain access (it was built without cgo)",
		Hint:   "use a release build of Portcullis, or build it with CGO_ENABLED=1"}
}

// Get fails with [secrets.ErrUnavailable]; see [noKeychain].
func (k noKeychain) Get(scope string) ([]byte, error) { return nil, k.fail("get", scope, nil) }

// Set fails with [secrets.ErrUnavailable]; see [noKeychain].
func (k noKeychain) Set(scope string, secret []byte) error { return k.fail("set", scope, secret) }

// Delete fails with [secrets.ErrUnavailable]; see [noKeychain].
func (k noKeychain) Exists(scope string) error { return k.fail("look up", scope, nil) }

func (k noKeychain) Delete(scope string) error { return k.fail("delete", scope, nil) }
