package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
)

// Schemas of publish_preview in the publish server's revisions A and B.
const (
	publishSchemaA = `{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"}},"additionalProperties":false}`
	publishSchemaB = `{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"},"target":{"type":"string","enum":["preview","production"],"default":"preview"}},"additionalProperties":false}`
)

// buildWait bounds how long a test waits for a build to be noticed and a new
// epoch to become ready: the settle delay, two measurements, a launch and a
// tools/list, on a machine shared with other builds.
const buildWait = 20 * time.Second

// TestBuildWithManualRestart: the developer rebuilds, but the server is
// configured with --restart manual. The status shows the build note naming
// the changed file and the running pid and epoch, calls still reach the old
// process (its pid in the server's own call log), and `portcullis restart`
// then replaces it with a new epoch that runs revision B.
func TestBuildWithManualRestart(t *testing.T) {
	s := newPublishSetup(t, "--restart", "manual")
	a := connectListChanged(t, s.home, pubLabel, "")
	if _, err := a.Session.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if got := callText(t, a.Session, "publish_preview", map[string]any{"branch": "main"}); got != "revision A published branch main to preview" {
		t.Fatalf("before the build: %q", got)
	}
	before := waitRun(t, s.home, a.PID(), 10*time.Second, "ready", readyOn(""))

	s.rebuild(t, publishRevB)
	want := fmt.Sprintf("build complete: publish changed; running server unchanged: pid=%d epoch=%s (portcullis restart %s)", before.PID, before.Epoch, pubLabel)
	noted := waitRun(t, s.home, a.PID(), buildWait, "the build note", func(r gateway.Status) bool { return r.Build != "" })
	if noted.Build != want {
		t.Errorf("status build note:\n got %q\nwant %q", noted.Build, want)
	}
	if noted.Epoch != before.Epoch || noted.PID != before.PID || noted.Epochs != 1 {
		t.Errorf("after the build: epoch %s pid %d epochs %d, want the running epoch %s pid %d (1 epoch)", noted.Epoch, noted.PID, noted.Epochs, before.Epoch, before.PID)
	}

	if got := callText(t, a.Session, "publish_preview", map[string]any{"branch": "after-build"}); got != "revision A published branch after-build to preview" {
		t.Errorf("after the build, before restart: %q, want revision A", got)
	}
	calls := readCalls(t, s.callLog)
	if len(calls) != 2 || calls[1].PID != before.PID || calls[1].Revision != "A" {
		t.Fatalf("call log after the build = %+v, want 2 calls, the second to pid %d revision A", calls, before.PID)
	}

	res, err := s.home.Run(testContext(t, 30*time.Second), "restart", pubLabel)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stdout, "1 agent run(s)") || !strings.Contains(res.Stdout, "new epoch") {
		t.Errorf("portcullis restart printed %q, want one run restarted", res.Stdout)
	}
	after := waitRun(t, s.home, a.PID(), buildWait, "ready on a new epoch", readyOn(string(before.Epoch)))
	if after.Build != "" || after.Epochs != 2 || after.PID == before.PID {
		t.Errorf("after restart: build note %q, epochs %d, pid %d (old %d); want no note, 2 epochs, a new pid", after.Build, after.Epochs, after.PID, before.PID)
	}
	if after.Record.EntryDigest == before.Record.EntryDigest {
		t.Errorf("entry digest unchanged across the rebuild: %s", after.Record.EntryDigest)
	}
	a.waitListChanged(t, 1, 10*time.Second) // the catalog changed: A → B
	if _, err := a.Session.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if got := callText(t, a.Session, "publish_preview", map[string]any{"branch": "main", "target": "production"}); got != "revision B published branch main to production" {
		t.Errorf("after restart: %q", got)
	}
	calls = readCalls(t, s.callLog)
	if last := calls[len(calls)-1]; last.PID != after.PID || last.Revision != "B" {
		t.Errorf("last call reached pid %d revision %s, want pid %d revision B", last.PID, last.Revision, after.PID)
	}
}

// TestRebuildSameCatalog: the binary changes but tools/list does not (a
// rebuild with another build label). The server is replaced by a new epoch,
// the catalog revision stays, and one tools/list_changed announces the new
// epoch (the agent's cached catalog is suspect after an epoch change).
func TestRebuildSameCatalog(t *testing.T) {
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			s := newPublishSetup(t)
			a := connectListChanged(t, s.home, pubLabel, era.version)
			if _, err := a.Session.ListTools(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			before := waitRun(t, s.home, a.PID(), 10*time.Second, "ready", readyOn(""))
			if before.AgentRevision != before.CatalogRevision {
				t.Fatalf("agent revision %d, catalog revision %d", before.AgentRevision, before.CatalogRevision)
			}

			s.rebuild(t, publishRevALabel)
			after := waitRun(t, s.home, a.PID(), buildWait, "ready on a new epoch", readyOn(string(before.Epoch)))
			if after.Record.EntryDigest == before.Record.EntryDigest {
				t.Fatalf("the rebuild did not change the binary's digest (%s)", after.Record.EntryDigest)
			}
			if after.CatalogRevision != before.CatalogRevision || after.AgentRevision != before.AgentRevision {
				t.Errorf("catalog revision %d → %d, agent revision %d → %d; want both unchanged", before.CatalogRevision, after.CatalogRevision, before.AgentRevision, after.AgentRevision)
			}
			// The new epoch answers, and the old-shaped call is still
			// current: no catalog_stale.
			if got := callText(t, a.Session, "status", nil); got != fmt.Sprintf("publish server revision A, pid %d", after.PID) {
				t.Errorf("status tool on the new epoch: %q", got)
			}
			if got := callText(t, a.Session, "publish_preview", map[string]any{"branch": "main"}); got != "revision A published branch main to preview" {
				t.Errorf("publish_preview on the new epoch: %q", got)
			}
			a.waitListChanged(t, 1, 10*time.Second)
			if n := a.listChanged(); n != 1 {
				t.Errorf("the agent received %d tools/list_changed for one epoch change, want 1", n)
			}
		})
	}
}

// TestSchemaChangeIgnoredListChanged: the rebuild adds the optional target
// field; the agent hears list_changed but does not refetch. Its old-shaped
// call is refused with catalog_stale naming both revisions and is never
// forwarded; once it lists the tools again the same call goes through with
// the server's default target, and a value outside the enum is refused as
// invalid_arguments by the gateway.
func TestSchemaChangeIgnoredListChanged(t *testing.T) {
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			s := newPublishSetup(t)
			a := connectListChanged(t, s.home, pubLabel, era.version)
			lt, err := a.Session.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := toolSchema(t, lt, "publish_preview"), canonical(t, publishSchemaA); got != want {
				t.Fatalf("revision A schema = %s, want %s", got, want)
			}
			before := waitRun(t, s.home, a.PID(), 10*time.Second, "ready", readyOn(""))

			s.rebuild(t, publishRevB)
			after := waitRun(t, s.home, a.PID(), buildWait, "ready on a new epoch with a new catalog", func(r gateway.Status) bool {
				return readyOn(string(before.Epoch))(r) && r.CatalogRevision != before.CatalogRevision
			})
			a.waitListChanged(t, 1, 10*time.Second)

			_, err = a.Session.CallTool(t.Context(), &mcp.CallToolParams{Name: "publish_preview", Arguments: map[string]any{"branch": "main"}})
			if err == nil {
				t.Fatal("an old-shaped call after the schema changed was not refused")
			}
			code, r := refusalOf(t, err)
			if code != -31010 || r.Error != control.CatalogStale {
				t.Fatalf("refusal code %d %q, want -31010 catalog_stale (%v)", code, r.Error, err)
			}
			want := control.Refusal{Error: control.CatalogStale, Server: pubLabel, Tool: "publish_preview", CurrentEpoch: after.Epoch,
				AgentRevision: before.CatalogRevision, CurrentRevision: after.CatalogRevision}
			got := r
			got.Reason, got.Problems, got.Retry, got.Arguments = "", nil, "", nil
			if r.Arguments == nil || !strings.Contains(r.Arguments.String(), `target (string, one of "preview"|"production", default "preview")`) {
				t.Errorf("catalog_stale does not give the current shape of target: %+v", r.Arguments)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("catalog_stale data (-want +got):\n%s", d)
			}
			if !strings.Contains(r.Reason, fmt.Sprintf("revision %d", before.CatalogRevision)) || !strings.Contains(strings.Join(r.Problems, " "), "target") || r.Retry == "" {
				t.Errorf("catalog_stale should name the agent's revision, the target change and what to do: %+v", r)
			}
			for _, c := range readCalls(t, s.callLog) {
				if c.Tool == "publish_preview" {
					t.Errorf("a refused call reached the server: %+v", c)
				}
			}

			lt, err = a.Session.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := toolSchema(t, lt, "publish_preview"), canonical(t, publishSchemaB); got != want {
				t.Errorf("revision B schema = %s, want %s", got, want)
			}
			if got := callText(t, a.Session, "publish_preview", map[string]any{"branch": "main"}); got != "revision B published branch main to preview" {
				t.Errorf("after refetching, the omitted target: %q", got)
			}
			_, err = a.Session.CallTool(t.Context(), &mcp.CallToolParams{Name: "publish_preview", Arguments: map[string]any{"branch": "main", "target": "staging"}})
			if code, r := refusalOf(t, err); code != -31011 || r.Error != control.InvalidArguments || r.CurrentRevision != after.CatalogRevision {
				t.Errorf("target staging: code %d data %+v, want -31011 invalid_arguments at revision %d", code, r, after.CatalogRevision)
			}
			calls := readCalls(t, s.callLog)
			if len(calls) != 1 || calls[0].PID != after.PID || calls[0].Revision != "B" || string(calls[0].Args) != `{"branch":"main"}` {
				t.Errorf("call log = %+v, want exactly the one accepted call, on pid %d revision B", calls, after.PID)
			}
		})
	}
}

// TestRestartDuringCall: a call is waiting for its response when a rebuild
// replaces the process. The agent gets epoch_ended naming the old and the
// new epoch, and the server's own call log shows the call ran once, on the
// old process: nothing is replayed onto the new epoch.
func TestRestartDuringCall(t *testing.T) {
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			s := newPublishSetup(t)
			a := connectListChanged(t, s.home, pubLabel, era.version)
			if _, err := a.Session.ListTools(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			before := waitRun(t, s.home, a.PID(), 10*time.Second, "ready", readyOn(""))

			var (
				wg      sync.Mutex
				callErr error
				done    = make(chan struct{})
			)
			go func() {
				defer close(done)
				_, err := a.Session.CallTool(testContext(t, 2*time.Minute), &mcp.CallToolParams{Name: "slow_publish",
					Arguments: map[string]any{"branch": "release", "delay_ms": 120000}})
				wg.Lock()
				callErr = err
				wg.Unlock()
			}()
			// The call is in flight once the server logged it.
			deadline := time.Now().Add(10 * time.Second)
			for len(readCalls(t, s.callLog)) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("slow_publish did not reach the server within 10 s")
				}
				time.Sleep(10 * time.Millisecond)
			}

			s.rebuild(t, publishRevB)
			select {
			case <-done:
			case <-time.After(buildWait):
				t.Fatalf("the in-flight call was not answered within %s of the rebuild", buildWait)
			}
			after := waitRun(t, s.home, a.PID(), buildWait, "ready on a new epoch", readyOn(string(before.Epoch)))
			wg.Lock()
			err := callErr
			wg.Unlock()
			if err == nil {
				t.Fatal("the in-flight call succeeded across a restart")
			}
			code, r := refusalOf(t, err)
			if code != -31030 || r.Error != control.EpochEnded || r.Epoch != before.Epoch || r.CurrentEpoch != after.Epoch {
				t.Errorf("refusal code %d data %+v, want -31030 epoch_ended with epoch %s and currentEpoch %s", code, r, before.Epoch, after.Epoch)
			}
			if !strings.Contains(r.Reason, "not retried") {
				t.Errorf("epoch_ended reason %q should say the call was not retried", r.Reason)
			}

			// A call on the new epoch, then the log: a replay would have
			// been sent at the handshake, before this call.
			if got := callText(t, a.Session, "status", nil); got != fmt.Sprintf("publish server revision B, pid %d", after.PID) {
				t.Errorf("status on the new epoch: %q", got)
			}
			var got []string
			for _, c := range readCalls(t, s.callLog) {
				got = append(got, fmt.Sprintf("%s rev %s pid %d", c.Tool, c.Revision, c.PID))
			}
			want := []string{
				fmt.Sprintf("slow_publish rev A pid %d", before.PID),
				fmt.Sprintf("status rev B pid %d", after.PID),
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("server call log (-want +got):\n%s", d)
			}
		})
	}
}

// TestWatchedDependencyChange: the executable's path and bytes stay the
// same while its lockfile (go.sum next to it) or a watched dependency
// directory (--watch) changes. Each change starts a new epoch whose
// execution record shows which digest changed and only that one.
func TestWatchedDependencyChange(t *testing.T) {
	deps := filepath.Join(t.TempDir(), "deps")
	if err := os.MkdirAll(filepath.Join(deps, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(deps, "lib", fmt.Sprintf("m%02d.js", i)), fmt.Appendf(nil, "module.exports = %d\n", i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := newPublishSetup(t, "--watch", deps)
	lock := filepath.Join(s.binDir, "go.sum")
	if err := os.WriteFile(lock, []byte("example.com/dep v1.0.0 h1:aaaa\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := connectListChanged(t, s.home, pubLabel, "")
	if _, err := a.Session.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	e1 := waitRun(t, s.home, a.PID(), 10*time.Second, "ready", readyOn(""))
	if e1.Record.Lockfile != lock || e1.Record.ExtraDigests[deps] == "" {
		t.Fatalf("first record: lockfile %q, extraDigests %v; want %s and %s", e1.Record.Lockfile, e1.Record.ExtraDigests, lock, deps)
	}

	// A file inside the watched tree changes.
	if err := os.WriteFile(filepath.Join(deps, "lib", "m07.js"), []byte("module.exports = 'seven'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e2 := waitRun(t, s.home, a.PID(), buildWait, "ready after the dependency change", readyOn(string(e1.Epoch)))
	if e2.Record.ExtraDigests[deps] == e1.Record.ExtraDigests[deps] {
		t.Errorf("extraDigests[%s] unchanged: %s", deps, e2.Record.ExtraDigests[deps])
	}
	if e2.Record.EntryDigest != e1.Record.EntryDigest || e2.Record.LockfileDigest != e1.Record.LockfileDigest {
		t.Errorf("entry or lockfile digest changed though only the dependency tree did")
	}
	if e2.Epochs != 2 {
		t.Errorf("epochs = %d, want 2", e2.Epochs)
	}

	// The lockfile is rewritten by a package manager: a new file renamed
	// over the old one.
	tmp := lock + ".tmp"
	if err := os.WriteFile(tmp, []byte("example.com/dep v1.0.1 h1:bbbb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, lock); err != nil {
		t.Fatal(err)
	}
	e3 := waitRun(t, s.home, a.PID(), buildWait, "ready after the lockfile change", readyOn(string(e2.Epoch)))
	if e3.Record.LockfileDigest == e2.Record.LockfileDigest {
		t.Errorf("lockfile digest unchanged: %s", e3.Record.LockfileDigest)
	}
	if e3.Record.EntryDigest != e2.Record.EntryDigest || e3.Record.ExtraDigests[deps] != e2.Record.ExtraDigests[deps] {
		t.Errorf("entry or dependency digest changed though only the lockfile did")
	}
	if got := callText(t, a.Session, "status", nil); got != fmt.Sprintf("publish server revision A, pid %d", e3.PID) {
		t.Errorf("status on the third epoch: %q", got)
	}
	// Each new epoch is announced, though the catalog stayed.
	a.waitListChanged(t, 2, 10*time.Second)
	if n := a.listChanged(); n != 2 {
		t.Errorf("%d list_changed for two epoch changes that left the catalog alone, want 2", n)
	}
}

// TestRuntimeToolAdded: the running process adds a tool (add_tool), with no
// new epoch. The gateway refetches on the server's list_changed, records a
// new catalog revision, tells the agent, and `portcullis catalog show|diff`
// show the revision and the classified change.
func TestRuntimeToolAdded(t *testing.T) {
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			s := newPublishSetup(t)
			a := connectListChanged(t, s.home, pubLabel, era.version)
			if _, err := a.Session.ListTools(t.Context(), nil); err != nil {
				t.Fatal(err)
			}
			before := waitRun(t, s.home, a.PID(), 10*time.Second, "ready", readyOn(""))
			if got := callText(t, a.Session, "add_tool", map[string]any{"name": "rollback"}); got != "added tool rollback" {
				t.Fatalf("add_tool: %q", got)
			}
			a.waitListChanged(t, 1, 10*time.Second)
			after := waitRun(t, s.home, a.PID(), 10*time.Second, "a new catalog revision", func(r gateway.Status) bool {
				return r.CatalogRevision > before.CatalogRevision
			})
			if after.Epoch != before.Epoch || after.Epochs != 1 {
				t.Errorf("a tool added at run time changed the epoch: %s → %s (%d epochs)", before.Epoch, after.Epoch, after.Epochs)
			}

			// Called before the agent refetched, the new tool is refused as
			// stale, saying it was added since the agent's revision.
			_, err := a.Session.CallTool(t.Context(), &mcp.CallToolParams{Name: "rollback"})
			if _, ref := refusalOf(t, err); ref.Error != control.CatalogStale || !strings.Contains(ref.Reason, `tool "rollback" was added after catalog revision`) {
				t.Errorf("rollback before the refetch: %+v, want catalog_stale saying it was added", ref)
			}
			// Once it refetched, the call goes.
			lt, err := a.Session.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			toolSchema(t, lt, "rollback")
			if got := callText(t, a.Session, "rollback", nil); got != "rollback from revision A" {
				t.Errorf("rollback: %q", got)
			}

			res, err := s.home.Run(testContext(t, 30*time.Second), "catalog", "show", pubLabel, "--json")
			if err != nil {
				t.Fatal(err)
			}
			var cat catalog.Catalog
			if err := json.Unmarshal([]byte(res.Stdout), &cat); err != nil {
				t.Fatalf("catalog show: %v\n%s", err, res.Stdout)
			}
			if cat.Revision != after.CatalogRevision || cat.Epoch != before.Epoch {
				t.Errorf("catalog show: revision %d epoch %s, want %d %s", cat.Revision, cat.Epoch, after.CatalogRevision, before.Epoch)
			}
			if _, ok := cat.Lookup("rollback"); !ok {
				t.Errorf("catalog show lacks rollback: %v", cat.Names())
			}

			wantCatalogDiff(t, s.home, pubLabel, before.CatalogRevision, after.CatalogRevision, "rollback tool_added")
		})
	}
}

// TestModernSubscriptionAcknowledgedOnce: an agent of the 2026-07-28 era
// that holds a subscriptions/listen stream gets the stream's acknowledgement
// once, as its first message; after a rebuild the gateway re-opens the
// stream on the new process, and that process's acknowledgement is not
// passed on (the list change is).
func TestModernSubscriptionAcknowledgedOnce(t *testing.T) {
	s := newPublishSetup(t)
	a := startRaw(t, s.home, pubLabel)
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw-modern", "version": "1"}}
	if m := a.call(`"d"`, "server/discover", map[string]any{"_meta": meta}, 60*time.Second); m.Error != nil {
		t.Fatalf("server/discover: %s", m.Raw)
	}
	a.request(`"L"`, "subscriptions/listen", map[string]any{"_meta": meta, "notifications": map[string]any{"toolsListChanged": true}})
	acks := 0
	next := func() wireMsg {
		t.Helper()
		m := a.next(buildWait)
		if m.Method == "notifications/subscriptions/acknowledged" {
			acks++
		}
		return m
	}
	if m := next(); m.Method != "notifications/subscriptions/acknowledged" {
		t.Fatalf("first message on the stream: %s", m.Raw)
	}
	if m := a.call(`"t"`, "tools/list", map[string]any{"_meta": meta}, 60*time.Second); m.Error != nil {
		t.Fatalf("tools/list: %s", m.Raw)
	}
	before := waitRun(t, s.home, a.pid(), 10*time.Second, "ready", readyOn(""))
	s.rebuild(t, publishRevB)
	for {
		m := next()
		if m.Method == "notifications/tools/list_changed" {
			break
		}
	}
	waitRun(t, s.home, a.pid(), buildWait, "ready on a new epoch", readyOn(string(before.Epoch)))
	// Whatever the new process sent on the re-opened stream came before
	// the answer to a request sent after it was ready.
	a.request(`"t2"`, "tools/list", map[string]any{"_meta": meta})
	for m := next(); string(m.ID) != `"t2"`; m = next() {
	}
	if acks != 1 {
		t.Errorf("the agent got %d subscription acknowledgements, want 1", acks)
	}
}
