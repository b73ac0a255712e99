package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/fakemodel"
	"github.com/portcullis/portcullis/internal/harness"
)

// codexTool is Codex's name for a tool of the inventory server: Codex offers
// a server's tools to the model as the namespace mcp__LABEL.
func codexTool(tool string) string { return "mcp__" + invLabel + fakemodel.NamespaceSep + tool }

// needCodex returns node and the Codex entry point of the npm test
// dependencies, skipping t when they are not installed. The entry runs the
// native binary of the platform's optional dependency
// (@openai/codex-linux-x64, …), which npm installs with it.
func needCodex(t *testing.T) (node, entry string) {
	t.Helper()
	npm := needNPM(t)
	entry = filepath.Join(npm, "@openai", "codex", "bin", "codex.js")
	if _, err := os.Stat(entry); err != nil {
		t.Skipf("skipping: Codex is not installed in %s (run `make test-deps`): %v", npm, err)
	}
	node, err := harness.Node()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	return node, entry
}

// codexSetup is an agentSetup whose agent is Codex: ~/.codex/config.toml
// names the scripted model as its provider (no retries, no update check,
// no analytics) and the inventory server, and `portcullis install codex` has
// routed the server through Portcullis. Codex asks the person itself before
// an MCP call that is not read-only, and `codex exec` can ask no one: the
// server's default_tools_approval_mode = "approve" lets its calls go, so that
// Portcullis is the one that asks. tool_timeout_sec is well above
// Portcullis's approval timeout.
func codexSetup(t *testing.T) (s *agentSetup, node, entry string) {
	t.Helper()
	node, entry = needCodex(t)
	return codexSetupOn(t, newAgentSetup(t)), node, entry
}

// codexSetupOn is codexSetup on the agentSetup s.
func codexSetupOn(t *testing.T, s *agentSetup) *agentSetup {
	t.Helper()
	dir := filepath.Join(s.agentHome, ".codex")
	file := fmt.Sprintf(`model = "fakemodel"
model_provider = "fakemodel"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.fakemodel]
name = "fakemodel"
wire_api = "responses"
env_key = "FAKEMODEL_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[mcp_servers.%s]
command = %q
args = []
default_tools_approval_mode = "approve"
startup_timeout_sec = 60
tool_timeout_sec = %d

[mcp_servers.%s.env]
INVENTORY_CALL_LOG = %q
`, invLabel, s.bin, int((4 * agentApprovalTimeout).Seconds()), invLabel, s.ledger)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	s.install(t, "codex")
	return s
}

// codexEnv is Codex's environment: offline, against the scripted model.
func (s *agentSetup) codexEnv() []string {
	return s.agentEnv(
		"CODEX_HOME="+filepath.Join(s.agentHome, ".codex"),
		"FAKEMODEL_API_KEY=test-fakemodel",
		"NO_COLOR=1",
	)
}

// codexExec is the command line of one `codex exec` session against the
// scripted model: JSON events on stdout, no git repository needed, and a
// config key Codex does not know is an error rather than ignored.
func (s *agentSetup) codexExec(entry, prompt string) []string {
	return []string{entry, "exec", "--json", "--strict-config", "--skip-git-repo-check",
		"-c", fmt.Sprintf("model_providers.fakemodel.base_url=%q", s.model.URL()+"/v1"), prompt}
}

// codexOutput is what the model read of a tool result, without the header
// Codex puts before it ("Wall time: 0.0141 seconds\nOutput:\n"); the
// Responses API has no error flag, so Codex's own refusals are text too
// ("tool call error: …").
func codexOutput(r fakemodel.ToolResult) fakemodel.ToolResult {
	if _, after, ok := strings.Cut(r.Text, "\nOutput:\n"); ok && strings.HasPrefix(r.Text, "Wall time: ") {
		r.Text = after
	}
	return r
}

// codexItem is one tool call as `codex exec --json` reports it.
type codexItem struct {
	Type   string `json:"type"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	Status string `json:"status"` // completed, failed
}

// codexCalls returns the MCP tool calls Codex reported completed on its
// stdout, in order.
func codexCalls(t *testing.T, stdout string) []codexItem {
	t.Helper()
	var out []codexItem
	for _, line := range strings.Split(stdout, "\n") {
		var ev struct {
			Type string    `json:"type"`
			Item codexItem `json:"item"`
		}
		if line == "" || json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		if ev.Type == "item.completed" && ev.Item.Type == "mcp_tool_call" {
			out = append(out, ev.Item)
		}
	}
	return out
}

// codexWrites are the writes the model sends after the rebuild in
// TestCodexSchemaChange, in order: "old" for the contract Codex listed,
// "new" for the correctly formed one.
type codexWrites struct {
	mu   sync.Mutex
	sent []string
}

func (w *codexWrites) add(form string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent = append(w.sent, form)
}

func (w *codexWrites) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.sent...)
}

// newContract is how Portcullis's refusals tell the model the new required
// argument of inventory_adjust ("current arguments of "inventory_adjust":
// sku (string, required), delta (integer, required), reason (string,
// required)").
const newContract = "reason (string, required)"

// maxOldWrites bounds the model's writes of the old contract after the
// rebuild: it sends the old form again (as a refusal asks it to: "call
// inventory_adjust again once they approve") until a refusal tells it the
// new contract.
const maxOldWrites = 3

// TestCodexSchemaChange drives the real Codex (npm, pinned) through
// Portcullis with a scripted Responses endpoint, across a rebuild of the
// inventory server that adds a required argument ("reason"). Codex never
// lists tools again within a session, so its model keeps the first
// contract, and Portcullis's refusals are where it learns the new one.
//
// The model reads the stock (policy allow) and writes (held for the person,
// who approves it). After the rebuild it writes the old way, again as long
// as the refusals ask it to, until a refusal names the new required
// argument (at most maxOldWrites times); then it sends the correctly formed
// write, with the reason. The person approves the new code when Portcullis
// asks. The correctly formed write must then reach the new process: it is
// judged on the contract the refusal told the model (and the person's
// approval), not refused for the catalog revision Codex listed at start. No
// old-form write may reach a server.
func TestCodexSchemaChange(t *testing.T) {
	t.Parallel()
	s, node, codex := codexSetup(t)
	allowTools(t, s.home, invLabel, "inventory_lookup")
	adjust, lookup := codexTool("inventory_adjust"), codexTool("inventory_lookup")
	oldForm := map[string]any{"sku": "WIDGET-1", "delta": 1}
	newForm := map[string]any{"sku": "WIDGET-1", "delta": 1, "reason": "restock"}
	pause := s.pause.Hook
	var writes codexWrites
	afterRebuild := func(req fakemodel.Request) fakemodel.Step {
		sent := writes.list()
		switch {
		case len(sent) > 0 && sent[len(sent)-1] == "new":
			return fakemodel.Step{Text: "done"}
		case len(sent) > 0 && len(req.Result) == 1 && strings.Contains(req.Result[0].Text, newContract):
			writes.add("new")
			return fakemodel.Step{Tool: adjust, Args: newForm}
		case len(sent) >= maxOldWrites:
			return fakemodel.Step{Text: "done"}
		default:
			writes.add("old")
			return fakemodel.Step{Tool: adjust, Args: oldForm}
		}
	}
	script := fakemodel.Script{
		{Tool: lookup, Args: map[string]any{"sku": "WIDGET-1"}},
		{Tool: adjust, Args: map[string]any{"sku": "WIDGET-1", "delta": 2}, Before: pause},
	}
	for range maxOldWrites + 2 {
		script = append(script, fakemodel.Step{Before: pause, Decide: afterRebuild})
	}
	s.startModel(t, script)
	p := s.startAgent(t, 5*time.Minute, s.codexEnv(), node, s.codexExec(codex, "Adjust the stock of WIDGET-1.")...)

	// The read reaches the server; Codex offered the server's tools under
	// mcp__inv.
	req := s.paused(t, p, 2*time.Minute)
	for _, tool := range []string{lookup, adjust} {
		if !slices.Contains(req.Tools, tool) {
			t.Fatalf("Codex offered the model %v, want %s among them", req.Tools, tool)
		}
	}
	r := codexOutput(onlyResult(t, req, "inventory_lookup"))
	if r.Name != lookup {
		t.Fatalf("the model's request carries a result of %q, want %q", r.Name, lookup)
	}
	wantStock(t, "the lookup", r, 40)
	shim, epoch1 := s.liveRun(t)
	s.pause.Resume()

	// The write waits for the person, who approves it for this run.
	s.decideWhenAsked(t, "inventory_adjust", epoch1, "approve")
	req = s.paused(t, p, time.Minute)
	wantStock(t, "the approved write", codexOutput(onlyResult(t, req, "approved write")), 42)

	// A rebuild whose inventory_adjust requires a reason: a new epoch.
	s.build(t, invRev2)
	epoch2 := epochOf(t, s.home, shim, epoch1)
	s.pause.Resume()

	// The writes after the rebuild, each with the result the model read;
	// the person approves the new code whenever Portcullis asks.
	approved := 0
	var results []string
	for {
		req, asked := s.approveOrPaused(t, p, epoch2)
		if asked {
			approved++
		}
		sent := writes.list()
		r := codexOutput(onlyResult(t, req, "a write after the rebuild"))
		results = append(results, r.Text)
		t.Logf("write %d after the rebuild (%s form; the person approved %d request(s) so far): the model read %q", len(sent), sent[len(sent)-1], approved, errorMessage(r.Text))
		if sent[len(sent)-1] == "new" {
			if strings.Contains(r.Text, "on hand") || strings.Contains(r.Text, `"quantity"`) {
				wantStock(t, "the correctly formed write", r, 41)
				break
			}
			t.Fatalf("the correctly formed write (with the new required argument reason, sent after a refusal told the model %q) did not reach the new code; the person had approved %d request(s) of the new code; it was refused: %s", newContract, approved, errorMessage(r.Text))
		}
		if strings.Contains(r.Text, "on hand") || strings.Contains(r.Text, `"quantity"`) {
			t.Fatalf("a write without the new required argument reached a server: %q", r.Text)
		}
		if len(sent) >= maxOldWrites && !strings.Contains(r.Text, newContract) {
			t.Fatalf("after %d writes of the old contract no refusal told the model the new required argument (%q); they read: %q", len(sent), newContract, results)
		}
		s.pause.Resume()
	}
	if approved == 0 {
		t.Errorf("the correctly formed write reached the new code, but the person was never asked to approve it")
	}
	run := waitRun(t, s.home, shim, 10*time.Second, "the run's status", func(gateway.Status) bool { return true })
	t.Logf("at the end the run is on catalog revision %d; Codex last listed revision %d", run.CatalogRevision, run.AgentRevision)
	s.pause.Resume()
	p.wait(t, time.Minute)
	if err := s.model.Err(); err != nil {
		t.Error(err)
	}

	// The server's ledger: the read and the approved write on the first
	// process, the correctly formed write on the rebuilt one; nothing else.
	calls := readInventoryCalls(t, s.ledger)
	ok := len(calls) == 3 &&
		calls[0].Tool == "inventory_lookup" && calls[0].Revision == "1" &&
		calls[1].Tool == "inventory_adjust" && canonical(t, string(calls[1].Args)) == `{"delta":2,"sku":"WIDGET-1"}` && calls[1].Revision == "1" && calls[1].Process == calls[0].Process &&
		calls[2].Tool == "inventory_adjust" && canonical(t, string(calls[2].Args)) == `{"delta":1,"reason":"restock","sku":"WIDGET-1"}` && calls[2].Revision == "2" && calls[2].Build == "rev2" && calls[2].Process != calls[0].Process
	if !ok {
		t.Errorf("the inventory ledger is %s; want the lookup and the write of delta 2 on revision 1's process, then the write with reason on revision 2's", describe(calls))
	}

	// Codex's own account agrees: every write after the rebuild but the
	// last failed.
	var got []string
	for _, it := range codexCalls(t, p.stdout.String()) {
		got = append(got, it.Server+"/"+it.Tool+":"+it.Status)
	}
	want := []string{"inv/inventory_lookup:completed", "inv/inventory_adjust:completed"}
	for range len(writes.list()) - 1 {
		want = append(want, "inv/inventory_adjust:failed")
	}
	want = append(want, "inv/inventory_adjust:completed")
	if !slices.Equal(got, want) {
		t.Errorf("codex exec --json reported the calls %v, want %v", got, want)
	}
}

// errorMessage is the error Codex gave the model for a failed call, from
// the text "tool call error: … Caused by:\n    Mcp error: CODE: MESSAGE(DATA)
// \n\nStack backtrace: …", without the error's data; other texts as they are.
func errorMessage(text string) string {
	_, after, ok := strings.Cut(text, "Caused by:\n")
	if !ok {
		return text
	}
	msg, _, _ := strings.Cut(after, "\n\n")
	msg, _, _ = strings.Cut(msg, `({"error"`)
	return strings.TrimSpace(msg)
}
