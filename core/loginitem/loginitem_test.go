package loginitem

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", name, diff)
	}
}

func TestLaunchAgentPlistGolden(t *testing.T) {
	golden(t, "launchagent.plist.golden",
		LaunchAgentPlist(ID, "/Applications/Portcullis.app/Contents/MacOS/portcullis", ID))
	// XML metacharacters in the path are escaped; no bundle id, no association.
	golden(t, "launchagent-escaped.plist.golden",
		LaunchAgentPlist(ID, `/Users/dev/Apps & Tools/<b>"x"/portcullis`, ""))
}

func TestDesktopEntryGolden(t *testing.T) {
	golden(t, "autostart.desktop.golden", DesktopEntry("/usr/local/bin/portcullis"))
	golden(t, "autostart-quoted.desktop.golden", DesktopEntry(`/home/dev/My Apps/$HOME\50%/portcullis`))
}

// unescapeString undoes the general escape rule of desktop entry string
// values (Desktop Entry Specification 1.5, "Possible value types").
func unescapeString(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
			switch s[i] {
			case 's':
				b.WriteByte(' ')
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			default:
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// splitExec splits an unescaped Exec value into arguments as a launcher
// does (spec "The Exec key"): quoted arguments lose their quotes and the
// backslash before ", `, $ and \; %% becomes %.
func splitExec(t *testing.T, s string) []string {
	t.Helper()
	var args []string
	var cur strings.Builder
	inArg, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\\' && i+1 < len(s) && strings.IndexByte("\"`$\\", s[i+1]) >= 0:
			i++
			cur.WriteByte(s[i])
		case c == '%' && i+1 < len(s) && s[i+1] == '%':
			// Launchers expand field codes before splitting, inside quotes too.
			i++
			cur.WriteByte('%')
			inArg = true
		case quoted && c == '"':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '"':
			quoted, inArg = true, true
		case c == ' ':
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		case strings.IndexByte(execReserved, c) >= 0:
			t.Fatalf("reserved character %q outside quotes in %q", c, s)
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if quoted {
		t.Fatalf("unterminated quote in %q", s)
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args
}

func TestExecArg(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"/usr/bin/portcullis", "/usr/bin/portcullis"},
		{"/opt/a b/portcullis", `"/opt/a b/portcullis"`},
		{"/opt/x$y", `"/opt/x\\$y"`},
		{`/opt/a\b`, `"/opt/a\\\\b"`},
		{`/opt/say"hi"`, `"/opt/say\\"hi\\""`},
		{"/opt/`cmd`", "\"/opt/\\\\`cmd\\\\`\""},
		{"/opt/100%", "/opt/100%%"},
		{"/opt/100% sure", `"/opt/100%% sure"`},
		{"/opt/it's", `"/opt/it's"`},
		{"/opt/~me/(x)", `"/opt/~me/(x)"`},
		{"/opt/ünïcode/app", "/opt/ünïcode/app"},
	}
	for _, tt := range tests {
		got := ExecArg(tt.in)
		if got != tt.want {
			t.Errorf("ExecArg(%q) = %q, want %q", tt.in, got, tt.want)
		}
		// A launcher reading the file gets the path back as one argument.
		if args := splitExec(t, unescapeString(got)); !cmp.Equal(args, []string{tt.in}) {
			t.Errorf("ExecArg(%q) reads back as %q", tt.in, args)
		}
	}
}

func TestDesktopEntryExecReadsBack(t *testing.T) {
	exe := `/home/dev/My Apps/$HOME\50%/portcullis`
	var exec string
	for line := range strings.Lines(string(DesktopEntry(exe))) {
		if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "Exec="); ok {
			exec = v
		}
	}
	if got := splitExec(t, unescapeString(exec)); !cmp.Equal(got, []string{exe}) {
		t.Errorf("Exec=%s reads back as %q, want [%q]", exec, got, exe)
	}
}

func TestDesktopEntryEnabled(t *testing.T) {
	tests := []struct {
		name string
		data string
		want bool
	}{
		{"generated", string(DesktopEntry("/usr/bin/portcullis")), true},
		{"gnome switched off", "[Desktop Entry]\nType=Application\nX-GNOME-Autostart-enabled=false\n", false},
		{"hidden", "[Desktop Entry]\nHidden=true\nExec=/x\n", false},
		{"hidden false", "[Desktop Entry]\nHidden=false\nExec=/x\n", true},
		{"spaces around =", "[Desktop Entry]\nHidden = true\n", false},
		{"other group ignored", "[Desktop Entry]\nExec=/x\n[Desktop Action quit]\nHidden=true\n", true},
		{"comment ignored", "[Desktop Entry]\n# Hidden=true\nExec=/x\n", true},
		{"empty", "", true},
	}
	for _, tt := range tests {
		if got := DesktopEntryEnabled([]byte(tt.data)); got != tt.want {
			t.Errorf("%s: DesktopEntryEnabled = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestCheckExecutable(t *testing.T) {
	tests := []struct {
		exe string
		ok  bool
	}{
		{"/usr/bin/portcullis", true},
		{"/Applications/Portcullis.app/Contents/MacOS/portcullis", true},
		{"/opt/a b/ünï", true},
		{"portcullis", false},
		{"./bin/portcullis", false},
		{"", false},
		{"/opt/evil\nExec=/bin/sh", false},
		{"/opt/tab\there", false},
		{"/opt/nul\x00", false},
	}
	for _, tt := range tests {
		err := CheckExecutable(tt.exe)
		if (err == nil) != tt.ok {
			t.Errorf("CheckExecutable(%q) = %v, want ok=%v", tt.exe, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadExecutable) {
			t.Errorf("CheckExecutable(%q) = %v, does not wrap ErrBadExecutable", tt.exe, err)
		}
	}
}

// TestImports keeps core/loginitem on the standard library and small
// libraries: no Fyne, no cgo, no platform or app package (docs/DESIGN.md, "Packages").
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "C" || strings.Contains(path, ".") {
				t.Errorf("%s imports %s; core/loginitem uses the standard library only", name, path)
			}
		}
	}
}

func TestLaunchdDisabled(t *testing.T) {
	out := `disabled services = {
	"com.apple.ftp-proxy" => disabled
	"dev.portcullis.app.helper" => disabled
	"dev.portcullis.app" => enabled
}
`
	tests := []struct {
		name, out string
		want      bool
	}{
		{"enabled", out, false},
		{"disabled (macOS 13+)", strings.Replace(out, `"dev.portcullis.app" => enabled`, `"dev.portcullis.app" => disabled`, 1), true},
		{"disabled (older)", "disabled services = {\n\t\"dev.portcullis.app\" => true\n}\n", true},
		{"enabled (older)", "disabled services = {\n\t\"dev.portcullis.app\" => false\n}\n", false},
		{"absent", "disabled services = {\n}\n", false},
		{"prefix of another label does not count", "\t\"dev.portcullis.app.helper\" => disabled\n", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		if got := LaunchdDisabled([]byte(tt.out), ID); got != tt.want {
			t.Errorf("%s: LaunchdDisabled = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestLaunchAgentPlistXML checks that the plist is well-formed XML whose
// strings read back as given, whatever the path holds.
func TestLaunchAgentPlistXML(t *testing.T) {
	exe := `/Users/dev/A & B/<x> "q" 'a'/ü/portcullis`
	dec := xml.NewDecoder(bytes.NewReader(LaunchAgentPlist(ID, exe, ID)))
	dec.Strict = true
	var strs []string
	var inString bool
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("plist is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			inString = tok.Name.Local == "string"
		case xml.EndElement:
			inString = false
		case xml.CharData:
			if inString {
				strs = append(strs, string(tok))
			}
		}
	}
	want := []string{ID, exe, "Aqua", "Interactive", ID}
	if diff := cmp.Diff(want, strs); diff != "" {
		t.Errorf("plist strings (-want +got):\n%s", diff)
	}
}
