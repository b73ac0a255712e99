// Package textsafe makes text that comes from a server — tool names,
// titles, descriptions, diagnostics, its stderr, the messages of its
// errors — safe to print on a person's terminal or to draw in a window: it
// is shown as data, never as terminal control, and nothing of it is hidden
// or reordered (docs/DESIGN.md, "Trust model": the server is untrusted).
//
// One predicate, Unsafe, decides which characters are escaped; Line, Block,
// Controls, JSON and Writer apply it. Line and Block also escape what
// could pass for one of their escapes, so that what they print reads back
// as one text only. Names adds what escaping cannot show: a tool
// name that mixes scripts, or that looks like another tool's name once
// normalised (NFKC, then the Unicode confusables skeleton of UTS #39).
package textsafe

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mtibben/confusables"
	"golang.org/x/text/unicode/norm"
)

// invisible are characters outside the format category (Cf) that draw
// nothing and so can hide in a name: the combining grapheme joiner, the
// Mongolian free variation selectors and vowel separator, the Hangul
// fillers and the Khmer inherent vowels.
var invisible = []rune{0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180E, 0x180F, 0x3164, 0xFFA0}

// Unsafe reports whether r must not reach a terminal or a window as it is:
// the C0 controls (ESC, CR, BEL, backspace… and so CSI and OSC sequences,
// OSC 52 included) and DEL, the C1 controls U+0080–U+009F (8-bit CSI and
// OSC), the line and paragraph separators U+2028 and U+2029, every format
// character (Unicode category Cf: the bidi marks, embeddings, overrides
// and isolates U+200E, U+200F, U+202A–U+202E, U+2066–U+2069, U+061C, the
// zero-width space, joiners and word joiner U+200B–U+200D, U+2060, the
// byte order mark U+FEFF, the soft hyphen, the tag characters
// U+E0000–U+E007F), and the invisible fillers listed in invisible.
func Unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7F, r >= 0x80 && r < 0xA0, r == 0x2028, r == 0x2029:
		return true
	case r < 0x80:
		return false
	}
	return unicode.Is(unicode.Cf, r) || slices.Contains(invisible, r)
}

// Line returns s fit for one line: every unsafe character written out
// visibly — a C0 control or DEL as \x1b, a C1 control as \u009b, any
// other as ⟨U+202E⟩ — and every byte that is not UTF-8 as \xff. Newlines
// and tabs are escaped too. So that no text can pass for an escape, a
// backslash that starts what reads as one (followed by x, u or another
// backslash, or last in s) is doubled, and ⟨ is written ⟨U+27E8⟩: two
// different strings never give the same line, and a tool named
// `read\x1b` shows as `read\\x1b`, not as a name holding ESC. Text
// without unsafe characters and without such a backslash or ⟨ is returned
// as it is. Line is not idempotent (escaping its own output doubles the
// backslashes): apply it once, to the server's text itself; Controls is the
// safety net for text already composed of escaped parts.
func Line(s string) string { return escape(s, false, true) }

// Quote returns s, a name that is someone's claim (the clientInfo an agent
// gave itself), as a quotation inside a sentence: cut to max runes (with
// "…" inside the quotes; max 0 keeps it whole), escaped as Line escapes it,
// the quotation marks that could end the quotation or open another (“ ”
// ‘ ’ „ ") written as ⟨U+201D⟩ and so on, between “ and ”. Nothing in s can
// then read as part of the sentence around it.
func Quote(s string, max int) string {
	cut := false
	if r := []rune(s); max > 0 && len(r) > max {
		s, cut = string(r[:max]), true
	}
	s = Line(s)
	var b strings.Builder
	b.WriteString("“")
	for _, r := range s {
		switch r {
		case '“', '”', '‘', '’', '„', '"':
			fmt.Fprintf(&b, "⟨U+%04X⟩", r)
		default:
			b.WriteRune(r)
		}
	}
	if cut {
		b.WriteString("…")
	}
	b.WriteString("”")
	return b.String()
}

// Block is Line for text of several lines (a description, a stderr tail):
// newlines and tabs are kept, everything else Line escapes is escaped.
func Block(s string) string { return escape(s, true, true) }

// Controls escapes only the unsafe characters of s, as Block does, and
// keeps backslashes and ⟨ as they are: the net over text whose server
// parts went through Line or Block already (a command's whole output, a
// notification, a menu), which it leaves unchanged. It keeps raw controls
// off a screen, but on its own two strings can give the same text: use
// Line or Block for what a server wrote.
func Controls(s string) string { return escape(s, true, false) }

func escape(s string, keepLines, literals bool) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || Unsafe(r) && !(keepLines && (r == '\n' || r == '\t')) ||
			literals && (r == '⟨' || r == '\\' && readsAsEscape(s[i+1:], keepLines)) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case literals && r == '\\' && readsAsEscape(s[i+1:], keepLines):
			b.WriteString(`\\`)
		case literals && r == '⟨':
			b.WriteString("⟨U+27E8⟩")
		case !Unsafe(r):
			b.WriteString(s[i : i+n])
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0xA0:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, "⟨U+%04X⟩", r)
		}
		i += n
	}
	return b.String()
}

// readsAsEscape reports whether a backslash followed by rest (the text
// still to escape) would start what reads as an escape or a doubled
// backslash in the output: rest starts with x, u or a backslash, or with a
// character that is itself written as \x or \u, or rest is empty (the
// line may be joined to more).
func readsAsEscape(rest string, keepLines bool) bool {
	if rest == "" {
		return true
	}
	switch rest[0] {
	case 'x', 'u', '\\':
		return true
	}
	r, n := utf8.DecodeRuneInString(rest)
	if r == utf8.RuneError && n == 1 {
		return true
	}
	return r < 0xA0 && Unsafe(r) && !(keepLines && (r == '\n' || r == '\t'))
}

// JSON returns the JSON text b with every unsafe character that it holds
// raw written as a \u escape instead (encoding/json leaves DEL, the C1
// controls and the format characters raw): the same JSON value, in bytes
// a terminal shows as they are. Outside strings valid JSON holds no such
// character; invalid UTF-8 is left to the caller's encoder (encoding/json
// writes U+FFFD).
func JSON(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 || !Unsafe(r) || r < 0x20 {
			if out != nil {
				out = append(out, b[i:i+n]...)
			}
			i += n
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(b)+16), b[:i]...)
		}
		if r > 0xFFFF {
			r -= 0x10000
			out = fmt.Appendf(out, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	if out == nil {
		return b
	}
	return out
}

// Writer is an io.Writer that passes what it is given through Controls
// to W: whatever a command prints, no raw control character reaches the
// terminal (the command escapes a server's text itself, with Line or
// Block, so that it cannot pass for an escape). A character split between two writes is held until the next;
// Flush writes what is held (escaped, as it is incomplete).
type Writer struct {
	W       io.Writer
	pending []byte
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{W: w} }

// Write escapes p and writes it to W; it reports len(p) written unless W
// failed.
func (w *Writer) Write(p []byte) (int, error) {
	data := p
	if len(w.pending) > 0 {
		data = append(w.pending, p...)
		w.pending = nil
	}
	// Hold back the start of a character cut at the end of p.
	cut := len(data)
	for k := 1; k <= utf8.UTFMax-1 && k <= len(data); k++ {
		c := data[len(data)-k]
		if c < 0x80 {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(data[len(data)-k:]) {
				cut = len(data) - k
			}
			break
		}
	}
	if cut < len(data) {
		w.pending = slices.Clone(data[cut:])
	}
	if _, err := io.WriteString(w.W, Controls(string(data[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes the bytes held back, escaped.
func (w *Writer) Flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	p := w.pending
	w.pending = nil
	_, err := io.WriteString(w.W, Controls(string(p)))
	return err
}

// Unwrap returns W, so that a caller can still ask whether it writes to a
// terminal.
func (w *Writer) Unwrap() io.Writer { return w.W }

// Flag says what makes a tool name unsafe to tell apart by eye.
type Flag struct {
	// Scripts are the scripts whose letters the name mixes (sorted), when
	// it mixes more than one; Common and Inherited characters (digits,
	// punctuation, combining marks) belong to none.
	Scripts []string
	// LooksLike are the other names (as given) with the same skeleton.
	LooksLike []string
}

// String words the flag for a person, without the name: "mixes Cyrillic
// and Latin letters; looks like read_file".
func (f Flag) String() string {
	var parts []string
	if len(f.Scripts) > 1 {
		parts = append(parts, "mixes "+strings.Join(f.Scripts, " and ")+" letters")
	}
	if len(f.LooksLike) > 0 {
		quoted := make([]string, len(f.LooksLike))
		for i, n := range f.LooksLike {
			quoted[i] = Line(n)
		}
		parts = append(parts, "looks like "+strings.Join(quoted, ", "))
	}
	return strings.Join(parts, "; ")
}

// Skeleton is what two names that a person cannot tell apart have in
// common: the name in NFKC, without its default-ignorable characters (the
// ones Unsafe escapes above U+00A0), mapped through the Unicode
// confusables table (UTS #39 skeleton: NFD, prototypes, NFD) and folded to
// lower case.
func Skeleton(name string) string {
	s := norm.NFKC.String(name)
	s = strings.Map(func(r rune) rune {
		if r >= 0xA0 && Unsafe(r) {
			return -1
		}
		return r
	}, s)
	return strings.ToLower(confusables.Skeleton(s))
}

// Scripts returns the scripts of the letters of name, sorted; Common and
// Inherited characters count for none.
func Scripts(name string) []string {
	var out []string
	for _, r := range name {
		if r < 0x80 {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
				out = appendNew(out, "Latin")
			}
			continue
		}
		for _, sc := range scriptNames {
			if unicode.Is(unicode.Scripts[sc], r) {
				if sc != "Common" && sc != "Inherited" {
					out = appendNew(out, sc)
				}
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// scriptNames are the names of unicode.Scripts, sorted, the most common
// first (a name is mostly Latin).
var scriptNames = func() []string {
	names := make([]string, 0, len(unicode.Scripts))
	for n := range unicode.Scripts {
		names = append(names, n)
	}
	slices.Sort(names)
	first := []string{"Latin", "Common", "Inherited", "Cyrillic", "Greek"}
	return append(first, slices.DeleteFunc(names, func(n string) bool { return slices.Contains(first, n) })...)
}()

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// Inspect flags the names (a catalog's tools, the tools of a card) that
// mix scripts or share their skeleton with another of them; names without
// a flag are absent from the map. Han, Hiragana and Katakana together
// count as one script (Japanese writes them together).
func Inspect(names []string) map[string]Flag {
	out := map[string]Flag{}
	bySkel := map[string][]string{}
	for _, n := range names {
		k := Skeleton(n)
		if !slices.Contains(bySkel[k], n) {
			bySkel[k] = append(bySkel[k], n)
		}
	}
	for _, n := range names {
		var f Flag
		if sc := Scripts(n); len(japanese(sc)) > 1 {
			f.Scripts = sc
		}
		for _, o := range bySkel[Skeleton(n)] {
			if o != n {
				f.LooksLike = append(f.LooksLike, o)
			}
		}
		if len(f.Scripts) > 0 || len(f.LooksLike) > 0 {
			out[n] = f
		}
	}
	return out
}

// japanese merges Han, Hiragana and Katakana in a sorted script list.
func japanese(sc []string) []string {
	var out []string
	for _, s := range sc {
		if s == "Han" || s == "Hiragana" || s == "Katakana" {
			s = "Japanese"
		}
		out = appendNew(out, s)
	}
	return out
}

// Name returns name for display among others (the other names shown or
// known with it; they may include name): Line(name), followed by
// " ⚠ " and its flag when it has one.
func Name(name string, others []string) string {
	all := others
	if !slices.Contains(all, name) {
		all = append(slices.Clone(others), name)
	}
	if f, ok := Inspect(all)[name]; ok {
		return Line(name) + " ⚠ " + f.String()
	}
	return Line(name)
}

// Warnings returns one sentence per flagged name of names, in their
// order: `tool "read_filе" mixes Cyrillic and Latin letters; looks like
// read_file`. Nil when none is flagged.
func Warnings(names []string) []string {
	flags := Inspect(names)
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		f, ok := flags[n]
		if !ok || seen[n] {
			continue
		}
		seen[n] = true
		out = append(out, `tool "`+Line(n)+`" `+f.String())
	}
	return out
}
