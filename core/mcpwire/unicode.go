package mcpwire

import (
	"bytes"
	"unicode/utf8"
)

// replacementEscape is U+FFFD written as a JSON escape: the same length as
// the \uXXXX escape of a lone surrogate it replaces.
const replacementEscape = `\ufffd`

// ReplaceInvalidUnicode returns the JSON text b with every string made valid
// Unicode, the way encoding/json decodes it: each byte that is not part of a
// valid UTF-8 sequence becomes U+FFFD (EF BF BD), and each \u escape of a
// lone UTF-16 surrogate (a high one not followed by a low one, or a low one
// alone) becomes \ufffd. n counts the replacements.
//
// b must be JSON that json.Valid accepts: outside strings such text is
// ASCII and holds no backslash, so only string contents can change. Every
// valid byte is kept; when nothing needs replacing, b itself is returned
// (no copy) and n is 0.
//
// RFC 8259 (section 8.1 and 8.2) requires UTF-8 and leaves strings with
// lone surrogates to each receiver; replacing them here means that the
// gateway, the peer behind it and the catalog digest all read one text.
func ReplaceInvalidUnicode(b []byte) (out []byte, n int) {
	if utf8.Valid(b) && !hasLoneSurrogate(b) {
		return b, 0
	}
	return appendValidUnicode(make([]byte, 0, len(b)+16), b)
}

// appendValidUnicode appends b to dst with the replacements of
// ReplaceInvalidUnicode.
func appendValidUnicode(dst, b []byte) ([]byte, int) {
	n, start := 0, 0
	for i := 0; i < len(b); {
		c := b[i]
		if c == '\\' {
			if i+1 < len(b) && b[i+1] == 'u' {
				if w := surrogateEscape(b, i); w != 0 {
					if w < 0 { // lone: replaced
						dst = append(append(dst, b[start:i]...), replacementEscape...)
						n++
						i += 6
						start = i
						continue
					}
					i += w // a valid pair
					continue
				}
			}
			i += 2 // an escape: the byte after the backslash is ASCII in valid JSON
			continue
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(append(dst, b[start:i]...), "\uFFFD"...)
			n++
			i++
			start = i
			continue
		}
		i += size
	}
	return append(dst, b[start:]...), n
}

// hasLoneSurrogate reports whether b (JSON text) holds a \u escape of a
// lone UTF-16 surrogate. Every surrogate escape starts with `\ud` or `\uD`,
// so it looks for `\u` (a vectorised search) and then at what precedes and
// follows; text without \u escapes costs one pass.
func hasLoneSurrogate(b []byte) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(`\u`))
		if j < 0 {
			return false
		}
		i += j
		// An escape only if an even number of backslashes precede it
		// (`\\u` is an escaped backslash and a letter u).
		n := 0
		for p := i - 1; p >= 0 && b[p] == '\\'; p-- {
			n++
		}
		if n%2 != 0 || i+2 >= len(b) || (b[i+2] != 'd' && b[i+2] != 'D') {
			i += 2
			continue
		}
		switch w := surrogateEscape(b, i); {
		case w < 0:
			return true
		case w > 0:
			i += w
		default:
			i += 2
		}
	}
}

// surrogateEscape looks at the \u escape at b[i:]. It returns 0 when the
// escape is not of a surrogate (or not complete), 12 for a high surrogate
// followed by the escape of a low one (a valid pair), and -1 for a lone
// surrogate, which encoding/json decodes as U+FFFD.
func surrogateEscape(b []byte, i int) int {
	r := hex4(b, i+2)
	if r < 0xD800 || r > 0xDFFF {
		return 0
	}
	if r <= 0xDBFF && i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
		if lo := hex4(b, i+8); lo >= 0xDC00 && lo <= 0xDFFF {
			return 12
		}
	}
	return -1
}

// hex4 reads four hex digits at b[i:], or returns -1.
func hex4(b []byte, i int) rune {
	if i+4 > len(b) {
		return -1
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}
