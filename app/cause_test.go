package app

import "testing"

// TestCauseLine: the line of a stderr tail that names the cause, for the
// runtimes' real failure reports.
func TestCauseLine(t *testing.T) {
	tests := []struct {
		name string
		tail []string
		want string
	}{
		{"node missing module", []string{
			"node:internal/modules/cjs/loader:1228",
			"  throw err;",
			"  ^",
			"",
			"Error: Cannot find module '/src/app/server.mjs'",
			"    at Module._resolveFilename (node:internal/modules/cjs/loader:1225:15)",
			"    at node:internal/main/run_main_module:28:49 {",
			"  code: 'MODULE_NOT_FOUND',",
			"  requireStack: []",
			"}",
			"",
			"Node.js v20.20.2",
		}, "Error: Cannot find module '/src/app/server.mjs'"},
		{"python traceback", []string{
			"Traceback (most recent call last):",
			`  File "/src/server.py", line 3, in <module>`,
			"    import mcp_helpers",
			"ModuleNotFoundError: No module named 'mcp_helpers'",
		}, "ModuleNotFoundError: No module named 'mcp_helpers'"},
		{"go panic", []string{
			"panic: open /etc/inv.json: no such file or directory",
			"",
			"goroutine 1 [running]:",
			"main.main()",
		}, "panic: open /etc/inv.json: no such file or directory"},
		{"node syntax", []string{
			"/src/server.mjs:12",
			"const x = ;",
			"          ^",
			"",
			"SyntaxError: Unexpected token ';'",
		}, "SyntaxError: Unexpected token ';'"},
		{"listen", []string{"starting", "listen tcp 127.0.0.1:8080: bind: address already in use"}, "listen tcp 127.0.0.1:8080: bind: address already in use"},
		{"no error", []string{"server started", "serving on stdio"}, ""},
		{"empty", nil, ""},
	}
	for _, tt := range tests {
		if got := causeLine(tt.tail); got != tt.want {
			t.Errorf("%s: causeLine = %q, want %q", tt.name, got, tt.want)
		}
	}
}
