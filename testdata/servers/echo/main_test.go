package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// syncBuffer is a bytes.Buffer safe for the server's logger and the test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// connect runs the echo server in process and returns a client session to it.
func connect(t *testing.T, callLog string, opts *mcp.ClientOptions) (*mcp.ClientSession, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	logs := &syncBuffer{}
	server, closeLog, err := newServer(slog.New(slog.NewTextHandler(logs, nil)), callLog, nil)
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
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, logs
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("got %d content items, want 1", len(res.Content))
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want text", res.Content[0])
	}
	return tc.Text
}

func TestTools(t *testing.T) {
	cs, _ := connect(t, "", nil)
	tests := []struct {
		tool     string
		args     map[string]any
		wantText string
		wantErr  bool
	}{
		{"echo", map[string]any{"message": "hi"}, "hi", false},
		{"echo", map[string]any{"message": ""}, "", false},
		{"echo", map[string]any{"message": "  spaces, ünïcode\nand a newline "}, "  spaces, ünïcode\nand a newline ", false},
		{"add", map[string]any{"a": 2, "b": 40}, "42", false},
		{"add", map[string]any{"a": -7, "b": 3}, "-4", false},
		{"slow", map[string]any{"duration_ms": 0}, "done after 1 steps", false},
		{"slow", map[string]any{"duration_ms": 1, "steps": 0}, "done after 1 steps", false},
		{"slow", map[string]any{"duration_ms": -1}, "", true},
		{"slow", map[string]any{"duration_ms": 10, "steps": 20000}, "", true},
		{"echo", map[string]any{"nope": 1}, "", true},
	}
	for _, tt := range tests {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
		if err != nil {
			t.Fatalf("%s %v: %v", tt.tool, tt.args, err)
		}
		if res.IsError != tt.wantErr {
			t.Errorf("%s %v: IsError = %v, want %v (%v)", tt.tool, tt.args, res.IsError, tt.wantErr, res.Content)
			continue
		}
		if !tt.wantErr {
			if got := text(t, res); got != tt.wantText {
				t.Errorf("%s %v: text %q, want %q", tt.tool, tt.args, got, tt.wantText)
			}
		}
	}
}

func TestAddStructured(t *testing.T) {
	cs, _ := connect(t, "", nil)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 20, "b": 22}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"sum":42}`, string(raw)); diff != "" {
		t.Errorf("structured content (-want +got):\n%s", diff)
	}
}

func TestSlowProgress(t *testing.T) {
	var mu sync.Mutex
	var got []string
	cs, _ := connect(t, "", &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			p := req.Params
			got = append(got, strings.Join([]string{p.ProgressToken.(string), p.Message}, ": "))
		},
	})
	params := &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"duration_ms": 30, "steps": 3}}
	params.SetProgressToken("tok")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if s := text(t, res); s != "done after 3 steps" {
		t.Errorf("result %q", s)
	}
	// Notifications are sent before the result, but the client may dispatch them
	// asynchronously: wait (bounded) for all three.
	want := []string{"tok: step 1 of 3", "tok: step 2 of 3", "tok: step 3 of 3"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
}

func TestSlowNoProgressWithoutToken(t *testing.T) {
	var mu sync.Mutex
	n := 0
	cs, _ := connect(t, "", &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			n++
			mu.Unlock()
		},
	})
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"duration_ms": 3, "steps": 3}}); err != nil {
		t.Fatal(err)
	}
	// A later call that does carry a token proves notifications would have arrived.
	params := &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"duration_ms": 1, "steps": 1}}
	params.SetProgressToken("later")
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := n
		mu.Unlock()
		if got >= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 1 {
		t.Errorf("got %d progress notifications, want 1 (only the call with a token)", n)
	}
}

func TestSlowCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, logs := connect(t, "", &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { cancel() },
	})
	params := &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"duration_ms": 600000, "steps": 10000}}
	params.SetProgressToken(1)
	// Depending on timing the client returns context.Canceled, or the server's error
	// result for the cancelled call arrives first.
	res, err := cs.CallTool(ctx, params)
	switch {
	case errors.Is(err, context.Canceled):
	case err == nil && res.IsError && strings.HasPrefix(text(t, res), "cancelled after "):
	default:
		detail := fmt.Sprint(err)
		if res != nil {
			detail = fmt.Sprintf("result %+v", res.Content[0])
		}
		t.Fatalf("CallTool: %s; want context.Canceled or a cancelled result", detail)
	}
	// The server must have stopped the handler, not merely the client giving up.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "slow cancelled") {
		if time.Now().After(deadline) {
			t.Fatalf("server did not log the cancellation; logs:\n%s", logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCallLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	cs, _ := connect(t, path, nil)
	for _, p := range []*mcp.CallToolParams{
		{Name: "echo", Arguments: map[string]any{"message": "one"}},
		{Name: "add", Arguments: map[string]any{"a": 1, "b": 2}},
		{Name: "echo", Arguments: map[string]any{"bad": true}}, // invalid: logged all the same
		{Name: "missing-tool", Arguments: map[string]any{}},
	} {
		cs.CallTool(context.Background(), p) // results do not matter here
	}
	if _, err := cs.ListTools(context.Background(), nil); err != nil { // not a tools/call
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []callRecord
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var r callRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, r)
	}
	pid := os.Getpid()
	want := []callRecord{
		{Tool: "echo", Args: json.RawMessage(`{"message":"one"}`), PID: pid},
		{Tool: "add", Args: json.RawMessage(`{"a":1,"b":2}`), PID: pid},
		{Tool: "echo", Args: json.RawMessage(`{"bad":true}`), PID: pid},
		{Tool: "missing-tool", Args: json.RawMessage(`{}`), PID: pid},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("call log (-want +got):\n%s", diff)
	}
}

func TestSplitList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"2025-11-25", []string{"2025-11-25"}},
		{" 2025-11-25 , ,2025-06-18,", []string{"2025-11-25", "2025-06-18"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, splitList(tt.in)); diff != "" {
			t.Errorf("splitList(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}
