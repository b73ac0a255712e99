package install

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bigClaudeJSON returns a ~/.claude.json with n projects, each with two stdio
// servers and some history, the shape that grows large on real machines.
func bigClaudeJSON(n int) string {
	var b strings.Builder
	b.WriteString("{\n  \"numStartups\": 1000,\n  \"projects\": {\n")
	for i := range n {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `    "/src/p%d": {
      "allowedTools": [],
      "history": [%s],
      "mcpServers": {
        "db": {"type": "stdio", "command": "node", "args": ["dist/server.js"], "env": {"PGSSLMODE": "disable"}},
        "docs": {"type": "stdio", "command": "uvx", "args": ["docs-mcp", "--root", "/src/p%d/docs"]}
      }
    }`, i, strings.Repeat(`{"display": "fix the failing test in the parser please", "pastedContents": {}},`, 20)+`{}`, i)
	}
	b.WriteString("\n  }\n}\n")
	return b.String()
}

// BenchmarkInstallClaudeCodeLarge measures a dry run of install on a ~/.claude.json
// of 300 projects (about 0.6 MB, 600 server entries): parse, analysis, labels,
// rewriting and the unified diffs of both files.
func BenchmarkInstallClaudeCodeLarge(b *testing.B) {
	dir := b.TempDir()
	home := filepath.Join(dir, "home")
	tg, err := Locate(ClaudeCode, ScopeUser, Env{GOOS: "linux", Home: home})
	if err != nil {
		b.Fatal(err)
	}
	data := bigClaudeJSON(300)
	if err := os.MkdirAll(home, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(tg.Path, []byte(data), 0o600); err != nil {
		b.Fatal(err)
	}
	opts := Options{Target: tg, ConfigFile: filepath.Join(dir, "pc", "config.json"), StateDir: filepath.Join(dir, "pc"), Exe: testExe, DryRun: true}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		rep, err := Install(opts)
		if err != nil {
			b.Fatal(err)
		}
		if len(rep.Entries) != 600 {
			b.Fatalf("entries = %d", len(rep.Entries))
		}
	}
}
