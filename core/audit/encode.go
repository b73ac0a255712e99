package audit

import (
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// The canonical encoder of the audit's own hot event types: it writes the
// RFC 8785 form of ToolCalled and ToolCompleted directly, once, instead of
// json.Marshal followed by a generic canonicalisation (jcs.Transform), which
// parses and re-sorts what was just written. The output is byte for byte
// what that generic path gives (encode_test.go checks it over many events
// and fuzzes it): members sorted by name (all names here are ASCII, so by
// bytes), omitempty members left out as encoding/json leaves them out, a
// nil slice without omitempty as null, strings with only the escapes of
// RFC 8785 §3.2.2.2 and invalid UTF-8 replaced by U+FFFD as encoding/json
// replaces it, numbers in ECMAScript form (§3.2.2.3).

// canonicalFast returns the canonical fields of v and true when v is one
// of the types the encoder knows and its numbers are exact; false sends the
// caller to the generic path.
func canonicalFast(v any) ([]byte, bool) {
	switch f := v.(type) {
	case ToolCalled:
		return f.appendCanonical(make([]byte, 0, 384))
	case *ToolCalled:
		return f.appendCanonical(make([]byte, 0, 384))
	case ToolCompleted:
		return f.appendCanonical(make([]byte, 0, 320))
	case *ToolCompleted:
		return f.appendCanonical(make([]byte, 0, 320))
	}
	return nil, false
}

// objWriter appends the members of one JSON object in the order given.
type objWriter struct {
	b     []byte
	first bool
}

func newObj(b []byte) objWriter { return objWriter{b: append(b, '{'), first: true} }

func (o *objWriter) name(n string) {
	if !o.first {
		o.b = append(o.b, ',')
	}
	o.first = false
	o.b = append(o.b, '"')
	o.b = append(o.b, n...) // names are ASCII letters: nothing to escape
	o.b = append(o.b, '"', ':')
}

func (o *objWriter) str(n, v string) {
	o.name(n)
	o.b = appendCanonString(o.b, v)
}

func (o *objWriter) strOmit(n, v string) {
	if v != "" {
		o.str(n, v)
	}
}

func (o *objWriter) strs(n string, v []string) {
	o.name(n)
	if v == nil {
		o.b = append(o.b, "null"...)
		return
	}
	o.b = append(o.b, '[')
	for i, s := range v {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		o.b = appendCanonString(o.b, s)
	}
	o.b = append(o.b, ']')
}

func (o *objWriter) strsOmit(n string, v []string) {
	if len(v) > 0 {
		o.strs(n, v)
	}
}

// maxExact is 2^53: integers up to it are exact in a float64 and written as
// their digits by ECMAScript.
const maxExact = 1 << 53

func (o *objWriter) uint(n string, v uint64) bool {
	if v > maxExact {
		return false
	}
	o.name(n)
	o.b = strconv.AppendUint(o.b, v, 10)
	return true
}

func (o *objWriter) float(n string, v float64) bool {
	s, err := jcs.NumberToJSON(v)
	if err != nil {
		return false
	}
	o.name(n)
	o.b = append(o.b, s...)
	return true
}

func (o *objWriter) boolOmit(n string, v bool) {
	if v {
		o.name(n)
		o.b = append(o.b, "true"...)
	}
}

func (o *objWriter) end() []byte { return append(o.b, '}') }

const lowerHex = "0123456789abcdef"

// appendCanonString appends s as an RFC 8785 string: '"' and '\' escaped,
// control characters as \b \f \n \r \t or \u00xx, everything else as is;
// bytes that are not UTF-8 become U+FFFD, as encoding/json makes them.
func appendCanonString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\uFFFD"...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func (f *ToolCalled) appendCanonical(b []byte) ([]byte, bool) {
	o := newObj(b)
	o.str("agentRun", string(f.AgentRun))
	o.strs("argKeys", f.ArgKeys)
	o.str("argsDigest", f.ArgsDigest)
	o.str("call", string(f.Call))
	if !o.uint("catalogRevision", f.CatalogRevision) {
		return nil, false
	}
	o.strsOmit("credentialScope", f.CredentialScope)
	o.str("decision", f.Decision)
	o.str("epoch", string(f.Epoch))
	o.strOmit("grant", string(f.Grant))
	o.str("serverLabel", f.ServerLabel)
	o.str("tool", f.Tool)
	return o.end(), true
}

func (f *ToolCompleted) appendCanonical(b []byte) ([]byte, bool) {
	if f.AnsweredBy != nil {
		return nil, false // rare (a late answer from other code): the general encoding
	}
	o := newObj(b)
	o.str("agentRun", string(f.AgentRun))
	o.str("call", string(f.Call))
	if !o.float("durationMs", f.DurationMS) {
		return nil, false
	}
	o.str("epoch", string(f.Epoch))
	o.strOmit("error", f.Error)
	o.boolOmit("lateAnswer", f.LateAnswer)
	o.str("outcome", f.Outcome)
	o.str("serverLabel", f.ServerLabel)
	o.str("tool", f.Tool)
	return o.end(), true
}
