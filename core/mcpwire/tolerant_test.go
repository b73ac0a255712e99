package mcpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	tAnswer = `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a]}\"b"}]}}`
	tNote   = `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`
	tReq    = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"}}`
	bom     = "\xEF\xBB\xBF"
)

// readTolerant reads every line of in with a tolerant reader, returning the
// lines and the notes given.
func readTolerant(t *testing.T, in io.Reader) (lines []string, notes []string) {
	t.Helper()
	r := NewTolerantReader(in, 1<<20, func(s string) { notes = append(notes, s) })
	for {
		line, err := r.ReadLine()
		if err == io.EOF {
			return lines, notes
		}
		if err != nil {
			t.Fatalf("ReadLine: %v", err)
		}
		if len(line) == 0 {
			t.Fatal("ReadLine returned an empty line")
		}
		lines = append(lines, string(line))
	}
}

func TestTolerantReader(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		want  []string
		notes []uint8 // the repairs reported, in order
	}{
		{"clean lines", tAnswer + "\n" + tNote + "\r\n", []string{tAnswer, tNote}, nil},
		{"BOM at the start of the stream", bom + tAnswer + "\n" + tNote + "\n", []string{tAnswer, tNote}, []uint8{noteBOM}},
		{"BOM on every line", bom + tAnswer + "\n" + bom + tNote + "\n", []string{tAnswer, tNote}, []uint8{noteBOM}},
		{"colour around the message", "\x1b[32m" + tAnswer + "\x1b[0m\n", []string{tAnswer}, []uint8{noteControl}},
		{"colour with parameters and a reset line", "\x1b[1;38;5;208m" + tAnswer + "\n\x1b[0m\n", []string{tAnswer}, []uint8{noteControl}},
		{"OSC title ended by BEL", "\x1b]0;my server\x07" + tAnswer + "\n", []string{tAnswer}, []uint8{noteControl}},
		{"OSC hyperlink ended by ST", "\x1b]8;;http://x\x1b\\" + tAnswer + "\n", []string{tAnswer}, []uint8{noteControl}},
		{"charset and keypad escapes", "\x1b(B\x1b=" + tAnswer + "\n", []string{tAnswer}, []uint8{noteControl}},
		{"BOM then colour then spaces", bom + "\x1b[0m  \t" + tAnswer + "  \n", []string{tAnswer}, []uint8{noteBOM, noteControl}},
		{"NUL and BEL before", "\x00\x07" + tAnswer + "\n", []string{tAnswer}, []uint8{noteControl}},
		{"lone CR between two messages", tNote + "\r" + tAnswer + "\n", []string{tNote, tAnswer}, []uint8{noteSplit}},
		{"lone CRs only", tNote + "\r" + tAnswer + "\r", []string{tNote, tAnswer}, []uint8{noteSplit}},
		{"LF CR", tNote + "\n\r" + tAnswer + "\n", []string{tNote, tAnswer}, nil},
		{"messages back to back", tNote + tAnswer + "\n", []string{tNote, tAnswer}, []uint8{noteSplit}},
		{"messages with a space between", tNote + " " + tAnswer + "\n", []string{tNote, tAnswer}, []uint8{noteSplit}},
		{"CR inside a message is white space", "{\"jsonrpc\":\"2.0\",\r\"id\":1,\"result\":{}}\n", []string{"{\"jsonrpc\":\"2.0\",\r\"id\":1,\"result\":{}}"}, nil},
		{"batch of one answer", "[" + tAnswer + "]\n", []string{tAnswer}, []uint8{noteBatch}},
		{"batch of a notification and an answer", "[" + tNote + "," + tAnswer + "]\n", []string{tNote, tAnswer}, []uint8{noteBatch}},
		{"batch with white space", "[ " + tNote + " , " + tAnswer + " ]\n", []string{tNote, tAnswer}, []uint8{noteBatch}},
		{"batch with a broken element", `[{"jsonrpc":"2.0","id":3,"result":{}},{"id":4,oops}]` + "\n", []string{`{"jsonrpc":"2.0","id":3,"result":{}}`, `{"id":4,oops}`}, []uint8{noteBatch}},
		{"batch after a BOM and before a message", bom + "[" + tAnswer + "]\r" + tNote + "\n", []string{tAnswer, tNote}, []uint8{noteBOM, noteBatch, noteSplit}},
		{"an array that is not a batch", "[1,2]\n[]\n", []string{"[1,2]", "[]"}, nil},
		{"log text before an answer", "INFO server: " + tAnswer + "\n", []string{"INFO server:", tAnswer}, []uint8{noteText}},
		{"coloured log text before an answer", "\x1b[2m[debug]\x1b[0m sent " + tAnswer + "\x1b[0m\n", []string{"[debug]\x1b[0m sent", tAnswer}, []uint8{noteControl, noteText}},
		{"text after an answer", tAnswer + "Server shutting down\n", []string{tAnswer, "Server shutting down"}, []uint8{noteText}},
		{"a request after text is not taken", "Received: " + tReq + "\n", []string{"Received: " + tReq}, nil},
		{"a notification after text is not taken", "log " + tNote + "\n", []string{"log " + tNote}, nil},
		{"an object that is not JSON-RPC after text is not taken", `log {"id":1}` + "\n", []string{`log {"id":1}`}, nil},
		{"plain log lines", "[INFO] started\nServer listening on stdio\n[1] [2]\n", []string{"[INFO] started", "Server listening on stdio", "[1] [2]"}, nil},
		{"spinner frames then an answer", "\rLoading |\rLoading /\r" + tAnswer + "\n", []string{"Loading |\rLoading /", tAnswer}, []uint8{noteSplit}},
		{"broken message then CR then an answer", `{"jsonrpc":"2.0","id":2,"result":{` + "\r" + tAnswer + "\n", []string{`{"jsonrpc":"2.0","id":2,"result":{`, tAnswer}, []uint8{noteSplit}},
		{"broken message alone", `{"jsonrpc":"2.0","id":2,"result":{"a":` + "\n", []string{`{"jsonrpc":"2.0","id":2,"result":{"a":`}, nil},
		{"junk-only lines are skipped", "\x1b[0m\n" + bom + "\n \t\r\n" + tNote + "\n", []string{tNote}, []uint8{noteControl, noteBOM}},
		{"no newline at the end", bom + tNote + "\r" + tAnswer, []string{tNote, tAnswer}, []uint8{noteBOM, noteSplit}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var wantNotes []string
			for _, k := range tt.notes {
				wantNotes = append(wantNotes, noteSentences[k])
			}
			want := tt.want
			// All at once, and one byte per read (every chunk boundary,
			// and a wait after every '\r').
			for _, in := range []io.Reader{strings.NewReader(tt.in), iotest.OneByteReader(strings.NewReader(tt.in))} {
				lines, notes := readTolerant(t, in)
				if d := cmp.Diff(want, lines); d != "" {
					t.Errorf("lines (-want +got):\n%s", d)
				}
				// The notes come in an order that depends on the reads.
				slices.Sort(notes)
				slices.Sort(wantNotes)
				if d := cmp.Diff(wantNotes, notes); d != "" {
					t.Errorf("notes (-want +got):\n%s", d)
				}
			}
		})
	}
}

// TestTolerantLoneCRWithoutNewline: a server that ends its lines with '\r'
// alone is read without waiting for a '\n' that never comes.
func TestTolerantLoneCRWithoutNewline(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	r := NewTolerantReader(pr, 0, nil)
	got := make(chan string, 4)
	go func() {
		for {
			line, err := r.ReadLine()
			if err != nil {
				close(got)
				return
			}
			got <- string(line)
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case s := <-got:
			return s
		case <-time.After(5 * time.Second):
			t.Fatal("the reader waits for a newline after a lone '\\r'")
		}
		return ""
	}
	// A '\r' inside an unfinished object does not end it.
	if _, err := io.WriteString(pw, `{"jsonrpc":"2.0",`+"\r"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(pw, `"id":1,"result":{}}`+"\r"); err != nil {
		t.Fatal(err)
	}
	if s := next(); s != "{\"jsonrpc\":\"2.0\",\r\"id\":1,\"result\":{}}" {
		t.Errorf("got %q", s)
	}
	if _, err := io.WriteString(pw, tAnswer+"\r"); err != nil {
		t.Fatal(err)
	}
	if s := next(); s != tAnswer {
		t.Errorf("got %q", s)
	}
	// The '\n' of a "\r\n" that arrives late makes an empty line, skipped.
	if _, err := io.WriteString(pw, "\n"+tNote+"\n"); err != nil {
		t.Fatal(err)
	}
	if s := next(); s != tNote {
		t.Errorf("got %q", s)
	}
	pw.Close()
	if _, ok := <-got; ok {
		t.Error("more lines than written")
	}
}

// TestStrictReaderUnchanged: NewReader (the agent side) still returns lines
// as they are; Parse then names the fault and the id.
func TestStrictReaderUnchanged(t *testing.T) {
	in := bom + tReq + "\n\x1b[0m" + tReq + "\n[" + tAnswer + "]\n" + tNote + "\r" + tAnswer + "\n"
	lines, errs := readAll(t, NewReader(strings.NewReader(in), 0))
	want := []string{bom + tReq, "\x1b[0m" + tReq, "[" + tAnswer + "]", tNote + "\r" + tAnswer}
	if d := cmp.Diff(want, lines); d != "" || len(errs) > 0 {
		t.Fatalf("lines (-want +got):\n%s\nerrors: %v", d, errs)
	}
	for i, reason := range []string{"byte-order mark", "terminal escape sequence"} {
		_, err := Parse([]byte(lines[i]))
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Code != CodeParseError || !strings.Contains(ie.Reason, reason) || string(ie.ID) != "7" {
			t.Errorf("Parse(%q) = %v (id %s); want a parse error naming the %s, with id 7", lines[i], err, ie.ID, reason)
		}
	}
}

// TestTolerantUnterminated: only the last message of a line that the stream
// cut off is Unterminated.
func TestTolerantUnterminated(t *testing.T) {
	r := NewTolerantReader(strings.NewReader(tNote+"\r"+`{"jsonrpc":"2.0","id":1,"res`), 0, nil)
	for i, want := range []bool{false, true} {
		if _, err := r.ReadLine(); err != nil {
			t.Fatal(err)
		}
		if r.Unterminated() != want {
			t.Errorf("message %d: Unterminated() = %v, want %v", i, r.Unterminated(), want)
		}
	}
}

// TestTolerantTooLarge: an oversized message after a BOM or escape
// sequences, or in a batch, still names its id, so its request fails alone.
func TestTolerantTooLarge(t *testing.T) {
	big := `{"jsonrpc":"2.0","result":{"t":"` + strings.Repeat("x", 2000) + `"},"id":5}`
	for _, line := range []string{
		bom + big, "\x1b[32m" + big, "\x1b]0;t\x1b\\" + big, bom + "\x1b[0m \x00" + big,
		"[" + big + "]", "[" + tNote + ", " + big + "]", bom + "[" + tNote + "," + big + "," + tNote + "]",
	} {
		for _, r := range []*Reader{NewReader(strings.NewReader(line+"\n"), 1000), NewTolerantReader(strings.NewReader(line+"\n"), 1000, nil)} {
			_, err := r.ReadLine()
			var tl *TooLargeError
			if !errors.As(err, &tl) || string(tl.ID) != "5" || tl.HasMethod {
				t.Errorf("%.40q…: %v, want a TooLargeError for the answer with id 5", line, err)
			}
		}
	}
}

func TestScanIDAfterJunk(t *testing.T) {
	obj := `{"jsonrpc":"2.0","method":"m","id":"x"}`
	for _, prefix := range []string{bom, bom + bom, "\x1b[0m", "\x1b[38;2;1;2;3m", "\x1b]0;title\x07", "\x1b]8;;u\x1b\\", "\x1b(B", "\x1bc", "\x00\x01 \t\r\n\x7f"} {
		id, method, has := ScanID([]byte(prefix + obj))
		if string(id) != `"x"` || method != "m" || !has {
			t.Errorf("ScanID after %q: %s %q %v", prefix, id, method, has)
		}
		if got := PeekID([]byte(prefix + obj)); string(got) != `"x"` {
			t.Errorf("PeekID after %q: %s", prefix, got)
		}
	}
	for _, prefix := range []string{"\xEF\xBB", "\x1b[0", "x", "\x1b[0\x01m"} {
		if id, _, has := ScanID([]byte(prefix + obj)); id != nil || has {
			t.Errorf("ScanID after %q found %s %v", prefix, id, has)
		}
	}
}

// FuzzTolerantReader: whatever the input, the tolerant reader returns pieces
// of it, and every line that is one clean JSON object comes back as it is,
// in order, whatever the chunk boundaries.
func FuzzTolerantReader(f *testing.F) {
	f.Add([]byte(bom + tAnswer + "\n\x1b[0m" + tNote + "\r" + tAnswer + "\n[" + tNote + "," + tAnswer + "]\nlog " + tAnswer))
	f.Add([]byte("{\"a\":1}\r{\"b\":\r2}\r\n\r[{}]\n{\"c\":\"\\\"\"}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var clean []string
		for _, l := range bytes.Split(b, []byte("\n")) {
			if len(l) > 0 && l[0] == '{' && l[len(l)-1] == '}' && json.Valid(l) && !bytes.ContainsAny(l, "\r") {
				clean = append(clean, string(l))
			}
		}
		for _, in := range []io.Reader{bytes.NewReader(b), iotest.HalfReader(bytes.NewReader(b))} {
			r := NewTolerantReader(in, len(b)+1, nil)
			var got []string
			for {
				line, err := r.ReadLine()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(line) == 0 || !bytes.Contains(b, line) {
					t.Fatalf("returned %q, not a piece of the input", line)
				}
				got = append(got, string(line))
			}
			i := 0
			for _, g := range got {
				if i < len(clean) && g == clean[i] {
					i++
				}
			}
			if i < len(clean) {
				t.Fatalf("clean line %q missing from %q", clean[i], got)
			}
		}
	})
}
