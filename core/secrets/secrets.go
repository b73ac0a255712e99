// Package secrets declares the credential store of Portcullis: the place where
// the secret value of each credential scope lives (docs/DESIGN.md, "Authorization and
// credentials"). Values live only in the operating system's store — the macOS
// Keychain or a Secret Service on Linux, implemented in package platform — and
// never in configuration files, logs, audit records or error texts.
//
// A [Store] is addressed by credential scope name (the keys of the configuration's
// "credentials" object, [config.ValidLabel] syntax). Its errors are *[Error]
// values that match one of the sentinels [ErrNotFound], [ErrLocked],
// [ErrUnavailable], [ErrEmpty] or [ErrInvalidScope] with errors.Is, so callers
// can branch without parsing text. [Memory] is an in-memory Store for tests of
// other packages.
package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/portcullis/portcullis/core/config"
)

// Store keeps one secret per credential scope. Implementations are safe for
// concurrent use.
//
// Every method returns an error matching [ErrInvalidScope] when scope is not a
// valid scope name. Errors never contain a secret value.
type Store interface {
	// Get returns the secret stored for scope. It returns an error matching
	// [ErrNotFound] when none is stored, [ErrLocked] when the store is locked,
	// [ErrUnavailable] when there is no store to ask, and [ErrEmpty] when the
	// stored value is empty (such a value is never handed out).
	Get(scope string) ([]byte, error)
	// Set stores secret for scope, replacing any previous value. It returns an
	// error matching [ErrEmpty] for an empty or all-whitespace secret, and
	// [ErrLocked] or [ErrUnavailable] as Get does. Set does not keep secret.
	Set(scope string, secret []byte) error
	// Exists reports whether a secret is stored for scope without reading
	// it, so that nobody is asked to approve a use that cannot happen. It
	// returns nil when an item exists (also in a locked store that can
	// tell), an error matching [ErrNotFound] when none does, [ErrLocked]
	// when a locked store cannot tell, and [ErrUnavailable] as Get does.
	// An item that exists may still fail Get (locked, or empty).
	Exists(scope string) error
	// Delete removes the secret of scope. It returns an error matching
	// [ErrNotFound] when none is stored, and [ErrLocked] or [ErrUnavailable]
	// as Get does.
	Delete(scope string) error
}

// Service is the service name under which the OS stores keep Portcullis's
// secrets: the kSecAttrService of the macOS Keychain's generic passwords and
// the "service" attribute of Secret Service items. The account
// (kSecAttrAccount, "account" attribute) is the credential scope name. With
// them a person finds an item by hand, for example
// `security find-generic-password -s dev.portcullis.app -a SCOPE` on macOS or
// `secret-tool lookup service dev.portcullis.app account SCOPE` on Linux.
const Service = "dev.portcullis.app"

// Label returns the human-readable label of scope's item in an OS store,
// "Portcullis: SCOPE", shown by Keychain Access and Seahorse.
func Label(scope string) string { return "Portcullis: " + scope }

// Sentinel errors; a Store's errors match exactly one of them (errors.Is) when
// the failure is one a caller can act on, and none for other failures.
var (
	// ErrNotFound means no secret is stored for the credential scope.
	ErrNotFound = errors.New("no secret stored")
	// ErrLocked means the store exists but is locked, or the person refused
	// to unlock it, or it wants to show a prompt that Portcullis does not show.
	ErrLocked = errors.New("credential store is locked")
	// ErrUnavailable means there is no store to ask: no D-Bus session bus, no
	// Secret Service on it, a store that does not answer, an unsupported
	// operating system, or a macOS build without cgo.
	ErrUnavailable = errors.New("credential store is unavailable")
	// ErrEmpty means a secret is empty or only whitespace. Such a secret is
	// never stored or returned: nothing is ever launched with an empty secret
	// in its place.
	ErrEmpty = errors.New("secret is empty")
	// ErrInvalidScope means a credential scope name does not match
	// [config.ValidLabel].
	ErrInvalidScope = errors.New("invalid credential scope name")
)

// Error describes a failed Store operation. It carries no secret value.
type Error struct {
	// Store names the backend for a person, such as "macOS Keychain" or
	// "Secret Service".
	Store string
	// Op is the operation: "get", "set" or "delete".
	Op string
	// Scope is the credential scope name the operation was about.
	Scope string
	// Kind is one of the package's sentinel errors, or nil for a failure a
	// caller cannot act on.
	Kind error
	// Detail says what happened, for a person (may be empty).
	Detail string
	// Hint says what to do about it, for a person (may be empty). It is not
	// part of Error().
	Hint string
	// Err is the underlying cause from the backend, or nil.
	Err error
}

// Error returns "STORE: OP SCOPE: KIND: DETAIL: CAUSE", leaving out empty parts.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Store)
	fmt.Fprintf(&b, ": %s %q", e.Op, e.Scope)
	if e.Kind != nil {
		b.WriteString(": ")
		b.WriteString(e.Kind.Error())
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Kind and Err (those that are not nil), so that errors.Is
// matches the sentinel and errors.As reaches the backend's error.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// Hint returns the advice for a person carried by the first *Error in err's
// chain, or "" if there is none.
func Hint(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Hint
	}
	return ""
}

// scopeRule says what a valid scope name looks like.
const scopeRule = "use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"

// CheckScope returns nil if scope is a valid credential scope name
// ([config.ValidLabel]: 1 to 64 ASCII letters, digits, '.', '_' or '-',
// starting with a letter or digit), or an error matching [ErrInvalidScope].
func CheckScope(scope string) error {
	if config.ValidLabel(scope) {
		return nil
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidScope, scope, scopeRule)
}

// CheckSecret returns [ErrEmpty] if secret is empty or consists only of
// whitespace (bytes.TrimSpace), and nil otherwise.
func CheckSecret(secret []byte) error {
	if len(bytes.TrimSpace(secret)) == 0 {
		return ErrEmpty
	}
	return nil
}

// Precheck validates the arguments of a Store operation before a backend is
// asked: scope for every op, and secret too when op is "set". It returns nil
// or an *Error naming store, op and scope whose Kind is [ErrInvalidScope] or
// [ErrEmpty]. Store implementations call it first.
func Precheck(store, op, scope string, secret []byte) error {
	if !config.ValidLabel(scope) {
		return &Error{Store: store, Op: op, Scope: scope, Kind: ErrInvalidScope, Detail: scopeRule}
	}
	if op == "set" && CheckSecret(secret) != nil {
		return &Error{Store: store, Op: op, Scope: scope, Kind: ErrEmpty, Detail: "refusing to store it"}
	}
	return nil
}

// CheckStored returns nil if value, read from store for scope, is not empty
// ([CheckSecret]), or an *Error whose Kind is [ErrEmpty]: an empty stored value
// is never handed out. Store implementations call it on every value they read.
func CheckStored(store, scope string, value []byte) error {
	if CheckSecret(value) != nil {
		return &Error{Store: store, Op: "get", Scope: scope, Kind: ErrEmpty,
			Detail: "the stored value is empty", Hint: "store a new value with: portcullis creds set " + scope}
	}
	return nil
}
