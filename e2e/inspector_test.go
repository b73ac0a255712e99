package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/internal/harness"
)

// TestInspectorFilesystem proves that the MCP Inspector CLI, a third-party
// client, lists and calls the tools of the npm
// @modelcontextprotocol/server-filesystem through Portcullis (its server
// command is `portcullis connect fs`), and sees the same tools as when it
// runs the server directly.
func TestInspectorFilesystem(t *testing.T) {
	npm := needNPM(t)
	node, err := harness.Node()
	if err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	const content = "Portcullis was here.\n"
	if err := os.WriteFile(filepath.Join(files, "note.txt"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHome(t)
	server := []string{node, filepath.Join(npm, harness.FilesystemEntry), files}
	addServer(t, h, "fs", server...)
	allowTools(t, h, "fs", "read_text_file")
	startDaemon(t, h)

	// The Inspector CLI gives the server it starts its own environment,
	// PORTCULLIS_HOME included.
	through := []string{h.Bin, "connect", "fs"}
	listed := inspect(t, npm, h.Environ(), append(through, "--method", "tools/list"))
	direct := inspect(t, npm, nil, append(slices.Clone(server), "--method", "tools/list"))
	names := toolNames(t, listed)
	if len(names) < 14 || !slices.Contains(names, "read_text_file") || !slices.Contains(names, "list_allowed_directories") {
		t.Errorf("tools through Portcullis: %v, want server-filesystem's 14 tools", names)
	}
	if diff := cmp.Diff(canon(t, direct), canon(t, listed)); diff != "" {
		t.Errorf("tools/list differs through Portcullis (-direct +proxied):\n%s", diff)
	}

	called := inspect(t, npm, h.Environ(), append(through, "--method", "tools/call", "--tool-name", "read_text_file",
		"--tool-arg", "path="+filepath.Join(files, "note.txt")))
	var res struct {
		Content []struct{ Type, Text string }
		IsError bool
	}
	if err := json.Unmarshal(called, &res); err != nil {
		t.Fatalf("tools/call output: %v\n%s", err, called)
	}
	if res.IsError || len(res.Content) != 1 || res.Content[0].Text != content {
		t.Errorf("read_text_file through Portcullis returned %s, want the file's text %q", called, content)
	}
}

// inspect runs the Inspector CLI with args (server command first, then the
// method flags) from node_modules, as it needs (testdata/npm/README.md), with
// the environment env (nil: the test's own), which the Inspector passes on to
// the server it starts, and returns its stdout, the JSON result.
func inspect(t *testing.T, npm string, env []string, args []string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{harness.InspectorEntry}, args...)...)
	cmd.Dir = npm
	cmd.Env = env
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("inspector %v: %v\nstdout: %s\nstderr: %s", args, err, out.Bytes(), stderr.Bytes())
	}
	return out.Bytes()
}

func toolNames(t *testing.T, listed []byte) []string {
	t.Helper()
	var res struct{ Tools []struct{ Name string } }
	if err := json.Unmarshal(listed, &res); err != nil {
		t.Fatalf("tools/list output: %v\n%s", err, listed)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

func canon(t *testing.T, raw []byte) string {
	t.Helper()
	c, err := harness.Canonical(raw)
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	return c
}
