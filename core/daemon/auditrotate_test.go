package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/secrets"
)

// TestRotateAuditLog: a signed log whose key is gone cannot go on (the
// daemon refuses it); rotate-key moves it aside with its anchor, removes the
// sealing key, and the next AuditSigning starts a new signed log; the old
// log still verifies by its chain. It refuses, changing nothing, when the
// key works, when the store is locked, and when the log is not signed.
func TestRotateAuditLog(t *testing.T) {
	key := []byte(strings.Repeat("k", AuditKeySize))
	setup := func(t *testing.T) (paths.Dirs, *secrets.Memory) {
		root := t.TempDir()
		dirs := paths.Dirs{Config: filepath.Join(root, "config"), State: filepath.Join(root, "state"), Runtime: filepath.Join(root, "run")}
		if err := dirs.Ensure(); err != nil {
			t.Fatal(err)
		}
		writeLog(t, AuditDir(dirs), key, 3)
		for _, p := range []string{AnchorPath(dirs), SealKeyPath(dirs)} {
			if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dirs, &secrets.Memory{}
	}
	now := time.Date(2026, 12, 1, 19, 4, 0, 0, time.UTC)

	dirs, store := setup(t)
	if _, _, err := AuditSigning(store, AuditDir(dirs), true); !errors.Is(err, ErrAuditKeyUnusable) || !strings.Contains(err.Error(), "portcullis audit rotate-key") {
		t.Fatalf("AuditSigning with the key gone: %v, want ErrAuditKeyUnusable naming rotate-key", err)
	}
	r, err := RotateAuditLog(dirs, store, now)
	if err != nil {
		t.Fatalf("RotateAuditLog: %v", err)
	}
	want := filepath.Join(dirs.State, "audit.rotated-20261201T190400Z")
	if r.Dir != want || !r.Sealed || !r.KeyMissing {
		t.Errorf("RotateAuditLog = %+v, want dir %s, sealed, key missing", r, want)
	}
	if _, err := os.Stat(filepath.Join(want, "anchor.json")); err != nil {
		t.Errorf("the anchor is not in the rotated log: %v", err)
	}
	for _, p := range []string{AuditDir(dirs), AnchorPath(dirs), SealKeyPath(dirs)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there (%v)", p, err)
		}
	}
	rep, err := audit.VerifyWith(want, audit.VerifyOptions{})
	if err != nil || rep.Problem != "" || rep.Events != 3 {
		t.Errorf("the rotated log does not verify by its chain: %+v, %v", rep, err)
	}
	newKey, note, err := AuditSigning(store, AuditDir(dirs), true)
	if err != nil || len(newKey) != AuditKeySize || note != "" || string(newKey) == string(key) {
		t.Errorf("after rotation AuditSigning = %d-byte key, note %q, err %v; want a new key", len(newKey), note, err)
	}

	// A key stored but not a key: deleted, and the log moved aside.
	dirs, store = setup(t)
	if err := store.Set(AuditKeyScope, []byte("not hex")); err != nil {
		t.Fatal(err)
	}
	if r, err := RotateAuditLog(dirs, store, now); err != nil || r.KeyMissing {
		t.Errorf("RotateAuditLog with a bad key: %+v, %v", r, err)
	}
	if _, err := store.Get(AuditKeyScope); !errors.Is(err, secrets.ErrNotFound) {
		t.Errorf("the unusable key item is still stored (%v)", err)
	}

	unchanged := func(t *testing.T, dirs paths.Dirs) {
		t.Helper()
		if _, err := os.Stat(AuditDir(dirs)); err != nil {
			t.Errorf("the log was moved: %v", err)
		}
		if _, err := os.Stat(SealKeyPath(dirs)); err != nil {
			t.Errorf("the sealing key was removed: %v", err)
		}
	}
	// The key works: nothing to rotate.
	dirs, store = setup(t)
	if err := store.Set(AuditKeyScope, []byte(strings.Repeat("6b", AuditKeySize))); err != nil {
		t.Fatal(err)
	}
	if _, err := RotateAuditLog(dirs, store, now); !errors.Is(err, ErrNothingToRotate) {
		t.Errorf("RotateAuditLog with a working key: %v, want ErrNothingToRotate", err)
	}
	unchanged(t, dirs)
	// A locked store: unlock it instead.
	dirs, _ = setup(t)
	if _, err := RotateAuditLog(dirs, &lockedStore{}, now); err == nil || errors.Is(err, ErrNothingToRotate) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Errorf("RotateAuditLog with a locked store: %v", err)
	}
	unchanged(t, dirs)
	// An unsigned log: no key to lose.
	root := t.TempDir()
	dirs = paths.Dirs{Config: filepath.Join(root, "c"), State: filepath.Join(root, "s"), Runtime: filepath.Join(root, "r")}
	writeLog(t, AuditDir(dirs), nil, 2)
	if _, err := RotateAuditLog(dirs, &secrets.Memory{}, now); !errors.Is(err, ErrNothingToRotate) {
		t.Errorf("RotateAuditLog of an unsigned log: %v, want ErrNothingToRotate", err)
	}
}

// lockedStore is a credential store that is locked.
type lockedStore struct{ secrets.Memory }

func (*lockedStore) Get(scope string) ([]byte, error) {
	return nil, &secrets.Error{Store: "test store", Op: "get", Scope: scope, Kind: secrets.ErrLocked}
}
