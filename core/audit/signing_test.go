package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const offReason = "settings.auditSigning is false"

// logTypes returns the type and whether it is signed of every event of the
// log in dir, as "type" or "type+sig".
func logTypes(t *testing.T, dir string) []string {
	t.Helper()
	evs, err := Tail(dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		s := e.Type
		if e.Sig != "" {
			s += "+sig"
		}
		out = append(out, s)
	}
	return out
}

// verifyOK verifies dir with and without the key and returns the report
// with the key.
func verifyOK(t *testing.T, dir string) Report {
	t.Helper()
	rep, err := Verify(dir, testKey)
	if err != nil || rep.Problem != "" {
		t.Fatalf("Verify with key = %+v, %v", rep, err)
	}
	nokey, err := Verify(dir, nil)
	if err != nil || nokey.Problem != "" || nokey.Events != rep.Events {
		t.Fatalf("Verify without key = %+v, %v", nokey, err)
	}
	if diff := cmp.Diff(rep.SigningOff, nokey.SigningOff); diff != "" {
		t.Errorf("SigningOff with and without key differ (-key +nokey):\n%s", diff)
	}
	return rep
}

// TestSigningOffAndOn turns signing off and on again on a live log, twice,
// and across reopenings: Verify accepts the unsigned stretches, each opened
// by a signed signing_disabled and closed by a signed signing_enabled, and
// reports them.
func TestSigningOffAndOn(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "audit")
	l := openTest(t, Options{Dir: dir, Key: testKey})
	appendN(t, l, 3)
	if !l.Signing() {
		t.Fatal("Signing() = false for a log opened with a key")
	}
	if err := l.DisableSigning(ctx, offReason); err != nil {
		t.Fatal(err)
	}
	if l.Signing() {
		t.Fatal("Signing() = true after DisableSigning")
	}
	// Turning off what is off writes nothing.
	if err := l.DisableSigning(ctx, offReason); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 2)
	rep := verifyOK(t, dir)
	if diff := cmp.Diff([]SigningOff{{Disabled: 4, Reason: offReason}}, rep.SigningOff); diff != "" {
		t.Errorf("SigningOff (-want +got):\n%s", diff)
	}
	if rep.Unsigned != 0 || rep.SignedEvents != 4 || rep.Events != 6 {
		t.Errorf("report %+v, want 6 events of which 4 signed, no unsigned prefix", rep)
	}

	if err := l.EnableSigning(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	if err := l.EnableSigning(ctx, testKey); err != nil { // on already: nothing
		t.Fatal(err)
	}
	if !l.Signing() {
		t.Fatal("Signing() = false after EnableSigning")
	}
	appendN(t, l, 1)
	if err := l.DisableSigning(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 1)
	l.Close()
	want := []string{"tool_called+sig", "tool_completed+sig", "catalog_revised+sig", "signing_disabled+sig", "tool_called", "tool_completed",
		"signing_enabled+sig", "tool_called+sig", "signing_disabled+sig", "tool_called"}
	if diff := cmp.Diff(want, logTypes(t, dir)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	evs, _ := Tail(dir, 4)
	var se SigningEnabled
	if err := evs[0].DecodeFields(&se); err != nil || se.UnsignedThrough != 6 {
		t.Errorf("signing_enabled at seq %d: %+v, %v; want unsignedThrough 6", evs[0].Seq, se, err)
	}
	rep = verifyOK(t, dir)
	if diff := cmp.Diff([]SigningOff{{Disabled: 4, Enabled: 7, Reason: offReason}, {Disabled: 9, Reason: "again"}}, rep.SigningOff); diff != "" {
		t.Errorf("SigningOff (-want +got):\n%s", diff)
	}

	// Reopened without a key, the log goes on unsigned; reopened with it,
	// signing resumes with a signing_enabled.
	l = openTest(t, Options{Dir: dir})
	appendN(t, l, 1)
	l.Close()
	l = openTest(t, Options{Dir: dir, Key: testKey})
	appendN(t, l, 1)
	l.Close()
	if got := logTypes(t, dir)[10:]; !slices.Equal(got, []string{"tool_called", "signing_enabled+sig", "tool_called+sig"}) {
		t.Fatalf("events after reopening: %q", got)
	}
	rep = verifyOK(t, dir)
	if n := len(rep.SigningOff); n != 2 || rep.SigningOff[1].Enabled != 12 {
		t.Errorf("SigningOff = %+v, want the second stretch closed at seq 12", rep.SigningOff)
	}
}

// TestSigningDisabledLast: a log whose last event is signing_disabled,
// reopened with the key, is closed at once by a signing_enabled naming it.
func TestSigningDisabledLast(t *testing.T) {
	dir := writeLog(t, 2, testKey)
	l := openTest(t, Options{Dir: dir, Key: testKey})
	if err := l.DisableSigning(context.Background(), offReason); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if rep := verifyOK(t, dir); len(rep.SigningOff) != 1 || rep.SigningOff[0].Disabled != 3 || rep.SigningOff[0].Enabled != 0 {
		t.Fatalf("SigningOff = %+v", rep.SigningOff)
	}
	l = openTest(t, Options{Dir: dir, Key: testKey})
	l.Close()
	evs, _ := Tail(dir, 1)
	var se SigningEnabled
	if evs[0].Type != TypeSigningEnabled || evs[0].DecodeFields(&se) != nil || se.UnsignedThrough != 3 {
		t.Fatalf("last event %+v, want signing_enabled with unsignedThrough 3", evs[0])
	}
	if rep := verifyOK(t, dir); rep.SigningOff[0].Enabled != 4 {
		t.Fatalf("SigningOff = %+v", rep.SigningOff)
	}
}

// TestEnableSigningCases: the key rules of EnableSigning and DisableSigning.
func TestEnableSigningCases(t *testing.T) {
	ctx := context.Background()

	// An empty log: no signing_enabled, the first event is signed.
	dir := filepath.Join(t.TempDir(), "audit")
	l := openTest(t, Options{Dir: dir})
	if err := l.EnableSigning(ctx, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("EnableSigning(nil) = %v, want ErrInvalid", err)
	}
	if err := l.EnableSigning(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	if err := l.EnableSigning(ctx, []byte("another key")); !errors.Is(err, ErrInvalid) {
		t.Errorf("EnableSigning with another key = %v, want ErrInvalid", err)
	}
	appendN(t, l, 2)
	l.Close()
	if got := logTypes(t, dir); !slices.Equal(got, []string{"tool_called+sig", "tool_completed+sig"}) {
		t.Errorf("events %q", got)
	}
	verifyOK(t, dir)

	// An unsigned log: signing_enabled closes the unsigned prefix.
	dir = writeLog(t, 2, nil)
	l = openTest(t, Options{Dir: dir})
	if err := l.DisableSigning(ctx, offReason); err != nil { // unsigned already: nothing
		t.Fatal(err)
	}
	if err := l.EnableSigning(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 1)
	l.Close()
	if got := logTypes(t, dir); !slices.Equal(got, []string{"tool_called", "tool_completed", "signing_enabled+sig", "tool_called+sig"}) {
		t.Errorf("events %q", got)
	}
	if rep := verifyOK(t, dir); rep.Unsigned != 2 || len(rep.SigningOff) != 0 {
		t.Errorf("report %+v", rep)
	}

	// A signed log opened without the key cannot turn signing off: the
	// event could not be signed. With the key given later, it signs on.
	dir = writeLog(t, 2, testKey)
	l = openTest(t, Options{Dir: dir})
	if err := l.DisableSigning(ctx, offReason); !errors.Is(err, ErrInvalid) {
		t.Errorf("DisableSigning without the key = %v, want ErrInvalid", err)
	}
	if err := l.EnableSigning(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 1)
	l.Close()
	if got := logTypes(t, dir); !slices.Equal(got, []string{"tool_called+sig", "tool_completed+sig", "tool_called+sig"}) {
		t.Errorf("events %q", got)
	}
	verifyOK(t, dir)
}

// TestSigningChangeFailsClosed: a signing change that cannot be written
// fails the Log closed like an Append, never leaves it unsigned, and the
// log verifies after Recover.
func TestSigningChangeFailsClosed(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		key      []byte // at Open
		change   func(l *Log) error
		fail     func(h *failingHooks, v bool)
		signing  bool // after the failure and after Recover
		lastType string
	}{
		{"disable, write", testKey, func(l *Log) error { return l.DisableSigning(ctx, offReason) },
			func(h *failingHooks, v bool) { h.failWrite.Store(v) }, true, "x+sig"},
		// The fsync failed but the event is on disk: Recover closes the
		// stretch it opened at once.
		{"disable, sync", testKey, func(l *Log) error { return l.DisableSigning(ctx, offReason) },
			func(h *failingHooks, v bool) { h.failSync.Store(v) }, true, "x+sig"},
		{"enable, write", nil, func(l *Log) error { return l.EnableSigning(ctx, testKey) },
			func(h *failingHooks, v bool) { h.failWrite.Store(v) }, true, "x+sig"},
		{"enable, sync", nil, func(l *Log) error { return l.EnableSigning(ctx, testKey) },
			func(h *failingHooks, v bool) { h.failSync.Store(v) }, true, "x+sig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fh := &failingHooks{}
			l := openTest(t, Options{Dir: dir, Key: tc.key, hooks: fh.hooks()})
			appendN(t, l, 2)
			tc.fail(fh, true)
			if err := tc.change(l); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("change = %v, want ErrUnavailable", err)
			}
			tc.fail(fh, false)
			if l.Signing() != tc.signing {
				t.Errorf("Signing() = %v after the failure, want %v", l.Signing(), tc.signing)
			}
			// Failed closed: nothing else is written, and the change is
			// refused too, until Recover.
			if err := tc.change(l); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("change while failed = %v, want ErrUnavailable", err)
			}
			if _, err := l.Append(ctx, "x", nil); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Append while failed = %v", err)
			}
			if err := l.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(ctx, "x", nil); err != nil {
				t.Fatal(err)
			}
			l.Close()
			types := logTypes(t, dir)
			if got := types[len(types)-1]; got != tc.lastType {
				t.Errorf("last event %s, want %s (events %q)", got, tc.lastType, types)
			}
			verifyOK(t, dir)
		})
	}
}

// signedLine encodes one event as the Log would with key (nil: unsigned),
// for forging lines as someone who holds the key, or not, would.
func signedLine(t *testing.T, key []byte, seq uint64, typ string, fields any, prev string) ([]byte, string) {
	t.Helper()
	canon, err := canonicalFields(fields)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 30, 2, 0, 0, int(seq), time.UTC)
	out, h, _ := newEncoder(key).appendLine(nil, seq, ts, typ, canon, prev)
	return bytes.TrimSuffix(out, []byte{'\n'}), h
}

// ev is one event of a forged log: its type and the key that signs it
// (nil: unsigned).
type ev struct {
	typ    string
	fields any
	key    []byte
}

// forgeLog writes a log of evs, chained and with head.json, as someone
// holding the keys given would.
func forgeLog(t *testing.T, evs []ev) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "audit")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	prev := Genesis
	for i, e := range evs {
		var b []byte
		b, prev = signedLine(t, e.key, uint64(i+1), e.typ, e.fields, prev)
		lines = append(lines, b)
	}
	writeLines(t, logPath(dir, 1), lines)
	head := fmt.Sprintf(`{"seq":%d,"hash":%q}`, len(evs), prev)
	if last := evs[len(evs)-1]; last.key != nil {
		// As the Log does: the head carries the last event's signature.
		var h struct{ Sig string }
		if err := json.Unmarshal(lines[len(lines)-1], &h); err != nil {
			t.Fatal(err)
		}
		head = fmt.Sprintf(`{"seq":%d,"hash":%q,"sig":%q}`, len(evs), prev, h.Sig)
	}
	if err := os.WriteFile(filepath.Join(dir, headName), []byte(head), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestVerifySigningTamper: every way of getting unsigned events past the
// verifier other than a genuine signing_disabled fails, with and without
// the key where the key is not what tells.
func TestVerifySigningTamper(t *testing.T) {
	k, other := testKey, []byte("another key, not the log's")
	off := SigningDisabled{Reason: offReason}
	x := map[string]string{"a": "b"}
	for _, tc := range []struct {
		name     string
		evs      []ev
		problem  string // with and without the key
		firstBad uint64
		keyOnly  bool // only the key tells (a signature that does not match)
	}{
		{"genuine: off, on, off", []ev{{"x", x, k}, {TypeSigningDisabled, off, k}, {"x", x, nil},
			{TypeSigningEnabled, SigningEnabled{UnsignedThrough: 3}, k}, {"x", x, k}, {TypeSigningDisabled, off, k}, {"x", x, nil}}, "", 0, false},
		{"genuine: unsigned prefix, on, off", []ev{{"x", x, nil}, {TypeSigningEnabled, SigningEnabled{UnsignedThrough: 1}, k},
			{TypeSigningDisabled, off, k}, {TypeSigningEnabled, SigningEnabled{UnsignedThrough: 3}, k}, {"x", x, k}}, "", 0, false},
		{"unsigned after signed, no signing_disabled", []ev{{"x", x, k}, {"x", x, k}, {"x", x, nil}}, ProblemBadSignature, 3, false},
		{"unsigned signing_disabled", []ev{{"x", x, k}, {TypeSigningDisabled, off, nil}, {"x", x, nil}}, ProblemBadSignature, 2, false},
		{"unsigned signing_disabled first", []ev{{TypeSigningDisabled, off, nil}, {"x", x, nil}}, ProblemBadSignature, 1, false},
		{"signing_disabled signed with another key", []ev{{"x", x, k}, {TypeSigningDisabled, off, other}, {"x", x, nil}}, ProblemBadSignature, 2, true},
		{"unsigned signing_enabled", []ev{{"x", x, k}, {TypeSigningDisabled, off, k}, {"x", x, nil},
			{TypeSigningEnabled, SigningEnabled{UnsignedThrough: 3}, nil}, {"x", x, nil}}, ProblemBadSignature, 4, false},
		{"signing_enabled with a wrong unsignedThrough", []ev{{"x", x, k}, {TypeSigningDisabled, off, k}, {"x", x, nil},
			{TypeSigningEnabled, SigningEnabled{UnsignedThrough: 2}, k}, {"x", x, k}}, ProblemBadSignature, 4, false},
		{"signing_enabled closing an unsigned prefix wrongly", []ev{{"x", x, nil}, {"x", x, nil},
			{TypeSigningEnabled, SigningEnabled{UnsignedThrough: 1}, k}}, ProblemBadSignature, 3, false},
		{"signing_enabled while signing is on", []ev{{"x", x, k}, {TypeSigningEnabled, SigningEnabled{UnsignedThrough: 1}, k}}, ProblemBadSignature, 2, false},
		{"signed event after signing_disabled without signing_enabled", []ev{{"x", x, k}, {TypeSigningDisabled, off, k}, {"x", x, nil},
			{"x", x, k}}, ProblemBadSignature, 4, false},
		{"signing_disabled twice", []ev{{"x", x, k}, {TypeSigningDisabled, off, k}, {TypeSigningDisabled, off, k}}, ProblemBadSignature, 3, false},
		{"signing_disabled closing an unsigned prefix", []ev{{"x", x, nil}, {TypeSigningDisabled, off, k}, {"x", x, nil}}, ProblemBadSignature, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := forgeLog(t, tc.evs)
			for _, key := range [][]byte{k, nil} {
				rep, err := Verify(dir, key)
				problem, firstBad := tc.problem, tc.firstBad
				if key == nil && tc.keyOnly {
					problem, firstBad = "", 0
				}
				if rep.Problem != problem || rep.FirstBad != firstBad {
					t.Errorf("Verify (key %v) = %+v, %v; want problem %q at seq %d", key != nil, rep, err, problem, firstBad)
				}
				if problem != "" && !errors.Is(err, ErrBroken) {
					t.Errorf("Verify (key %v) error = %v, want ErrBroken", key != nil, err)
				}
				t.Logf("key %v: %v", key != nil, err)
			}
		})
	}
}

// TestVerifySigningOffTamperRealLog damages a log that the Log wrote with a
// signing_disabled, as someone who can write the file but has no key would.
func TestVerifySigningOffTamperRealLog(t *testing.T) {
	ctx := context.Background()
	write := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "audit")
		l := openTest(t, Options{Dir: dir, Key: testKey})
		appendN(t, l, 4)
		if err := l.DisableSigning(ctx, offReason); err != nil { // seq 5
			t.Fatal(err)
		}
		appendN(t, l, 3) // 6 to 8, unsigned
		l.Close()
		verifyOK(t, dir)
		return dir
	}
	for _, tc := range []struct {
		name     string
		mutate   func(t *testing.T, dir string, lines [][]byte) [][]byte
		keys     [][]byte // the keys Verify is given
		problem  string
		firstBad uint64
	}{
		{"signing_disabled removed", func(t *testing.T, dir string, ls [][]byte) [][]byte {
			return slices.Delete(ls, 4, 5)
		}, [][]byte{testKey, nil}, ProblemDeleted, 5},
		{"signing_disabled removed, the rest resealed", func(t *testing.T, dir string, ls [][]byte) [][]byte {
			ls = slices.Delete(ls, 4, 5)
			prev := string(parseOK(t, ls[3]).hash)
			for i := 4; i < len(ls); i++ {
				ls[i] = replaceOnce(t, ls[i], fmt.Sprintf(`"seq":%d,`, i+2), fmt.Sprintf(`"seq":%d,`, i+1))
				ls[i], prev = reseal(t, ls[i], prev)
			}
			os.WriteFile(filepath.Join(dir, headName), []byte(`{"seq":7,"hash":"`+prev+`"}`), 0o600)
			return ls
		}, [][]byte{testKey, nil}, ProblemBadSignature, 5},
		{"signing_disabled's signature flipped", func(t *testing.T, dir string, ls [][]byte) [][]byte {
			ls[4] = flipHex(t, ls[4], "sig")
			return ls
		}, [][]byte{testKey}, ProblemBadSignature, 5},
		{"signing_disabled's signature removed", func(t *testing.T, dir string, ls [][]byte) [][]byte {
			ls[4], _ = reseal(t, ls[4], string(parseOK(t, ls[3]).hash))
			return ls
		}, [][]byte{testKey, nil}, ProblemBadSignature, 5},
		{"signing_disabled's reason edited", func(t *testing.T, dir string, ls [][]byte) [][]byte {
			ls[4] = replaceOnce(t, ls[4], offReason, "nothing to see")
			return ls
		}, [][]byte{testKey, nil}, ProblemEdited, 5},
		{"signing_disabled forged earlier, the rest resealed", func(t *testing.T, dir string, ls [][]byte) [][]byte {
			// Turn seq 2 into an unsigned signing_disabled so that the
			// signed events after it could be rewritten.
			prev := string(parseOK(t, ls[0]).hash)
			ls[1], prev = signedLine(t, nil, 2, TypeSigningDisabled, SigningDisabled{Reason: offReason}, prev)
			for i := 2; i < len(ls); i++ {
				ls[i], prev = reseal(t, ls[i], prev)
			}
			os.WriteFile(filepath.Join(dir, headName), []byte(`{"seq":8,"hash":"`+prev+`"}`), 0o600)
			return ls
		}, [][]byte{testKey, nil}, ProblemBadSignature, 2},
		{"an unsigned event after signing_disabled edited", func(t *testing.T, dir string, ls [][]byte) [][]byte {
			ls[6] = replaceOnce(t, ls[6], `"tool_completed"`, `"tool_called"`)
			return ls
		}, [][]byte{testKey, nil}, ProblemEdited, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t)
			if lines := tc.mutate(t, dir, readLines(t, logPath(dir, 1))); lines != nil {
				writeLines(t, logPath(dir, 1), lines)
			}
			for _, key := range tc.keys {
				rep, err := Verify(dir, key)
				if rep.Problem != tc.problem || rep.FirstBad != tc.firstBad || !errors.Is(err, ErrBroken) {
					t.Errorf("Verify (key %v) = %+v, %v; want problem %q at seq %d", key != nil, rep, err, tc.problem, tc.firstBad)
				}
				t.Logf("key %v: %v", key != nil, err)
			}
		})
	}
}

// TestHasSigned: whether any event of a log is signed, wherever it is.
func TestHasSigned(t *testing.T) {
	if got, err := HasSigned(filepath.Join(t.TempDir(), "missing")); got || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("HasSigned of a missing directory = %v, %v; want false, ErrNotExist", got, err)
	}
	if got, err := HasSigned(writeLog(t, 3, nil)); got || err != nil {
		t.Errorf("HasSigned of an unsigned log = %v, %v", got, err)
	}
	dir := writeLog(t, 2, testKey)
	l := openTest(t, Options{Dir: dir, Key: testKey})
	if err := l.DisableSigning(context.Background(), offReason); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 2)
	l.Close()
	if got, err := HasSigned(dir); !got || err != nil {
		t.Errorf("HasSigned of a log whose signing was turned off = %v, %v; want true", got, err)
	}
}
