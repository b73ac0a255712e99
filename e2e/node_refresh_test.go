package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/internal/harness"
)

// nodeLabel is the server label of the Node.js server of TestNodeDistRewrite.
const nodeLabel = "node-dist"

// nodeServerSource returns dist/server.mjs of revision rev ("A" or "B"): an
// MCP server on the official TypeScript SDK (its McpServer and stdio
// transport, tool schemas in zod, both from testdata/npm/node_modules).
// Revision A has the tool greet; revision B has greet and farewell. Each
// answer names the revision and the pid that produced it.
func nodeServerSource(rev string) string {
	src := `import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const revision = "` + rev + `";
const server = new McpServer({ name: "node-dist", version: "1.0.0-" + revision });
const text = (s) => ({ content: [{ type: "text", text: s + " (revision " + revision + ", pid " + process.pid + ")" }] });

server.registerTool("greet", {
  description: "Greets someone.",
  inputSchema: { name: z.string() },
}, async ({ name }) => text("hello " + name));
`
	if rev == "B" {
		src += `
server.registerTool("farewell", {
  description: "Says goodbye to someone.",
  inputSchema: { name: z.string() },
}, async ({ name }) => text("goodbye " + name));
`
	}
	return src + `
await server.connect(new StdioServerTransport());
`
}

// writeAtomically writes data to a new file next to path and renames it over
// path, as build tools and package managers replace their output.
func writeAtomically(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp-build"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestNodeDistRewrite: a Node.js MCP server built on the official TypeScript
// SDK runs as `node PROJECT/dist/server.mjs` with --watch PROJECT/dist. The
// build rewrites dist/server.mjs with a new tool. The supervisor replaces
// the process with a new epoch whose execution record carries the new entry
// digest, the catalog revision increases, the agent receives
// tools/list_changed and can call the new tool, `portcullis catalog diff`
// classifies it as added, and the audit log names the changed entry file
// (build_detected, server_replaced, server_started of the new epoch).
func TestNodeDistRewrite(t *testing.T) {
	npm := needNPM(t)
	node, err := harness.Node()
	if err != nil {
		t.Fatal(err)
	}
	for _, era := range []struct{ name, version string }{
		{"2025-06-18", "2025-06-18"},
		{"2026-07-28", "2026-07-28"},
	} {
		t.Run(era.name, func(t *testing.T) {
			// The project: dist/server.mjs, and node_modules resolving the
			// SDK and zod from the pinned test peers.
			proj := t.TempDir()
			dist := filepath.Join(proj, "dist")
			entry := filepath.Join(dist, "server.mjs")
			if err := os.Mkdir(dist, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(npm, filepath.Join(proj, "node_modules")); err != nil {
				t.Fatal(err)
			}
			writeAtomically(t, entry, nodeServerSource("A"))
			digestA, err := harness.FileSHA256(entry)
			if err != nil {
				t.Fatal(err)
			}

			h := newHome(t)
			if err := h.AddServer(testContext(t, 30*time.Second), nodeLabel, []string{"--cwd", proj, "--watch", dist}, node, entry); err != nil {
				t.Fatal(err)
			}
			allowTools(t, h, nodeLabel, "greet", "farewell")
			startDaemon(t, h)

			a := connectListChanged(t, h, nodeLabel, era.version)
			if got := listedNames(t, a.Session); !cmp.Equal(got, []string{"greet"}) {
				t.Fatalf("revision A tools = %v, want [greet]", got)
			}
			before := waitRun(t, h, a.PID(), buildWait, "ready", readyOn(""))
			if got, want := callText(t, a.Session, "greet", map[string]any{"name": "Ada"}), "hello Ada (revision A, pid "; !strings.HasPrefix(got, want) {
				t.Fatalf("greet on revision A = %q, want prefix %q", got, want)
			}
			if rec := before.Record; rec == nil || rec.Entry != entry || rec.EntryDigest != digestA || rec.ExtraDigests[dist] == "" {
				t.Fatalf("first execution record = %+v, want entry %s with digest %s and a digest of %s", rec, entry, digestA, dist)
			}

			// The build: dist/server.mjs replaced by revision B.
			writeAtomically(t, entry, nodeServerSource("B"))
			digestB, err := harness.FileSHA256(entry)
			if err != nil {
				t.Fatal(err)
			}
			after := waitRun(t, h, a.PID(), buildWait, "ready on a new epoch with a new catalog revision", func(r gateway.Status) bool {
				return readyOn(string(before.Epoch))(r) && r.CatalogRevision != before.CatalogRevision
			})
			a.waitListChanged(t, 1, 10*time.Second)
			if after.CatalogRevision <= before.CatalogRevision {
				t.Errorf("catalog revision %d → %d, want an increase", before.CatalogRevision, after.CatalogRevision)
			}
			if after.Epochs != 2 || after.PID == before.PID {
				t.Errorf("after the build: %d epochs, pid %d (was %d); want 2 epochs and a new process", after.Epochs, after.PID, before.PID)
			}
			rec := after.Record
			if rec == nil || rec.Entry != entry || rec.EntryDigest != digestB || rec.Epoch != after.Epoch {
				t.Fatalf("new execution record = %+v, want epoch %s, entry %s with digest %s", rec, after.Epoch, entry, digestB)
			}
			if rec.ExtraDigests[dist] == before.Record.ExtraDigests[dist] {
				t.Errorf("digest of the watched %s unchanged: %s", dist, rec.ExtraDigests[dist])
			}
			if rec.ResolvedExecutable != before.Record.ResolvedExecutable || rec.Runtime != before.Record.Runtime {
				t.Errorf("node itself changed: %+v %q → %+v %q", before.Record.ResolvedExecutable, before.Record.Runtime, rec.ResolvedExecutable, rec.Runtime)
			}

			// The agent refetches and uses the new tool on the new process.
			if got := listedNames(t, a.Session); !cmp.Equal(got, []string{"farewell", "greet"}) {
				t.Errorf("revision B tools = %v, want [farewell greet]", got)
			}
			wantPID := " (revision B, pid " + strconv.Itoa(ownPID(t, after.PID)) + ")"
			if got := callText(t, a.Session, "farewell", map[string]any{"name": "Ada"}); got != "goodbye Ada"+wantPID {
				t.Errorf("farewell = %q, want %q", got, "goodbye Ada"+wantPID)
			}
			if got := callText(t, a.Session, "greet", map[string]any{"name": "Ada"}); got != "hello Ada"+wantPID {
				t.Errorf("greet on revision B = %q, want %q", got, "hello Ada"+wantPID)
			}

			// portcullis catalog diff: previous → current revision.
			wantCatalogDiff(t, h, nodeLabel, before.CatalogRevision, after.CatalogRevision, "farewell tool_added")

			// The audit log: the build on the old epoch naming the entry,
			// the replacement A → B, and B's execution record.
			var detected, replaced, started []audit.Event
			for _, e := range auditEvents(t, h) {
				switch f := auditFields(t, e); {
				case e.Type == audit.TypeBuildDetected && f["serverLabel"] == nodeLabel:
					detected = append(detected, e)
				case e.Type == audit.TypeServerReplaced && f["oldEpoch"] == string(before.Epoch):
					replaced = append(replaced, e)
				case e.Type == audit.TypeServerStarted && f["epoch"] == string(after.Epoch):
					started = append(started, e)
				}
			}
			if len(detected) != 1 {
				t.Fatalf("%d build_detected events, want 1: %v", len(detected), detected)
			}
			var bd audit.BuildDetected
			if err := detected[0].DecodeFields(&bd); err != nil {
				t.Fatal(err)
			}
			if bd.Epoch != before.Epoch || !slices.Contains(bd.Digests, "entry") || !slices.Contains(bd.Digests, "extra:"+dist) {
				t.Errorf("build_detected = %+v, want epoch %s and the digests entry and extra:%s", bd, before.Epoch, dist)
			}
			if len(replaced) != 1 {
				t.Fatalf("%d server_replaced events from epoch %s, want 1", len(replaced), before.Epoch)
			}
			var sr audit.ServerReplaced
			if err := replaced[0].DecodeFields(&sr); err != nil {
				t.Fatal(err)
			}
			if sr.NewEpoch != after.Epoch || !strings.Contains(sr.Reason, "dist/server.mjs") {
				t.Errorf("server_replaced = %+v, want new epoch %s and a reason naming dist/server.mjs", sr, after.Epoch)
			}
			if len(started) != 1 {
				t.Fatalf("%d server_started events for epoch %s, want 1", len(started), after.Epoch)
			}
			var ss audit.ServerStarted
			if err := started[0].DecodeFields(&ss); err != nil {
				t.Fatal(err)
			}
			var exec identity.Record
			if err := json.Unmarshal(ss.Execution, &exec); err != nil {
				t.Fatalf("server_started execution %s: %v", ss.Execution, err)
			}
			if ss.PID != after.PID || exec.Entry != entry || exec.EntryDigest != digestB || exec.Epoch != after.Epoch {
				t.Errorf("server_started of the new epoch: pid %d, execution entry %s digest %s epoch %s; want pid %d, %s %s %s",
					ss.PID, exec.Entry, exec.EntryDigest, exec.Epoch, after.PID, entry, digestB, after.Epoch)
			}
			if replaced[0].Seq < detected[0].Seq || started[0].Seq < replaced[0].Seq {
				t.Errorf("audit order: build_detected %d, server_replaced %d, server_started %d (once its identity was read); want that order",
					detected[0].Seq, replaced[0].Seq, started[0].Seq)
			}
			t.Logf("epoch %s → %s, catalog revision %d → %d, build_detected digests %v, server_replaced reason %q",
				before.Epoch, after.Epoch, before.CatalogRevision, after.CatalogRevision, bd.Digests, sr.Reason)
			verifyAudit(t, h)
		})
	}
}
