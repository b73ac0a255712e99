package mcpwire

import "bytes"

// What skipJunk skipped, besides JSON white space.
const (
	junkBOM     uint8 = 1 << iota // a UTF-8 byte-order mark (EF BB BF)
	junkControl                   // a terminal escape sequence or another control byte
)

// utf8BOM is U+FEFF in UTF-8, which some runtimes (.NET, PowerShell) write
// at the start of a stream.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// maxEscapeString bounds how far an OSC, DCS, SOS, PM or APC escape string is
// searched for its terminator.
const maxEscapeString = 4096

// skipJunk returns the offset of the first byte at or after i that is not
// JSON white space, a UTF-8 byte-order mark, a terminal escape sequence
// (ECMA-48: CSI "ESC [ … final", OSC/DCS/SOS/PM/APC strings ended by BEL
// or "ESC \", and the two- and three-byte escapes) or another C0 control
// byte or DEL, and what kinds of junk it passed (white space not counted).
// None of these can start a JSON text.
func skipJunk(b []byte, i int) (int, uint8) {
	var kinds uint8
	for i < len(b) {
		c := b[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == 0xEF:
			if !bytes.HasPrefix(b[i:], utf8BOM) {
				return i, kinds
			}
			kinds |= junkBOM
			i += len(utf8BOM)
		case c == 0x1B:
			kinds |= junkControl
			i += escapeLen(b, i)
		case c < 0x20 || c == 0x7F:
			kinds |= junkControl
			i++
		default:
			return i, kinds
		}
	}
	return i, kinds
}

// escapeLen returns the length of the escape sequence at b[i] (an ESC): the
// whole sequence when it is complete, else 1 (the ESC alone).
func escapeLen(b []byte, i int) int {
	j := i + 1
	if j >= len(b) {
		return 1
	}
	switch c := b[j]; {
	case c == '[': // CSI: parameter bytes, intermediate bytes, a final byte
		j++
		for j < len(b) && b[j] >= 0x30 && b[j] <= 0x3F {
			j++
		}
		for j < len(b) && b[j] >= 0x20 && b[j] <= 0x2F {
			j++
		}
		if j < len(b) && b[j] >= 0x40 && b[j] <= 0x7E {
			return j + 1 - i
		}
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
		// OSC, DCS, SOS, PM, APC: a string ended by BEL or ST (ESC \).
		end := min(len(b), j+1+maxEscapeString)
		for k := j + 1; k < end; k++ {
			switch {
			case b[k] == 0x07:
				return k + 1 - i
			case b[k] == 0x1B && k+1 < len(b) && b[k+1] == '\\':
				return k + 2 - i
			}
		}
	case c >= 0x20 && c <= 0x2F: // nF: intermediate bytes, then a final byte
		for j < len(b) && b[j] >= 0x20 && b[j] <= 0x2F {
			j++
		}
		if j < len(b) && b[j] >= 0x30 && b[j] <= 0x7E {
			return j + 1 - i
		}
	case c >= 0x30 && c <= 0x7E: // Fp, Fe, Fs: one more byte
		return 2
	}
	return 1
}

// valueEnd returns the offset just past the object or array that starts at
// b[i] ('{' or '['), following nesting and strings only (the value is not
// validated), and false when it does not end within b.
func valueEnd(b []byte, i int) (int, bool) {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			k := stringEnd(b, j+1)
			if k < 0 {
				return 0, false
			}
			j = k
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1, true
			}
		}
	}
	return 0, false
}

// stringEnd returns the offset of the quote that closes the string whose
// contents start at b[j], or -1.
func stringEnd(b []byte, j int) int {
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		k += j
		n := 0
		for p := k - 1; p >= j && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return k
		}
		j = k + 1
	}
}
