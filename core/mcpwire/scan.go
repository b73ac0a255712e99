package mcpwire

import (
	"bytes"
	"encoding/json"
)

// MaxScannedValue bounds the "id" and "method" values an IDScanner keeps, in
// bytes as written (quotes and escapes included). A longer id is not
// recovered; a longer method is reported as present but not named.
const MaxScannedValue = 4096

// maxScannedKey bounds the raw bytes of a member name the scanner keeps:
// "method" written with every letter escaped (\u006d…) takes 36.
const maxScannedKey = 64

type scanState uint8

const (
	scanBegin  scanState = iota // before the top-level '{'
	scanKey                     // expecting a member name (or '}')
	scanInKey                   // inside a member name
	scanColon                   // expecting ':'
	scanValue                   // expecting a member's value
	scanString                  // inside a top-level member's string value
	scanScalar                  // inside a top-level number or literal
	scanNested                  // inside a top-level member's object or array
	scanAfter                   // expecting ',' or '}'
	scanDone                    // the top-level object is closed
	scanDead                    // not a JSON object, or broken beyond use

	// Junk before the top-level '{' (see skipJunk).
	scanBOM1   // after EF, expecting BB
	scanBOM2   // after EF BB, expecting BF
	scanEsc    // after ESC
	scanCSI    // inside a CSI sequence, before its final byte
	scanEscStr // inside an OSC, DCS, SOS, PM or APC string
	scanStrEsc // after ESC inside such a string, expecting '\'
	scanNF     // after ESC and intermediate bytes, expecting a final byte

	// A batch: an array of objects, each scanned as a message.
	scanBatch      // expecting an element ('{') or the end (']')
	scanBatchAfter // expecting ',' or ']'
)

type scanMember uint8

const (
	memberOther scanMember = iota
	memberID
	memberMethod
)

// IDScanner finds the top-level "id" and "method" members of one JSON
// object fed to it in pieces through Write (then Close), in bounded
// memory, whatever the object's size and wherever the members are: the
// official TypeScript SDK writes "id" last, so for a line too large to
// keep the id may come after megabytes of params or result.
//
// It follows the JSON structure (nesting depth, strings, escapes) without
// validating it: members named "id" inside params or result, or the text
// "id" inside a string, are not the message's id. A member name written
// with escapes (\u0069d) counts as what it decodes to, as in Parse. The id
// is reported only when it is a string or a number that occurs once at
// the top level and is at most MaxScannedValue bytes long; Parse also
// rejects a message whose "id" occurs twice, since which one a peer would
// answer is anyone's guess. On a valid JSON object the result agrees with
// Parse (see FuzzScanner). A byte-order mark, terminal escape sequences and
// control bytes before the object are passed over, as PeekID and a tolerant
// Reader do. The zero value is ready to use.
type IDScanner struct {
	st      scanState
	depth   int  // nesting inside a top-level member's object or array
	inStr   bool // inside a string within a nested value
	esc     bool // the previous byte was a backslash inside a string
	key     []byte
	keyLong bool
	cur     scanMember // the member whose value is being read
	val     []byte     // the value of an id or method member being read
	valLong bool
	ids     int // top-level "id" members seen
	id      []byte
	methods int // top-level "method" members seen
	method  string

	batch      bool   // the line is an array (a JSON-RPC batch)
	bResp      int    // elements without a method (responses)
	bRespID    []byte // the id of the last of them
	bReq       int    // elements with a method and a usable id (requests)
	bReqID     []byte // the id of the last of them
	bReqMethod string // and its method
	bMethod    bool   // an element has a method
}

// Write feeds the next bytes of the object; it never fails.
func (s *IDScanner) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch s.st {
		case scanBegin:
			switch {
			case isSpace(c):
			case c == '{':
				s.st = scanKey
			case c == '[':
				s.st, s.batch = scanBatch, true
			case c == 0xEF:
				s.st = scanBOM1
			case c == 0x1B:
				s.st = scanEsc
			case c < 0x20 || c == 0x7F:
			default:
				s.st = scanDead
			}
		case scanBOM1, scanBOM2, scanEsc, scanCSI, scanEscStr, scanStrEsc, scanNF:
			s.junk(c)
		case scanKey:
			switch {
			case isSpace(c):
			case c == '"':
				s.st, s.key, s.keyLong, s.esc = scanInKey, s.key[:0], false, false
			case c == '}':
				s.closeObject()
			default:
				s.st = scanDead
			}
		case scanInKey:
			if !s.esc && c == '"' {
				s.endKey()
				s.st = scanColon
				continue
			}
			s.esc = !s.esc && c == '\\'
			if len(s.key) < maxScannedKey {
				s.key = append(s.key, c)
			} else {
				s.keyLong = true
			}
		case scanColon:
			switch {
			case isSpace(c):
			case c == ':':
				s.st = scanValue
			default:
				s.st = scanDead
			}
		case scanValue:
			s.val, s.valLong, s.esc = s.val[:0], false, false
			switch {
			case isSpace(c):
			case c == '"':
				s.st = scanString
				s.keep(c)
			case c == '{' || c == '[':
				s.st, s.depth, s.inStr = scanNested, 1, false
				s.valLong = true // never a usable id or method
			case c == ',' || c == '}' || c == ']' || c == ':':
				s.st = scanDead
			default:
				s.st = scanScalar
				s.keep(c)
			}
		case scanString:
			if s.cur != memberOther {
				s.keep(c)
			} else if !s.esc {
				// Skip ahead to the next quote or backslash.
				if j := skipPlain(p[i:]); j > 0 {
					i += j - 1
					continue
				}
			}
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.endValue()
				s.st = scanAfter
			}
		case scanScalar:
			if c == ',' || c == '}' || c == ']' || isSpace(c) {
				s.endValue()
				s.st = scanAfter
				i-- // the delimiter belongs to what follows
				continue
			}
			s.keep(c)
		case scanNested:
			if s.inStr {
				if !s.esc {
					if j := skipPlain(p[i:]); j > 0 {
						i += j - 1
						continue
					}
				}
				switch {
				case s.esc:
					s.esc = false
				case c == '\\':
					s.esc = true
				case c == '"':
					s.inStr = false
				}
				continue
			}
			switch c {
			case '"':
				s.inStr = true
			case '{', '[':
				s.depth++
			case '}', ']':
				s.depth--
				if s.depth == 0 {
					s.endValue()
					s.st = scanAfter
				}
			}
		case scanAfter:
			switch {
			case isSpace(c):
			case c == ',':
				s.st = scanKey
			case c == '}':
				s.closeObject()
			default:
				s.st = scanDead
			}
		case scanBatch:
			switch {
			case isSpace(c):
			case c == '{':
				s.ids, s.id, s.methods, s.method, s.cur = 0, nil, 0, "", memberOther
				s.st = scanKey
			case c == ']':
				s.st = scanDone
			default:
				s.st = scanDead
			}
		case scanBatchAfter:
			switch {
			case isSpace(c):
			case c == ',':
				s.st = scanBatch
			case c == ']':
				s.st = scanDone
			default:
				s.st = scanDead
			}
		case scanDone, scanDead:
			return len(p), nil
		}
	}
	return len(p), nil
}

// closeObject ends the top-level object, or an element of a batch.
func (s *IDScanner) closeObject() {
	if !s.batch {
		s.st = scanDone
		return
	}
	id := s.elemID()
	switch method, has := s.elemMethod(); {
	case !has:
		s.bResp++
		s.bRespID = id
	case id != nil:
		s.bReq++
		s.bReqID, s.bReqMethod = id, method
		s.bMethod = true
	default:
		s.bMethod = true
	}
	s.st = scanBatchAfter
}

// junk advances over a byte-order mark or an escape sequence before the
// top-level object, as skipJunk does for a whole line; a sequence that
// breaks off makes the line unusable.
func (s *IDScanner) junk(c byte) {
	next := scanDead
	switch s.st {
	case scanBOM1:
		if c == 0xBB {
			next = scanBOM2
		}
	case scanBOM2:
		if c == 0xBF {
			next = scanBegin
		}
	case scanEsc:
		switch {
		case c == '[':
			next = scanCSI
		case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
			next, s.depth = scanEscStr, 0
		case c >= 0x20 && c <= 0x2F:
			next = scanNF
		case c >= 0x30 && c <= 0x7E:
			next = scanBegin
		}
	case scanCSI:
		switch {
		case c >= 0x20 && c <= 0x3F:
			next = scanCSI
		case c >= 0x40 && c <= 0x7E:
			next = scanBegin
		}
	case scanEscStr, scanStrEsc:
		s.depth++ // counts the string's bytes
		switch {
		case s.depth > maxEscapeString:
		case c == 0x07 || s.st == scanStrEsc && c == '\\':
			next = scanBegin
		case c == 0x1B:
			next = scanStrEsc
		default:
			next = scanEscStr
		}
	case scanNF:
		switch {
		case c >= 0x20 && c <= 0x2F:
			next = scanNF
		case c >= 0x30 && c <= 0x7E:
			next = scanBegin
		}
	}
	if next == scanBegin {
		s.depth = 0
	}
	s.st = next
}

// Close marks the end of the message: a number or literal that runs to
// the end is complete. It never fails.
func (s *IDScanner) Close() error {
	if s.st == scanScalar {
		s.endValue()
		s.st = scanAfter
	}
	return nil
}

func (s *IDScanner) keep(c byte) {
	if s.cur == memberOther || s.valLong {
		return
	}
	if len(s.val) >= MaxScannedValue {
		s.valLong = true
		return
	}
	s.val = append(s.val, c)
}

func (s *IDScanner) endKey() {
	s.cur = memberOther
	if s.keyLong {
		return
	}
	name := s.key
	if bytes.IndexByte(name, '\\') >= 0 {
		var str string
		q := make([]byte, 0, len(name)+2)
		q = append(append(append(q, '"'), name...), '"')
		if json.Unmarshal(q, &str) != nil {
			return
		}
		name = []byte(str)
	}
	switch string(name) {
	case "id":
		s.cur = memberID
		s.ids++
	case "method":
		s.cur = memberMethod
		s.methods++
	}
}

func (s *IDScanner) endValue() {
	switch s.cur {
	case memberID:
		s.id = nil
		if s.ids == 1 && !s.valLong && validID(s.val) && json.Valid(s.val) {
			// As Parse reads it: invalid Unicode replaced.
			s.id, _ = ReplaceInvalidUnicode(bytes.Clone(s.val))
		}
	case memberMethod:
		s.method = ""
		if s.methods == 1 && !s.valLong && len(s.val) > 0 && s.val[0] == '"' {
			_ = json.Unmarshal(s.val, &s.method)
		}
	}
	s.cur = memberOther
}

// ID returns the top-level id seen so far: a string or a number as
// written (invalid Unicode replaced, as Parse does), or nil when there is
// none, it is not a string or a number, it is longer than MaxScannedValue,
// or "id" occurs more than once.
//
// For a batch (an array of objects, MCP 2025-03-26) it is the id of the
// one response in it (an element without a method), so that the request it
// answers can fail alone; when the batch holds no response, the id of its
// one request; nil when it holds several (or none with a usable id).
func (s *IDScanner) ID() json.RawMessage {
	if s.batch {
		switch {
		case s.bResp == 1:
			return s.bRespID
		case s.bResp == 0 && s.bReq == 1:
			return s.bReqID
		}
		return nil
	}
	return s.elemID()
}

func (s *IDScanner) elemID() json.RawMessage {
	if s.ids != 1 || s.id == nil {
		return nil
	}
	return s.id
}

// Method returns the top-level method name seen so far and whether the
// object has a top-level "method" member at all. A message with one is a
// request or a notification, never a response, even when the name is not
// a string, is too long to keep, or occurs twice (name "" then). For a
// batch it describes the element whose id ID returns: nothing for its one
// response, the method of its one request; otherwise whether any element
// has a method.
func (s *IDScanner) Method() (name string, ok bool) {
	if s.batch {
		switch {
		case s.bResp == 1 && s.bRespID != nil:
			return "", false
		case s.bResp == 0 && s.bReq == 1:
			return s.bReqMethod, true
		}
		return "", s.bMethod
	}
	return s.elemMethod()
}

func (s *IDScanner) elemMethod() (name string, ok bool) {
	if s.methods != 1 {
		return "", s.methods > 0
	}
	return s.method, true
}

// ScanID runs an IDScanner over a whole message.
func ScanID(msg []byte) (id json.RawMessage, method string, hasMethod bool) {
	var s IDScanner
	_, _ = s.Write(msg)
	_ = s.Close()
	method, hasMethod = s.Method()
	return s.ID(), method, hasMethod
}

// skipPlain returns how many leading bytes of b are neither '"' nor '\\'
// (all of b when none is).
func skipPlain(b []byte) int {
	if j := bytes.IndexAny(b, `"\`); j >= 0 {
		return j
	}
	return len(b)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
