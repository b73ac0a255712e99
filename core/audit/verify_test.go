package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// reseal re-encodes a line with a new prev and a fresh hash, as someone
// who can write the file but does not hold the key would: without sig.
func reseal(t testing.TB, b []byte, prev string) ([]byte, string) {
	t.Helper()
	l, err := parseLine(b)
	if err != nil {
		t.Fatalf("reseal: %v", err)
	}
	ts, _ := time.Parse(time.RFC3339Nano, string(l.ts))
	out, h, _ := newEncoder(nil).appendLine(nil, l.seq, ts, l.typ, l.fields, prev)
	return bytes.TrimSuffix(out, []byte{'\n'}), h
}

func replaceOnce(t testing.TB, b []byte, old, new string) []byte {
	t.Helper()
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%q not in %s", old, b)
	}
	return bytes.Replace(b, []byte(old), []byte(new), 1)
}

// flipHex changes the last hex digit of the value of member name.
func flipHex(t testing.TB, b []byte, name string) []byte {
	t.Helper()
	i := bytes.Index(b, []byte(`"`+name+`":"`))
	if i < 0 {
		t.Fatalf("no %s in %s", name, b)
	}
	j := i + len(name) + 4
	j += bytes.IndexByte(b[j:], '"') - 1
	out := bytes.Clone(b)
	if out[j] == '0' {
		out[j] = '1'
	} else {
		out[j] = '0'
	}
	return out
}

func TestVerify(t *testing.T) {
	const n = 10
	type mutation func(t *testing.T, dir string, lines [][]byte) [][]byte
	edit := func(f func(t *testing.T, b []byte) []byte) mutation {
		return func(t *testing.T, dir string, lines [][]byte) [][]byte {
			lines[4] = f(t, lines[4])
			return lines
		}
	}
	for _, tc := range []struct {
		name     string
		mutate   mutation
		key      []byte // for Verify
		problem  string
		firstBad uint64
	}{
		{"clean", nil, testKey, "", 0},
		{"clean without key", nil, nil, "", 0},
		{"edit fields", edit(func(t *testing.T, b []byte) []byte { return replaceOnce(t, b, `"tool_4"`, `"tool_9"`) }), nil, ProblemEdited, 5},
		{"edit seq", edit(func(t *testing.T, b []byte) []byte { return replaceOnce(t, b, `"seq":5,`, `"seq":50,`) }), nil, ProblemEdited, 5},
		{"edit ts", edit(func(t *testing.T, b []byte) []byte {
			return replaceOnce(t, b, `"ts":"2026-11-30T01`, `"ts":"2026-11-30T02`)
		}), nil, ProblemEdited, 5},
		{"edit type", edit(func(t *testing.T, b []byte) []byte {
			return replaceOnce(t, b, `"type":"tool_called"`, `"type":"tool_completed"`)
		}), nil, ProblemEdited, 5},
		{"edit prev", edit(func(t *testing.T, b []byte) []byte { return flipHex(t, b, "prev") }), nil, ProblemEdited, 5},
		{"edit hash", edit(func(t *testing.T, b []byte) []byte { return flipHex(t, b, "hash") }), nil, ProblemEdited, 5},
		{"edit sig", edit(func(t *testing.T, b []byte) []byte { return flipHex(t, b, "sig") }), testKey, ProblemBadSignature, 5},
		{"edit to garbage", edit(func(t *testing.T, b []byte) []byte { return b[:len(b)/2] }), nil, ProblemEdited, 5},
		{"edit and rehash, no key", func(t *testing.T, dir string, lines [][]byte) [][]byte {
			prev := string(parseOK(t, lines[3]).hash)
			lines[4], _ = reseal(t, replaceOnce(t, lines[4], `"tool_4"`, `"tool_9"`), prev)
			return lines
		}, nil, ProblemBadSignature, 5}, // resealed without the key: unsigned after signed events
		{"edit and rehash, key", func(t *testing.T, dir string, lines [][]byte) [][]byte {
			prev := string(parseOK(t, lines[3]).hash)
			lines[4], _ = reseal(t, replaceOnce(t, lines[4], `"tool_4"`, `"tool_9"`), prev)
			return lines
		}, testKey, ProblemBadSignature, 5},
		{"rehash whole chain and head, key", func(t *testing.T, dir string, lines [][]byte) [][]byte {
			prev := string(parseOK(t, lines[3]).hash)
			lines[4] = replaceOnce(t, lines[4], `"tool_4"`, `"tool_9"`)
			for i := 4; i < len(lines); i++ {
				lines[i], prev = reseal(t, lines[i], prev)
			}
			os.WriteFile(filepath.Join(dir, headName), []byte(`{"seq":10,"hash":"`+prev+`"}`), 0o600)
			return lines
		}, testKey, ProblemBadSignature, 5},
		{"edit and rehash last line", func(t *testing.T, dir string, lines [][]byte) [][]byte {
			prev := string(parseOK(t, lines[8]).hash)
			lines[9], _ = reseal(t, replaceOnce(t, lines[9], `"run-0"`, `"run-2"`), prev)
			return lines
		}, nil, ProblemBadSignature, 10},
		{"delete line", func(t *testing.T, dir string, lines [][]byte) [][]byte {
			return append(lines[:4:4], lines[5:]...)
		}, testKey, ProblemDeleted, 5},
		{"delete first line", func(t *testing.T, dir string, lines [][]byte) [][]byte { return lines[1:] }, nil, ProblemDeleted, 1},
		{"swap lines", func(t *testing.T, dir string, lines [][]byte) [][]byte {
			lines[4], lines[5] = lines[5], lines[4]
			return lines
		}, testKey, ProblemReordered, 5},
		{"move line later", func(t *testing.T, dir string, lines [][]byte) [][]byte {
			moved := lines[2]
			lines = append(lines[:2:2], lines[3:]...)
			return append(lines, moved)
		}, nil, ProblemReordered, 3},
		{"duplicate line", func(t *testing.T, dir string, lines [][]byte) [][]byte {
			return append(lines[:6:6], lines[5:]...)
		}, nil, ProblemReordered, 7},
		{"truncate whole lines", func(t *testing.T, dir string, lines [][]byte) [][]byte { return lines[:7] }, testKey, ProblemTruncated, 8},
		{"truncate mid-line", func(t *testing.T, dir string, lines [][]byte) [][]byte {
			b := bytes.Join(lines, []byte{'\n'})
			cut := bytes.Index(b, lines[8]) + 40
			os.WriteFile(logPath(dir, 1), b[:cut], 0o600)
			return nil
		}, testKey, ProblemTruncated, 9},
		{"wrong key", nil, []byte("another key"), ProblemBadSignature, 1},
		// Cut off the end and write a head to match, without the
		// signature the Log copies into it: caught with or without key.
		{"truncate and rewrite head", func(t *testing.T, dir string, lines [][]byte) [][]byte {
			last := parseOK(t, lines[7])
			os.WriteFile(filepath.Join(dir, headName), []byte(`{"seq":8,"hash":"`+last.hash+`"}`), 0o600)
			return lines[:8]
		}, nil, ProblemEdited, 8},
		{"head without its signature, key", func(t *testing.T, dir string, lines [][]byte) [][]byte {
			last := parseOK(t, lines[9])
			os.WriteFile(filepath.Join(dir, headName), []byte(`{"seq":10,"hash":"`+last.hash+`"}`), 0o600)
			return nil
		}, testKey, ProblemEdited, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeLog(t, n, testKey)
			if tc.mutate != nil {
				if lines := tc.mutate(t, dir, readLines(t, logPath(dir, 1))); lines != nil {
					writeLines(t, logPath(dir, 1), lines)
				}
			}
			rep, err := Verify(dir, tc.key)
			if got, want := [2]any{rep.Problem, rep.FirstBad}, [2]any{tc.problem, tc.firstBad}; got != want {
				t.Fatalf("Verify = %+v, %v; want problem %q at seq %d", rep, err, tc.problem, tc.firstBad)
			}
			if tc.problem == "" && (err != nil || rep.Events != n) {
				t.Fatalf("Verify = %+v, %v; want %d events", rep, err, n)
			}
			if tc.problem != "" && !errors.Is(err, ErrBroken) {
				t.Fatalf("Verify error = %v, want ErrBroken", err)
			}
			if tc.problem != "" && rep.Events != tc.firstBad-1 {
				t.Errorf("Events = %d, want %d", rep.Events, tc.firstBad-1)
			}
			t.Logf("%s", err)
		})
	}
}

func parseOK(t testing.TB, b []byte) line {
	t.Helper()
	l, err := parseLine(b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestVerifyWithoutHead: without head.json whole trailing lines can be
// dropped undetected; Verify says so.
func TestVerifyWithoutHead(t *testing.T) {
	dir := writeLog(t, 5, nil)
	os.Remove(filepath.Join(dir, headName))
	writeLines(t, logPath(dir, 1), readLines(t, logPath(dir, 1))[:3])
	rep, err := Verify(dir, nil)
	if err != nil || rep.Events != 3 || len(rep.Warnings) != 1 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

func TestRotation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	l := openTest(t, Options{Dir: dir, MaxFileBytes: 2000, Key: testKey})
	appendN(t, l, 30)
	l.Close()
	// Reopening continues in the last file and keeps rotating.
	l = openTest(t, Options{Dir: dir, MaxFileBytes: 2000, Key: testKey})
	appendN(t, l, 30)
	l.Close()
	files, _ := listFiles(dir)
	if len(files) < 4 {
		t.Fatalf("%d files, want rotation", len(files))
	}
	for _, f := range files[:len(files)-1] {
		st, _ := os.Stat(f.path)
		if st.Size() > 2000 {
			t.Errorf("%s is %d bytes, over MaxFileBytes", f.name, st.Size())
		}
	}
	rep, err := Verify(dir, testKey)
	if err != nil || rep.Events != 60 || rep.Files != len(files) {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
	tail, err := Tail(dir, 25)
	if err != nil || len(tail) != 25 || tail[0].Seq != 36 || tail[24].Seq != 60 {
		t.Fatalf("Tail = %d events from %v, %v", len(tail), tail[0].Seq, err)
	}

	// A middle file removed, or cut short, is found.
	second := readLines(t, files[1].path)
	firstOfSecond := parseOK(t, second[0]).seq
	lastOfSecond := parseOK(t, second[len(second)-1]).seq
	writeLines(t, files[1].path, second[:len(second)-1])
	if rep, _ := Verify(dir, testKey); rep.Problem != ProblemTruncated || rep.FirstBad != lastOfSecond {
		t.Errorf("after cutting %s: %+v, want truncated at %d", files[1].name, rep, lastOfSecond)
	}
	os.Remove(files[1].path)
	if rep, _ := Verify(dir, testKey); rep.Problem != ProblemDeleted || rep.FirstBad != firstOfSecond {
		t.Errorf("after removing %s: %+v, want deleted at %d", files[1].name, rep, firstOfSecond)
	}
}

func TestTornLastLine(t *testing.T) {
	dir := writeLog(t, 6, testKey)
	path := logPath(dir, 1)
	before, _ := os.ReadFile(path)
	lines := readLines(t, path)
	torn := lines[2][:57] // a prefix of a line, as a crash mid-write leaves
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(torn)
	f.Close()

	rep, err := Verify(dir, testKey)
	if err != nil || rep.Problem != ProblemTorn || rep.FirstBad != 7 || rep.Events != 6 || rep.Failed() {
		t.Fatalf("Verify before recovery = %+v, %v", rep, err)
	}

	l := openTest(t, Options{Dir: dir, Key: testKey})
	appendN(t, l, 2)
	l.Close()

	after, _ := os.ReadFile(path)
	if !bytes.HasPrefix(after, append(bytes.Clone(before), torn...)) {
		t.Fatal("the torn bytes or earlier lines were rewritten")
	}
	evs, _ := Tail(dir, 3)
	var rec LogRecovered
	if err := evs[0].DecodeFields(&rec); err != nil || evs[0].Type != TypeLogRecovered {
		t.Fatalf("event 7 = %+v, %v", evs[0], err)
	}
	sum := sha256.Sum256(torn)
	want := LogRecovered{File: fileName(1), Offset: int64(len(before)), Length: int64(len(torn)),
		Digest: "sha256:" + hex.EncodeToString(sum[:]), After: 6, HeadSeq: 6}
	if diff := cmp.Diff(want, rec); diff != "" {
		t.Errorf("log_recovered (-want +got):\n%s", diff)
	}
	rep, err = Verify(dir, testKey)
	wantRec := []Recovered{{Seq: 7, File: fileName(1), Offset: int64(len(before)), Length: int64(len(torn))}}
	if err != nil || rep.Problem != "" || rep.Events != 9 || !cmp.Equal(rep.Recovered, wantRec) {
		t.Fatalf("Verify after recovery = %+v, %v", rep, err)
	}

	// Changing the torn bytes afterwards is an edit.
	after[len(before)+3] ^= 1
	os.WriteFile(path, after, 0o600)
	if rep, _ := Verify(dir, testKey); rep.Problem != ProblemEdited || rep.FirstBad != 7 {
		t.Fatalf("Verify after editing the torn bytes = %+v", rep)
	}
}

// TestAppendedWholeLineIsAnEdit: a whole line that is not an event, added at
// the end, is an edit, not a torn write (a crash ends inside its last
// line), before a daemon opens the log and after it recorded the bytes with
// log_recovered alike.
func TestAppendedWholeLineIsAnEdit(t *testing.T) {
	for _, added := range []string{"garbage{\n", `{"seq":999}` + "\n", "a partial line\nthen more"} {
		dir := writeLog(t, 4, testKey)
		path := logPath(dir, 1)
		f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString(added)
		f.Close()
		if rep, _ := Verify(dir, testKey); rep.Problem != ProblemEdited || rep.FirstBad != 5 || !rep.Failed() {
			t.Errorf("%q appended: Verify = %+v; want edited at 5", added, rep)
		}
		l := openTest(t, Options{Dir: dir, Key: testKey})
		appendN(t, l, 1)
		l.Close()
		if rep, _ := Verify(dir, testKey); rep.Problem != ProblemEdited || !rep.Failed() {
			t.Errorf("%q appended, then a daemon opened the log: Verify = %+v; want edited", added, rep)
		}
	}
}

// TestUnterminatedLastEvent: a whole event missing only its newline is an
// event; Open adds the newline and writes no log_recovered.
func TestUnterminatedLastEvent(t *testing.T) {
	dir := writeLog(t, 3, nil)
	b, _ := os.ReadFile(logPath(dir, 1))
	os.WriteFile(logPath(dir, 1), b[:len(b)-1], 0o600)
	if rep, err := Verify(dir, nil); err != nil || rep.Problem != "" || rep.Events != 3 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
	l := openTest(t, Options{Dir: dir})
	ev, err := l.Append(context.Background(), "x", nil)
	if err != nil || ev.Seq != 4 {
		t.Fatalf("Append = %+v, %v", ev, err)
	}
	l.Close()
	if rep, err := Verify(dir, nil); err != nil || rep.Events != 4 || len(rep.Recovered) != 0 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

// TestTornUnsignedThenKey: recovery of an unsigned log opened with a key
// writes log_recovered unsigned, then signing_enabled.
func TestTornUnsignedThenKey(t *testing.T) {
	dir := writeLog(t, 3, nil)
	f, _ := os.OpenFile(logPath(dir, 1), os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte(`{"fields":{"a`))
	f.Close()
	l := openTest(t, Options{Dir: dir, Key: testKey})
	appendN(t, l, 1)
	l.Close()
	rep, err := Verify(dir, testKey)
	if err != nil || rep.Events != 6 || rep.Unsigned != 4 || len(rep.Recovered) != 1 {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}
