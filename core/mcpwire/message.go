package mcpwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Kind says what a JSON-RPC 2.0 message is (JSON-RPC 2.0 spec, sections 4
// and 5; MCP spec, basic/index, "Messages").
type Kind uint8

// The kinds of message.
const (
	KindRequest      Kind = iota + 1 // has "method" and "id"
	KindNotification                 // has "method", no "id"
	KindResponse                     // has "id" and "result" or "error"
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindNotification:
		return "notification"
	case KindResponse:
		return "response"
	}
	return "invalid"
}

// Standard JSON-RPC 2.0 error codes (JSON-RPC 2.0 spec, section 5.1).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// ErrInvalid is wrapped by every *InvalidError.
var ErrInvalid = errors.New("invalid JSON-RPC message")

// InvalidError reports a line that is not a usable JSON-RPC 2.0 message.
// Code is CodeParseError when the line is not JSON, CodeInvalidRequest when it
// is JSON but not a valid message. ID holds the message's id when it could be
// recovered (so that an answer can name it), else nil.
type InvalidError struct {
	Code   int
	Reason string
	ID     json.RawMessage
}

func (e *InvalidError) Error() string { return "invalid JSON-RPC message: " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Message is one parsed JSON-RPC message. Raw is the message exactly as read,
// except that strings that are not valid Unicode are made so (Replaced counts
// the replacements; see ReplaceInvalidUnicode); ID, Params, Result and Error
// are sub-slices of Raw (nil when absent), so a Message must not be modified.
// Method is the decoded method name.
type Message struct {
	Raw      []byte
	Kind     Kind
	ID       json.RawMessage
	Method   string
	Params   json.RawMessage
	Result   json.RawMessage
	Error    json.RawMessage
	Replaced int // invalid UTF-8 bytes and lone surrogate escapes replaced by U+FFFD
}

// Parse classifies one line. It keeps line (no copy): callers that reuse the
// buffer must pass a copy. A message whose strings hold invalid UTF-8 or lone
// surrogate escapes gets a Raw of its own with them replaced by U+FFFD, as
// encoding/json decodes them (see ReplaceInvalidUnicode): what the gateway
// reads from a message and what it passes on are then the same text, whatever
// decoder the peer on the other side uses; a valid message keeps its bytes. It returns an *InvalidError for anything that is
// not a single JSON-RPC 2.0 request, notification or response. A JSON array
// (a JSON-RPC batch, allowed only by MCP 2025-03-26) is reported as
// CodeInvalidRequest with the reason "batch". A member name that occurs twice
// at the top level or in params is CodeInvalidRequest too: RFC 8259 section
// 4 leaves such objects to each parser, so the gateway and the peer could
// read different ids, methods or tool names from one message.
func Parse(line []byte) (*Message, error) {
	if !json.Valid(line) {
		return nil, &InvalidError{Code: CodeParseError, Reason: notJSONReason(line), ID: PeekID(line)}
	}
	line, replaced := ReplaceInvalidUnicode(line)
	i := skipSpace(line, 0)
	if line[i] == '[' {
		return nil, &InvalidError{Code: CodeInvalidRequest, Reason: "batch"}
	}
	if line[i] != '{' {
		return nil, &InvalidError{Code: CodeInvalidRequest, Reason: "not a JSON object"}
	}
	m := &Message{Raw: line, Replaced: replaced}
	var version, method json.RawMessage
	hasID := false
	var seen memberNames
	dup := ""
	err := eachMember(line, func(key []byte, val []byte) bool {
		if seen.add(key) && dup == "" {
			dup = string(key)
		}
		switch string(key) {
		case "jsonrpc":
			version = val
		case "id":
			m.ID, hasID = val, true
		case "method":
			method = val
		case "params":
			m.Params = val
		case "result":
			m.Result = val
		case "error":
			m.Error = val
		}
		return true
	})
	if err != nil {
		return nil, &InvalidError{Code: CodeParseError, Reason: err.Error()}
	}
	fail := func(reason string) (*Message, error) {
		id := m.ID
		if !validID(id) {
			id = nil
		}
		return nil, &InvalidError{Code: CodeInvalidRequest, Reason: reason, ID: id}
	}
	if dup == "" && len(m.Params) > 0 && m.Params[0] == '{' {
		var pseen memberNames
		_ = eachMember(m.Params, func(key []byte, _ []byte) bool {
			if pseen.add(key) {
				dup = "params." + string(key)
				return false
			}
			return true
		})
	}
	if dup != "" {
		if dup == "id" {
			m.ID = nil // which one the peer would answer is anyone's guess
		}
		return fail(fmt.Sprintf("member %q occurs more than once", dup))
	}
	if !bytes.Equal(version, []byte(`"2.0"`)) {
		if version == nil {
			return fail(`missing "jsonrpc": "2.0"`)
		}
		return fail(`"jsonrpc" must be "2.0"`)
	}
	if hasID && !validID(m.ID) && !(method == nil && isNull(m.ID) && m.Error != nil) {
		return fail("id must be a string or a number")
	}
	switch {
	case method != nil:
		if name, ok := plainString(method); ok {
			m.Method = name
		} else if err := json.Unmarshal(method, &m.Method); err != nil {
			return fail("method must be a string")
		}
		if m.Result != nil || m.Error != nil {
			// Neither a request nor a response: a peer waiting on
			// that id would wait for ever if it were taken for either.
			return fail("a message with a method must not carry result or error")
		}
		if m.Params != nil && m.Params[0] != '{' && m.Params[0] != '[' {
			return fail("params must be an object or an array")
		}
		if hasID {
			m.Kind = KindRequest
		} else {
			m.Kind = KindNotification
		}
	case m.Result != nil || m.Error != nil:
		if !hasID {
			return fail("response without id")
		}
		if m.Result != nil && m.Error != nil {
			return fail("response with both result and error")
		}
		if m.Error != nil && !validErrorObject(m.Error) {
			return fail("error must be an object with an integer code and a string message")
		}
		m.Kind = KindResponse
	default:
		return fail("neither a request, a notification nor a response")
	}
	return m, nil
}

// memberNames finds a member name that occurs twice in one object. The
// first names are compared where they are (an object of a JSON-RPC message
// has a handful), the rest through a map, so that an object of many members
// costs no more than a map.
type memberNames struct {
	few  [16][]byte
	n    int
	many map[string]bool
}

// add records key and reports whether it was recorded before.
func (s *memberNames) add(key []byte) bool {
	if s.many == nil {
		for _, k := range s.few[:s.n] {
			if bytes.Equal(k, key) {
				return true
			}
		}
		if s.n < len(s.few) {
			s.few[s.n] = key
			s.n++
			return false
		}
		s.many = make(map[string]bool, 2*len(s.few))
		for _, k := range s.few {
			s.many[string(k)] = true
		}
	}
	if s.many[string(key)] {
		return true
	}
	s.many[string(key)] = true
	return false
}

// plainString returns the contents of the JSON string raw when it holds no
// escape and no control character (then its bytes are its value; UTF-8 was
// checked by the caller), and false for anything else.
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	for _, c := range body {
		if c == '\\' || c == '"' || c < 0x20 {
			return "", false
		}
	}
	return string(body), true
}

// validErrorObject reports whether raw is a JSON-RPC 2.0 error object
// (section 5.1): an object with an integer "code" and a string "message"
// ("data" is free).
func validErrorObject(raw json.RawMessage) bool {
	var e struct {
		Code    json.RawMessage `json:"code"`
		Message *string         `json:"message"`
	}
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &e) != nil || e.Message == nil {
		return false
	}
	if _, err := strconv.ParseInt(string(e.Code), 10, 64); err == nil {
		return true
	}
	// An integer written as a float (-32000.0: Python's json.dumps of a
	// float) is still the integer the peer meant; 1.5 is not a code.
	f, err := strconv.ParseFloat(string(e.Code), 64)
	return err == nil && json.Valid(e.Code) && f == math.Trunc(f) && math.Abs(f) < 1<<53
}

// notJSONReason says why line is not JSON when what it starts with can tell.
func notJSONReason(line []byte) string {
	_, kinds := skipJunk(line, 0)
	switch {
	case kinds&junkBOM != 0:
		return "not valid JSON: the line starts with a UTF-8 byte-order mark (EF BB BF)"
	case kinds&junkControl != 0:
		return "not valid JSON: the line starts with a terminal escape sequence or a control byte"
	}
	return "not valid JSON"
}

func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	c := id[0]
	return c == '"' || c == '-' || (c >= '0' && c <= '9')
}

func isNull(v json.RawMessage) bool { return bytes.Equal(v, []byte("null")) }

// PeekID recovers the top-level "id" of a message from a prefix of it, for
// example the prefix of an oversized or malformed line. A byte-order mark,
// terminal escape sequences and control bytes before the message are passed
// over. It returns nil when no string or number id can be found before the
// data ends or goes wrong.
func PeekID(prefix []byte) json.RawMessage {
	start, _ := skipJunk(prefix, 0)
	dec := json.NewDecoder(bytes.NewReader(prefix[start:]))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := kt.(string)
		if key != "id" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil
			}
			continue
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil || !validID(raw) {
			return nil
		}
		raw, _ = ReplaceInvalidUnicode(raw) // as Parse reads it
		return raw
	}
	return nil
}

// IntID reads an id that the gateway minted itself (a non-negative integer).
// A peer that echoes it in another form still matches by value: the number
// 7 as the string "7", or as 7.0 or 7e0 (JSON numbers of the same value;
// JSON-RPC 2.0 section 4 only says ids SHOULD NOT have fractional parts);
// coerced reports that it did, so the mismatch can be logged. A value with
// a fractional part, a negative one, or one from 2^53 on (where float64
// forms stop being exact) does not match.
func IntID(id json.RawMessage) (n int64, coerced bool, ok bool) {
	if len(id) == 0 {
		return 0, false, false
	}
	s := id
	if id[0] == '"' {
		var str string
		if json.Unmarshal(id, &str) != nil {
			return 0, false, false
		}
		s, coerced = []byte(str), true
	}
	n, err := strconv.ParseInt(string(s), 10, 64)
	if err == nil {
		if n < 0 {
			return 0, false, false
		}
		return n, coerced, true
	}
	// Another spelling of an integer: 7.0, 7e0, 70E-1.
	f, ferr := strconv.ParseFloat(string(s), 64)
	if ferr != nil || f < 0 || f >= 1<<53 || f != math.Trunc(f) || !json.Valid(s) {
		return 0, false, false
	}
	return int64(f), true, true
}

// SetMember returns a copy of the JSON object raw with the top-level member
// key set to value (raw JSON): replaced in place when present, appended when
// absent. raw must be a valid JSON object.
func SetMember(raw []byte, key string, value []byte) ([]byte, error) {
	return SetPath(raw, []string{key}, value)
}

// SetPath is SetMember for a nested member: path names object keys from the
// top level down. Missing intermediate objects are created. Every byte
// outside the replaced value is kept. It fails when a value on the path
// exists but is not an object.
func SetPath(raw []byte, path []string, value []byte) ([]byte, error) {
	if len(path) == 0 {
		return nil, errors.New("empty path")
	}
	start, end, found, err := findMember(raw, path[0])
	if err != nil {
		return nil, err
	}
	if found {
		inner := value
		if len(path) > 1 {
			if raw[start] != '{' {
				return nil, fmt.Errorf("member %q is not an object", path[0])
			}
			inner, err = SetPath(raw[start:end], path[1:], value)
			if err != nil {
				return nil, err
			}
		}
		return splice(raw, start, end, inner), nil
	}
	// Append "key": value before the closing brace.
	inner := value
	for i := len(path) - 1; i >= 1; i-- {
		inner = objectWith(path[i], inner)
	}
	closing := bytes.LastIndexByte(raw, '}')
	if closing < 0 {
		return nil, errors.New("not an object")
	}
	var b bytes.Buffer
	b.Grow(len(raw) + len(path[0]) + len(inner) + 4)
	b.Write(raw[:closing])
	k, _ := json.Marshal(path[0])
	if hasMembers(raw) {
		b.WriteByte(',')
	}
	b.Write(k)
	b.WriteByte(':')
	b.Write(inner)
	b.Write(raw[closing:])
	return b.Bytes(), nil
}

// GetPath returns the raw value at the nested object path, or nil.
func GetPath(raw []byte, path ...string) json.RawMessage {
	for _, key := range path {
		if len(raw) == 0 || raw[skipSpace(raw, 0)] != '{' {
			return nil
		}
		start, end, found, err := findMember(raw, key)
		if err != nil || !found {
			return nil
		}
		raw = raw[start:end]
	}
	return raw
}

func objectWith(key string, value []byte) []byte {
	k, _ := json.Marshal(key)
	out := make([]byte, 0, len(k)+len(value)+3)
	out = append(out, '{')
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, value...)
	return append(out, '}')
}

func hasMembers(obj []byte) bool {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i = skipSpace(obj, i+1)
	return i < len(obj) && obj[i] != '}'
}

func splice(raw []byte, start, end int, value []byte) []byte {
	out := make([]byte, 0, len(raw)-(end-start)+len(value))
	out = append(out, raw[:start]...)
	out = append(out, value...)
	return append(out, raw[end:]...)
}

// findMember locates the value of the top-level member key in the object raw.
func findMember(raw []byte, key string) (start, end int, found bool, err error) {
	err = eachMemberSpan(raw, func(k []byte, s, e int) bool {
		if string(k) == key {
			start, end, found = s, e, true
			return false
		}
		return true
	})
	return
}

// eachMember calls fn for each top-level member of the JSON object raw, in
// order, with the decoded key and the raw value. raw must be valid JSON.
func eachMember(raw []byte, fn func(key, val []byte) bool) error {
	return eachMemberSpan(raw, func(k []byte, s, e int) bool { return fn(k, raw[s:e]) })
}

func eachMemberSpan(raw []byte, fn func(key []byte, start, end int) bool) error {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return errors.New("not an object")
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return nil
	}
	for i < len(raw) {
		if raw[i] != '"' {
			return fmt.Errorf("expected a member name at offset %d", i)
		}
		kend, err := skipString(raw, i)
		if err != nil {
			return err
		}
		key := raw[i+1 : kend-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var s string
			if err := json.Unmarshal(raw[i:kend], &s); err != nil {
				return err
			}
			key = []byte(s)
		}
		i = skipSpace(raw, kend)
		if i >= len(raw) || raw[i] != ':' {
			return fmt.Errorf("expected ':' at offset %d", i)
		}
		vstart := skipSpace(raw, i+1)
		vend, err := skipValue(raw, vstart)
		if err != nil {
			return err
		}
		if !fn(key, vstart, vend) {
			return nil
		}
		i = skipSpace(raw, vend)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
			continue
		}
		if i < len(raw) && raw[i] == '}' {
			return nil
		}
		return fmt.Errorf("expected ',' or '}' at offset %d", i)
	}
	return errors.New("unterminated object")
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just past the string that starts at b[i].
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errors.New("unterminated string")
}

// skipValue returns the offset just past the JSON value that starts at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("missing value")
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errors.New("unterminated value")
	default:
		j := i
		for j < len(b) {
			switch b[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return j, nil
			}
			j++
		}
		return j, nil
	}
}

// DeleteMembers returns a copy of the JSON object raw without each of its
// top-level members whose (decoded) name drop reports true — every such
// member, also a name that occurs more than once or is written with
// escapes — and the names removed, in order. raw is returned as it is when
// nothing is removed; otherwise the members kept keep their bytes and
// order, separated by commas without spaces. It fails when raw is not a
// valid JSON object.
func DeleteMembers(raw []byte, drop func(name string) bool) ([]byte, []string, error) {
	var kept [][]byte
	var names []string
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, nil, errors.New("not an object")
	}
	i = skipSpace(raw, i+1)
	for i < len(raw) && raw[i] != '}' {
		if raw[i] != '"' {
			return nil, nil, fmt.Errorf("expected a member name at offset %d", i)
		}
		kstart := i
		kend, err := skipString(raw, i)
		if err != nil {
			return nil, nil, err
		}
		var key string
		if err := json.Unmarshal(raw[kstart:kend], &key); err != nil {
			return nil, nil, err
		}
		i = skipSpace(raw, kend)
		if i >= len(raw) || raw[i] != ':' {
			return nil, nil, fmt.Errorf("expected ':' at offset %d", i)
		}
		vend, err := skipValue(raw, skipSpace(raw, i+1))
		if err != nil {
			return nil, nil, err
		}
		if drop(key) {
			names = append(names, key)
		} else {
			kept = append(kept, raw[kstart:vend])
		}
		i = skipSpace(raw, vend)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		} else if i >= len(raw) || raw[i] != '}' {
			return nil, nil, fmt.Errorf("expected ',' or '}' at offset %d", i)
		}
	}
	if i >= len(raw) {
		return nil, nil, errors.New("unterminated object")
	}
	if len(names) == 0 {
		return raw, nil, nil
	}
	out := append(make([]byte, 0, len(raw)), '{')
	out = append(out, bytes.Join(kept, []byte{','})...)
	return append(out, '}'), names, nil
}
