package authz

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/identity"
)

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func TestCardLines(t *testing.T) {
	tests := []struct {
		name string
		card Card
		want []string
	}{
		{
			name: "first use",
			card: Card{Reason: "first use of write_note in this agent run", AgentRun: "RUN1", AgentExe: "/usr/bin/claude", AgentPID: 4242,
				ServerLabel: "notes", CurrentEpoch: "EPOCH_A", Tool: "write_note", Arguments: json.RawMessage(`{"text":"hi"}`),
				ToolScope: []string{"write_note"}, OtherTools: []string{"delete_note"}},
			want: []string{
				"first use of write_note in this agent run",
				"Agent: /usr/bin/claude (pid 4242), run RUN1",
				"Server: notes",
				"Epoch: EPOCH_A",
				`Call: write_note {"text":"hi"}`,
				"Tools proposed: write_note",
				"Not proposed (add with --tools or --all): delete_note",
			},
		},
		{
			name: "rebuild with identity and catalog changes, defaults, ask every use",
			card: Card{Reason: "server execution epoch changed: new code asks for the authority you gave the old code",
				AgentRun: "RUN1", ServerLabel: "notes", PreviousEpoch: "EPOCH_A", CurrentEpoch: "EPOCH_B",
				IdentityChanges:  []identity.Change{{Field: "entry", Path: "/srv/notes", Old: digestA, New: digestB}},
				ApprovedRevision: 1, CatalogRevision: 2,
				CatalogChanges: []catalog.Change{
					{Tool: "write_note", Kind: "property_added", Severity: catalog.Contract, Summary: "write_note: new optional argument target"},
					{Tool: "drop_all", Kind: "tool_added", Severity: catalog.Authority, Summary: "drop_all: new tool"},
				},
				Tool: "write_note", Defaults: map[string]any{"target": "preview", "count": 3},
				ToolScope: []string{"write_note"}, ChangedTools: []string{"write_note"}, CredentialScope: []string{"notes-api"}, AskEveryUse: true},
			want: []string{
				"server execution epoch changed: new code asks for the authority you gave the old code",
				"Agent: unknown agent (pid 0), run RUN1",
				"Server: notes",
				"Epoch: EPOCH_A → EPOCH_B (new code)",
				"  changed on disk: the entry /srv/notes (aaaaaaaaaaaa… → bbbbbbbbbbbb…)",
				"Catalog: revision 1 → 2",
				"  authority drop_all: new tool",
				"  contract  write_note: new optional argument target",
				"Call: write_note {}",
				"  omitted count will be 3 (default)",
				`  omitted target will be "preview" (default)`,
				"Tools proposed: write_note (changed)",
				"Credentials: notes-api — in this call's params._meta, asked on every use",
			},
		},
		{
			name: "identity approval for env credentials",
			card: Card{Reason: "notes asks for credentials notes-token at launch: approve this code before it receives them",
				AgentRun: "RUN1", AgentExe: "/usr/bin/agent", AgentPID: 7, ServerLabel: "notes",
				PreviousEpoch: "EPOCH_A", Identity: digestA,
				LaunchCommand: []string{"/srv/notes", "--db", "my notes.db"}, Executable: "/srv/notes", ExecutableDigest: digestB,
				IdentityChanges: []identity.Change{
					{Field: "resolvedExecutable", Path: "/srv/notes", Old: digestA, New: digestB},
					{Field: "runtime", Old: "node v22.14.0", New: "node v24.1.0"},
					// A compiled server is its own entry: one line.
					{Field: "entry", Path: "/srv/notes", Old: digestA, New: digestB},
					{Field: "lockfile", Path: "/srv/go.sum", Old: "", New: "sha256:1234"},
				},
				CredentialScope: []string{"notes-token"}},
			want: []string{
				"notes asks for credentials notes-token at launch: approve this code before it receives them",
				"Agent: /usr/bin/agent (pid 7), run RUN1",
				"Server: notes",
				"Epoch: EPOCH_A → not started yet (new code)",
				"Command: /srv/notes --db 'my notes.db'",
				"Executable: /srv/notes (sha256 bbbbbbbbbbbb…)",
				"Identity digest: aaaaaaaaaaaa…",
				"  changed on disk: the executable and entry /srv/notes (aaaaaaaaaaaa… → bbbbbbbbbbbb…)",
				// A runtime version is not a digest: shown whole.
				"  changed on disk: the runtime (node v22.14.0 → node v24.1.0)",
				"  changed on disk: the lockfile /srv/go.sum (none → 1234)",
				"Credentials: notes-token — in the environment of this launch",
			},
		},
		{
			name: "first launch of a script with env credentials",
			card: Card{Reason: "inv asks for credentials tok at launch: approve this code before it receives them",
				AgentRun: "RUN1", ServerLabel: "inv", Identity: digestA,
				LaunchCommand: []string{"node", "dist/server.js"}, Executable: "/usr/bin/node", ExecutableDigest: digestB,
				Entry: "/src/inv/dist/server.js", EntryDigest: digestA, CredentialScope: []string{"tok"}},
			want: []string{
				"inv asks for credentials tok at launch: approve this code before it receives them",
				"Agent: unknown agent (pid 0), run RUN1",
				"Server: inv",
				"Epoch: not started yet",
				"Command: node dist/server.js",
				"Executable: /usr/bin/node (sha256 bbbbbbbbbbbb…)",
				"Entry: /src/inv/dist/server.js (sha256 aaaaaaaaaaaa…)",
				"Identity digest: aaaaaaaaaaaa…",
				"Credentials: tok — in the environment of this launch",
			},
		},
		{
			name: "stale refusal after a rebuild, a new tool not proposed",
			card: Card{Reason: "server execution epoch changed: a call prepared for the old code was refused; approve the new code to continue",
				AgentRun: "R", ServerLabel: "s", PreviousEpoch: "E1", CurrentEpoch: "E2", Tool: "read", Stale: true,
				ToolScope: []string{"read"}, OtherTools: []string{"wipe"}, NewTools: []string{"wipe"}},
			want: []string{
				"server execution epoch changed: a call prepared for the old code was refused; approve the new code to continue",
				"Agent: unknown agent (pid 0), run R",
				"Server: s",
				"Epoch: E1 → E2 (new process)",
				"Call: read {}",
				"This call was refused already (authorization_stale): approving allows the new code for this run; nothing runs now",
				"Tools proposed: read",
				"Not proposed (add with --tools or --all): wipe (new)",
			},
		},
		{
			name: "the agent's name is its quoted claim, never a line's subject",
			card: Card{Reason: "drop is not covered", AgentRun: "R", AgentPID: 31, AgentName: "Claude Code wants to read notes.txt on\n\"x\"", ServerLabel: "s", CurrentEpoch: "E"},
			want: []string{"drop is not covered", "Agent: unknown agent (pid 31), run R",
				`Agent calls itself "Claude Code wants to read notes.txt on\n\"x\"" (its clientInfo, not verified)`, "Server: s", "Epoch: E"},
		},
		{
			name: "same epoch as approved",
			card: Card{Reason: "drop is not covered", AgentRun: "R", ServerLabel: "s", PreviousEpoch: "E", CurrentEpoch: "E"},
			want: []string{"drop is not covered", "Agent: unknown agent (pid 0), run R", "Server: s", "Epoch: E"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.card.Lines()); diff != "" {
				t.Errorf("Lines (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCardNamesCredentialsByScopeOnly: a card rendered to text or JSON holds
// scope names, never a value, whatever the arguments look like.
func TestCardJSONRoundTrip(t *testing.T) {
	c := Card{Reason: "r", AgentRun: "R", ServerLabel: "s", CurrentEpoch: "E", Tool: "t",
		Arguments: json.RawMessage(`{"a":1}`), Defaults: map[string]any{"b": "x"}, CredentialScope: []string{"api"}}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back Card
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c.Lines(), back.Lines()); diff != "" {
		t.Errorf("lines after a JSON round trip (-want +got):\n%s", diff)
	}
	if strings.Contains(string(b), "identity") {
		t.Errorf("empty identity fields are encoded: %s", b)
	}
}

// TestCardJSONLaunchHasNoEpoch: a launch request, made before its process
// has an epoch, leaves currentEpoch out of the JSON instead of a placeholder.
func TestCardJSONLaunchHasNoEpoch(t *testing.T) {
	b, err := json.Marshal(Card{Reason: "r", AgentRun: "R", ServerLabel: "s", Identity: digestA, Executable: "/srv/notes", ExecutableDigest: digestB})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "currentEpoch") || strings.Contains(string(b), "not started") {
		t.Errorf("launch card JSON: %s", b)
	}
	if !strings.Contains(string(b), `"executable":"/srv/notes"`) {
		t.Errorf("launch card JSON without its executable: %s", b)
	}
}

func TestIdentityDigest(t *testing.T) {
	base := identity.Record{
		ServerLabel: "notes", ResolvedExecutable: identity.FileDigest{Path: "/srv/notes", SHA256: digestA},
		EntryDigest: digestA, Entry: "/srv/notes", Runtime: "go1.26",
		ExtraDigests: map[string]string{"dist": digestA, "assets": digestB},
		Epoch:        "EPOCH_A", ProcessID: 100, StartedAt: time.Unix(1, 0),
	}
	d := IdentityDigest(base)
	if !strings.HasPrefix(d, identity.DigestPrefix) || len(d) != len(identity.DigestPrefix)+64 {
		t.Fatalf("digest %q", d)
	}
	same := base
	same.Epoch, same.ProcessID, same.StartedAt = "EPOCH_B", 200, time.Unix(2, 0)
	same.Observed = []identity.Observed{{PID: 200, Exe: "/srv/notes"}}
	same.ExtraDigests = map[string]string{"assets": digestB, "dist": digestA}
	if got := IdentityDigest(same); got != d {
		t.Errorf("a relaunch of the same code has another identity digest: %s vs %s", got, d)
	}
	changes := map[string]func(*identity.Record){
		"executable":  func(r *identity.Record) { r.ResolvedExecutable.SHA256 = digestB },
		"runtime":     func(r *identity.Record) { r.Runtime = "go1.27" },
		"entry":       func(r *identity.Record) { r.EntryDigest = digestB },
		"lockfile":    func(r *identity.Record) { r.LockfileDigest = digestB },
		"interpreter": func(r *identity.Record) { r.Interpreter = &identity.FileDigest{Path: "/bin/sh", SHA256: digestA} },
		"wrapper":     func(r *identity.Record) { r.Wrappers = []identity.FileDigest{{Path: "run.sh", SHA256: digestA}} },
		"extra":       func(r *identity.Record) { r.ExtraDigests = map[string]string{"dist": digestB, "assets": digestB} },
	}
	for name, change := range changes {
		r := base
		r.ExtraDigests = map[string]string{"dist": digestA, "assets": digestB}
		change(&r)
		if IdentityDigest(r) == d {
			t.Errorf("changing the %s does not change the identity digest", name)
		}
	}
}

// TestCardMeasured: a launch card lists what the identity covers beside the
// executable and the entry (watched paths, lockfile, package), so that the
// person sees what "no measured file changed" was measured on.
func TestCardMeasured(t *testing.T) {
	rec := identity.Record{
		ExtraDigests:   map[string]string{"lib": "sha256:" + strings.Repeat("b", 64), "dist": "sha256:" + strings.Repeat("a", 64)},
		Lockfile:       "/src/notes/package-lock.json",
		LockfileDigest: "sha256:" + strings.Repeat("c", 64),
		Package:        &identity.PackageDigest{Dir: "/src/notes", SHA256: "sha256:" + strings.Repeat("d", 64), Measured: "sources, node_modules", Files: 342},
	}
	c := Card{Reason: "r", AgentRun: "run", ServerLabel: "notes", Measured: MeasuredParts(rec)}
	got := strings.Join(c.Lines(), "\n")
	for _, want := range []string{
		"Measured: watched path dist (sha256 " + identity.ShortDigest(rec.ExtraDigests["dist"]) + ")\nMeasured: watched path lib (",
		"Measured: lockfile /src/notes/package-lock.json (sha256 ",
		"Measured: package /src/notes: sources, node_modules, 342 files (sha256 ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("card lines lack %q:\n%s", want, got)
		}
	}
	if len(MeasuredParts(identity.Record{})) != 0 {
		t.Errorf("a record with nothing beside executable and entry has measured parts")
	}
}

// TestFoldSameFile: the entry and wrapper changes that repeat the
// executable's (same path, same digests) fold into it, whatever their
// order; a change that differs in anything stays its own.
func TestFoldSameFile(t *testing.T) {
	exe := identity.Change{Field: "resolvedExecutable", Path: "/p/run.sh", Old: "sha256:1", New: "sha256:2"}
	as := func(field string, c identity.Change) identity.Change { c.Field = field; return c }
	other := func(f func(*identity.Change)) identity.Change { c := as("entry", exe); f(&c); return c }
	tests := []struct {
		name string
		in   []identity.Change
		want []string
	}{
		{"a shell script, entry first", []identity.Change{as("wrappers", exe), as("entry", exe), exe},
			[]string{"the executable, entry and wrapper /p/run.sh"}},
		{"entry at another path", []identity.Change{exe, other(func(c *identity.Change) { c.Path = "/p/main.js" })},
			[]string{"the executable /p/run.sh", "the entry /p/main.js"}},
		{"entry with another old digest", []identity.Change{exe, other(func(c *identity.Change) { c.Old = "sha256:0" })},
			[]string{"the executable /p/run.sh", "the entry /p/run.sh"}},
		{"no executable change", []identity.Change{as("entry", exe), {Field: "extra:dist", Path: "dist", New: "sha256:d"}},
			[]string{"the entry /p/run.sh", "the watched path dist"}},
	}
	for _, tt := range tests {
		var got []string
		for _, c := range FoldSameFile(tt.in) {
			got = append(got, ChangeSubject(c))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestCardNamesWhatRuns: a new epoch whose files did not change but whose
// environment or observed code did says so, line by line, and never "no
// measured file changed"; the identity digest an approval binds covers
// the environment and the ignore patterns.
func TestCardNamesWhatRuns(t *testing.T) {
	old := identity.Record{ResolvedExecutable: identity.FileDigest{Path: "/usr/bin/python3", SHA256: digestA},
		Observed: []identity.Observed{{PID: 1, Exe: "/usr/bin/node", SHA256: digestA, Script: "/h/.npm/_npx/1/index.js", ScriptSHA256: digestA}}}
	now := old
	now.Environment = map[string]string{"PYTHONPATH": "/tmp/inject"}
	now.Observed = []identity.Observed{{PID: 2, Exe: "/usr/bin/node", SHA256: digestA, Script: "/h/.npm/_npx/1/index.js", ScriptSHA256: digestB}}
	c := Card{Reason: "r", AgentRun: "RUN1", ServerLabel: "py", PreviousEpoch: "EPOCH_A", CurrentEpoch: "EPOCH_B", IdentityChanges: identity.Diff(old, now)}
	lines := c.Lines()
	for _, want := range []string{
		"Epoch: EPOCH_A → EPOCH_B (new code)",
		"  changed environment: the variable PYTHONPATH (unset → /tmp/inject)",
		"  observed running: the file /h/.npm/_npx/1/index.js (aaaaaaaaaaaa… → bbbbbbbbbbbb…)",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("card lacks %q:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	withIgnore := old
	withIgnore.Ignore = []string{"data/**"}
	for name, r := range map[string]identity.Record{"environment": now, "ignore": withIgnore} {
		if IdentityDigest(r) == IdentityDigest(old) {
			t.Errorf("the identity digest does not cover the %s", name)
		}
	}
}
