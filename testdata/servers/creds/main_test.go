package main

import (
	"bufio"
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

const secret = "PCSECRET-creds-server-0123456789"

func connect(t *testing.T, cfg config) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	server, closeLog, err := newServer(slog.New(slog.NewTextHandler(io.Discard, nil)), cfg)
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
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, p *mcp.CallToolParams) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n"), res.IsError
}

func readLog(t *testing.T, path string) []CallRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(secret)) {
		t.Errorf("the call log holds the secret:\n%s", b)
	}
	var out []CallRecord
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var r CallRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		r.PID = 0
		out = append(out, r)
	}
	return out
}

func TestMetaCredential(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "calls.jsonl")
	cs := connect(t, config{rev: "A", scope: "notes-api", logPath: logPath})
	withCred := mcp.Meta{metaKey: map[string]any{"notes-api": secret}}
	got, isErr := call(t, cs, &mcp.CallToolParams{Name: "note_write", Arguments: map[string]any{"text": "hi"}, Meta: withCred})
	want := "revision=A wrote note 1 (credential " + Digest(secret)[:19] + "…)"
	if isErr || got != want {
		t.Errorf("with the credential: %q (error %v), want %q", got, isErr, want)
	}
	if strings.Contains(got, secret) {
		t.Error("the result holds the secret")
	}
	got, isErr = call(t, cs, &mcp.CallToolParams{Name: "note_write", Arguments: map[string]any{"text": "hi"}})
	if !isErr || !strings.Contains(got, "no credential") {
		t.Errorf("without a credential: %q (error %v), want a tool error", got, isErr)
	}
	other := mcp.Meta{metaKey: map[string]any{"other-scope": secret}}
	if _, isErr := call(t, cs, &mcp.CallToolParams{Name: "note_write", Arguments: map[string]any{"text": "x"}, Meta: other}); !isErr {
		t.Error("a credential of another scope was accepted")
	}
	if got, _ := call(t, cs, &mcp.CallToolParams{Name: "note_read", Arguments: map[string]any{}}); got != "revision=A holds 1 notes" {
		t.Errorf("note_read: %q", got)
	}
	if _, isErr := call(t, cs, &mcp.CallToolParams{Name: "note_write", Arguments: map[string]any{"text": "x", "tag": "t"}, Meta: withCred}); !isErr {
		t.Error("revision A accepted the tag argument of revision B")
	}
	wantLog := []CallRecord{
		{Tool: "note_write", Revision: "A", Meta: Digest(secret)},
		{Tool: "note_write", Revision: "A"},
		{Tool: "note_write", Revision: "A"},
		{Tool: "note_read", Revision: "A"},
		{Tool: "note_write", Revision: "A", Meta: Digest(secret)},
	}
	if diff := cmp.Diff(wantLog, readLog(t, logPath)); diff != "" {
		t.Errorf("call log (-want +got):\n%s", diff)
	}
}

func TestOptionalCredential(t *testing.T) {
	cs := connect(t, config{rev: "A", scope: "notes-api", optional: true})
	if got, isErr := call(t, cs, &mcp.CallToolParams{Name: "note_write", Arguments: map[string]any{"text": "hi"}}); isErr || got != "revision=A wrote note 1 (no credential)" {
		t.Errorf("without a credential, optional: %q (error %v)", got, isErr)
	}
}

func TestEnvCredentialAndRevisionB(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "calls.jsonl")
	cs := connect(t, config{rev: "B", scope: "notes-api", envCred: secret, logPath: logPath})
	got, isErr := call(t, cs, &mcp.CallToolParams{Name: "note_write", Arguments: map[string]any{"text": "hi", "tag": "t"}})
	if isErr || !strings.HasPrefix(got, "revision=B wrote note 1 (credential sha256:") {
		t.Errorf("env credential: %q (error %v)", got, isErr)
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var schema string
	for _, tl := range res.Tools {
		if tl.Name == "note_write" {
			b, _ := json.Marshal(tl.InputSchema)
			schema = string(b)
		}
	}
	if !strings.Contains(schema, `"tag"`) {
		t.Errorf("revision B's note_write schema %s has no tag", schema)
	}
	if diff := cmp.Diff([]CallRecord{{Tool: "note_write", Revision: "B", Env: Digest(secret)}}, readLog(t, logPath)); diff != "" {
		t.Errorf("call log (-want +got):\n%s", diff)
	}
}
