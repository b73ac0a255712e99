package mcpwire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReplaceInvalidUnicode(t *testing.T) {
	tests := []struct {
		in, want string
		n        int
	}{
		{`{"a":"plain","b":"é€😀","c":"\u00e9\ud83d\ude00\uD83D\uDE00"}`, "", 0},
		{`{"a":"\\ud800","b":"\\\\ud800"}`, "", 0}, // escaped backslashes, not escapes
		{"{\"d\":\"x\xff\xfey\"}", "{\"d\":\"x\uFFFD\uFFFDy\"}", 2},
		{"{\"d\":\"\xe2\x82\"}", "{\"d\":\"\uFFFD\uFFFD\"}", 2},           // a cut sequence: one per byte, as encoding/json
		{"{\"d\":\"\xed\xa0\x80\"}", "{\"d\":\"\uFFFD\uFFFD\uFFFD\"}", 3}, // a surrogate in UTF-8
		{"{\"d\":\"\xc0\xaf\"}", "{\"d\":\"\uFFFD\uFFFD\"}", 2},           // overlong
		{"{\"k\xff\":1}", "{\"k\uFFFD\":1}", 1},                           // in a member name
		{`{"s":"\ud800"}`, `{"s":"\ufffd"}`, 1},
		{`{"s":"\udc00x"}`, `{"s":"\ufffdx"}`, 1},
		{`{"s":"\ud800\u0041"}`, `{"s":"\ufffd\u0041"}`, 1},
		{`{"s":"\ud800\ud800\udc00"}`, `{"s":"\ufffd\ud800\udc00"}`, 1},
		{`{"s":"\uDBFF\uDFFF"}`, "", 0},
		{`{"s":"\uDBFF\uDFFF\uDFFF"}`, `{"s":"\uDBFF\uDFFF\ufffd"}`, 1},
		{`{"s":"\\\ud800"}`, `{"s":"\\\ufffd"}`, 1},
		{`["\ud800",` + "\"\xff\"]", `["\ufffd",` + "\"\uFFFD\"]", 2},
	}
	for _, tt := range tests {
		in := []byte(tt.in)
		out, n := ReplaceInvalidUnicode(in)
		want := tt.want
		if want == "" {
			want = tt.in
		}
		if string(out) != want || n != tt.n {
			t.Errorf("ReplaceInvalidUnicode(%q) = %q, %d; want %q, %d", tt.in, out, n, want, tt.n)
		}
		if n == 0 && len(in) > 0 && &out[0] != &in[0] {
			t.Errorf("ReplaceInvalidUnicode(%q) copied a text that needed no change", tt.in)
		}
		if json.Valid(in) {
			checkSameDecoding(t, in, out)
		}
	}
}

// checkSameDecoding fails unless in and out decode to the same value with
// encoding/json, which makes strings valid Unicode the same way.
func checkSameDecoding(t *testing.T, in, out []byte) {
	t.Helper()
	decode := func(b []byte) any {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decoding %q: %v", b, err)
		}
		return v
	}
	if a, b := decode(in), decode(out); !reflect.DeepEqual(a, b) {
		t.Fatalf("%q decodes to %#v, the repaired %q to %#v", in, a, out, b)
	}
}

func TestParseReplacesInvalidUnicode(t *testing.T) {
	line := []byte("{\"jsonrpc\":\"2.0\",\"id\":\"r\xff\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"bad \xfe\xff \\udc00 end\"}]}}")
	m, err := Parse(line)
	if err != nil {
		t.Fatal(err)
	}
	want := "{\"jsonrpc\":\"2.0\",\"id\":\"r\uFFFD\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"bad \uFFFD\uFFFD \\ufffd end\"}]}}"
	if string(m.Raw) != want || m.Replaced != 4 || string(m.ID) != "\"r\uFFFD\"" || m.Kind != KindResponse {
		t.Fatalf("Parse: Raw %q, Replaced %d, ID %s, kind %s", m.Raw, m.Replaced, m.ID, m.Kind)
	}
	if !bytes.HasPrefix(m.Result, []byte(`{"content"`)) || &m.Result[0] == &line[bytes.Index(line, []byte(`{"content"`))] {
		t.Error("Result is not a slice of the repaired Raw")
	}
	// A valid message is kept, not copied.
	valid := []byte(`{"jsonrpc":"2.0","id":1,"result":{"t":"é \ud83d\ude00"}}`)
	m, err = Parse(valid)
	if err != nil || &m.Raw[0] != &valid[0] || m.Replaced != 0 {
		t.Fatalf("Parse of a valid message: %v, Replaced %d, copied %v", err, m.Replaced, &m.Raw[0] != &valid[0])
	}
	// The method name is read after the repair: the gateway and the server
	// see the same name.
	m, err = Parse([]byte("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"ec\xffho\"}}"))
	if err != nil || !strings.Contains(string(m.Params), "ec\uFFFDho") {
		t.Fatalf("Parse: %v, params %q", err, m.Params)
	}
}

// FuzzReplaceInvalidUnicode: on any JSON text the repair keeps the JSON
// valid, leaves valid UTF-8 without lone surrogates, changes nothing that
// encoding/json reads, and is a fixed point.
func FuzzReplaceInvalidUnicode(f *testing.F) {
	f.Add([]byte("{\"a\":\"x\xff\\ud800\\\\ud800\\ud83d\\ude00\"}"))
	f.Add([]byte(`["\uDBFF\uDFFF\uDFFF","\\\ud800"]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		out, n := ReplaceInvalidUnicode(b)
		if !json.Valid(out) || !utf8.Valid(out) || hasLoneSurrogate(out) {
			t.Fatalf("%q repaired to %q: not valid JSON, UTF-8 or without lone surrogates", b, out)
		}
		if (n == 0) != bytes.Equal(out, b) {
			t.Fatalf("%q: %d replacements, output %q", b, n, out)
		}
		if again, n2 := ReplaceInvalidUnicode(out); n2 != 0 || !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point: %q → %q", out, again)
		}
		checkSameDecoding(t, b, out)
	})
}

// FuzzParseValidUnicode: whatever Parse accepts has a Raw of valid Unicode,
// the same bytes when the line already was, and reads as the line does.
func FuzzParseValidUnicode(f *testing.F) {
	f.Add([]byte("{\"jsonrpc\":\"2.0\",\"id\":\"a\xff\",\"result\":{\"t\":\"\\ud800\xfe\"}}"))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"m\udc00","params":{"\ud83d\ude00":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		if !utf8.Valid(m.Raw) || hasLoneSurrogate(m.Raw) {
			t.Fatalf("Parse(%q).Raw = %q: not valid Unicode", b, m.Raw)
		}
		if (m.Replaced == 0) != bytes.Equal(m.Raw, b) {
			t.Fatalf("Parse(%q): Replaced %d, Raw %q", b, m.Replaced, m.Raw)
		}
		checkSameDecoding(t, b, m.Raw)
	})
}
