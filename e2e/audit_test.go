package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

// The audit tests drive a real daemon, real `portcullis connect` shims with
// go-sdk clients, real Go test servers, and read the log only through the
// `portcullis audit` commands, as a person or a script would.

// auditAddServer writes label into h's configuration with every tool in
// allow listed as policy "allow", so that calls need no approval.
func auditAddServer(t *testing.T, h *harness.Home, label string, s config.Server, allow ...string) {
	t.Helper()
	cfg, err := config.Load(h.ConfigFile())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, tool := range allow {
		if s.Tools == nil {
			s.Tools = map[string]config.ToolPolicy{}
		}
		s.Tools[tool] = config.ToolPolicy{Policy: config.PolicyAllow}
	}
	if err := cfg.AddServer(label, s); err != nil {
		t.Fatal(err)
	}
	if err := config.Save(h.ConfigFile(), cfg); err != nil {
		t.Fatal(err)
	}
}

// auditRun runs `portcullis ARGS…` and returns its result whatever its exit
// code; only a failure to run it at all fails the test.
func auditRun(t *testing.T, h *harness.Home, args ...string) harness.Result {
	t.Helper()
	r, err := h.Run(testContext(t, 60*time.Second), args...)
	var ee *harness.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("portcullis %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// auditEvents returns every event of h's log, read with
// `portcullis audit tail --json`.
func auditEvents(t *testing.T, h *harness.Home) []audit.Event {
	t.Helper()
	r := auditRun(t, h, "audit", "tail", "--json", "-n", "1000000")
	if r.Code != 0 {
		t.Fatalf("audit tail: exit %d\n%s", r.Code, r.Stderr)
	}
	var evs []audit.Event
	sc := bufio.NewScanner(strings.NewReader(r.Stdout))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var e audit.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit tail --json printed %q: %v", sc.Text(), err)
		}
		evs = append(evs, e)
	}
	return evs
}

// auditVerifyResult is the output of `portcullis audit verify --json`.
type auditVerifyResult struct {
	OK        bool   `json:"ok"`
	Events    uint64 `json:"events"`
	FirstBad  uint64 `json:"firstBad"`
	Problem   string `json:"problem"`
	Detail    string `json:"detail"`
	Torn      bool   `json:"torn"`
	Signed    bool   `json:"signaturesChecked"`
	KeyNote   string `json:"keyNote"`
	Recovered []struct {
		Seq    uint64 `json:"seq"`
		Length int64  `json:"length"`
	} `json:"recovered"`
	SignedEvents uint64 `json:"signedEvents"`
	SigningOff   []struct {
		Disabled uint64 `json:"disabled"`
		Enabled  uint64 `json:"enabled"`
		Reason   string `json:"reason"`
	} `json:"signingOff"`
}

// auditVerify runs `portcullis audit verify --json` and returns its result
// and exit code.
func auditVerify(t *testing.T, h *harness.Home) (auditVerifyResult, int) {
	t.Helper()
	r := auditRun(t, h, "audit", "verify", "--json")
	var v auditVerifyResult
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil {
		t.Fatalf("audit verify --json (exit %d) printed %q: %v\n%s", r.Code, r.Stdout, err, r.Stderr)
	}
	return v, r.Code
}

// auditFields decodes the fields of e into a map.
func auditFields(t *testing.T, e audit.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := e.DecodeFields(&m); err != nil {
		t.Fatalf("seq %d: %v", e.Seq, err)
	}
	return m
}

// auditCallLog returns the tools/call lines the echo server wrote to its
// ECHO_CALL_LOG file (none when it does not exist).
func auditCallLog(t *testing.T, path string) []json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []json.RawMessage
	for l := range bytes.Lines(b) {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			out = append(out, json.RawMessage(l))
		}
	}
	return out
}

// auditArgsDigest is the argsDigest the log records for args.
func auditArgsDigest(t *testing.T, args any) string {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := audit.ArgsSummary(b)
	return d
}

// TestAuditUnwritableFailsClosed proves that when the audit log cannot be
// written, tool calls are refused with audit_unavailable and nothing reaches
// the server, and that `portcullis status` says so.
//
// How the log is made unwritable: the tests run as root, so a chmod would
// not stop the daemon's writes, and mounting a small file system is not
// allowed. Instead the test lowers RLIMIT_FSIZE of the running daemon to 1
// byte with prlimit(2): every later write past byte 1 of a regular file
// fails with EFBIG, which is how a full disk (ENOSPC) or an exhausted quota
// looks to the writer. Go's runtime ignores the SIGXFSZ that comes with it,
// so the daemon keeps running and sees the error. The echo server was
// started before, so its own limit (and its ECHO_CALL_LOG) is untouched.
func TestAuditUnwritableFailsClosed(t *testing.T) {
	h := newHome(t)
	callLog := filepath.Join(t.TempDir(), "calls.jsonl")
	auditAddServer(t, h, "echo", config.Server{Command: echoBin, Env: map[string]string{"ECHO_CALL_LOG": callLog}}, "echo")
	d := startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("echo"), "")
	ctx := testContext(t, 60*time.Second)

	// A call while the log works reaches the server: the call log records.
	if _, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "before"}}); err != nil {
		t.Fatal(err)
	}
	if got := auditCallLog(t, callLog); len(got) != 1 {
		t.Fatalf("the echo server recorded %d calls, want 1: %s", len(got), got)
	}

	var old unix.Rlimit
	if err := unix.Prlimit(d.PID(), unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 1, Max: unix.RLIM_INFINITY}, &old); err != nil {
		t.Fatalf("prlimit on the daemon: %v", err)
	}

	var refused []string
	for i := range 3 {
		msg := fmt.Sprintf("after %d", i)
		res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}})
		var we *jsonrpc.Error
		if !errors.As(err, &we) {
			t.Fatalf("call %q with an unwritable log: result %v, err %v; want a JSON-RPC error", msg, res, err)
		}
		var data control.Refusal
		if err := json.Unmarshal(we.Data, &data); err != nil {
			t.Fatalf("refusal data %s: %v", we.Data, err)
		}
		if we.Code != int64(control.AuditUnavailable.Code()) || data.Error != control.AuditUnavailable {
			t.Fatalf("call %q refused with code %d, data %s; want %d audit_unavailable", msg, we.Code, we.Data, control.AuditUnavailable.Code())
		}
		refused = append(refused, auditArgsDigest(t, map[string]any{"message": msg}))
	}
	if got := auditCallLog(t, callLog); len(got) != 1 {
		t.Errorf("the echo server recorded %d calls, want only the one made before the log failed: %s", len(got), got)
	}
	// A tool that needs approval: nobody is asked to approve what the log
	// could not record.
	_, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 1, "b": 2}})
	if code, ref := refusalOf(t, err); code != int64(control.AuditUnavailable.Code()) || ref.Error != control.AuditUnavailable {
		t.Errorf("an approve tool while the log fails: code %d, %+v; want audit_unavailable", code, ref)
	}
	// Again after the daemon's once-a-second recovery attempt: re-reading
	// the log's tail does not make it writable, and nobody is asked.
	time.Sleep(1100 * time.Millisecond)
	_, err = a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 3, "b": 4}})
	if code, ref := refusalOf(t, err); code != int64(control.AuditUnavailable.Code()) || ref.Error != control.AuditUnavailable {
		t.Errorf("an approve tool a second later: code %d, %+v; want audit_unavailable", code, ref)
	}
	if p := approvals(t, h); len(p) != 0 {
		t.Errorf("approval requests raised while the log fails: %+v", p)
	}

	rep, err := h.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Audit.Error == "" {
		t.Errorf("status does not report the failing audit log: %+v", rep.Audit)
	}
	if out, err := h.Run(ctx, "status"); err != nil || !strings.Contains(out.Stdout, "Audit log cannot be written: every tool call is refused") {
		t.Errorf("portcullis status does not tell the person the audit log fails (%v):\n%s", err, out.Stdout)
	}

	// What was written before the failure still verifies, and no refused
	// call left an intent behind.
	if v, code := auditVerify(t, h); code != 0 || !v.OK {
		t.Errorf("audit verify after the failure: exit %d, %+v", code, v)
	}
	for _, e := range auditEvents(t, h) {
		if e.Type == audit.TypeToolCalled && slices.Contains(refused, auditFields(t, e)["argsDigest"].(string)) {
			t.Errorf("seq %d records a refused call as called", e.Seq)
		}
	}
	if err := unix.Prlimit(d.PID(), unix.RLIMIT_FSIZE, &old, nil); err != nil {
		t.Fatal(err)
	}

	// Writable again: the next call goes through, and the log says first
	// that writes resumed, naming the failure.
	time.Sleep(1100 * time.Millisecond) // the recovery attempt is at most once a second
	if _, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "after"}}); err != nil {
		t.Fatalf("a call once the log is writable again: %v", err)
	}
	evs := auditEvents(t, h)
	i := slices.IndexFunc(evs, func(e audit.Event) bool { return e.Type == audit.TypeLogResumed })
	if i < 0 || !strings.Contains(auditFields(t, evs[i])["failure"].(string), "file too large") {
		t.Fatalf("no log_resumed naming the failure after the log became writable again")
	}
	if i+1 >= len(evs) || evs[i+1].Type != audit.TypeToolCalled {
		t.Errorf("the event after log_resumed is %v, want the call's tool_called", evs[min(i+1, len(evs)-1)].Type)
	}
	if v, code := auditVerify(t, h); code != 0 || !v.OK {
		t.Errorf("audit verify after writes resumed: exit %d, %+v", code, v)
	}
}

// auditStep is one expected event of a story: its type and a predicate on
// its fields.
type auditStep struct {
	what string
	typ  string
	ok   func(f map[string]any) bool
}

// auditFindInOrder returns the events matching steps, in order (each after
// the one before), or fails naming the first step not found.
func auditFindInOrder(t *testing.T, evs []audit.Event, steps []auditStep) []audit.Event {
	t.Helper()
	var found []audit.Event
	i := 0
	for _, st := range steps {
		for ; i < len(evs); i++ {
			if evs[i].Type == st.typ && st.ok(auditFields(t, evs[i])) {
				break
			}
		}
		if i == len(evs) {
			var b strings.Builder
			for _, e := range evs {
				fmt.Fprintf(&b, "  %d %s %s\n", e.Seq, e.Type, e.Fields)
			}
			t.Fatalf("no %s event for %q after seq %d; the log:\n%s", st.typ, st.what, seqOf(found), b.String())
		}
		found = append(found, evs[i])
		i++
	}
	return found
}

func seqOf(evs []audit.Event) uint64 {
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// TestAuditRebuildStory follows one agent run through a rebuild of its
// server and proves that the log tells the story in order — server_started
// (epoch A), tool_called under A, build_detected, server_replaced A→B,
// server_started (B), tool_called under B — that the sessions and activity
// queries read it back, that the clean log verifies, and that editing,
// deleting, reordering or truncating it makes `portcullis audit verify`
// fail naming the first bad seq.
func TestAuditRebuildStory(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	binDir := t.TempDir()
	inv, err := harness.BuildServer(ctx, repoRoot, binDir, "inventory", "")
	if err != nil {
		t.Fatal(err)
	}
	h := newHome(t)
	auditAddServer(t, h, "inv", config.Server{Command: inv}, "inventory_lookup", "inventory_adjust")
	d := startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("inv"), "")
	lookup := func(sku string) {
		t.Helper()
		res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "inventory_lookup", Arguments: map[string]any{"sku": sku}})
		if err != nil || res.IsError {
			t.Fatalf("inventory_lookup %s: %v %+v", sku, err, res)
		}
	}
	lookup("WIDGET-1")
	st, _ := runOf(t, h, a.PID(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady && r.Epoch != "" })
	epochA, run := st.Epoch, st.Run

	// The rebuild: a different binary at the same path.
	if _, err := harness.BuildServer(ctx, repoRoot, binDir, "inventory", "-X main.schemaRevision=2"); err != nil {
		t.Fatal(err)
	}
	st, _ = runOf(t, h, a.PID(), "ready under a new epoch", func(r gateway.Status) bool {
		return r.State == gateway.StateReady && r.Epoch != "" && r.Epoch != epochA
	})
	epochB := st.Epoch
	if _, err := a.Session.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	lookup("GADGET-2")

	is := func(k, v string) func(map[string]any) bool {
		return func(f map[string]any) bool { return f[k] == v && f["agentRun"] == string(run) }
	}
	story := []auditStep{
		{"run started", audit.TypeRunStarted, is("serverLabel", "inv")},
		{"epoch A started", audit.TypeServerStarted, is("epoch", string(epochA))},
		{"call under A", audit.TypeToolCalled, func(f map[string]any) bool {
			return f["epoch"] == string(epochA) && f["tool"] == "inventory_lookup" && f["argsDigest"] == auditArgsDigest(t, map[string]any{"sku": "WIDGET-1"})
		}},
		{"build detected while A runs", audit.TypeBuildDetected, func(f map[string]any) bool { return f["epoch"] == string(epochA) && f["serverLabel"] == "inv" }},
		// B is launched (its epoch minted) and takes over at once
		// (server_replaced names it); server_started records B's
		// identity once the kernel's view of it was read, before any call
		// reaches B.
		{"A replaced by B", audit.TypeServerReplaced, func(f map[string]any) bool {
			return f["oldEpoch"] == string(epochA) && f["newEpoch"] == string(epochB) && f["agentRun"] == string(run)
		}},
		{"epoch B started", audit.TypeServerStarted, is("epoch", string(epochB))},
		{"call under B", audit.TypeToolCalled, func(f map[string]any) bool {
			return f["epoch"] == string(epochB) && f["tool"] == "inventory_lookup" && f["argsDigest"] == auditArgsDigest(t, map[string]any{"sku": "GADGET-2"})
		}},
		// (The same story under policy "approve" — approval_requested and
		// approval_granted before each call, the grant voided by the
		// replacement — is checked by TestRebuildVoidsGrants.)
	}
	evs := auditEvents(t, h)
	found := auditFindInOrder(t, evs, story)
	calledA, calledB := auditFields(t, found[2]), auditFields(t, found[6])
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: the sequence is not contiguous", i, e.Seq)
		}
	}
	// The catalog changed with the rebuild (adjust requires a reason now).
	auditFindInOrder(t, evs[found[4].Seq:], []auditStep{{"catalog revised under B", audit.TypeCatalogRevised, func(f map[string]any) bool {
		diff, _ := f["diff"].(map[string]any)
		changed, _ := diff["changed"].([]any)
		return f["epoch"] == string(epochB) && slices.Contains(changed, any("inventory_adjust"))
	}}})

	// The queries read the story back through the CLI.
	var calls []struct {
		Seq       uint64 `json:"seq"`
		Call      string `json:"call"`
		AgentRun  string `json:"agentRun"`
		Epoch     string `json:"epoch"`
		Tool      string `json:"tool"`
		Decision  string `json:"decision"`
		Completed bool   `json:"completed"`
		Outcome   string `json:"outcome"`
	}
	r := auditRun(t, h, "audit", "activity", "--run", string(run), "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &calls); err != nil || r.Code != 0 {
		t.Fatalf("audit activity --json: exit %d, %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	if len(calls) != 2 || calls[0].Epoch != string(epochA) || calls[1].Epoch != string(epochB) ||
		calls[0].Call != calledA["call"] || calls[1].Call != calledB["call"] ||
		!calls[0].Completed || calls[0].Outcome != "ok" || !calls[1].Completed || calls[1].Outcome != "ok" ||
		calls[0].Decision != "allow" {
		t.Errorf("audit activity --run %s = %+v; want the two lookups under %s and %s, allowed and completed ok", run, calls, epochA, epochB)
	}
	var sessions []struct {
		AgentRun    string `json:"agentRun"`
		ServerLabel string `json:"serverLabel"`
		Calls       int    `json:"calls"`
		Denied      int    `json:"denied"`
	}
	r = auditRun(t, h, "audit", "sessions", "--server", "inv", "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &sessions); err != nil || r.Code != 0 {
		t.Fatalf("audit sessions --json: exit %d, %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	if len(sessions) != 1 || sessions[0].AgentRun != string(run) || sessions[0].Calls != 2 || sessions[0].Denied != 0 {
		t.Errorf("audit sessions --server inv = %+v; want run %s with 2 calls", sessions, run)
	}

	// The readable tail names the replacement with both short epochs.
	r = auditRun(t, h, "audit", "tail", "-n", "100")
	wantLine := "epoch=" + epochA[len(epochA)-8:] + "->" + epochB[len(epochB)-8:]
	if r.Code != 0 || !strings.Contains(r.Stdout, string(wantLine)) {
		t.Errorf("audit tail does not show %q:\n%s", wantLine, r.Stdout)
	}

	// Stop the daemon so that nothing is appended while the log is copied.
	a.Close()
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	v, code := auditVerify(t, h)
	if code != 0 || !v.OK || v.Problem != "" || v.Events < uint64(len(evs)) {
		t.Fatalf("audit verify of the clean log: exit %d, %+v", code, v)
	}
	if r := auditRun(t, h, "audit", "verify"); r.Code != 0 || !strings.Contains(r.Stdout, "Audit log OK") {
		t.Errorf("audit verify: exit %d\n%s", r.Code, r.Stdout)
	}
	if v.Signed {
		// The same signed log verified where no keychain answers: only
		// the hash chain could be checked, and the exit status says so.
		nokey := *h
		nokey.Env = append(slices.Clone(h.Env), "DBUS_SESSION_BUS_ADDRESS=", "XDG_RUNTIME_DIR="+t.TempDir())
		if r := auditRun(t, &nokey, "audit", "verify"); r.Code != 3 || !strings.Contains(r.Stdout, "NOT FULLY VERIFIED") {
			t.Errorf("audit verify of a signed log without the key: exit %d\n%s\nwant exit 3, NOT FULLY VERIFIED", r.Code, r.Stdout)
		}
	}
	auditTamper(t, h, found[2].Seq)
}

// auditTamper copies h's log once per kind of damage, damages the copy and
// checks that `portcullis audit verify` fails (exit 1) naming the first bad
// seq and the problem. seq is the tool_called event of an
// inventory_lookup in the middle of the log.
func auditTamper(t *testing.T, h *harness.Home, seq uint64) {
	t.Helper()
	src := filepath.Join(h.Dir, "audit")
	file := "audit-000001.jsonl"
	b, err := os.ReadFile(filepath.Join(src, file))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	lines = lines[:len(lines)-1] // the empty piece after the last newline
	last := uint64(len(lines))
	m := int(seq - 1) // the line of seq
	tests := []struct {
		name     string
		damage   func(lines [][]byte) [][]byte
		firstBad uint64
		problem  string
	}{
		{"a field edited", func(ls [][]byte) [][]byte {
			ls[m] = bytes.Replace(ls[m], []byte(`"tool":"inventory_lookup"`), []byte(`"tool":"inventory_adjust"`), 1)
			return ls
		}, seq, audit.ProblemEdited},
		{"a line deleted", func(ls [][]byte) [][]byte {
			return slices.Delete(ls, m, m+1)
		}, seq, audit.ProblemDeleted},
		{"two lines swapped", func(ls [][]byte) [][]byte {
			ls[m], ls[m+1] = ls[m+1], ls[m]
			return ls
		}, seq, audit.ProblemReordered},
		{"the last line cut off", func(ls [][]byte) [][]byte {
			return ls[:len(ls)-1]
		}, last, audit.ProblemTruncated},
		{"a whole line appended", func(ls [][]byte) [][]byte {
			return append(ls, []byte(`{"seq":999}`+"\n"))
		}, last + 1, audit.ProblemEdited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hc, err := harness.NewHome(portcullis, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(hc.Dir, "audit")
			if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
				t.Fatal(err)
			}
			ls := tt.damage(slices.Clone(lines))
			ls = slices.Clone(ls)
			if err := os.WriteFile(filepath.Join(dst, file), bytes.Join(ls, nil), 0o600); err != nil {
				t.Fatal(err)
			}
			v, code := auditVerify(t, hc)
			if code != 1 || v.OK || v.FirstBad != tt.firstBad || v.Problem != tt.problem {
				t.Errorf("audit verify --json: exit %d, firstBad %d, problem %q (%s); want exit 1, firstBad %d, problem %q",
					code, v.FirstBad, v.Problem, v.Detail, tt.firstBad, tt.problem)
			}
			r := auditRun(t, hc, "audit", "verify")
			want := fmt.Sprintf("FAILED verification at seq %d: %s", tt.firstBad, tt.problem)
			if r.Code != 1 || !strings.Contains(r.Stdout, want) {
				t.Errorf("audit verify: exit %d, output:\n%s\nwant exit 1 and %q", r.Code, r.Stdout, want)
			}
		})
	}
}

// TestAuditSurvivesSIGKILL kills the daemon with SIGKILL while 16 callers
// keep it logging, and proves that the log verifies up to its last whole
// line, that every call the agent saw answered and every call the echo
// server received has its tool_called intent in the log, that a torn last
// line (as a crash in the middle of a write leaves) is reported but is not
// a failure, and that a new daemon continues the log: after more calls it
// verifies, with the torn bytes recorded by log_recovered and the sequence
// unbroken.
func TestAuditSurvivesSIGKILL(t *testing.T) {
	h := newHome(t)
	callLog := filepath.Join(t.TempDir(), "calls.jsonl")
	auditAddServer(t, h, "echo", config.Server{Command: echoBin, Env: map[string]string{"ECHO_CALL_LOG": callLog}}, "echo")
	ctx := testContext(t, 3*time.Minute)
	d1, err := h.StartDaemon(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d1.Stop(5 * time.Second) })

	const agents, callers, enough = 2, 8, 400
	var (
		mu       sync.Mutex
		answered []string // argsDigest of every call answered with a result
	)
	callCtx, stopCalls := context.WithCancel(ctx)
	defer stopCalls()
	var wg sync.WaitGroup
	var shims []int
	for ai := range agents {
		a := connectCmd(t, h.ConnectCommand("echo"), "")
		shims = append(shims, a.PID())
		for ci := range callers {
			wg.Go(func() {
				for i := 0; callCtx.Err() == nil; i++ {
					args := map[string]any{"message": fmt.Sprintf("agent %d caller %d call %d", ai, ci, i)}
					res, err := a.Session.CallTool(callCtx, &mcp.CallToolParams{Name: "echo", Arguments: args})
					if err != nil {
						return // the daemon is gone
					}
					if res.IsError {
						t.Errorf("echo %v: tool error %+v", args, res)
						return
					}
					mu.Lock()
					answered = append(answered, auditArgsDigest(t, args))
					mu.Unlock()
				}
			})
		}
	}
	for {
		mu.Lock()
		n := len(answered)
		mu.Unlock()
		if n >= enough {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("only %d calls answered before the deadline", n)
		case <-d1.Done():
			t.Fatalf("the daemon exited early:\n%s", d1.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The shims are frozen first: a shim that loses its daemon starts a
	// new one, and this test is about what the killed daemon left.
	for _, pid := range shims {
		freezeShim(t, pid)
	}
	if err := syscall.Kill(d1.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d1.Done()
	stopCalls()
	wg.Wait()

	v, code := auditVerify(t, h)
	if code != 0 || !v.OK {
		t.Fatalf("audit verify after SIGKILL: exit %d, %+v", code, v)
	}
	evs := auditEvents(t, h)
	intents := map[string]bool{}
	for _, e := range evs {
		if e.Type == audit.TypeToolCalled {
			intents[auditFields(t, e)["argsDigest"].(string)] = true
		}
	}
	mu.Lock()
	for _, dg := range answered {
		if !intents[dg] {
			t.Errorf("a call answered to the agent (args %s) has no tool_called in the log", dg)
		}
	}
	t.Logf("%d calls answered, %d events logged before SIGKILL", len(answered), len(evs))
	mu.Unlock()
	for _, l := range auditCallLog(t, callLog) {
		var c struct{ Args json.RawMessage }
		if err := json.Unmarshal(l, &c); err != nil {
			t.Fatal(err)
		}
		if dg, _ := audit.ArgsSummary(c.Args); !intents[dg] {
			t.Errorf("the echo server received a call without an intent in the log: %s", l)
		}
	}

	// A crash in the middle of a write leaves a torn last line; add one
	// (the start of an event without its newline) as such a crash would.
	files, _ := filepath.Glob(filepath.Join(h.Dir, "audit", "audit-*.jsonl"))
	slices.Sort(files)
	// SIGKILL itself may have torn the last line: Linux ends a write to a
	// regular file early, at a page boundary, when a fatal signal is
	// pending. Whatever follows the last newline now is part of the
	// region the next daemon must recover.
	last, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	crashTorn := len(last) - (bytes.LastIndexByte(last, '\n') + 1)
	if crashTorn > 0 {
		t.Logf("SIGKILL left a torn last line of %d bytes", crashTorn)
		if !v.Torn {
			t.Errorf("audit verify after SIGKILL did not report the %d-byte torn last line: %+v", crashTorn, v)
		}
	}
	torn := []byte(`{"fields":{"agentRun":"01J`)
	f, err := os.OpenFile(files[len(files)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(torn); err != nil {
		t.Fatal(err)
	}
	f.Close()
	v, code = auditVerify(t, h)
	if code != 0 || !v.OK || !v.Torn {
		t.Fatalf("audit verify with a torn last line: exit %d, %+v; want ok (exit 0) and torn", code, v)
	}
	if r := auditRun(t, h, "audit", "verify"); r.Code != 0 || !strings.Contains(r.Stdout, "torn") {
		t.Errorf("audit verify does not mention the torn line (exit %d):\n%s", r.Code, r.Stdout)
	}

	// A new daemon continues the log.
	startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("echo"), "")
	for i := range 20 {
		if _, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": fmt.Sprintf("after restart %d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	v, code = auditVerify(t, h)
	if code != 0 || !v.OK || v.Torn || len(v.Recovered) != 1 || v.Recovered[0].Length != int64(crashTorn+len(torn)) {
		t.Fatalf("audit verify after the restart: exit %d, %+v; want ok with one recovered region of %d bytes", code, v, crashTorn+len(torn))
	}
	after := auditEvents(t, h)
	for i, e := range after {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d after the restart: the sequence is not contiguous", i, e.Seq)
		}
	}
	if n := len(after) - len(evs); n < 40 {
		t.Errorf("only %d events were added after the restart, want at least 40 (20 calls)", n)
	}
	if after[len(evs)].Type != audit.TypeLogRecovered {
		t.Errorf("the first event after the restart is %s, want %s", after[len(evs)].Type, audit.TypeLogRecovered)
	}
}
