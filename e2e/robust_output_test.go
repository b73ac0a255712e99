package e2e

// A server whose stdout is JSON-RPC with the faults real servers have
// around their messages: a UTF-8 byte-order mark at the start of stdout
// (.NET, PowerShell), colour codes around a message, a JSON-RPC batch
// (MCP 2025-03-26), a lone '\r' as the line end, a log line that carries
// an answer, invalid UTF-8 in an answer and in tools/list. Each answer must
// reach the agent; none may hang.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/portcullis/portcullis/core/gateway"
)

// quirkySource is the whole server: stdlib only, built by quirkyBin.
const quirkySource = `package main

import (
	"bufio"
	"encoding/json"
	"os"
	"strconv"
)

const logNote = ` + "`" + `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"working"}}` + "`" + `

// The description of badutf8 holds the bytes FF FE: not UTF-8.
const tools = ` + "`" + `{"tools":[` + "`" + ` +
	` + "`" + `{"name":"ansi","description":"Answers in colour.","inputSchema":{"type":"object"}},` + "`" + ` +
	` + "`" + `{"name":"batch","description":"Answers with a batch.","inputSchema":{"type":"object"}},` + "`" + ` +
	` + "`" + `{"name":"cr","description":"Ends its lines with a lone CR.","inputSchema":{"type":"object"}},` + "`" + ` +
	` + "`" + `{"name":"logtext","description":"Answers inside a log line.","inputSchema":{"type":"object"}},` + "`" + ` +
	` + "`" + `{"name":"badutf8","description":"Bad bytes: ` + "`" + ` + "\xff\xfe" + ` + "`" + `.","inputSchema":{"type":"object"}}]}` + "`" + `

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	write := func(s string) { _, _ = os.Stdout.WriteString(s) }
	write("\xEF\xBB\xBF") // as a .NET console writes before its first line
	for in.Scan() {
		var req struct {
			ID     json.RawMessage ` + "`json:\"id\"`" + `
			Method string          ` + "`json:\"method\"`" + `
			Params struct {
				Name string ` + "`json:\"name\"`" + `
			} ` + "`json:\"params\"`" + `
		}
		if json.Unmarshal(in.Bytes(), &req) != nil || req.ID == nil {
			continue
		}
		res := func(result string) string {
			return ` + "`" + `{"jsonrpc":"2.0","id":` + "`" + ` + string(req.ID) + ` + "`" + `,"result":` + "`" + ` + result + "}"
		}
		text := func(s string) string {
			return res(` + "`" + `{"content":[{"type":"text","text":` + "`" + ` + strconv.Quote(s) + "}]}")
		}
		switch req.Method {
		case "initialize":
			write(res(` + "`" + `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"quirky","version":"1.0.0"}}` + "`" + `) + "\n")
		case "tools/list":
			write("\x1b[32m" + res(tools) + "\x1b[0m\n")
		case "tools/call":
			switch req.Params.Name {
			case "ansi":
				write("\x1b]0;quirky\x07\x1b[1;34m" + text("ansi ok") + "\x1b[0m\n")
			case "batch":
				write("[" + logNote + "," + text("batch ok") + "]\n")
			case "cr":
				write(logNote + "\r" + text("cr ok") + "\r") // and no newline
			case "logtext":
				write("INFO answering: " + text("log ok") + "\n")
			case "badutf8":
				write(res(` + "`" + `{"content":[{"type":"text","text":"bad ` + "`" + ` + "\xff\xfe" + ` + "`" + ` bytes"}]}` + "`" + `) + "\n")
			default:
				write(` + "`" + `{"jsonrpc":"2.0","id":` + "`" + ` + string(req.ID) + ` + "`" + `,"error":{"code":-32602,"message":"unknown tool"}}` + "`" + ` + "\n")
			}
		default:
			write(` + "`" + `{"jsonrpc":"2.0","id":` + "`" + ` + string(req.ID) + ` + "`" + `,"error":{"code":-32601,"message":"method not found"}}` + "`" + ` + "\n")
		}
	}
}
`

var quirkyTools = []string{"ansi", "batch", "cr", "logtext", "badutf8"}

// quirkyBin builds quirkySource into a temporary directory of t.
func quirkyBin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module quirky\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(quirkySource), 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd := "go"
	if r := os.Getenv("GOROOT"); r != "" {
		if p := filepath.Join(r, "bin", "go"); fileExists(p) {
			goCmd = p
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "quirky")
	cmd := exec.CommandContext(ctx, goCmd, "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the quirky server: %v\n%s", err, out)
	}
	return bin
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestRobustServerOutputQuirks proves, through the real shim and daemon,
// that every answer of a server with faulty framing reaches the agent at
// once: the initialize answer after a UTF-8 byte-order mark (before, the
// handshake hung until the startup timeout killed the server), a colour-
// coded tools/list, a batch, answers separated by a lone '\r' with no
// newline, an answer inside a log line; invalid UTF-8 in the catalog still
// makes a catalog revision, and in an answer reaches the agent as U+FFFD.
// The server's diagnostics tell what was repaired.
func TestRobustServerOutputQuirks(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "quirky", quirkyBin(t))
	allowTools(t, h, "quirky", quirkyTools...)
	startDaemon(t, h)
	a := startRaw(t, h, "quirky")

	start := time.Now()
	a.handshake("1")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the initialize answer after a byte-order mark took %s", d.Round(time.Millisecond))
	}

	m := a.call("2", "tools/list", nil, 10*time.Second)
	if m.Error != nil || !strings.Contains(m.Raw, `"badutf8"`) || !strings.Contains(m.Raw, "Bad bytes: \uFFFD\uFFFD.") || !utf8.ValidString(m.Raw) {
		t.Fatalf("tools/list (colour-coded, invalid UTF-8 in a description): %.600q", m.Raw)
	}
	st, _ := runOf(t, h, a.pid(), "ready with a catalog revision", func(r gateway.Status) bool {
		return r.State == gateway.StateReady && r.CatalogRevision != 0
	})

	for i, tc := range []struct{ tool, want string }{
		{"ansi", "ansi ok"},
		{"batch", "batch ok"},
		{"cr", "cr ok"},
		{"logtext", "log ok"},
		{"badutf8", "bad \uFFFD\uFFFD bytes"},
		{"cr", "cr ok"}, // the server's lone '\r' ends are read every time
	} {
		id := string(rune('a'+i)) + "-" + tc.tool
		a.request(`"`+id+`"`, "tools/call", toolCall(tc.tool, map[string]any{}))
		got, before := a.await(`"`+id+`"`, 10*time.Second)
		if got.Error != nil || got.text(t) != tc.want || !utf8.ValidString(got.Raw) {
			t.Errorf("%s answered %.300q, want %q", tc.tool, got.Raw, tc.want)
		}
		if tc.tool == "batch" || tc.tool == "cr" {
			// The notification that shares the batch or the line comes first.
			if len(before) == 0 || before[len(before)-1].Method != "notifications/message" {
				t.Errorf("%s: the notification before the answer did not reach the agent (got %d messages before it)", tc.tool, len(before))
			}
		}
	}

	after, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	if after.Epoch != st.Epoch || after.Epochs != 1 || after.InFlight != 0 {
		t.Errorf("the session did not go on with one process: epoch %s → %s (%d epochs, %d in flight)", st.Epoch, after.Epoch, after.Epochs, after.InFlight)
	}
	diag := strings.Join(after.Diagnostics, "\n")
	for _, want := range []string{"byte-order mark", "escape sequences", "batch", "several JSON-RPC messages on one line", "shared its line", "INFO answering:"} {
		if !strings.Contains(diag, want) {
			t.Errorf("the diagnostics do not mention %q:\n%s", want, diag)
		}
	}
}
