package mcpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestScanID(t *testing.T) {
	big := strings.Repeat("x", 100_000)
	tests := []struct {
		name, in  string
		id        string // "" for none
		method    string
		hasMethod bool
	}{
		{"id first", `{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{}}`, "1", "tools/call", true},
		{"id last (TypeScript SDK)", `{"method":"tools/call","params":{"name":"a","arguments":{"t":"` + big + `"}},"jsonrpc":"2.0","id":42}`, "42", "tools/call", true},
		{"id in the middle", `{"jsonrpc":"2.0","result":{"a":1},"id":"r-7","extra":[1,2]}`, `"r-7"`, "", false},
		{"nested ids ignored", `{"jsonrpc":"2.0","method":"m","params":{"id":99,"x":[{"id":98}],"y":{"z":{"id":"no"}}},"id":3}`, "3", "m", true},
		{"nested id only", `{"jsonrpc":"2.0","method":"n","params":{"id":99}}`, "", "n", true},
		{"nested method ignored", `{"jsonrpc":"2.0","id":4,"result":{"method":"x","content":[{"method":"y"}]}}`, "4", "", false},
		{"id inside strings", `{"jsonrpc":"2.0","result":{"text":"\"id\":5,"},"note":"{\"id\":6}","id":7}`, "7", "", false},
		{"escaped quotes and backslashes", `{"result":{"t":"a\\\"b\\\\","u":"\\\\\"},\"id\":1"},"id":8,"jsonrpc":"2.0"}`, "8", "", false},
		{"string id with escapes", `{"jsonrpc":"2.0","result":{},"id":"a\"b\\c\u00e9"}`, `"a\"b\\c\u00e9"`, "", false},
		{"escaped member names", `{"jsonrpc":"2.0","\u006d\u0065\u0074\u0068\u006f\u0064":"x","\u0069d":9}`, "9", "x", true},
		{"negative float id", `{"id" : -1.5e3 , "result":{}}`, "-1.5e3", "", false},
		{"whitespace everywhere", " \t{ \"result\" : [ ] ,\r\n \"id\" :\t10 } ", "10", "", false},
		{"no id", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1}}`, "", "notifications/progress", true},
		{"id null", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}`, "", "", false},
		{"id true", `{"jsonrpc":"2.0","id":true,"method":"m"}`, "", "m", true},
		{"id object", `{"jsonrpc":"2.0","id":{"id":1},"method":"m"}`, "", "m", true},
		{"id array", `{"jsonrpc":"2.0","id":[1],"method":"m"}`, "", "m", true},
		{"id twice", `{"jsonrpc":"2.0","id":1,"method":"m","id":2}`, "", "m", true},
		{"method not a string", `{"jsonrpc":"2.0","id":1,"method":{"a":1}}`, "1", "", true},
		{"method twice", `{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}`, "1", "", true},
		{"id too long", `{"id":"` + strings.Repeat("i", MaxScannedValue) + `","result":{}}`, "", "", false},
		{"longest id kept", `{"id":"` + strings.Repeat("i", MaxScannedValue-2) + `","result":{}}`, `"` + strings.Repeat("i", MaxScannedValue-2) + `"`, "", false},
		{"batch of a request", `[{"jsonrpc":"2.0","id":1,"method":"m"}]`, "1", "m", true},
		{"batch of a notification and an answer", ` [ {"jsonrpc":"2.0","method":"n"} , {"result":{"id":9},"jsonrpc":"2.0","id":"r1"} ] `, `"r1"`, "", false},
		{"batch of two answers", `[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}]`, "", "", false},
		{"batch of two requests", `[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":2,"method":"b"}]`, "", "", true},
		{"batch with a non-object", `[{"jsonrpc":"2.0","id":3,"result":{}},4,{"id":5,"result":{}}]`, "3", "", false},
		{"batch cut after its answer", `[{"jsonrpc":"2.0","id":6,"result":{}},{"jsonrpc":"2.0","method":"n","par`, "6", "", false},
		{"empty batch", `[]`, "", "", false},
		{"nested arrays", `[[{"id":1}]]`, "", "", false},
		{"invalid UTF-8 in the id", "{\"jsonrpc\":\"2.0\",\"id\":\"a\xffb\",\"result\":{}}", "\"a\uFFFDb\"", "", false},
		{"not JSON", `Starting server... "id":1`, "", "", false},
		{"truncated after id", `{"jsonrpc":"2.0","id":11,"result":{"text":"cut`, "11", "", false},
		{"truncated inside id", `{"jsonrpc":"2.0","id":"abc`, "", "", false},
		{"number id at the end", `{"id":12`, "12", "", false},
		{"empty object", `{}`, "", "", false},
		{"key like id", `{"idx":1,"xid":2,"ID":3,"id ":4}`, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, method, has := ScanID([]byte(tt.in))
			if string(id) != tt.id || method != tt.method || has != tt.hasMethod {
				t.Errorf("ScanID = id %s method %q %v, want %s %q %v", id, method, has, tt.id, tt.method, tt.hasMethod)
			}
			// Byte by byte gives the same.
			var s IDScanner
			for i := range len(tt.in) {
				_, _ = s.Write([]byte{tt.in[i]})
			}
			_ = s.Close()
			m, h := s.Method()
			if string(s.ID()) != tt.id || m != tt.method || h != tt.hasMethod {
				t.Errorf("byte by byte: id %s method %q %v, want %s %q %v", s.ID(), m, h, tt.id, tt.method, tt.hasMethod)
			}
			// What Parse says of valid lines, the scanner says too.
			if json.Valid([]byte(tt.in)) {
				checkScanAgrees(t, []byte(tt.in))
			}
		})
	}
}

// TestReaderTooLargeFindsIDAnywhere: an oversized line reports its id
// wherever it stands, without keeping the line.
func TestReaderTooLargeFindsIDAnywhere(t *testing.T) {
	pad := strings.Repeat(`{"id":0,"t":"\"id\":1"},`, 20_000) // ~480 KB of decoys
	lines := []struct{ line, id, method string }{
		{`{"jsonrpc":"2.0","id":"first","result":{"a":[` + pad + `{}]}}`, `"first"`, ""},
		{`{"method":"tools/call","params":{"arguments":{"a":[` + pad + `{}]}},"jsonrpc":"2.0","id":77}`, "77", "tools/call"},
		{`{"result":{"a":[` + pad + `{}]},"jsonrpc":"2.0","id":-5}` + "\r", "-5", ""},
		{`{"jsonrpc":"2.0","method":"notifications/message","params":{"a":[` + pad + `{}]}}`, "", "notifications/message"},
		{`{"result":{"a":[` + pad + `{}]},"jsonrpc":"2.0","id":"at-eof"}`, `"at-eof"`, ""},
	}
	var in strings.Builder
	for i, l := range lines {
		in.WriteString(l.line)
		if i < len(lines)-1 {
			in.WriteString("\n")
		}
	}
	r := NewReader(strings.NewReader(in.String()), 100_000)
	for _, want := range lines {
		_, err := r.ReadLine()
		var tl *TooLargeError
		if !errors.As(err, &tl) {
			t.Fatalf("want TooLargeError, got %v", err)
		}
		if string(tl.ID) != want.id || tl.Method != want.method || tl.HasMethod != (want.method != "") {
			t.Errorf("TooLargeError id %s method %q %v, want %s %q", tl.ID, tl.Method, tl.HasMethod, want.id, want.method)
		}
		if tl.Size != int64(len(strings.TrimSuffix(want.line, "\r"))) || len(tl.Prefix) != PrefixKeep {
			t.Errorf("size %d prefix %d, want %d and %d", tl.Size, len(tl.Prefix), len(want.line), PrefixKeep)
		}
	}
	if _, err := r.ReadLine(); err == nil {
		t.Error("want EOF")
	}
	// A line over the limit only by its "\r" is not too large; one byte
	// more is, and its id is found (the end-of-line check path).
	line := `{"jsonrpc":"2.0","result":{},"id":5}`
	r = NewReader(strings.NewReader(line+"\r\n"+line+"x\r\n"), len(line))
	if got, err := r.ReadLine(); err != nil || string(got) != line {
		t.Fatalf("line at the limit: %q %v", got, err)
	}
	_, err := r.ReadLine()
	var tl *TooLargeError
	if !errors.As(err, &tl) || string(tl.ID) != "5" {
		t.Fatalf("one byte over: %v (%+v)", err, tl)
	}
}

// checkScanAgrees fails t when the scanner, over a whole valid JSON line
// and over the line cut in pieces, disagrees with Parse (or, where Parse
// refuses the line, with the top-level members eachMember finds).
func checkScanAgrees(t *testing.T, line []byte) {
	t.Helper()
	wantID, wantMethod, wantHas := wantScan(line)
	m, err := Parse(line)
	id, method, has := ScanID(line)
	if !bytes.Equal(id, wantID) || method != wantMethod || has != wantHas {
		t.Fatalf("ScanID(%q) = %s %q %v, want %s %q %v", line, id, method, has, wantID, wantMethod, wantHas)
	}
	if err == nil && m.Kind == KindRequest && wantID != nil {
		// PeekID reads the same id of a request.
		if p := PeekID(line); !bytes.Equal(p, wantID) {
			t.Fatalf("PeekID(%q) = %s, ScanID %s", line, p, wantID)
		}
	}
	// In three pieces, cut anywhere.
	for _, cut := range [][2]int{{1, 2}, {len(line) / 3, 2 * len(line) / 3}, {len(line) - 1, len(line) - 1}} {
		a, b := min(max(cut[0], 0), len(line)), min(max(cut[1], 0), len(line))
		var s IDScanner
		_, _ = s.Write(line[:a])
		_, _ = s.Write(line[a:b])
		_, _ = s.Write(line[b:])
		_ = s.Close()
		mm, hh := s.Method()
		if !bytes.Equal(s.ID(), wantID) || mm != wantMethod || hh != wantHas {
			t.Fatalf("IDScanner over %q cut at %d,%d = %s %q %v, want %s %q %v", line, a, b, s.ID(), mm, hh, wantID, wantMethod, wantHas)
		}
	}
}

// wantScan is what an IDScanner must find in the valid JSON line: what
// Parse reads of an object (its members, when it is not a message), and
// for a batch what ID and Method say of its elements, up to the first
// one that is not an object.
func wantScan(line []byte) (wantID json.RawMessage, wantMethod string, wantHas bool) {
	if i := skipSpace(line, 0); i < len(line) && line[i] == '[' {
		var elems []json.RawMessage
		_ = json.Unmarshal(line, &elems)
		var resp, req int
		var respID, reqID json.RawMessage
		var reqMethod string
		anyMethod := false
		for _, el := range elems {
			if el[0] != '{' {
				break
			}
			id, method, has := wantScan(el)
			switch {
			case !has:
				resp, respID = resp+1, id
			case id != nil:
				req, reqID, reqMethod, anyMethod = req+1, id, method, true
			default:
				anyMethod = true
			}
		}
		switch {
		case resp == 1 && respID != nil:
			return respID, "", false
		case resp == 1:
			return nil, "", anyMethod
		case resp == 0 && req == 1:
			return reqID, reqMethod, true
		}
		return nil, "", anyMethod
	}
	m, err := Parse(line)
	var ie *InvalidError
	switch {
	case err == nil:
		if validID(m.ID) {
			wantID = m.ID
		}
		wantMethod, wantHas = m.Method, m.Kind != KindResponse
	case errors.As(err, &ie) && ie.Code == CodeInvalidRequest && ie.Reason != "batch" && ie.Reason != "not a JSON object":
		// Not a message, but an object: the scanner still reads its
		// top-level members.
		ids, methods := 0, 0
		var id, method json.RawMessage
		_ = eachMember(line, func(key, val []byte) bool {
			switch string(key) {
			case "id":
				ids++
				id = val
			case "method":
				methods++
				method = val
			}
			return true
		})
		if ids == 1 && validID(id) {
			wantID, _ = ReplaceInvalidUnicode(id)
		}
		wantHas = methods > 0
		if methods == 1 && method[0] == '"' {
			_ = json.Unmarshal(method, &wantMethod)
		}
	default:
		return nil, "", false // not an object: nothing to find
	}
	// The limit is on the id and method as written.
	if raw := GetPath(line, "id"); len(raw) > MaxScannedValue {
		wantID = nil
	}
	if raw := GetPath(line, "method"); len(raw) > MaxScannedValue {
		wantMethod = "" // present, too long to name
	}
	return wantID, wantMethod, wantHas
}

// FuzzScanner checks that the scanner agrees with Parse on every valid JSON
// line, fed whole or in pieces, and that the reader reports the same id and
// method for the line when it is over the limit.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"a"}`,
		`{"method":"a","params":{"id":2,"s":"\"id\":3"},"jsonrpc":"2.0","id":"x\"y"}`,
		`{"jsonrpc":"2.0","result":{"id":[1,{"id":2}]},"id":-3.5}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}`,
		`{"\u0069d":1,"id":2}`,
		`[{"id":1}]`,
		`{"id":1`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Never panics, whatever the input; pieces agree with the whole.
		id, method, has := ScanID(b)
		var s IDScanner
		for i := 0; i < len(b); i += 7 {
			_, _ = s.Write(b[i:min(i+7, len(b))])
		}
		_ = s.Close()
		if m, h := s.Method(); !bytes.Equal(s.ID(), id) || m != method || h != has {
			t.Fatalf("in pieces: %s %q %v, whole: %s %q %v", s.ID(), m, h, id, method, has)
		}
		if bytes.ContainsAny(b, "\n") || !json.Valid(b) {
			return
		}
		checkScanAgrees(t, b)
		// Over the limit, the reader reports what the scanner found.
		r := NewReader(bytes.NewReader(append(bytes.Clone(b), '\n')), max(len(bytes.TrimSpace(b))-1, 1))
		_, err := r.ReadLine()
		var tl *TooLargeError
		if len(bytes.TrimSpace(b)) > 1 && errors.As(err, &tl) {
			if !bytes.Equal(tl.ID, id) || tl.Method != method || tl.HasMethod != has {
				t.Fatalf("TooLargeError %s %q %v, ScanID %s %q %v", tl.ID, tl.Method, tl.HasMethod, id, method, has)
			}
		}
	})
}
