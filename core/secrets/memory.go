package secrets

import (
	"bytes"
	"sync"
)

// Memory is a [Store] that keeps secrets in memory, for tests of other
// packages. Its zero value is an empty, working store. It validates scopes and
// secrets like the real stores do, and [Memory.Fail] makes it behave like a
// locked or missing store.
type Memory struct {
	mu    sync.Mutex
	items map[string][]byte // guarded by mu
	fail  error             // guarded by mu
}

var _ Store = (*Memory)(nil)

const memoryName = "memory store"

// Fail makes every later operation fail with an *Error whose Kind is kind
// (typically [ErrLocked] or [ErrUnavailable]); Fail(nil) restores normal
// operation. Stored secrets are kept.
func (m *Memory) Fail(kind error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fail = kind
}

// Len returns the number of stored secrets.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items)
}

// checkLocked validates the arguments and reports the configured failure;
// m.mu must be held.
func (m *Memory) checkLocked(op, scope string, secret []byte) error {
	if err := Precheck(memoryName, op, scope, secret); err != nil {
		return err
	}
	if m.fail != nil {
		return &Error{Store: memoryName, Op: op, Scope: scope, Kind: m.fail, Detail: "failure injected by the test"}
	}
	return nil
}

// Get returns a copy of the secret stored for scope; see [Store.Get].
func (m *Memory) Get(scope string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked("get", scope, nil); err != nil {
		return nil, err
	}
	v, ok := m.items[scope]
	if !ok {
		return nil, &Error{Store: memoryName, Op: "get", Scope: scope, Kind: ErrNotFound}
	}
	if err := CheckStored(memoryName, scope, v); err != nil {
		return nil, err
	}
	return bytes.Clone(v), nil
}

// Set stores a copy of secret for scope; see [Store.Set].
func (m *Memory) Set(scope string, secret []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked("set", scope, secret); err != nil {
		return err
	}
	if m.items == nil {
		m.items = make(map[string][]byte)
	}
	m.items[scope] = bytes.Clone(secret)
	return nil
}

// Exists reports whether a secret is stored for scope; see [Store.Exists].
func (m *Memory) Exists(scope string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked("look up", scope, nil); err != nil {
		return err
	}
	if _, ok := m.items[scope]; !ok {
		return &Error{Store: memoryName, Op: "look up", Scope: scope, Kind: ErrNotFound}
	}
	return nil
}

// Delete removes the secret of scope; see [Store.Delete].
func (m *Memory) Delete(scope string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked("delete", scope, nil); err != nil {
		return err
	}
	if _, ok := m.items[scope]; !ok {
		return &Error{Store: memoryName, Op: "delete", Scope: scope, Kind: ErrNotFound}
	}
	delete(m.items, scope)
	return nil
}
