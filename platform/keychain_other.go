//go:build !linux && !darwin

package platform

import (
	"runtime"

	"github.com/portcullis/portcullis/core/secrets"
)

// unsupportedStore is the [secrets.Store] of systems Portcullis has no
// credential store for: every operation fails with [secrets.ErrUnavailable].
type unsupportedStore struct{}

// NewSecretStore returns the credential store of this system. Only macOS (the
// Keychain) and Linux (the Secret Service) have one; elsewhere every operation
// fails with an error matching [secrets.ErrUnavailable] that names
// runtime.GOOS.
func NewSecretStore() secrets.Store { return unsupportedStore{} }

func (unsupportedStore) fail(op, scope string, secret []byte) error {
	if err := secrets.Precheck("credential store", op, scope, secret); err != nil {
		return err
	}
	return &secrets.Error{Store: "credential store", Op: op, Scope: scope, Kind: secrets.ErrUnavailable,
		Detail: "Portcullis has no credential store for " + runtime.GOOS,
		Hint:   "run Portcullis on macOS or Linux to use credential scopes"}
}

// Get fails with [secrets.ErrUnavailable]; see [unsupportedStore].
func (s unsupportedStore) Get(scope string) ([]byte, error) { return nil, s.fail("get", scope, nil) }

// Set fails with [secrets.ErrUnavailable]; see [unsupportedStore].
func (s unsupportedStore) Set(scope string, secret []byte) error { return s.fail("set", scope, secret) }

// Delete fails with [secrets.ErrUnavailable]; see [unsupportedStore].
func (s unsupportedStore) Exists(scope string) error { return s.fail("look up", scope, nil) }

func (s unsupportedStore) Delete(scope string) error { return s.fail("delete", scope, nil) }
