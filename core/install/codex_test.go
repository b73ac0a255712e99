package install

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestCodexRefusesLayouts checks that a server Portcullis cannot edit safely
// is refused with the reason, and the file left as it was.
func TestCodexRefusesLayouts(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"inline table", "[mcp_servers]\ntime = { command = \"uvx\", args = [\"mcp-server-time\"] }\n", "not [mcp_servers.NAME] tables"},
		{"dotted top-level", "mcp_servers.time.command = \"uvx\"\n", "dotted key mcp_servers.time.command"},
		{"env apart", "[mcp_servers.time]\ncommand = \"uvx\"\n\n[other]\nx = 1\n\n[mcp_servers.time.env]\nTZ = \"UTC\"\n", "apart from the rest of the server time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tg := f.target(t, Codex, ScopeUser)
			writeFile(t, tg.Path, tt.in, 0o600)
			_, err := Install(f.opts(tg, newFakeStore()))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "the file was not changed") {
				t.Fatalf("Install error = %v, want one saying %q and that the file was not changed", err, tt.want)
			}
			if got := readString(t, tg.Path); got != tt.in {
				t.Errorf("the file changed:\n%s", got)
			}
		})
	}
}

// TestCodexTrickyText checks that strings holding brackets, quotes and '#',
// multi-line strings and arrays of tables do not confuse where a server's
// table ends, and that a round trip gives the original bytes back.
func TestCodexTrickyText(t *testing.T) {
	in := `title = """
[mcp_servers.fake]
command = "not a server"
"""
[mcp_servers.a]
command = 'C:\bin\tool' # a literal string
args = ["--x=[1]", "# not a comment", '''multi
line''']
note = "a \"quoted\" ] value"

[[plugins]]
name = "p"
`
	f := newFixture(t)
	tg := f.target(t, Codex, ScopeUser)
	writeFile(t, tg.Path, in, 0o600)
	opts := f.opts(tg, newFakeStore())
	rep, err := Install(opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Entries) != 1 || rep.Entries[0].Action != ActionInstalled {
		t.Fatalf("entries = %+v, want a installed", rep.Entries)
	}
	got := readString(t, tg.Path)
	for _, keep := range []string{`note = "a \"quoted\" ] value"`, "[[plugins]]", `command = "not a server"`} {
		if !strings.Contains(got, keep) {
			t.Errorf("the installed file lost %q:\n%s", keep, got)
		}
	}
	if _, err := Uninstall(opts); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, tg.Path); got != in {
		t.Errorf("uninstall did not give the original back:\n%s", got)
	}
}

func TestCodexNoProjectScope(t *testing.T) {
	_, err := Locate(Codex, ScopeProject, Env{GOOS: "linux", Home: "/home/u", Dir: "/src/app"})
	if !errors.Is(err, ErrScope) || !strings.Contains(err.Error(), "no project configuration") {
		t.Fatalf("Locate(codex, project) = %v", err)
	}
}

func TestCodexDisabledNote(t *testing.T) {
	f := newFixture(t)
	tg := f.target(t, Codex, ScopeUser)
	writeFile(t, tg.Path, "[mcp_servers.a]\ncommand = \"uvx\"\nenabled = false\n", 0o600)
	rep, err := Import(f.opts(tg, newFakeStore()))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Entries) != 1 || !slices.Contains(rep.Entries[0].Notes, "the agent has this entry disabled; it stays disabled there") {
		t.Fatalf("entries = %+v, want a note that a is disabled", rep.Entries)
	}
}
