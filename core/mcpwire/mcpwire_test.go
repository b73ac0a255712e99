package mcpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readAll(t *testing.T, r *Reader) (lines []string, errs []error) {
	t.Helper()
	for {
		line, err := r.ReadLine()
		if err == io.EOF {
			return
		}
		if err != nil {
			errs = append(errs, err)
			if !errors.Is(err, ErrTooLarge) {
				return
			}
			continue
		}
		lines = append(lines, string(line))
	}
}

func TestReaderFraming(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		max   int
		lines []string
		big   []int64
	}{
		{"lf", "a\nb\n", 0, []string{"a", "b"}, nil},
		{"crlf", "a\r\nb\r\n", 0, []string{"a", "b"}, nil},
		{"no final newline", "a\nb", 0, []string{"a", "b"}, nil},
		{"blank lines skipped", "\n\na\n  \nb\n", 0, []string{"a", "b"}, nil},
		{"exactly at limit", "12345\n", 5, []string{"12345"}, nil},
		{"exactly at limit crlf", "12345\r\n", 5, []string{"12345"}, nil},
		{"over limit continues", "123456\nok\n", 5, []string{"ok"}, []int64{6}},
		{"over limit crlf", "123456\r\nok\n", 5, []string{"ok"}, []int64{6}},
		{"over limit at eof", "ok\n1234567890", 5, []string{"ok"}, []int64{10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, errs := readAll(t, NewReader(strings.NewReader(tt.in), tt.max))
			if diff := cmp.Diff(tt.lines, lines); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
			var sizes []int64
			for _, err := range errs {
				var tl *TooLargeError
				if !errors.As(err, &tl) {
					t.Fatalf("unexpected error %v", err)
				}
				sizes = append(sizes, tl.Size)
			}
			if diff := cmp.Diff(tt.big, sizes); diff != "" {
				t.Errorf("too-large sizes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReaderLongLinesAcrossBuffer(t *testing.T) {
	// Lines longer than the bufio buffer (64 KiB) but under the limit pass
	// whole; a line over the limit keeps its prefix so the id can be found.
	long := `{"jsonrpc":"2.0","id":42,"result":{"text":"` + strings.Repeat("x", 200_000) + `"}}`
	huge := `{"jsonrpc":"2.0","id":"big","result":{"text":"` + strings.Repeat("y", 600_000) + `"}}`
	in := long + "\n" + huge + "\n" + `{"jsonrpc":"2.0","method":"after"}` + "\n"
	r := NewReader(strings.NewReader(in), 500_000)
	first, err := r.ReadLine()
	if err != nil || string(first) != long {
		t.Fatalf("first line: err=%v len=%d", err, len(first))
	}
	_, err = r.ReadLine()
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("want TooLargeError, got %v", err)
	}
	if tl.Size != int64(len(huge)) {
		t.Errorf("size = %d, want %d", tl.Size, len(huge))
	}
	if got := string(PeekID(tl.Prefix)); got != `"big"` {
		t.Errorf("PeekID(prefix) = %s, want \"big\"", got)
	}
	third, err := r.ReadLine()
	if err != nil || !strings.Contains(string(third), "after") {
		t.Fatalf("stream did not continue: %q %v", third, err)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in     string
		kind   Kind
		id     string
		method string
		code   int // expected InvalidError code, 0 for success
		errID  string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, KindRequest, "1", "tools/list", 0, ""},
		{`{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"x"}}`, KindRequest, `"a-1"`, "tools/call", 0, ""},
		{` { "method" : "notifications/initialized" , "jsonrpc" : "2.0" } `, KindNotification, "", "notifications/initialized", 0, ""},
		{`{"jsonrpc":"2.0","id":7,"result":{}}`, KindResponse, "7", "", 0, ""},
		{`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}`, KindResponse, "null", "", 0, ""},
		{`{"jsonrpc":"2.0","id":-3,"error":{"code":1,"message":"x"}}`, KindResponse, "-3", "", 0, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":"\"}{"},"extra":[1,{"b":2}]}`, KindRequest, "1", "x", 0, ""},
		{`{"jsonrpc":"2.0","\u0069d":5,"method":"escaped key"}`, KindRequest, "5", "escaped key", 0, ""},
		{`{bad json`, 0, "", "", CodeParseError, ""},
		{`{"jsonrpc":"2.0","id":9,"method":"x"`, 0, "", "", CodeParseError, "9"},
		{`{"id":3,"method":"tools/list"}`, 0, "", "", CodeInvalidRequest, "3"},
		{`{"jsonrpc":"1.0","id":3,"method":"tools/list"}`, 0, "", "", CodeInvalidRequest, "3"},
		{`{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}`, 0, "", "", CodeInvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":true,"method":"tools/list"}`, 0, "", "", CodeInvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":1,"method":3}`, 0, "", "", CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":"s"}`, 0, "", "", CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","result":{}}`, 0, "", "", CodeInvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":1,"result":{},"error":{}}`, 0, "", "", CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1}`, 0, "", "", CodeInvalidRequest, "1"},
		{`[{"jsonrpc":"2.0","id":1,"method":"x"}]`, 0, "", "", CodeInvalidRequest, ""},
		{`"just a string"`, 0, "", "", CodeInvalidRequest, ""},
		{`Starting server...`, 0, "", "", CodeParseError, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"x","id":2}`, 0, "", "", CodeInvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"x","method":"y"}`, 0, "", "", CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}`, 0, "", "", CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":{"b":1,"b":2}}}`, KindRequest, "1", "x", 0, ""},
		// Error objects: an integer code and a string message (section 5.1).
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"m","data":[1]}}`, KindResponse, "1", "", 0, ""},
		{`{"jsonrpc":"2.0","id":1,"error":"boom"}`, 0, "", "", CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"error":{"message":"boom"}}`, 0, "", "", CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":"5","message":"boom"}}`, 0, "", "", CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"boom"}}`, 0, "", "", CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32000.0,"message":"a float of an integer"}}`, KindResponse, "1", "", 0, ""},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":1}}`, 0, "", "", CodeInvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"error":null}`, 0, "", "", CodeInvalidRequest, "1"},
		// A method with a result or an error is neither kind.
		{`{"jsonrpc":"2.0","id":4,"method":"x","result":{}}`, 0, "", "", CodeInvalidRequest, "4"},
		{`{"jsonrpc":"2.0","method":"x","error":{"code":1,"message":"m"}}`, 0, "", "", CodeInvalidRequest, ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			m, err := Parse([]byte(tt.in))
			if tt.code != 0 {
				var ie *InvalidError
				if !errors.As(err, &ie) {
					t.Fatalf("want InvalidError, got %v", err)
				}
				if ie.Code != tt.code || string(ie.ID) != tt.errID {
					t.Errorf("got code %d id %q, want %d %q (%s)", ie.Code, ie.ID, tt.code, tt.errID, ie.Reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Kind != tt.kind || string(m.ID) != tt.id || m.Method != tt.method {
				t.Errorf("got %v id=%s method=%q", m.Kind, m.ID, m.Method)
			}
		})
	}
}

func TestSetPathKeepsOtherBytes(t *testing.T) {
	in := `{"jsonrpc":"2.0", "id" : 17 ,"method":"tools/call","params":{"name":"n","arguments":{"x":1.50},"_meta":{"progressToken":"p","other":true}},"zzz":{"keep":"me"}}`
	tests := []struct {
		path []string
		val  string
		want string
	}{
		{[]string{"id"}, `"agent-1"`, strings.Replace(in, "17", `"agent-1"`, 1)},
		{[]string{"params", "_meta", "progressToken"}, `99`, strings.Replace(in, `"progressToken":"p"`, `"progressToken":99`, 1)},
		{[]string{"params", "_meta", "new"}, `1`, strings.Replace(in, `"other":true}`, `"other":true,"new":1}`, 1)},
		{[]string{"params", "x", "y"}, `2`, strings.Replace(in, `"other":true}}`, `"other":true},"x":{"y":2}}`, 1)},
	}
	for _, tt := range tests {
		got, err := SetPath([]byte(in), tt.path, []byte(tt.val))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("SetPath(%v):\n got %s\nwant %s", tt.path, got, tt.want)
		}
		if !json.Valid(got) {
			t.Errorf("invalid output %s", got)
		}
	}
	if _, err := SetPath([]byte(in), []string{"params", "name", "x"}, []byte("1")); err == nil {
		t.Error("SetPath through a string: want error")
	}
	empty, err := SetPath([]byte(`{ }`), []string{"a", "b"}, []byte(`1`))
	if err != nil || string(empty) != `{ "a":{"b":1}}` {
		t.Errorf("SetPath on empty object = %s, %v", empty, err)
	}
	if got := string(GetPath([]byte(in), "params", "_meta", "progressToken")); got != `"p"` {
		t.Errorf("GetPath = %s", got)
	}
	if got := GetPath([]byte(in), "params", "name", "x"); got != nil {
		t.Errorf("GetPath through string = %s, want nil", got)
	}
}

func TestIntID(t *testing.T) {
	tests := []struct {
		in          string
		n           int64
		coerced, ok bool
	}{
		{"7", 7, false, true},
		{`"7"`, 7, true, true},
		{`"x7"`, 0, false, false},
		{"-1", 0, false, false},
		{"1.5", 0, false, false},
		{"", 0, false, false},
		// Other spellings of the same integer match, coerced.
		{"7.0", 7, true, true},
		{"7e0", 7, true, true},
		{"70E-1", 7, true, true},
		{"0.7e1", 7, true, true},
		{`"7.0"`, 7, true, true},
		{"-0", 0, false, true},
		{"-0.0", 0, true, true},
		// Not integers, not JSON numbers, or beyond exact float64.
		{"7.5e0", 0, false, false},
		{"-7.0", 0, false, false},
		{"1e400", 0, false, false},
		{"9007199254740993.0", 0, false, false},
		{`"Inf"`, 0, false, false},
		{`"NaN"`, 0, false, false},
		{`"0x7"`, 0, false, false},
		{"07.0", 0, false, false},
	}
	for _, tt := range tests {
		n, c, ok := IntID(json.RawMessage(tt.in))
		if n != tt.n || c != tt.coerced || ok != tt.ok {
			t.Errorf("IntID(%s) = %d %v %v", tt.in, n, c, ok)
		}
	}
}

func TestNewError(t *testing.T) {
	b := NewError(nil, CodeParseError, "parse error", map[string]string{"k": "v"})
	want := `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error","data":{"k":"v"}}}`
	if string(b) != want {
		t.Errorf("got %s", b)
	}
	b = NewError(json.RawMessage(`"x"`), 1, "m", func() {})
	if !bytes.Contains(b, []byte(`"message":"m"`)) || bytes.Contains(b, []byte("data")) {
		t.Errorf("unencodable data: %s", b)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"jsonrpc":"2.0","id":1,"method":"a"}`, `{"jsonrpc":"2.0","id":"x","result":{"a":[1,"]"]}}`, `{`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		// Whatever parsed must survive an id rewrite as valid JSON.
		if m.Kind != KindNotification {
			out, err := SetMember(m.Raw, "id", []byte(`123`))
			if err != nil || !json.Valid(out) {
				t.Fatalf("SetMember on %q: %v %q", b, err, out)
			}
			m2, err := Parse(out)
			if err != nil || string(m2.ID) != "123" {
				t.Fatalf("reparse after rewrite: %v", err)
			}
		}
	})
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("a\nbb\r\nccc"), 2)
	f.Add([]byte(`{"method":"m","params":{"id":1},"id":2}`+"\n"+`{"id":3}`), 8)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		if max <= 0 || max > 1<<16 {
			max = 8
		}
		// The lines the reader must return: split at '\n', one '\r'
		// trimmed, blank ones skipped, oversized ones reported with the id
		// and method the scanner finds in them.
		segs := bytes.Split(b, []byte("\n"))
		if len(segs[len(segs)-1]) == 0 {
			segs = segs[:len(segs)-1]
		}
		r := NewReader(bytes.NewReader(b), max)
		for _, seg := range segs {
			want := bytes.TrimSuffix(seg, []byte("\r"))
			if len(want) <= max && len(bytes.TrimSpace(want)) == 0 {
				continue
			}
			line, err := r.ReadLine()
			if len(want) > max {
				var tl *TooLargeError
				if !errors.As(err, &tl) {
					t.Fatalf("line of %d bytes over %d: got %q, %v", len(want), max, line, err)
				}
				id, method, has := ScanID(seg)
				if tl.Size != int64(len(want)) || !bytes.Equal(tl.ID, id) || tl.Method != method || tl.HasMethod != has {
					t.Fatalf("TooLargeError %d %s %q %v, want %d %s %q %v", tl.Size, tl.ID, tl.Method, tl.HasMethod, len(want), id, method, has)
				}
				continue
			}
			if err != nil || !bytes.Equal(line, want) {
				t.Fatalf("got %q %v, want %q", line, err, want)
			}
		}
		if line, err := r.ReadLine(); err != io.EOF {
			t.Fatalf("after the last line: %q %v, want EOF", line, err)
		}
	})
}
