package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestErrorText(t *testing.T) {
	cause := errors.New("org.freedesktop.Secret.Error.IsLocked: Cannot get secret of a locked object")
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{"kind only", &Error{Store: "Secret Service", Op: "get", Scope: "api", Kind: ErrNotFound},
			`Secret Service: get "api": no secret stored`},
		{"kind, detail and cause", &Error{Store: "Secret Service", Op: "set", Scope: "api", Kind: ErrLocked, Detail: "creating the item", Err: cause, Hint: "unlock it"},
			`Secret Service: set "api": credential store is locked: creating the item: ` + cause.Error()},
		{"no kind", &Error{Store: "macOS Keychain", Op: "delete", Scope: "api", Err: io.ErrUnexpectedEOF},
			`macOS Keychain: delete "api": unexpected EOF`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.err.Error()); diff != "" {
				t.Errorf("Error() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrorMatching(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	err := fmt.Errorf("launching server: %w", &Error{Store: "s", Op: "get", Scope: "api", Kind: ErrLocked, Err: cause, Hint: "unlock the keyring"})
	sentinels := []error{ErrNotFound, ErrLocked, ErrUnavailable, ErrEmpty, ErrInvalidScope}
	var got []error
	for _, s := range sentinels {
		if errors.Is(err, s) {
			got = append(got, s)
		}
	}
	if diff := cmp.Diff([]error{ErrLocked}, got, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("sentinels matched (-want +got):\n%s", diff)
	}
	if !errors.Is(err, cause) {
		t.Errorf("%v does not match its cause", err)
	}
	if h := Hint(err); h != "unlock the keyring" {
		t.Errorf("Hint = %q", h)
	}
	if h := Hint(cause); h != "" {
		t.Errorf("Hint of a plain error = %q, want empty", h)
	}
}

func TestChecks(t *testing.T) {
	tests := []struct {
		scope  string
		secret []byte
		op     string
		want   error
	}{
		{"inventory-api.staging_2", []byte("x"), "set", nil},
		{"a", []byte(" token "), "set", nil},
		{strings.Repeat("a", 64), []byte("x"), "set", nil},
		{strings.Repeat("a", 65), []byte("x"), "set", ErrInvalidScope},
		{"", []byte("x"), "get", ErrInvalidScope},
		{"-leading-dash", nil, "delete", ErrInvalidScope},
		{"has space", nil, "get", ErrInvalidScope},
		{"ünïcode", nil, "get", ErrInvalidScope},
		{"api", nil, "set", ErrEmpty},
		{"api", []byte{}, "set", ErrEmpty},
		{"api", []byte(" \r\n\t"), "set", ErrEmpty},
		{"api", nil, "get", nil}, // the secret is checked only for set
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %q %q", tt.op, tt.scope, tt.secret), func(t *testing.T) {
			err := Precheck("test", tt.op, tt.scope, tt.secret)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Precheck = %v, want %v", err, tt.want)
			}
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Store != "test" || e.Op != tt.op || e.Scope != tt.scope {
					t.Errorf("Precheck = %#v, want an *Error naming store, op and scope", err)
				}
			}
			if cerr := CheckScope(tt.scope); errors.Is(tt.want, ErrInvalidScope) != errors.Is(cerr, ErrInvalidScope) {
				t.Errorf("CheckScope = %v", cerr)
			}
		})
	}
	if err := CheckStored("test", "api", []byte("\n")); !errors.Is(err, ErrEmpty) || Hint(err) == "" {
		t.Errorf("CheckStored of a newline = %v (hint %q), want ErrEmpty with a hint", err, Hint(err))
	}
	if err := CheckStored("test", "api", []byte("v")); err != nil {
		t.Errorf("CheckStored of a value = %v", err)
	}
}

func TestMemory(t *testing.T) {
	var m Memory // the zero value works
	secret := []byte("s3cr3t-memory")
	if _, err := m.Get("api"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before Set = %v, want ErrNotFound", err)
	}
	if err := m.Delete("api"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete before Set = %v, want ErrNotFound", err)
	}
	in := bytes.Clone(secret)
	if err := m.Set("api", in); err != nil {
		t.Fatal(err)
	}
	in[0] = 'X' // the store keeps its own copy
	got, err := m.Get("api")
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Get = %q, %v; want %q", got, err, secret)
	}
	got[0] = 'Y' // and hands out copies
	if again, _ := m.Get("api"); !bytes.Equal(again, secret) {
		t.Errorf("Get after modifying a returned value = %q", again)
	}
	if err := m.Set("api", []byte("second")); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get("api"); string(got) != "second" || m.Len() != 1 {
		t.Errorf("after update: %q, Len %d", got, m.Len())
	}
	if err := m.Set("api", []byte("\n")); !errors.Is(err, ErrEmpty) {
		t.Errorf("Set of a newline = %v, want ErrEmpty", err)
	}
	if err := m.Set("bad scope", secret); !errors.Is(err, ErrInvalidScope) {
		t.Errorf("Set with a bad scope = %v, want ErrInvalidScope", err)
	}

	var errs []error
	for _, kind := range []error{ErrLocked, ErrUnavailable} {
		m.Fail(kind)
		_, gerr := m.Get("api")
		serr := m.Set("api", secret)
		derr := m.Delete("api")
		for _, err := range []error{gerr, serr, derr} {
			if !errors.Is(err, kind) {
				t.Errorf("with Fail(%v): %v", kind, err)
			}
			errs = append(errs, err)
		}
	}
	m.Fail(nil)
	if got, err := m.Get("api"); err != nil || string(got) != "second" {
		t.Errorf("after Fail(nil): %q, %v; the stored value must survive failures", got, err)
	}
	if err := m.Delete("api"); err != nil || m.Len() != 0 {
		t.Errorf("Delete = %v, Len %d", err, m.Len())
	}
	for _, err := range errs {
		if strings.Contains(err.Error(), string(secret)) {
			t.Errorf("error text contains the secret: %v", err)
		}
	}
}

func TestMemoryConcurrent(t *testing.T) {
	var m Memory
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			scope := fmt.Sprintf("scope-%d", i)
			for j := range 100 {
				v := fmt.Appendf(nil, "v%d", j)
				if err := m.Set(scope, v); err != nil {
					t.Error(err)
					return
				}
				if got, err := m.Get(scope); err != nil || !bytes.Equal(got, v) {
					t.Errorf("%s: %q, %v", scope, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if m.Len() != 8 {
		t.Errorf("Len = %d, want 8", m.Len())
	}
}
