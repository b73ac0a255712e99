package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sealedLog is a log with sealing set up in a fresh data directory.
type sealedLog struct {
	dir, keyPath, anchorPath string
	vk                       VerificationKey
	l                        *Log
}

func openSealed(t *testing.T, base string) *Log {
	t.Helper()
	return openTest(t, Options{Dir: filepath.Join(base, "audit"), Key: testKey,
		SealKeys: SealKeyFile{Path: filepath.Join(base, "seal.key")}, AnchorPath: filepath.Join(base, "anchor.json")})
}

func newSealed(t *testing.T, before int) *sealedLog {
	t.Helper()
	base := t.TempDir()
	l := openSealed(t, base)
	appendN(t, l, before)
	vk, err := l.SetupSeals(context.Background(), false)
	if err != nil {
		t.Fatalf("SetupSeals: %v", err)
	}
	return &sealedLog{dir: filepath.Join(base, "audit"), keyPath: filepath.Join(base, "seal.key"), anchorPath: filepath.Join(base, "anchor.json"), vk: vk, l: l}
}

func (s *sealedLog) seal(t *testing.T) {
	t.Helper()
	if err := s.l.Seal(context.Background(), SealSchedule); err != nil {
		t.Fatalf("Seal: %v", err)
	}
}

func (s *sealedLog) verify(t *testing.T) Report {
	t.Helper()
	o := VerifyOptions{Key: testKey, Seal: &s.vk}
	if a, ok, err := ReadAnchor(s.anchorPath); err != nil {
		t.Fatal(err)
	} else if ok {
		o.Anchor = &a
	}
	rep, err := VerifyWith(s.dir, o)
	if err != nil && !errors.Is(err, ErrBroken) {
		t.Fatal(err)
	}
	return rep
}

func TestVerificationKeyRoundTrip(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	vk := VerificationKey{Epoch: 7, Public: pub}
	s := vk.String()
	got, err := ParseVerificationKey(strings.ToLower(strings.ReplaceAll(s, "-", " ")))
	if err != nil || got.Epoch != 7 || !got.Public.Equal(pub) {
		t.Fatalf("ParseVerificationKey(%q) = %+v, %v", s, got, err)
	}
	// One character changed fails the checksum.
	b := []byte(s)
	i := len(vkPrefix) + 3
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	if _, err := ParseVerificationKey(string(b)); err == nil {
		t.Fatalf("a mistyped key %q parsed", b)
	}
}

func TestSealsVerify(t *testing.T) {
	s := newSealed(t, 5)
	appendN(t, s.l, 3)
	s.seal(t)
	s.seal(t) // nothing written since: no seal
	appendN(t, s.l, 2)
	if err := s.l.Seal(context.Background(), SealStop); err != nil {
		t.Fatal(err)
	}
	rep := s.verify(t)
	if rep.Failed() || rep.Seals == nil || rep.Seals.Proven != 3 || rep.Seals.UnsealedFrom != 0 {
		t.Fatalf("report %+v seals %+v", rep, rep.Seals)
	}
	if e, ok := s.l.Sealing(); !ok || e != 3 {
		t.Fatalf("Sealing = %d, %v; want epoch 3", e, ok)
	}
	// The key on disk is epoch 3's: epochs 0 to 2 are gone.
	k, err := SealKeyFile{Path: s.keyPath}.Load()
	if err != nil || k.Epoch != 3 {
		t.Fatalf("stored key epoch %d, %v", k.Epoch, err)
	}
	// Another verification key proves nothing.
	pub, _, _ := ed25519.GenerateKey(nil)
	other := VerificationKey{Public: pub}
	rep, _ = VerifyWith(s.dir, VerifyOptions{Seal: &other})
	if rep.Problem != ProblemBadSeal {
		t.Fatalf("with another key: %+v", rep)
	}
	if _, err := s.l.SetupSeals(context.Background(), false); !errors.Is(err, ErrSealKeysExist) {
		t.Fatalf("SetupSeals again = %v, want ErrSealKeysExist", err)
	}
}

func TestSealRekey(t *testing.T) {
	s := newSealed(t, 2)
	appendN(t, s.l, 2)
	s.seal(t)
	newVK, err := s.l.SetupSeals(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s.l, 2)
	s.seal(t)
	old := s.verify(t)
	if old.Failed() || old.Seals.Proven != 5 {
		t.Fatalf("old key after re-keying: %+v %+v", old, old.Seals)
	}
	s.vk = newVK
	rep := s.verify(t)
	if rep.Failed() || rep.Seals.Proven != 2 || rep.Seals.Earlier != 3 {
		t.Fatalf("new key: %+v %+v", rep, rep.Seals)
	}
}

func TestSealedLogEmptyOrLate(t *testing.T) {
	s := newSealed(t, 3)
	s.l.Close()
	for _, f := range mustList(t, s.dir) {
		os.Remove(f.path)
	}
	os.Remove(filepath.Join(s.dir, headName))
	if rep := s.verify(t); rep.Problem != ProblemEmpty {
		t.Fatalf("deleted log: %+v", rep)
	}
	// The daemon restarted on the empty directory: a new log whose seals
	// continue the key chain but do not reach back to the key's epoch.
	l := openSealed(t, filepath.Dir(s.dir))
	appendN(t, l, 2)
	if err := l.Seal(context.Background(), SealStop); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if rep := s.verify(t); rep.Problem != ProblemStartsLate {
		t.Fatalf("new log after deletion: %+v", rep)
	}
}

func TestSealedLogStartsLate(t *testing.T) {
	base := t.TempDir()
	l := openTest(t, Options{Dir: filepath.Join(base, "audit"), MaxFileBytes: 2000,
		SealKeys: SealKeyFile{Path: filepath.Join(base, "seal.key")}, AnchorPath: filepath.Join(base, "anchor.json")})
	appendN(t, l, 20)
	vk, err := l.SetupSeals(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	dir := filepath.Join(base, "audit")
	files := mustList(t, dir)
	if len(files) < 3 {
		t.Fatalf("want several files, got %d", len(files))
	}
	// Drop the first file and renumber the rest: the chain alone would
	// say "deleted"; the key says the log starts after its genesis.
	os.Remove(files[0].path)
	for i, f := range files[1:] {
		os.Rename(f.path, logPath(dir, i+1))
	}
	rep, _ := VerifyWith(dir, VerifyOptions{Seal: &vk})
	if rep.Problem != ProblemStartsLate {
		t.Fatalf("%+v", rep)
	}
}

func TestSealedLogEndsEarly(t *testing.T) {
	s := newSealed(t, 3)
	appendN(t, s.l, 3)
	s.seal(t)
	appendN(t, s.l, 3)
	if err := s.l.Seal(context.Background(), SealStop); err != nil {
		t.Fatal(err)
	}
	s.l.Close()
	// Cut the last 4 events (the final seal among them) and write a head
	// that matches the new end: the chain verifies, the anchor does not.
	path := logPath(s.dir, 1)
	lines := readLines(t, path)
	lines = lines[:len(lines)-4]
	writeLines(t, path, lines)
	ln, _ := parseLine(lines[len(lines)-1])
	os.WriteFile(filepath.Join(s.dir, headName), fmt.Appendf(nil, `{"hash":%q,"seq":%d,"sig":%q}`, ln.hash, ln.seq, ln.sig), 0o600)
	if rep, _ := Verify(s.dir, testKey); rep.Failed() {
		t.Fatalf("the cut is not visible without the anchor; want a passing chain: %+v", rep)
	}
	if rep := s.verify(t); rep.Problem != ProblemEndsEarly {
		t.Fatalf("%+v", rep)
	}
}

// forge rewrites the log in dir (one file, unsigned events) with edit
// applied to event seq at, recomputing every hash after it and re-signing
// the seals of epochs from stolen.Epoch on with stolen and keys of the
// forger's own making: what someone who copied the key file at the time
// of stolen can do.
func forge(t *testing.T, dir string, at uint64, edit func(fields []byte) []byte, stolen SealKey) {
	t.Helper()
	path := logPath(dir, 1)
	lines := readLines(t, path)
	enc := newEncoder(nil)
	prev := Genesis
	key := stolen
	var out [][]byte
	for _, b := range lines {
		ln, err := parseLine(b)
		if err != nil {
			t.Fatal(err)
		}
		fields := ln.fields
		if ln.seq == at {
			fields = edit(fields)
		}
		if ln.typ == TypeLogSealed {
			var s LogSealed
			json.Unmarshal(fields, &s)
			if s.Epoch >= stolen.Epoch {
				next, pub, _ := newSealKey(s.Epoch + 1)
				s.Next = formatPublic(pub)
				s.Sig = edPrefix + fmt.Sprintf("%x", ed25519.Sign(key.Private, SealMessage(ln.seq, prev, string(ln.ts), s)))
				key = next
				fields, _ = canonicalFields(s)
			}
		}
		ev, _ := ln.event()
		line, h, _ := enc.appendLine(nil, ln.seq, ev.TS, ln.typ, fields, prev)
		out = append(out, line[:len(line)-1])
		prev = h
	}
	writeLines(t, path, out)
	os.Remove(filepath.Join(dir, headName))
}

func TestStolenKeyCannotRewriteThePast(t *testing.T) {
	base := t.TempDir()
	o := Options{Dir: filepath.Join(base, "audit"), SealKeys: SealKeyFile{Path: filepath.Join(base, "seal.key")}}
	l := openTest(t, o)
	appendN(t, l, 4) // seq 1-4
	vk, err := l.SetupSeals(context.Background(), false)
	if err != nil { // seal epoch 0 at seq 5
		t.Fatal(err)
	}
	appendN(t, l, 4) // seq 6-9
	if err := l.Seal(context.Background(), SealSchedule); err != nil {
		t.Fatal(err) // seal epoch 1 at seq 10
	}
	// Time T: the key file is copied (epoch 2's key).
	stolen, err := o.SealKeys.Load()
	if err != nil || stolen.Epoch != 2 {
		t.Fatalf("stolen %d %v", stolen.Epoch, err)
	}
	appendN(t, l, 4) // seq 11-14
	if err := l.Seal(context.Background(), SealStop); err != nil {
		t.Fatal(err) // seal epoch 2 at seq 15
	}
	l.Close()
	orig, _ := os.ReadFile(logPath(o.Dir, 1))
	edit := func(f []byte) []byte {
		e := strings.NewReplacer(`"inventory-local"`, `"somewhere-else"`, `"other"`, `"another"`).Replace(string(f))
		if e == string(f) {
			t.Fatalf("the edit changes nothing in %s", f)
		}
		return []byte(e)
	}
	// Every event but the seals: those before T (seq 1-9) are covered by
	// seals epoch 0 (seq 5) and 1 (seq 10), whose keys are erased; those
	// after (seq 11-14) are the stolen key's epoch, which it can rewrite.
	for at := uint64(1); at <= 14; at++ {
		if at == 5 || at == 10 {
			continue
		}
		tc := struct {
			at     uint64
			ok     bool
			badSeq uint64
		}{at: at, ok: at > 10, badSeq: 5}
		if at > 5 {
			tc.badSeq = 10
		}
		os.WriteFile(logPath(o.Dir, 1), orig, 0o600)
		forge(t, o.Dir, tc.at, edit, stolen)
		rep, _ := VerifyWith(o.Dir, VerifyOptions{Seal: &vk})
		if tc.ok != !rep.Failed() || !tc.ok && (rep.Problem != ProblemBadSeal || rep.FirstBad != tc.badSeq) {
			t.Errorf("edit at seq %d with the key stolen after seq 10: %s at %d (%s); want ok=%v bad at %d", tc.at, rep.Problem, rep.FirstBad, rep.Detail, tc.ok, tc.badSeq)
		}
	}
}

func TestSwapDetected(t *testing.T) {
	for _, tc := range []struct {
		name   string
		swap   func(t *testing.T, dir string)
		change string
		file   string
		after  string // the problem Verify reports after the person acknowledged
	}{
		{"cp+mv segment", func(t *testing.T, dir string) { cpmv(t, logPath(dir, 1)) }, "replaced", fileName(1), ""},
		{"cp+mv head", func(t *testing.T, dir string) { cpmv(t, filepath.Join(dir, headName)) }, "replaced", headName, ""},
		{"rm segment", func(t *testing.T, dir string) { os.Remove(logPath(dir, 1)) }, "deleted", fileName(1), ProblemDeleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "audit")
			l := openTest(t, Options{Dir: dir, Key: testKey})
			appendN(t, l, 3)
			tc.swap(t, dir)
			if l.Tampered() != nil {
				t.Fatal("tampering reported before a commit")
			}
			appendN(t, l, 1) // this commit notices
			err := l.Tampered()
			tp, ok := l.TamperedEvent()
			if !errors.Is(err, ErrTampered) || !ok || tp.Seq != 4 || len(tp.Fields.Files) != 1 ||
				tp.Fields.Files[0] != (TamperedFile{File: tc.file, Change: tc.change}) || tp.Fields.Segment != fileName(2) {
				t.Fatalf("Tampered = %v, %+v", err, tp)
			}
			// The events after it are in the new file, not in the swapped one.
			if evs := readLines(t, logPath(dir, 2)); len(evs) != 2 {
				t.Fatalf("new file holds %d lines, want log_tampered and the event", len(evs))
			}
			if rep, _ := Verify(dir, testKey); rep.Problem != ProblemTampered && rep.Problem != ProblemDeleted {
				t.Fatalf("Verify = %+v", rep)
			}
			// It survives a restart, and stops after acknowledgement.
			l.Close()
			l = openTest(t, Options{Dir: dir, Key: testKey})
			if !errors.Is(l.Tampered(), ErrTampered) {
				t.Fatal("tampering forgotten by a restart")
			}
			if err := l.AcknowledgeTampered(context.Background(), "test"); err != nil {
				t.Fatal(err)
			}
			if l.Tampered() != nil {
				t.Fatal("still tampered after acknowledgement")
			}
			l.Close()
			rep, _ := Verify(dir, testKey)
			if rep.Problem != tc.after {
				t.Fatalf("after acknowledgement Verify = %+v, want %q", rep, tc.after)
			}
			if tc.after == "" && (len(rep.Tampered) != 1 || rep.Tampered[0] != 4) {
				t.Fatalf("Report.Tampered = %v", rep.Tampered)
			}
		})
	}
}

func cpmv(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".copy", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".copy", path); err != nil {
		t.Fatal(err)
	}
}

func mustList(t *testing.T, dir string) []logFile {
	t.Helper()
	f, err := listFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestSealKeyStaleOrMissing(t *testing.T) {
	s := newSealed(t, 2)
	old, err := os.ReadFile(s.keyPath)
	if err != nil {
		t.Fatal(err)
	}
	s.seal(t) // nothing written since setup: no seal
	appendN(t, s.l, 1)
	s.seal(t)
	s.l.Close()
	// The key file of an earlier epoch put back.
	os.WriteFile(s.keyPath, old, 0o600)
	l := openSealed(t, filepath.Dir(s.dir))
	if _, ok := l.Sealing(); ok || l.SealErr() == nil || !strings.Contains(l.SealErr().Error(), "epoch 1") {
		t.Fatalf("an old key: Sealing ok, SealErr %v", l.SealErr())
	}
	if err := l.Seal(context.Background(), SealStop); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if rep := s.verify(t); rep.Failed() {
		t.Fatalf("the old key sealed the log again: %+v", rep)
	}
	// The key file deleted.
	os.Remove(s.keyPath)
	l = openSealed(t, filepath.Dir(s.dir))
	if l.SealErr() == nil || !strings.Contains(l.SealErr().Error(), "gone") {
		t.Fatalf("a deleted key: SealErr %v", l.SealErr())
	}
	if _, err := l.SetupSeals(context.Background(), false); !errors.Is(err, ErrSealKeysExist) {
		t.Fatalf("SetupSeals without force after the key was deleted = %v", err)
	}
}

func TestDirectoryDeletedUnderTheLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	l := openTest(t, Options{Dir: dir})
	appendN(t, l, 3)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), TypeLogResumed, nil); err != nil {
		t.Fatalf("Append after rm -rf: %v", err)
	}
	tp, ok := l.TamperedEvent()
	if !ok || len(tp.Fields.Files) != 2 || tp.Fields.Files[0].Change != "deleted" || tp.Fields.LastSeq != 3 {
		t.Fatalf("TamperedEvent = %+v, %v", tp, ok)
	}
	l.Close()
	if rep, _ := Verify(dir, nil); rep.Problem != ProblemDeleted {
		t.Fatalf("Verify = %+v; want the missing file reported", rep)
	}
}

// failingKeys is a SealKeyFile whose Replace fails on call number failAt
// (1-based), as a crash at that point would leave the store.
type failingKeys struct {
	SealKeyFile
	calls, failAt int
}

func (f *failingKeys) Replace(k SealKey) error {
	f.calls++
	if f.calls == f.failAt {
		return errors.New("injected: the process died here")
	}
	return f.SealKeyFile.Replace(k)
}

// TestSealInterrupted: a crash between a seal's fsync and the key's
// replacement is finished by the next Open, and a crash before the seal
// leaves the current key; either way the epochs that follow verify.
func TestSealInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		failAt int // Replace calls in a seal: 1 stores the next key beside the current, 2 replaces
		seals  int // proven at the end
	}{
		{"after the seal", 2, 3},  // setup, the interrupted one, stop
		{"before the seal", 1, 2}, // setup, stop
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSealed(t, 2)
			s.l.Close()
			base := filepath.Dir(s.dir)
			fk := &failingKeys{SealKeyFile: SealKeyFile{Path: s.keyPath}, failAt: tc.failAt}
			o := Options{Dir: s.dir, Key: testKey, SealKeys: fk, AnchorPath: s.anchorPath}
			l := openTest(t, o)
			appendN(t, l, 2)
			err := l.Seal(context.Background(), SealSchedule)
			if tc.failAt == 1 && err == nil || l.SealErr() == nil {
				t.Fatalf("Seal = %v, SealErr %v: want the injected failure reported", err, l.SealErr())
			}
			l.Close() // the "crash": the store is as the failure left it
			l = openSealed(t, base)
			if l.SealErr() != nil {
				t.Fatalf("after reopening: %v", l.SealErr())
			}
			appendN(t, l, 2)
			if err := l.Seal(context.Background(), SealStop); err != nil {
				t.Fatal(err)
			}
			l.Close()
			if rep := s.verify(t); rep.Failed() || rep.Seals.Proven != tc.seals {
				t.Fatalf("%+v %+v", rep, rep.Seals)
			}
		})
	}
}
