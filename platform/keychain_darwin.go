//go:build darwin && cgo

package platform

import (
	"errors"

	"github.com/keybase/go-keychain"

	"github.com/portcullis/portcullis/core/secrets"
)

// keychainStoreName names the macOS store in errors.
const keychainStoreName = "macOS Keychain"

// macKeychain is the macOS [secrets.Store]: generic passwords in the login
// Keychain (Security framework, SecItem API) with service dev.portcullis.app,
// account SCOPE and label "Portcullis: SCOPE", not synchronized to iCloud and
// accessible only while the device is unlocked (kSecAttrAccessible
// WhenUnlockedThisDeviceOnly). macOS itself may ask the person to allow access
// when an item was created by another build of the app.
type macKeychain struct{}

// NewSecretStore returns the credential store of this system: on macOS the
// login Keychain.
func NewSecretStore() secrets.Store { return macKeychain{} }

// keychainQuery matches scope's item.
func keychainQuery(scope string) keychain.Item {
	q := keychain.NewItem()
	q.SetSecClass(keychain.SecClassGenericPassword)
	q.SetService(secrets.Service)
	q.SetAccount(scope)
	return q
}

// keychainError maps a Security framework status to the package's errors.
func keychainError(op, scope string, err error) error {
	e := &secrets.Error{Store: keychainStoreName, Op: op, Scope: scope, Err: err}
	var status keychain.Error
	if errors.As(err, &status) {
		switch status {
		case keychain.ErrorItemNotFound:
			e.Kind, e.Err = secrets.ErrNotFound, nil
		case keychain.ErrorInteractionNotAllowed, keychain.ErrorAuthFailed, keychain.ErrorUserCanceled:
			e.Kind = secrets.ErrLocked
			e.Hint = "unlock the login keychain (Keychain Access) and allow Portcullis to use the item, then try again"
		case keychain.ErrorNotAvailable, keychain.ErrorNoSuchKeychain:
			e.Kind = secrets.ErrUnavailable
			e.Hint = "make sure your login keychain exists (Keychain Access, Keychain First Aid), then try again"
		}
	}
	return e
}

// Get returns the secret of scope; see [secrets.Store.Get].
func (macKeychain) Get(scope string) ([]byte, error) {
	if err := secrets.Precheck(keychainStoreName, "get", scope, nil); err != nil {
		return nil, err
	}
	q := keychainQuery(scope)
	q.SetMatchLimit(keychain.MatchLimitOne)
	q.SetReturnData(true)
	results, err := keychain.QueryItem(q)
	if err != nil {
		return nil, keychainError("get", scope, err)
	}
	if len(results) == 0 { // QueryItem reports errSecItemNotFound this way
		return nil, keychainError("get", scope, keychain.ErrorItemNotFound)
	}
	if err := secrets.CheckStored(keychainStoreName, scope, results[0].Data); err != nil {
		return nil, err
	}
	return results[0].Data, nil
}

// Exists looks scope's item up by its attributes, without its data (so
// macOS does not ask the person to allow access); see [secrets.Store.Exists].
func (macKeychain) Exists(scope string) error {
	if err := secrets.Precheck(keychainStoreName, "look up", scope, nil); err != nil {
		return err
	}
	q := keychainQuery(scope)
	q.SetMatchLimit(keychain.MatchLimitOne)
	q.SetReturnAttributes(true)
	results, err := keychain.QueryItem(q)
	if err != nil {
		return keychainError("look up", scope, err)
	}
	if len(results) == 0 {
		return keychainError("look up", scope, keychain.ErrorItemNotFound)
	}
	return nil
}

// Set adds scope's item, or updates it when it exists; see
// [secrets.Store.Set].
func (macKeychain) Set(scope string, secret []byte) error {
	if err := secrets.Precheck(keychainStoreName, "set", scope, secret); err != nil {
		return err
	}
	item := keychain.NewGenericPassword(secrets.Service, scope, secrets.Label(scope), secret, "")
	item.SetSynchronizable(keychain.SynchronizableNo)
	item.SetAccessible(keychain.AccessibleWhenUnlockedThisDeviceOnly)
	err := keychain.AddItem(item)
	if errors.Is(err, keychain.ErrorDuplicateItem) {
		update := keychain.NewItem()
		update.SetLabel(secrets.Label(scope))
		update.SetData(secret)
		update.SetAccessible(keychain.AccessibleWhenUnlockedThisDeviceOnly)
		err = keychain.UpdateItem(keychainQuery(scope), update)
	}
	if err != nil {
		return keychainError("set", scope, err)
	}
	return nil
}

// Delete removes scope's item; see [secrets.Store.Delete].
func (macKeychain) Delete(scope string) error {
	if err := secrets.Precheck(keychainStoreName, "delete", scope, nil); err != nil {
		return err
	}
	if err := keychain.DeleteItem(keychainQuery(scope)); err != nil {
		return keychainError("delete", scope, err)
	}
	return nil
}
