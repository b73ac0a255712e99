package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func connect(t *testing.T, revision, token string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	server := newServer(newInventory(seedStock), revision, token)
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

type call struct {
	tool     string
	args     map[string]any
	wantText string // substring of the only text content
	wantErr  bool
}

func run(t *testing.T, cs *mcp.ClientSession, calls []call) []string {
	t.Helper()
	var texts []string
	for _, c := range calls {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s %v: %v", c.tool, c.args, err)
		}
		got := res.Content[0].(*mcp.TextContent).Text
		texts = append(texts, got)
		if res.IsError != c.wantErr || !strings.Contains(got, c.wantText) {
			t.Errorf("%s %v = %q (IsError %v), want %q (IsError %v)", c.tool, c.args, got, res.IsError, c.wantText, c.wantErr)
		}
	}
	return texts
}

func TestLookupAndAdjust(t *testing.T) {
	cs := connect(t, "1", "")
	run(t, cs, []call{
		{"inventory_lookup", map[string]any{"sku": "WIDGET-1"}, "WIDGET-1: 40 on hand", false},
		{"inventory_adjust", map[string]any{"sku": "WIDGET-1", "delta": -5}, "WIDGET-1 adjusted by -5: 35 on hand", false},
		{"inventory_lookup", map[string]any{"sku": "WIDGET-1"}, "WIDGET-1: 35 on hand", false},
		{"inventory_adjust", map[string]any{"sku": "GIZMO-3", "delta": -1}, "only 0 on hand", true},
		{"inventory_adjust", map[string]any{"sku": "GIZMO-3", "delta": 4}, "GIZMO-3 adjusted by +4: 4 on hand", false},
		{"inventory_lookup", map[string]any{"sku": "NOPE"}, `unknown sku "NOPE" (known: GADGET-2, GIZMO-3, WIDGET-1)`, true},
		{"inventory_adjust", map[string]any{"sku": "GADGET-2"}, "delta", true}, // delta is required
		{"inventory_adjust", map[string]any{"sku": "GADGET-2", "delta": 1, "reason": "x"}, "reason", true},
	})
	// The seed is copied: another server starts from the seed again.
	run(t, connect(t, "1", ""), []call{{"inventory_lookup", map[string]any{"sku": "WIDGET-1"}, "WIDGET-1: 40 on hand", false}})
}

func TestToken(t *testing.T) {
	tests := []struct {
		token, want, secret string
	}{
		{"", "GADGET-2 adjusted by +1: 13 on hand", ""},
		{"sk-live-0123456789abcd", "; authorized with token ending …abcd", "sk-live-0123456789"},
		{"s3cr3t9", "; authorized with a token (too short to show its ending)", "s3cr3t9"},
	}
	for _, tt := range tests {
		texts := run(t, connect(t, "1", tt.token), []call{
			{"inventory_adjust", map[string]any{"sku": "GADGET-2", "delta": 1}, tt.want, false},
		})
		if tt.token == "" && strings.Contains(texts[0], "authorized") {
			t.Errorf("no token, but %q", texts[0])
		}
		if tt.secret != "" && strings.Contains(texts[0], tt.secret) {
			t.Errorf("result %q reveals the token", texts[0])
		}
	}
}

func TestRevision2NeedsReason(t *testing.T) {
	cs := connect(t, "2", "")
	run(t, cs, []call{
		{"inventory_adjust", map[string]any{"sku": "GADGET-2", "delta": 1}, "reason", true},
		{"inventory_adjust", map[string]any{"sku": "GADGET-2", "delta": 1, "reason": " "}, "reason must not be empty", true},
		{"inventory_adjust", map[string]any{"sku": "GADGET-2", "delta": 1, "reason": "restock"}, "13 on hand (reason: restock)", false},
	})
}

// TestCatalog pins the advertised contract: names, annotations and required fields
// for both schema revisions.
func TestCatalog(t *testing.T) {
	type tool struct {
		Name                     string
		ReadOnly, NotDestructive bool
		Required                 []string
	}
	tests := []struct {
		revision string
		want     []tool
	}{
		{"1", []tool{
			{"inventory_adjust", false, true, []string{"sku", "delta"}},
			{"inventory_lookup", true, false, []string{"sku"}},
		}},
		{"2", []tool{
			{"inventory_adjust", false, true, []string{"sku", "delta", "reason"}},
			{"inventory_lookup", true, false, []string{"sku"}},
		}},
	}
	for _, tt := range tests {
		res, err := connect(t, tt.revision, "").ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []tool
		for _, tl := range res.Tools {
			schema := tl.InputSchema.(map[string]any)
			var req []string
			for _, r := range schema["required"].([]any) {
				req = append(req, r.(string))
			}
			a := tl.Annotations
			got = append(got, tool{tl.Name, a.ReadOnlyHint, a.DestructiveHint != nil && !*a.DestructiveHint, req})
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("revision %s tools/list (-want +got):\n%s", tt.revision, diff)
		}
	}
}

func TestAuthorizationNote(t *testing.T) {
	for token, want := range map[string]string{
		"":                     "",
		"abc":                  "authorized with a token (too short to show its ending)",
		"123456789012":         "authorized with token ending …9012",
		"ghp_abcdefghijklmnop": "authorized with token ending …mnop",
	} {
		if got := authorizationNote(token); got != want {
			t.Errorf("authorizationNote(%q) = %q, want %q", token, got, want)
		}
	}
}
