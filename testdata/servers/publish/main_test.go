package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connect runs the publish server of revision rev in process and returns a
// client session to it; listChanged receives once per
// notifications/tools/list_changed.
func connect(t *testing.T, rev, callLog string, pv string, listChanged chan<- struct{}) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	server, closeLog, err := newServer(slog.New(slog.NewTextHandler(io.Discard, nil)), rev, callLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLog)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	opts := &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		select {
		case listChanged <- struct{}{}:
		default:
		}
	}}
	var so *mcp.ClientSessionOptions
	if pv != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: pv}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, opts).Connect(ctx, ct, so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// TestSchemas proves the two revisions advertise the documented schemas byte
// for byte and the same other tools.
func TestSchemas(t *testing.T) {
	for _, tc := range []struct{ rev, schema string }{{"A", schemaA}, {"B", schemaB}} {
		t.Run(tc.rev, func(t *testing.T) {
			cs := connect(t, tc.rev, "", "", nil)
			res, err := cs.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, tool := range res.Tools {
				b, _ := json.Marshal(tool.InputSchema)
				got[tool.Name] = string(b)
			}
			want := map[string]string{
				"publish_preview": tc.schema,
				"status":          `{"additionalProperties":false,"properties":{},"type":"object"}`,
				"slow_publish":    `{"additionalProperties":false,"properties":{"branch":{"type":"string"},"delay_ms":{"maximum":600000,"minimum":0,"type":"integer"}},"required":["branch","delay_ms"],"type":"object"}`,
				"add_tool":        `{"additionalProperties":false,"properties":{"name":{"pattern":"^[a-z][a-z0-9_]{0,63}$","type":"string"}},"required":["name"],"type":"object"}`,
				"revise":          `{"additionalProperties":false,"properties":{"change":{"enum":["typo","destructive","target"],"type":"string"}},"required":["change"],"type":"object"}`,
			}
			// The client decodes schemas into maps: compare canonically.
			for k, v := range want {
				var m any
				_ = json.Unmarshal([]byte(v), &m)
				b, _ := json.Marshal(m)
				want[k] = string(b)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("input schemas (-want +got):\n%s", d)
			}
		})
	}
}

// TestPublish proves the handler's answers per revision, the default
// target, the server-side refusal of revision B's field in revision A, and
// the call log.
func TestPublish(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "calls.jsonl")
	for _, tc := range []struct {
		rev     string
		args    map[string]any
		want    string
		isError bool
	}{
		{"A", map[string]any{"branch": "main"}, "revision A published branch main to preview", false},
		{"A", map[string]any{"branch": "main", "target": "production"}, `unknown argument "target" in revision A`, true},
		{"B", map[string]any{"branch": "main"}, "revision B published branch main to preview", false},
		{"B", map[string]any{"branch": "fix", "target": "production"}, "revision B published branch fix to production", false},
		{"B", map[string]any{"branch": "fix", "target": "staging"}, `target must be preview or production, not "staging"`, true},
		{"B", map[string]any{}, "branch is required", true},
	} {
		cs := connect(t, tc.rev, logPath, "", nil)
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "publish_preview", Arguments: tc.args})
		if err != nil {
			t.Fatal(err)
		}
		if got := text(t, res); got != tc.want || res.IsError != tc.isError {
			t.Errorf("revision %s publish_preview %v = %q (isError %v), want %q (isError %v)", tc.rev, tc.args, got, res.IsError, tc.want, tc.isError)
		}
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) != 6 {
		t.Fatalf("call log has %d lines, want 6:\n%s", len(lines), b)
	}
	var rec CallRecord
	if err := json.Unmarshal(lines[3], &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Tool != "publish_preview" || rec.Revision != "B" || rec.PID != os.Getpid() || string(rec.Args) != `{"branch":"fix","target":"production"}` {
		t.Errorf("call log line 4 = %+v", rec)
	}
}

// TestAddTool proves add_tool changes the tool list in the running process
// and the client hears list_changed, in both protocol eras.
func TestAddTool(t *testing.T) {
	for _, pv := range []string{"", "2025-06-18"} {
		t.Run("pv="+pv, func(t *testing.T) {
			changed := make(chan struct{}, 1)
			cs := connect(t, "A", "", pv, changed)
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "add_tool", Arguments: map[string]any{"name": "rollback"}})
			if err != nil || res.IsError {
				t.Fatalf("add_tool: %v %v", err, res)
			}
			select {
			case <-changed:
			case <-time.After(10 * time.Second):
				t.Fatal("no tools/list_changed within 10 s")
			}
			lt, err := cs.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range lt.Tools {
				names = append(names, tool.Name)
			}
			if !strings.Contains(strings.Join(names, ","), "rollback") {
				t.Errorf("tools after add_tool = %v, want rollback among them", names)
			}
			res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "rollback", Arguments: map[string]any{}})
			if err != nil || text(t, res) != "rollback from revision A" {
				t.Errorf("rollback = %v, %v", res, err)
			}
			res, _ = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "add_tool", Arguments: map[string]any{"name": "rollback"}})
			if res == nil || !res.IsError {
				t.Errorf("adding rollback twice: %v, want a tool error", res)
			}
		})
	}
}

// TestRevise proves revise rewrites publish_preview in place: the client
// hears list_changed, the listed tool carries the change, and after
// "target" an omitted target publishes to production.
func TestRevise(t *testing.T) {
	changed := make(chan struct{}, 1)
	cs := connect(t, "A", "", "", changed)
	pub := func() *mcp.Tool {
		t.Helper()
		lt, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range lt.Tools {
			if tool.Name == "publish_preview" {
				return tool
			}
		}
		t.Fatal("no publish_preview")
		return nil
	}
	for _, change := range []string{"typo", "destructive", "target"} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "revise", Arguments: map[string]any{"change": change}})
		if err != nil || text(t, res) != "revised publish_preview: "+change {
			t.Fatalf("revise %s: %v %v", change, res, err)
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no tools/list_changed within 10 s after revise %s", change)
		}
	}
	tool := pub()
	if tool.Description != "Publishes a branch to a preveiw environment." || tool.Annotations == nil || tool.Annotations.DestructiveHint == nil || !*tool.Annotations.DestructiveHint {
		t.Errorf("revised publish_preview = %+v %+v", tool, tool.Annotations)
	}
	if b, _ := json.Marshal(tool.InputSchema); !strings.Contains(string(b), `"default":"production"`) {
		t.Errorf("revised schema %s lacks target's default production", b)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "publish_preview", Arguments: map[string]any{"branch": "main"}})
	if err != nil || text(t, res) != "revision A published branch main to production" {
		t.Errorf("omitted target after revise target: %v %v", res, err)
	}
}

// TestSlowPublishCancelled proves slow_publish waits and stops when the call
// is cancelled.
func TestSlowPublishCancelled(t *testing.T) {
	cs := connect(t, "B", "", "", nil)
	start := time.Now()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "slow_publish", Arguments: map[string]any{"branch": "x", "delay_ms": 200}})
	if err != nil || text(t, res) != "revision B published branch x to preview" {
		t.Fatalf("slow_publish = %v, %v", res, err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("slow_publish answered after %s, want at least 200 ms", d)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow_publish", Arguments: map[string]any{"branch": "x", "delay_ms": 60000}}); err == nil {
		t.Fatal("a cancelled slow_publish succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancelled slow_publish returned after %s", d)
	}
}
