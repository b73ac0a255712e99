package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gowebpki/jcs"
)

// TestLineFormatIndependent recomputes every hash and signature the way an
// independent verifier would: parse the line as JSON, drop hash and sig,
// canonicalise with RFC 8785, hash prev || canonical.
func TestLineFormatIndependent(t *testing.T) {
	dir := writeLog(t, 20, testKey)
	prev := Genesis
	for i, line := range readLines(t, logPath(dir, 1)) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %d is not JSON: %v", i+1, err)
		}
		var hash, sig, gotPrev string
		json.Unmarshal(m["hash"], &hash)
		json.Unmarshal(m["sig"], &sig)
		json.Unmarshal(m["prev"], &gotPrev)
		delete(m, "hash")
		delete(m, "sig")
		body, _ := json.Marshal(m)
		canon, err := jcs.Transform(body)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(append([]byte(gotPrev), canon...))
		if want := "sha256:" + hex.EncodeToString(sum[:]); hash != want {
			t.Fatalf("line %d: hash %s, independent computation %s", i+1, hash, want)
		}
		mac := hmac.New(sha256.New, testKey)
		mac.Write([]byte(hash))
		if want := "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil)); sig != want {
			t.Fatalf("line %d: sig %s, want %s", i+1, sig, want)
		}
		if gotPrev != prev {
			t.Fatalf("line %d: prev %s, want %s", i+1, gotPrev, prev)
		}
		var seq uint64
		json.Unmarshal(m["seq"], &seq)
		if seq != uint64(i+1) {
			t.Fatalf("line %d has seq %d", i+1, seq)
		}
		prev = hash
	}
}

func TestAppendReturnsEvent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	l := openTest(t, Options{Dir: dir})
	ev, err := l.Append(context.Background(), TypeRunStarted, RunStarted{AgentRun: "r1", ServerLabel: "s", Agent: Agent{Name: "claude-code", PID: 42}})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Seq != 1 || ev.Prev != Genesis || ev.Sig != "" || ev.TS.Location() != time.UTC {
		t.Errorf("event = %+v", ev)
	}
	if got, want := string(ev.Fields), `{"agent":{"name":"claude-code","pid":42},"agentRun":"r1","serverLabel":"s"}`; got != want {
		t.Errorf("fields = %s, want %s", got, want)
	}
	tail, err := Tail(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Event{ev}, tail); diff != "" {
		t.Errorf("Tail differs from the returned event (-want +got):\n%s", diff)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, logPath(dir, 1): 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", path, st.Mode().Perm(), want)
		}
	}
}

func TestAppendInvalid(t *testing.T) {
	l := openTest(t, Options{Dir: t.TempDir()})
	for _, tc := range []struct {
		typ    string
		fields any
	}{
		{"", nil},
		{"Tool-Called", nil},
		{"tool_called", []int{1}},
		{"tool_called", json.RawMessage(`"x"`)},
		{"tool_called", json.RawMessage(`{"a":`)},
		{TypeSigningDisabled, SigningDisabled{Reason: "forged"}}, // only DisableSigning writes it
		{TypeSigningEnabled, SigningEnabled{UnsignedThrough: 1}},
	} {
		if _, err := l.Append(context.Background(), tc.typ, tc.fields); !errors.Is(err, ErrInvalid) {
			t.Errorf("Append(%q, %v) = %v, want ErrInvalid", tc.typ, tc.fields, err)
		}
	}
	// Invalid events do not make the log fail.
	if _, err := l.Append(context.Background(), "x", nil); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentAppendsShareFsyncs(t *testing.T) {
	dir := t.TempDir()
	var syncs atomic.Int64
	l := openTest(t, Options{Dir: dir, hooks: &hooks{sync: func(f *os.File) error {
		syncs.Add(1)
		return f.Sync()
	}}})
	const workers, per = 8, 100
	var wg sync.WaitGroup
	seqs := make(chan uint64, workers*per)
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				typ, f := sampleFields(w*per + i)
				ev, err := l.Append(context.Background(), typ, f)
				if err != nil {
					t.Error(err)
					return
				}
				seqs <- ev.Seq
			}
		})
	}
	wg.Wait()
	close(seqs)
	seen := map[uint64]bool{}
	for s := range seqs {
		seen[s] = true
	}
	for s := uint64(1); s <= workers*per; s++ {
		if !seen[s] {
			t.Fatalf("seq %d was not returned", s)
		}
	}
	if n := syncs.Load(); n >= workers*per {
		t.Errorf("%d fsyncs for %d events: no group commit", n, workers*per)
	}
	l.Close()
	rep, err := Verify(dir, nil)
	if err != nil || rep.Events != workers*per {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

func TestReopenContinuesChain(t *testing.T) {
	dir := writeLog(t, 5, testKey)
	l := openTest(t, Options{Dir: dir, Key: testKey})
	ev, err := l.Append(context.Background(), "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Seq != 6 {
		t.Errorf("seq after reopen = %d, want 6", ev.Seq)
	}
	l.Close()
	if rep, err := Verify(dir, testKey); err != nil || rep.Events != 6 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

func TestSecondOpenIsLockedOut(t *testing.T) {
	dir := t.TempDir()
	openTest(t, Options{Dir: dir})
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("second Open = %v, want ErrUnavailable", err)
	}
}

func TestSigningEnabledLater(t *testing.T) {
	dir := writeLog(t, 4, nil)
	l := openTest(t, Options{Dir: dir, Key: testKey})
	appendN(t, l, 2)
	l.Close()
	evs, err := Tail(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].Type != TypeSigningEnabled || evs[0].Seq != 5 || evs[0].Sig == "" {
		t.Fatalf("event 5 = %+v, want signed signing_enabled", evs[0])
	}
	rep, err := Verify(dir, testKey)
	if err != nil || rep.Unsigned != 4 || rep.Events != 7 {
		t.Fatalf("Verify with key = %+v, %v", rep, err)
	}
	if _, err := Verify(dir, nil); err != nil {
		t.Fatalf("Verify without key: %v", err)
	}
	// An unsigned log cannot pass as signed.
	if rep, err := Verify(writeLog(t, 3, nil), testKey); !errors.Is(err, ErrBroken) || rep.Problem != ProblemBadSignature || rep.FirstBad != 1 {
		t.Fatalf("Verify of unsigned log with key = %+v, %v", rep, err)
	}
}

// failingHooks fail writes or syncs while fail is set; a failing write
// writes half of the bytes first, as a full disk can.
type failingHooks struct {
	failWrite, failSync atomic.Bool
}

func (h *failingHooks) hooks() *hooks {
	return &hooks{
		write: func(f *os.File, b []byte) (int, error) {
			if h.failWrite.Load() {
				n, _ := f.Write(b[:len(b)/2])
				return n, syscall.ENOSPC
			}
			return f.Write(b)
		},
		sync: func(f *os.File) error {
			if h.failSync.Load() {
				return syscall.EIO
			}
			return f.Sync()
		},
	}
}

func TestFailClosedAndRecover(t *testing.T) {
	for _, tc := range []struct {
		name      string
		set       func(*failingHooks, bool)
		cause     error
		recovered int // torn regions Verify lists afterwards
	}{
		{"write", func(h *failingHooks, v bool) { h.failWrite.Store(v) }, syscall.ENOSPC, 1},
		{"sync", func(h *failingHooks, v bool) { h.failSync.Store(v) }, syscall.EIO, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fh := &failingHooks{}
			l := openTest(t, Options{Dir: dir, Key: testKey, hooks: fh.hooks()})
			appendN(t, l, 3)
			tc.set(fh, true)
			_, err := l.Append(context.Background(), TypeToolCalled, ToolCalled{Call: "c"})
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, tc.cause) {
				t.Fatalf("Append = %v, want ErrUnavailable wrapping %v", err, tc.cause)
			}
			tc.set(fh, false)
			// Fails closed until recovered, even though the disk is fine again.
			if _, err := l.Append(context.Background(), "x", nil); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Append after failure = %v, want ErrUnavailable", err)
			}
			if err := l.Err(); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Err = %v", err)
			}
			if err := l.Recover(context.Background()); err != nil {
				t.Fatalf("Recover: %v", err)
			}
			if _, err := l.Append(context.Background(), "x", nil); err != nil {
				t.Fatalf("Append after Recover: %v", err)
			}
			l.Close()
			rep, err := Verify(dir, testKey)
			if err != nil || len(rep.Recovered) != tc.recovered {
				t.Fatalf("Verify = %+v, %v", rep, err)
			}
		})
	}
}

// TestFailClosedRealRotation makes rotation hit a real OS error: the next
// file's name is taken by a directory.
func TestFailClosedRealRotation(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, Options{Dir: dir, MaxFileBytes: 1500})
	if err := os.Mkdir(logPath(dir, 2), 0o700); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := 0; i < 50 && err == nil; i++ {
		_, err = l.Append(context.Background(), "x", map[string]string{"pad": "0123456789012345678901234567890123456789"})
	}
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, os.ErrExist) {
		t.Fatalf("Append = %v, want ErrUnavailable wrapping EEXIST", err)
	}
	if _, err := l.Append(context.Background(), "x", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Append after failure = %v", err)
	}
}

// TestUnwritableDirectory is the permission case; root ignores modes.
func TestUnwritableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root: file modes do not stop writes (see TestFailClosedRealRotation, TestFileSizeLimit)")
	}
	dir := writeLog(t, 2, nil)
	os.Chmod(logPath(dir, 1), 0o400)
	os.Chmod(dir, 0o500)
	t.Cleanup(func() { os.Chmod(dir, 0o700); os.Chmod(logPath(dir, 1), 0o600) })
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open = %v, want ErrUnavailable", err)
	}
}

func TestArgsSummary(t *testing.T) {
	digest := func(s string) string { sum := sha256.Sum256([]byte(s)); return "sha256:" + hex.EncodeToString(sum[:]) }
	for _, tc := range []struct {
		in         string
		wantDigest string
		wantKeys   []string
	}{
		{`{"sku":"A-1", "count": 2.0, "b":{"z":1,"a":2}}`, digest(`{"b":{"a":2,"z":1},"count":2,"sku":"A-1"}`), []string{"b", "count", "sku"}},
		{``, digest(`{}`), []string{}},
		{`[1, 2]`, digest(`[1,2]`), nil},
		{`{"a":`, digest(`{"a":`), nil},
	} {
		d, k := ArgsSummary(json.RawMessage(tc.in))
		if d != tc.wantDigest || !cmp.Equal(k, tc.wantKeys) {
			t.Errorf("ArgsSummary(%s) = %s, %v; want %s, %v", tc.in, d, k, tc.wantDigest, tc.wantKeys)
		}
	}
}

// TestArgsSummaryCanonicalInput: arguments already in canonical form (the
// fast path, no transform) are summarised exactly as a canonicalisation
// followed by a parse of the member names would summarise them.
func TestArgsSummaryCanonicalInput(t *testing.T) {
	for _, in := range []string{
		`{}`,
		`{"message":"ping"}`,
		`{"a":1,"b":[true,false,null,{"y":"z"}],"c":{"d":-0.5}}`,
		`{"\u001f":1,"a\"b":2,"é":3,"😀":4,"ｆ":5}`,
		`{"n":1e+21,"s":"line\nbreak"}`,
		`[1,2]`,
		`"text"`,
	} {
		if !isCanonical([]byte(in)) {
			t.Fatalf("test input %s is not canonical", in)
		}
		canon, err := jcs.Transform([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		wantDigest := sha256Text(canon)
		var wantKeys []string
		var obj map[string]json.RawMessage
		if canon[0] == '{' && json.Unmarshal(canon, &obj) == nil {
			wantKeys = []string{}
			for k := range obj {
				wantKeys = append(wantKeys, k)
			}
			slices.Sort(wantKeys)
		}
		d, k := ArgsSummary(json.RawMessage(in))
		if d != wantDigest || !cmp.Equal(k, wantKeys) {
			t.Errorf("ArgsSummary(%s) = %s, %q; want %s, %q", in, d, k, wantDigest, wantKeys)
		}
	}
}

func TestIsCanonical(t *testing.T) {
	for _, in := range []string{
		`{}`, `{"a":1}`, `{"a":1,"b":[true,false,null]}`, `{"b":1,"a":2}`, `{"a":1,"a":2}`, `{ "a":1}`,
		`{"a":1.0}`, `{"a":1e3}`, `{"a":1000}`, `{"a":1e+21}`, `{"a":-0}`, `{"a":0.1}`, `{"a":"\u0001"}`,
		`{"a":"\u0041"}`, `{"a":"\/"}`, `{"a":"\n"}`, `{"a":"é"}`, `{"\ud83d\ude00":1,"\uffff":2}`,
		`{"😀":1,"":2}`, `{"":2,"😀":1}`, `{"a":"` + "\xff" + `"}`, `{"a":[]}`, `{"a":[1,]}`, `{"a":{}}x`,
		`{"a":"x","b\n":1}`, `{"b\n":1,"a":"x"}`, `{"a\\":1,"a":2}`, `{"a":2,"a\\":1}`,
	} {
		canon, err := jcs.Transform([]byte(in))
		want := err == nil && string(canon) == in
		if got := isCanonical([]byte(in)); got != want {
			t.Errorf("isCanonical(%s) = %v, want %v (jcs: %s, %v)", in, got, want, canon, err)
		}
	}
}
