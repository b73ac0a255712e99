package textsafe

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// Hostile is the set of spoofs a server tried on a person's terminal
// (tmux, xterm): cursor movement and erase, OSC 52 to the clipboard, 8-bit
// CSI, a bidi override, zero-width characters and a Cyrillic homoglyph.
var hostile = map[string]string{
	"cursor":    "drop_all_tables\x1b[15D\x1b[Kread_file",
	"osc52":     "ok\x1b]52;c;cm0gLXJmIH4=\x07",
	"osc52-st":  "ok\x1b]52;c;cm0gLXJmIH4=\x1b\\",
	"c1-csi":    "a\u009b2Jb",
	"bidi":      "read_\u202eelif_",
	"isolate":   "x\u2066y\u2069",
	"zwj":       "read\u200d_file",
	"zwsp":      "read\u200b_file",
	"bom":       "\ufefftool",
	"cr":        "safe\rdanger",
	"bs":        "rm\b\b",
	"tag":       "t\U000E0041",
	"badutf8":   "a\xff\xc3",
	"separator": "a\u2028b",
}

// raw reports the first character of s that Unsafe refuses, or -1.
func raw(s string, keepLines bool) rune {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return r
		}
		if Unsafe(r) && !(keepLines && (r == '\n' || r == '\t')) {
			return r
		}
		i += n
	}
	return -1
}

func TestLineEscapesEverySpoof(t *testing.T) {
	want := map[string]string{
		"cursor":    `drop_all_tables\x1b[15D\x1b[Kread_file`,
		"osc52":     `ok\x1b]52;c;cm0gLXJmIH4=\x07`,
		"osc52-st":  `ok\x1b]52;c;cm0gLXJmIH4=\x1b\\`, // ST's backslash is last: doubled
		"c1-csi":    `a\u009b2Jb`,
		"bidi":      "read_⟨U+202E⟩elif_",
		"isolate":   "x⟨U+2066⟩y⟨U+2069⟩",
		"zwj":       "read⟨U+200D⟩_file",
		"zwsp":      "read⟨U+200B⟩_file",
		"bom":       "⟨U+FEFF⟩tool",
		"cr":        `safe\x0ddanger`,
		"bs":        `rm\x08\x08`,
		"tag":       "t⟨U+E0041⟩",
		"badutf8":   `a\xff\xc3`,
		"separator": "a⟨U+2028⟩b",
	}
	for name, in := range hostile {
		got := Line(in)
		if got != want[name] {
			t.Errorf("%s: Line(%q) = %q, want %q", name, in, got, want[name])
		}
		if r := raw(got, false); r != -1 {
			t.Errorf("%s: %q still holds %U", name, got, r)
		}
		if back, ok := unescape(got); !ok || back != in {
			t.Errorf("%s: Line(%q) = %q reads back as %q (%v)", name, in, got, back, ok)
		}
		if again := Controls(got); again != got {
			t.Errorf("%s: Controls changed escaped text: %q → %q", name, got, again)
		}
	}
	if got := Line("naïve café 東京 read_filе"); got != "naïve café 東京 read_filе" {
		t.Errorf("printable text changed: %q", got)
	}
	if got, want := Line("a\nb\tc"), `a\x0ab\x09c`; got != want {
		t.Errorf("Line(newline, tab) = %q, want %q", got, want)
	}
	if got, want := Block("a\nb\tc\x1b[2J"), "a\nb\tc\\x1b[2J"; got != want {
		t.Errorf("Block = %q, want %q", got, want)
	}
}

// unescape reads text that Line or Block wrote back into the string they
// were given: \\ is a backslash, \xHH a byte, \uHHHH and ⟨U+HHHH⟩ a
// character; a backslash before anything else is itself. ok is false when
// text holds what Line never writes (a raw unsafe character, a bare ⟨).
func unescape(text string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(text); {
		switch {
		case strings.HasPrefix(text[i:], `\\`):
			b.WriteByte('\\')
			i += 2
		case strings.HasPrefix(text[i:], `\x`) && len(text) >= i+4 && isHex(text[i+2:i+4]):
			v, _ := strconv.ParseUint(text[i+2:i+4], 16, 8)
			b.WriteByte(byte(v))
			i += 4
		case strings.HasPrefix(text[i:], `\u`) && len(text) >= i+6 && isHex(text[i+2:i+6]):
			v, _ := strconv.ParseUint(text[i+2:i+6], 16, 32)
			b.WriteRune(rune(v))
			i += 6
		case strings.HasPrefix(text[i:], "⟨U+"):
			end := strings.Index(text[i:], "⟩")
			if end < 0 {
				return b.String(), false
			}
			v, err := strconv.ParseUint(text[i+len("⟨U+"):i+end], 16, 32)
			if err != nil {
				return b.String(), false
			}
			b.WriteRune(rune(v))
			i += end + len("⟩")
		default:
			r, n := utf8.DecodeRuneInString(text[i:])
			if r == utf8.RuneError && n == 1 || r == '⟨' || Unsafe(r) && r != '\n' && r != '\t' {
				return b.String(), false
			}
			b.WriteString(text[i : i+n])
			i += n
		}
	}
	return b.String(), true
}

func isHex(s string) bool {
	_, err := strconv.ParseUint(s, 16, 64)
	return err == nil && !strings.HasPrefix(s, "+")
}

// A name that holds the text \x1b and a name that holds ESC must not look
// the same, nor may any other two names: what Line prints reads back as
// one string only.
func TestLineCannotBeConfused(t *testing.T) {
	pairs := [][2]string{
		{`read\x1b[2Jfile`, "read\x1b[2Jfile"},
		{`read\x1b`, "read\x1b"},
		{`a\u009b`, "a\u009b"},
		{"a⟨U+202E⟩b", "a\u202eb"},
		{`a\`, `a\\`},
		{"\\\x1b", `\x1b`},
		{"\\\n", `\x0a`},
		{"\\\xff", `\xff`},
	}
	for _, p := range pairs {
		a, b := Line(p[0]), Line(p[1])
		if a == b {
			t.Errorf("Line(%q) and Line(%q) both print %q", p[0], p[1], a)
		}
	}
	for in, want := range map[string]string{
		`read\x1b`:          `read\\x1b`,
		"read\x1b":          `read\x1b`,
		`C:\Users\me`:       `C:\Users\me`, // a backslash before other letters stays single
		`C:\xavier\`:        `C:\\xavier\\`,
		`\d+ and \\`:        `\d+ and \\\\`,
		"⟨U+202E⟩":          "⟨U+27E8⟩U+202E⟩",
		"\\\x1b":            `\\\x1b`,
		"plain text, no \\": `plain text, no \\`,
	} {
		if got := Line(in); got != want {
			t.Errorf("Line(%q) = %q, want %q", in, got, want)
		}
	}
	if got, want := Block("a\\\nb"), "a\\\nb"; got != want { // a kept newline is no escape
		t.Errorf("Block = %q, want %q", got, want)
	}
	if got := Controls(`\x1b ⟨U+202E⟩` + "\x1b"); got != `\x1b ⟨U+202E⟩\x1b` {
		t.Errorf("Controls = %q", got)
	}
}

// FuzzLineReadsBack checks that Line and Block can be read back into the
// string they were given, so that no two strings print the same.
func FuzzLineReadsBack(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	for _, s := range []string{`\`, `\\x1b`, "\\\x1b", "\\\xff", "\\\u009b", "⟨", "⟨U+0041⟩", `C:\path\x`, "\\\n\\\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, esc := range map[string]func(string) string{"Line": Line, "Block": Block} {
			out := esc(s)
			if back, ok := unescape(out); !ok || back != s {
				t.Fatalf("%s(%q) = %q reads back as %q (ok %v)", name, s, out, back, ok)
			}
			if name == "Line" && strings.ContainsAny(out, "\n\t") {
				t.Fatalf("Line(%q) = %q holds a newline or tab", s, out)
			}
		}
	})
}

func TestJSONKeepsTheValue(t *testing.T) {
	for name, in := range hostile {
		if !utf8.ValidString(in) {
			continue // encoding/json replaces invalid bytes itself
		}
		b, err := json.Marshal(map[string]string{"name": in + "\x7f"})
		if err != nil {
			t.Fatal(err)
		}
		out := JSON(b)
		if r := raw(string(out), false); r != -1 {
			t.Errorf("%s: JSON output %q still holds %U", name, out, r)
		}
		var back map[string]string
		if err := json.Unmarshal(out, &back); err != nil || back["name"] != in+"\x7f" {
			t.Errorf("%s: JSON changed the value: %q (%v)", name, back["name"], err)
		}
	}
}

func TestWriterHoldsASplitCharacter(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	in := []byte("é\u202e\x1b[Kz")
	for i := range in { // one byte at a time: every character is split
		if n, err := w.Write(in[i : i+1]); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	w.Write([]byte{0xe2, 0x80}) // a cut character at the very end
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), `é⟨U+202E⟩\x1b[Kz\xe2\x80`; got != want {
		t.Errorf("written %q, want %q", got, want)
	}
}

func TestInspectFlagsHomoglyphsAndMixedScripts(t *testing.T) {
	names := []string{"read_file", "read_fil\u0435", "write_file", "ｒｅａｄ_file", "read\u200b_file", "日本語のツール", "Deploy"}
	got := Inspect(names)
	want := map[string]Flag{
		"read_file":       {LooksLike: []string{"read_fil\u0435", "ｒｅａｄ_file", "read\u200b_file"}},
		"read_fil\u0435":  {Scripts: []string{"Cyrillic", "Latin"}, LooksLike: []string{"read_file", "ｒｅａｄ_file", "read\u200b_file"}},
		"ｒｅａｄ_file":       {LooksLike: []string{"read_file", "read_fil\u0435", "read\u200b_file"}},
		"read\u200b_file": {LooksLike: []string{"read_file", "read_fil\u0435", "ｒｅａｄ_file"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Inspect (-want +got):\n%s", diff)
	}
	n := Name("read_fil\u0435", []string{"read_file"})
	if !strings.Contains(n, "mixes Cyrillic and Latin letters; looks like read_file") {
		t.Errorf("Name = %q", n)
	}
	if n := Name("dr\x1b[3Dx", nil); n != `dr\x1b[3Dx` {
		t.Errorf("Name of an escaped name = %q", n)
	}
	if w := Warnings([]string{"write_file", "Deploy"}); w != nil {
		t.Errorf("Warnings of plain names = %q", w)
	}
	w := Warnings([]string{"read_file", "read\u200d_file"})
	if len(w) != 2 || !strings.Contains(w[1], `"read⟨U+200D⟩_file" looks like read_file`) {
		t.Errorf("Warnings = %q", w)
	}
}

func TestQuote(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"claude-code", 0, "“claude-code”"},
		{"Claude Code wants to read notes.txt on", 0, "“Claude Code wants to read notes.txt on”"},
		{"a” wants x “b", 0, "“a⟨U+201D⟩ wants x ⟨U+201C⟩b”"},
		{`say "hi"`, 0, "“say ⟨U+0022⟩hi⟨U+0022⟩”"},
		{"evil\u202Eedoc\n", 0, "“evil⟨U+202E⟩edoc\\x0a”"},
		{"abcdef", 3, "“abc…”"},
	}
	for _, tc := range tests {
		if got := Quote(tc.in, tc.max); got != tc.want {
			t.Errorf("Quote(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
