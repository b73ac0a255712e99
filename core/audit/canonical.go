package audit

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// isCanonical reports whether b is exactly one JSON value in the canonical
// form of RFC 8785: no insignificant whitespace, object members sorted by the
// UTF-16 code units of their names (§3.2.3) without duplicates, strings with
// only the mandatory escapes (§3.2.2.2) and numbers in ECMAScript form
// (§3.2.2.3). It is a single pass over b, much cheaper than canonicalising b
// again and comparing.
func isCanonical(b []byte) bool {
	p := canonChecker{b: b}
	return p.value(0) && p.i == len(b)
}

// topKeys returns the sorted top-level member names of b, a canonical JSON
// value (isCanonical), nil when b is not an object.
func topKeys(b []byte) []string {
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	p := canonChecker{b: b, i: 1}
	keys := []string{}
	for p.i < len(p.b) && p.b[p.i] == '"' {
		raw, ok := p.str()
		if !ok || p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil
		}
		k := string(raw)
		if bytes.IndexByte(raw, '\\') >= 0 {
			k = unescape(raw)
		}
		keys = append(keys, k)
		p.i++
		if !p.value(1) || p.i >= len(p.b) {
			return nil
		}
		if p.b[p.i] == ',' {
			p.i++
		}
	}
	// Canonical order is by UTF-16 code units; the summary's is Go's.
	slices.Sort(keys)
	return keys
}

type canonChecker struct {
	b []byte
	i int
}

const maxCanonDepth = 1000

func (p *canonChecker) value(depth int) bool {
	if p.i >= len(p.b) || depth > maxCanonDepth {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		p.i++
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return true
		}
		for {
			if !p.value(depth + 1) {
				return false
			}
			if p.i >= len(p.b) {
				return false
			}
			switch p.b[p.i] {
			case ',':
				p.i++
			case ']':
				p.i++
				return true
			default:
				return false
			}
		}
	case c == '"':
		_, ok := p.str()
		return ok
	case c == 't':
		return p.lit("true")
	case c == 'f':
		return p.lit("false")
	case c == 'n':
		return p.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return false
}

func (p *canonChecker) lit(s string) bool {
	if !bytes.HasPrefix(p.b[p.i:], []byte(s)) {
		return false
	}
	p.i += len(s)
	return true
}

func (p *canonChecker) number() bool {
	j := p.i
	for j < len(p.b) {
		c := p.b[j]
		if !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			break
		}
		j++
	}
	text := p.b[p.i:j]
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		return false
	}
	want, err := jcs.NumberToJSON(f)
	if err != nil || want != string(text) {
		return false
	}
	p.i = j
	return true
}

// str checks a canonical string starting at the opening quote and returns its
// raw contents (between the quotes).
func (p *canonChecker) str() ([]byte, bool) {
	p.i++ // opening quote
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			raw := p.b[start:p.i]
			p.i++
			return raw, true
		case c < 0x20:
			return nil, false
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return nil, false
			}
			switch p.b[p.i+1] {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				p.i += 2
			case 'u':
				if p.i+6 > len(p.b) {
					return nil, false
				}
				h := p.b[p.i+2 : p.i+6]
				if h[0] != '0' || h[1] != '0' || !isLowerHex(h[2]) || !isLowerHex(h[3]) {
					return nil, false
				}
				v, _ := strconv.ParseUint(string(h), 16, 16)
				// Only control characters without a short escape use \u.
				if v >= 0x20 || v == '\b' || v == '\f' || v == '\n' || v == '\r' || v == '\t' {
					return nil, false
				}
				p.i += 6
			default:
				return nil, false
			}
		case c < utf8.RuneSelf:
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && size <= 1 {
				return nil, false
			}
			p.i += size
		}
	}
	return nil, false
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func (p *canonChecker) object(depth int) bool {
	p.i++
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return true
	}
	var prev []byte
	first := true
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return false
		}
		key, ok := p.str()
		if !ok {
			return false
		}
		if !first && compareKeys(prev, key) >= 0 {
			return false
		}
		first, prev = false, key
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return false
		}
		p.i++
		if !p.value(depth + 1) {
			return false
		}
		if p.i >= len(p.b) {
			return false
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

// compareKeys orders two raw (still escaped) member names by their UTF-16
// code units, as RFC 8785 §3.2.3 sorts them.
func compareKeys(a, b []byte) int {
	if bytes.IndexByte(a, '\\') >= 0 || bytes.IndexByte(b, '\\') >= 0 {
		return compareUTF16(unescape(a), unescape(b))
	}
	// UTF-8 byte order equals code point order, which equals UTF-16 order
	// unless a supplementary character (lead byte 0xF0…) meets one in
	// U+E000…U+FFFF (lead bytes 0xEE, 0xEF).
	if !hasHighByte(a) && !hasHighByte(b) {
		return bytes.Compare(a, b)
	}
	return compareUTF16(string(a), string(b))
}

func hasHighByte(s []byte) bool {
	for _, c := range s {
		if c >= 0xEE {
			return true
		}
	}
	return false
}

func unescape(raw []byte) string {
	var s string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	_ = json.Unmarshal(q, &s)
	return s
}

func compareUTF16(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	for i := 0; i < len(ra) && i < len(rb); i++ {
		if ra[i] == rb[i] {
			continue
		}
		ua, ub := firstUnit(ra[i]), firstUnit(rb[i])
		if ua != ub {
			if ua < ub {
				return -1
			}
			return 1
		}
		// Both supplementary with the same high surrogate: the low
		// surrogates order like the code points.
		if ra[i] < rb[i] {
			return -1
		}
		return 1
	}
	switch {
	case len(ra) < len(rb):
		return -1
	case len(ra) > len(rb):
		return 1
	}
	return 0
}

func firstUnit(r rune) rune {
	if r >= 0x10000 {
		return 0xD800 + (r-0x10000)>>10
	}
	return r
}
