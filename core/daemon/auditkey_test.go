package daemon

import (
	"context"
	"encoding/hex"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/secrets"
)

// setFails is a store in which no key is stored and storing one fails, like
// a Secret Service whose default collection is locked for writing.
type setFails struct{ secrets.Memory }

func (s *setFails) Set(scope string, _ []byte) error {
	return &secrets.Error{Store: "test store", Op: "set", Scope: scope, Kind: secrets.ErrLocked}
}

var _ secrets.Store = (*setFails)(nil)

// writeLog appends n events to the audit log in dir, signed with key when
// key is not nil.
func writeLog(t *testing.T, dir string, key []byte, n int) {
	t.Helper()
	l, err := audit.Open(audit.Options{Dir: dir, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := l.Append(context.Background(), audit.TypeRunStarted, audit.RunStarted{AgentRun: "run", ServerLabel: "s", Agent: audit.Agent{PID: i + 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeOffLog appends n events to the audit log in dir, signed with key,
// then turns signing off and appends m unsigned events.
func writeOffLog(t *testing.T, dir string, key []byte, n, m int) {
	t.Helper()
	writeLog(t, dir, key, n)
	l, err := audit.Open(audit.Options{Dir: dir, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.DisableSigning(context.Background(), auditSigningOffReason); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	writeLog(t, dir, nil, m)
}

func TestAuditSigning(t *testing.T) {
	oldKey := []byte(strings.Repeat("k", AuditKeySize))
	tests := []struct {
		name string
		off  bool // settings.auditSigning is false
		// setup prepares the store and the log directory.
		setup func(t *testing.T, store *secrets.Memory, dir string) secrets.Store
		// wantKey: "new" (a fresh key, now stored), "old" (oldKey), "" (nil).
		wantKey  string
		wantNote bool  // a note saying the log is not signed (AuditSigningOffNote when off)
		wantErr  error // errors.Is target
		wantErr2 error // a second errors.Is target
		// wantStored is the value under AuditKeyScope afterwards: "new",
		// "old", "none", or a literal.
		wantStored string
	}{
		{
			name:       "first start creates the key",
			setup:      func(*testing.T, *secrets.Memory, string) secrets.Store { return nil },
			wantKey:    "new",
			wantStored: "new",
		},
		{
			name: "stored key is used",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				must(t, m.Set(AuditKeyScope, []byte(hex.EncodeToString(oldKey))))
				writeLog(t, dir, oldKey, 3)
				return nil
			},
			wantKey:    "old",
			wantStored: "old",
		},
		{
			name: "unsigned log gets a new key",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				writeLog(t, dir, nil, 3)
				return nil
			},
			wantKey:    "new",
			wantStored: "new",
		},
		{
			name: "no keychain, empty log: unsigned with a note",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				m.Fail(secrets.ErrUnavailable)
				return nil
			},
			wantNote:   true,
			wantStored: "none",
		},
		{
			name: "locked keychain, unsigned log: unsigned with a note",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				writeLog(t, dir, nil, 2)
				m.Fail(secrets.ErrLocked)
				return nil
			},
			wantNote:   true,
			wantStored: "none",
		},
		{
			name: "key cannot be stored: unsigned with a note",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				return &setFails{}
			},
			wantNote:   true,
			wantStored: "none",
		},
		{
			name: "locked keychain, signed log: refuse",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				must(t, m.Set(AuditKeyScope, []byte(hex.EncodeToString(oldKey))))
				writeLog(t, dir, oldKey, 2)
				m.Fail(secrets.ErrLocked)
				return nil
			},
			wantErr:    ErrAuditKeyUnusable,
			wantErr2:   secrets.ErrLocked,
			wantStored: "old",
		},
		{
			name: "no keychain, signed log: refuse",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				writeLog(t, dir, oldKey, 2)
				m.Fail(secrets.ErrUnavailable)
				return nil
			},
			wantErr:    ErrAuditKeyUnusable,
			wantErr2:   secrets.ErrUnavailable,
			wantStored: "none",
		},
		{
			name: "key deleted, signed log: refuse, no new key",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				writeLog(t, dir, oldKey, 2)
				return nil
			},
			wantErr:    ErrAuditKeyUnusable,
			wantErr2:   secrets.ErrNotFound,
			wantStored: "none",
		},
		{
			name: "stored value is not a key: refuse, never overwrite",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				must(t, m.Set(AuditKeyScope, []byte("not hex at all")))
				return nil
			},
			wantErr:    ErrBadAuditKey,
			wantStored: "not hex at all",
		},
		{
			name: "stored key of the wrong length",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				must(t, m.Set(AuditKeyScope, []byte("abcd")))
				return nil
			},
			wantErr:    ErrBadAuditKey,
			wantStored: "abcd",
		},
		{
			name: "signing turned off earlier, key stored: sign again with it",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				must(t, m.Set(AuditKeyScope, []byte(hex.EncodeToString(oldKey))))
				writeOffLog(t, dir, oldKey, 2, 2)
				return nil
			},
			wantKey:    "old",
			wantStored: "old",
		},
		{
			name: "signing turned off earlier, key deleted: unsigned with a note, no new key",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				writeOffLog(t, dir, oldKey, 2, 2)
				return nil
			},
			wantNote:   true,
			wantStored: "none",
		},
		{
			name: "signing turned off as the last event, key deleted: no new key",
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				writeOffLog(t, dir, oldKey, 2, 0)
				return nil
			},
			wantNote:   true,
			wantStored: "none",
		},
		{
			name:       "off, first start: no key is created",
			off:        true,
			setup:      func(*testing.T, *secrets.Memory, string) secrets.Store { return nil },
			wantNote:   true,
			wantStored: "none",
		},
		{
			name: "off, unsigned log: the store is not asked",
			off:  true,
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				writeLog(t, dir, nil, 2)
				m.Fail(secrets.ErrLocked)
				return nil
			},
			wantNote:   true,
			wantStored: "none",
		},
		{
			name: "off, turned off already: the store is not asked",
			off:  true,
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				writeOffLog(t, dir, oldKey, 2, 1)
				m.Fail(secrets.ErrUnavailable)
				return nil
			},
			wantNote:   true,
			wantStored: "none",
		},
		{
			name: "off, signed log: the key, to sign signing_disabled",
			off:  true,
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				must(t, m.Set(AuditKeyScope, []byte(hex.EncodeToString(oldKey))))
				writeLog(t, dir, oldKey, 2)
				return nil
			},
			wantKey:    "old",
			wantNote:   true,
			wantStored: "old",
		},
		{
			name: "off, signed log, locked keychain: refuse",
			off:  true,
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				must(t, m.Set(AuditKeyScope, []byte(hex.EncodeToString(oldKey))))
				writeLog(t, dir, oldKey, 2)
				m.Fail(secrets.ErrLocked)
				return nil
			},
			wantErr:    ErrAuditKeyUnusable,
			wantErr2:   secrets.ErrLocked,
			wantStored: "old",
		},
		{
			name: "off, signed log, key deleted: refuse, no new key",
			off:  true,
			setup: func(t *testing.T, m *secrets.Memory, dir string) secrets.Store {
				writeLog(t, dir, oldKey, 2)
				return nil
			},
			wantErr:    ErrAuditKeyUnusable,
			wantErr2:   secrets.ErrNotFound,
			wantStored: "none",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := &secrets.Memory{}
			dir := filepath.Join(t.TempDir(), "audit")
			var store secrets.Store = mem
			if s := tt.setup(t, mem, dir); s != nil {
				store = s
			}
			key, note, err := AuditSigning(store, dir, !tt.off)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || (tt.wantErr2 != nil && !errors.Is(err, tt.wantErr2)) {
					t.Fatalf("err = %v, want %v and %v", err, tt.wantErr, tt.wantErr2)
				}
				if key != nil {
					t.Errorf("key returned with an error")
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := note != ""; got != tt.wantNote {
				t.Errorf("note = %q, want a note: %v", note, tt.wantNote)
			}
			if tt.wantNote && !strings.Contains(note, "not signed") {
				t.Errorf("note %q does not say the log is not signed", note)
			}
			if tt.wantNote && tt.off != (note == AuditSigningOffNote) {
				t.Errorf("note %q; want AuditSigningOffNote: %v", note, tt.off)
			}
			if tt.wantErr != nil && tt.off && !strings.Contains(err.Error(), "settings.auditSigning is false") {
				t.Errorf("error %q does not say that the key is needed to turn signing off", err)
			}
			mem.Fail(nil)
			stored, getErr := mem.Get(AuditKeyScope)
			switch tt.wantKey {
			case "new":
				if len(key) != AuditKeySize || string(key) == string(oldKey) {
					t.Errorf("key = %x, want a fresh %d-byte key", key, AuditKeySize)
				}
			case "old":
				if diff := cmp.Diff(oldKey, key); diff != "" {
					t.Errorf("key (-want +got):\n%s", diff)
				}
			default:
				if key != nil {
					t.Errorf("key = %x, want none", key)
				}
			}
			switch tt.wantStored {
			case "none":
				if !errors.Is(getErr, secrets.ErrNotFound) {
					t.Errorf("stored = %q, %v; want nothing stored", stored, getErr)
				}
			case "new":
				if string(stored) != hex.EncodeToString(key) {
					t.Errorf("stored %q, want the returned key in hex", stored)
				}
			case "old":
				if string(stored) != hex.EncodeToString(oldKey) {
					t.Errorf("stored %q, want the old key in hex", stored)
				}
			default:
				if string(stored) != tt.wantStored {
					t.Errorf("stored %q, want %q", stored, tt.wantStored)
				}
			}
		})
	}
}

// TestAuditSigningVerifies follows a log through the transitions the rule
// allows — unsigned while no keychain works, then signed — and checks that
// audit.Verify with the key ReadAuditKey returns accepts it.
func TestAuditSigningVerifies(t *testing.T) {
	mem := &secrets.Memory{}
	dir := filepath.Join(t.TempDir(), "audit")
	mem.Fail(secrets.ErrUnavailable)
	key, note, err := AuditSigning(mem, dir, true)
	if err != nil || key != nil || note == "" {
		t.Fatalf("without a keychain: key %x, note %q, err %v; want unsigned with a note", key, note, err)
	}
	writeLog(t, dir, key, 3)
	mem.Fail(nil)
	key, _, err = AuditSigning(mem, dir, true)
	if err != nil || key == nil {
		t.Fatalf("with a keychain: key %x, err %v; want a key", key, err)
	}
	writeLog(t, dir, key, 3) // Open writes signing_enabled first
	again, _, err := AuditSigning(mem, dir, true)
	if err != nil || string(again) != string(key) {
		t.Fatalf("second start: key %x, err %v; want the same key", again, err)
	}
	vkey, err := ReadAuditKey(mem)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Verify(dir, vkey)
	if err != nil {
		t.Fatalf("Verify: %v (%+v)", err, rep)
	}
	if diff := cmp.Diff(audit.Report{Events: 7, Files: 1, Signed: true, Unsigned: 3, SignedEvents: 4}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	other := make([]byte, AuditKeySize)
	if rep, err := audit.Verify(dir, other); !errors.Is(err, audit.ErrBroken) || rep.Problem != audit.ProblemBadSignature {
		t.Errorf("Verify with another key: %v, problem %q; want bad-signature", err, rep.Problem)
	}
}

func TestAuditKeyCreatesOnce(t *testing.T) {
	mem := &secrets.Memory{}
	k1, err := AuditKey(mem)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := AuditKey(mem)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != AuditKeySize || string(k1) != string(k2) {
		t.Errorf("keys %x and %x; want the same %d-byte key twice", k1, k2, AuditKeySize)
	}
	mem.Fail(secrets.ErrLocked)
	if _, err := AuditKey(mem); !errors.Is(err, secrets.ErrLocked) {
		t.Errorf("locked store: %v, want ErrLocked", err)
	}
	if _, err := ReadAuditKey(&secrets.Memory{}); !errors.Is(err, secrets.ErrNotFound) {
		t.Errorf("ReadAuditKey of an empty store: %v, want ErrNotFound", err)
	}
}

func TestAuditStatus(t *testing.T) {
	dirs := paths.Dirs{State: "/state"}
	tests := []struct {
		name string
		opts Options
		want AuditStatus
	}{
		{"signed", Options{Dirs: dirs, AuditKey: []byte("k"), AuditNote: "ignored"},
			AuditStatus{Dir: "/state/audit", Signed: true}},
		{"unsigned with the reason", Options{Dirs: dirs, AuditNote: "the audit log is not signed: no keychain"},
			AuditStatus{Dir: "/state/audit", Note: "the audit log is not signed: no keychain"}},
		{"unsigned without a reason", Options{Dirs: dirs},
			AuditStatus{Dir: "/state/audit", Note: "the audit log is not signed: the daemon was started without a key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &Daemon{opts: tt.opts}
			if diff := cmp.Diff(tt.want, d.auditStatus()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	t.Run("open and healthy", func(t *testing.T) {
		d := &Daemon{opts: Options{Dirs: paths.Dirs{State: t.TempDir()}, AuditKey: []byte("k")}}
		l, err := audit.Open(audit.Options{Dir: AuditDir(d.opts.Dirs), Key: d.opts.AuditKey})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		d.audit = l
		want := AuditStatus{Dir: AuditDir(d.opts.Dirs), Signed: true}
		if diff := cmp.Diff(want, d.auditStatus()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
