package daemon

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/codediff"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
)

// The agent runs as the same user: it can replace the approved snapshot
// this daemon wrote with one that matches its change. The daemon refuses
// to compare with a file it finds replaced or deleted.
func TestAnApprovedSnapshotReplacedByTheAgentIsRefused(t *testing.T) {
	c := newCodeStore(t.TempDir(), slog.New(slog.DiscardHandler))
	snap := &codediff.Snapshot{Root: "/src", Epoch: "e1", Files: map[string]codediff.File{"a.py": {Digest: "00", Size: 1}}}
	if err := c.save("srv", snap); err != nil {
		t.Fatal(err)
	}
	if got, err := c.approved("srv"); err != nil || got.Epoch != "e1" {
		t.Fatalf("approved: %+v %v", got, err)
	}
	forged := *snap
	forged.Files = map[string]codediff.File{"a.py": {Digest: "11", Size: 1}}
	b, _ := json.Marshal(&forged)
	if err := os.WriteFile(c.file("srv"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.approved("srv"); err == nil || !strings.Contains(err.Error(), "replaced since this daemon wrote it") {
		t.Errorf("replaced snapshot: %v", err)
	}
	os.Remove(c.file("srv"))
	if got, err := c.approved("srv"); err == nil || got != nil {
		t.Errorf("deleted snapshot read as none: %+v %v", got, err)
	}
	// A daemon started later has no record of what was written: it takes
	// the file as found (codediff.Check still applies; docs/TRUST.md).
	if got, err := newCodeStore(c.dir, c.log).approved("srv"); err != nil || got != nil {
		t.Errorf("fresh store: %+v %v", got, err)
	}
}

// A server relaunched again and again with a tree of new text each time
// (every agent connection is a launch): the snapshots the daemon holds in
// memory stay within maxHeld.
func TestTheEpochsSnapshotsStayWithinTheirMemoryBound(t *testing.T) {
	root := t.TempDir()
	entry := filepath.Join(root, "server.py")
	c := newCodeStore(t.TempDir(), slog.New(slog.DiscardHandler))
	c.maxHeld = 3 << 20
	for i := range 12 {
		for j := range 6 { // 6 files of 200 KB, each within MaxFileBytes
			p := filepath.Join(root, fmt.Sprintf("m%d.py", j))
			if err := os.WriteFile(p, []byte(strings.Repeat(fmt.Sprintf("# launch %d\n", i), 200_000/12)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(entry, []byte("import m0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rec := identity.Record{ServerLabel: "srv", Entry: entry, Epoch: ids.EpochID(fmt.Sprintf("e%02d", i))}
		c.launched(rec)
		c.mu.Lock()
		s := c.byEpoch[rec.Epoch]
		c.mu.Unlock()
		<-s.done
		if s.err != nil || s.held < 1<<20 {
			t.Fatalf("launch %d: held %d, %v", i, s.held, s.err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var held int64
	for _, e := range c.epochs {
		held += c.byEpoch[e].heldNow()
	}
	if held > c.maxHeld+(2<<20) || len(c.epochs) > 4 {
		t.Errorf("%d epochs hold %d bytes, bound %d", len(c.epochs), held, c.maxHeld)
	}
	if _, ok := c.byEpoch["e11"]; !ok {
		t.Error("the newest epoch was dropped")
	}
}

// A launch's snapshot holds the measured entry even when a .gitignore the
// server wrote names it, with the launch's digests and identity, so that a
// card compares against what was measured.
func TestALaunchSnapshotHoldsWhatWasMeasured(t *testing.T) {
	root := t.TempDir()
	entry := filepath.Join(root, "server.py")
	for p, text := range map[string]string{entry: "print('v1')\n", filepath.Join(root, ".gitignore"): "server.py\n"} {
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := identity.NewMeasurer(nil).DigestFile(entry)
	if err != nil {
		t.Fatal(err)
	}
	rec := identity.Record{ServerLabel: "srv", Entry: entry, EntryDigest: sum, Epoch: "e1",
		ResolvedExecutable: identity.FileDigest{Path: "/usr/bin/python3", SHA256: "sha256:00"}}
	c := newCodeStore(t.TempDir(), slog.New(slog.DiscardHandler))
	c.launched(rec)
	s := c.byEpoch["e1"]
	<-s.done
	if s.err != nil {
		t.Fatal(s.err)
	}
	if f, ok := s.snap.Files["server.py"]; !ok || !f.Kept {
		t.Errorf("the measured entry is not in the snapshot: %+v", s.snap.Files)
	}
	if s.snap.Measured["server.py"] != sum || len(s.snap.Measured) != 1 || s.snap.Identity != authz.IdentityDigest(rec) {
		t.Errorf("measured %v, identity %q", s.snap.Measured, s.snap.Identity)
	}
	if probs := codediff.Check(s.snap); len(probs) != 0 {
		t.Errorf("Check: %v", probs)
	}
}
