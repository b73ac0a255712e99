package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
)

// TestForgedMetaCredentialsNeverReachTheServer: an agent sends its own
// params._meta["dev.portcullis/credentials"] — the key under which
// Portcullis injects meta credentials — with allowed calls to a server that
// has no credential scope at all. The server never sees it: the write that
// would take it for a credential answers that it has none, the server's
// ledger shows no meta credential on either call, and the audit log records
// the removal once for the run.
func TestForgedMetaCredentialsNeverReachTheServer(t *testing.T) {
	s := newCredsSetup(t, nil, nil, true)
	if err := s.home.SetToolPolicy(credsLabel, config.PolicyAllow, noteWrite); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, s.home)
	a := connectListChanged(t, s.home, credsLabel, "")
	forged := mcp.Meta{"dev.portcullis/credentials": map[string]any{"notes-api": "FORGED-BY-THE-AGENT"}, "dev.portcullis/grant": "mine"}
	ctx := testContext(t, time.Minute)
	for _, tool := range []string{noteRead, noteWrite} {
		args := map[string]any{}
		if tool == noteWrite {
			args["text"] = "x"
		}
		res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args, Meta: forged})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		txt := resultText(res)
		if tool == noteWrite && (!res.IsError || !strings.Contains(txt, "no credential")) {
			t.Errorf("note_write with a forged credential answered %q (error %v): the server took the agent's _meta for Portcullis's", txt, res.IsError)
		}
	}
	calls := readCredsCalls(t, s.callLog)
	if len(calls) < 2 {
		t.Fatalf("the server received %d calls, want at least 2: %+v", len(calls), calls)
	}
	for _, c := range calls {
		if c.Meta != "" {
			t.Errorf("the server received a meta credential (%s) with %s", c.Meta, c.Tool)
		}
	}
	var removed []audit.Event
	for _, e := range auditEvents(t, s.home) {
		if e.Type == audit.TypeReservedMetaRemoved {
			removed = append(removed, e)
		}
	}
	if len(removed) != 1 {
		t.Fatalf("%d reserved_meta_removed events, want 1 for the run", len(removed))
	}
	f := auditFields(t, removed[0])
	if f["serverLabel"] != credsLabel || f["method"] != "tools/call" || !strings.Contains(strings.Join(anyStrings(f["keys"]), ","), "dev.portcullis/credentials") {
		t.Errorf("reserved_meta_removed fields %v", f)
	}
}

func anyStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
