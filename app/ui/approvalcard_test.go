package ui

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"
	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/textsafe"
)

// rebuildCard is the card of a call held after a rebuild: new epoch, an
// entry file changed on disk, a catalog diff of three severities, a call
// with a defaulted argument, a credential, the two tools the person chose
// for the previous epoch proposed (one of them changed) and a tool the
// rebuild added, offered unticked.
func rebuildCard() authz.Card {
	return authz.Card{
		Reason:        "server execution epoch changed: new code asks for the authority you gave the old code",
		AgentRun:      "01JQ7R00000000000000RUN001",
		AgentExe:      "/usr/local/bin/claude",
		AgentName:     "claude-code",
		AgentPID:      4242,
		ServerLabel:   "inventory-local",
		PreviousEpoch: epochA,
		CurrentEpoch:  epochB,
		IdentityChanges: []identity.Change{
			{Field: "entry", Path: "/home/dev/inventory/dist/server.js", Old: identity.DigestPrefix + "1111111111111111aaaa", New: identity.DigestPrefix + "2222222222222222bbbb"},
			{Field: "runtime", Old: "node v22.14.0", New: "node v22.15.0"},
		},
		ApprovedRevision: 12,
		CatalogRevision:  13,
		CatalogChanges: []catalog.Change{
			{Tool: "inventory_adjust", Kind: catalog.KindDescriptionChanged, Severity: catalog.Cosmetic, Summary: "inventory_adjust: description changed"},
			{Tool: "inventory_adjust", Kind: catalog.KindEnumValueAdded, Severity: catalog.Authority, Summary: `inventory_adjust: argument "env" now also accepts "production"`},
			{Tool: "inventory_adjust", Kind: catalog.KindRequiredAdded, Severity: catalog.Contract, Summary: `inventory_adjust: argument "reason" is now required`},
			{Tool: "inventory_purge", Kind: catalog.KindToolAdded, Severity: catalog.Authority, Summary: "inventory_purge: new tool (declared no annotations; MCP defaults: may be destructive, open world)"},
		},
		Tool:            "inventory_adjust",
		Arguments:       json.RawMessage(`{"sku":"A-100","delta":-3}`),
		Defaults:        map[string]any{"env": "staging", "dryRun": false},
		ToolScope:       []string{"inventory_adjust", "inventory_lookup"},
		OtherTools:      []string{"inventory_purge"},
		NewTools:        []string{"inventory_purge"},
		ChangedTools:    []string{"inventory_adjust"},
		CredentialScope: []string{"inventory-api-staging"},
	}
}

// launchCard is the card of a first launch with an env credential: no epoch
// yet, and the code to approve named by command, executable and entry.
func launchCard() authz.Card {
	return authz.Card{
		Reason:   "inventory-local asks for credentials inventory-api-staging at launch: approve this code before it receives them",
		AgentRun: "01JQ7R00000000000000RUN001", AgentExe: "/usr/local/bin/claude", AgentPID: 4242,
		ServerLabel: "inventory-local", Identity: identity.DigestPrefix + "abcdefabcdefabcdef",
		LaunchCommand: []string{"node", "dist/server.js"},
		Executable:    "/usr/bin/node", ExecutableDigest: identity.DigestPrefix + "0123456789abcdef",
		Entry: "/home/dev/inventory/dist/server.js", EntryDigest: identity.DigestPrefix + "fedcba9876543210",
		CredentialScope: []string{"inventory-api-staging"},
	}
}

// TestApprovalLaunchCardMarkup renders the card of a first launch with
// credentials and compares it with the golden markup in testdata.
func TestApprovalLaunchCardMarkup(t *testing.T) {
	w, _ := newTestWindow(t, request("apr_1", 0, launchCard()))
	test.AssertRendersToMarkup(t, "approval_launch.xml", w.win.Canvas())
}

func TestCardModel(t *testing.T) {
	tests := []struct {
		name string
		card authz.Card
		want cardView
	}{
		{
			name: "rebuild with catalog changes",
			card: rebuildCard(),
			want: cardView{
				Sentence: "An agent (pid 4242) calling itself “claude-code” wants to run `inventory_adjust` on inventory-local — new code since you last approved",
				Args: []cardArg{{Name: "delta", Value: "-3"}, {Name: "sku", Value: `"A-100"`},
					{Name: "dryRun", Value: "false", Default: true}, {Name: "env", Value: `"staging"`, Default: true}},
				Tools: []toolTick{{Name: "inventory_adjust", Label: "inventory_adjust", Ticked: true, Locked: true, Mark: "changed"},
					{Name: "inventory_lookup", Label: "inventory_lookup", Ticked: true}, {Name: "inventory_purge", Label: "inventory_purge", Mark: "new"}},
				Credentials: "Credentials: inventory-api-staging — in this call's params._meta",
				Disk: []diskChange{
					{"entry file /home/dev/inventory/dist/server.js", "111111111111… → 222222222222…", "ON DISK    "},
					{"runtime", "node v22.14.0 → node v22.15.0", "ON DISK    "},
				},
				CatalogHeading: "Tools changed (catalog revision 12 → 13)",
				Changes: []cardChange{ // most severe first
					{catalog.Authority, `inventory_adjust: argument "env" now also accepts "production"`},
					{catalog.Authority, "inventory_purge: new tool (declared no annotations; MCP defaults: may be destructive, open world)"},
					{catalog.Contract, `inventory_adjust: argument "reason" is now required`},
					{catalog.Cosmetic, "inventory_adjust: description changed"},
				},
				Legend: []legendEntry{
					{catalog.Authority, "the tools may now do or reach more"},
					{catalog.Contract, "what a call must send or gets back changed"},
					{catalog.Cosmetic, "wording or looks only"},
				},
				Details: []cardFact{
					{"Agent", "calls itself “claude-code” (its clientInfo, not verified)\n/usr/local/bin/claude, pid 4242"},
					{"Agent run", "00RUN001"},
					{"Server", "inventory-local"},
					{"Epoch", "S2AAAAAA → S2BBBBBB (new code)"},
					{"Catalog", "revision 12 → 13"},
					{"Recorded reason", "server execution epoch changed: new code asks for the authority you gave the old code"},
				},
			},
		},
		{
			name: "first use: same epoch, no arguments, unknown agent",
			card: authz.Card{Reason: "first use of echo in this agent run", AgentRun: "run1", ServerLabel: "echo",
				CurrentEpoch: epochA, CatalogRevision: 1, Tool: "echo", ToolScope: []string{"echo"}},
			want: cardView{
				Sentence: "An agent wants to run `echo` on echo — first use in this agent run",
				NoArgs:   true,
				Tools:    []toolTick{{Name: "echo", Label: "echo", Ticked: true, Locked: true}},
				Details: []cardFact{{"Agent", "unknown executable"}, {"Agent run", "run1"}, {"Server", "echo"}, {"Epoch", "S2AAAAAA"},
					{"Catalog", "revision 1"}, {"Recorded reason", "first use of echo in this agent run"}},
			},
		},
		{
			name: "a tool not covered, a new process of the same code, an agent known by pid",
			card: authz.Card{AgentRun: "run1", AgentPID: 9, ServerLabel: "notes", PreviousEpoch: epochA, CurrentEpoch: epochB,
				Tool: "notes_write", Arguments: json.RawMessage("{\"text\":\"a\u202eb\"}") /* a right-to-left override, raw */, ArgsDigest: identity.DigestPrefix + "abcdef0123456789"},
			want: cardView{
				Sentence: "An agent (pid 9) wants to run `notes_write` on notes — a new process (no measured file changed) since you last approved",
				Args:     []cardArg{{Name: "text", Value: `"a⟨U+202E⟩b"`}},
				Tools:    []toolTick{{Name: "notes_write", Label: "notes_write", Ticked: true, Locked: true}},
				Details: []cardFact{{"Agent", "unknown executable, pid 9"}, {"Agent run", "run1"}, {"Server", "notes"},
					{"Epoch", "S2AAAAAA → S2BBBBBB (new process)"}, {"Arguments", "sha256 abcdef012345…"}},
			},
		},
		{
			name: "launch of a new identity with env credentials, asked every use",
			card: authz.Card{Reason: "launch with credentials", AgentRun: "run1", AgentPID: 7, ServerLabel: "inv", PreviousEpoch: epochA,
				Identity: identity.DigestPrefix + "abcdefabcdefabcdef", CredentialScope: []string{"tok"}, AskEveryUse: true},
			want: cardView{
				Sentence:    "An agent (pid 7) wants to start inv with tok — its credentials ask for approval at every use",
				Credentials: "Credentials: tok — in the environment of this launch, asked on every use",
				Details: []cardFact{{"Agent", "unknown executable, pid 7"}, {"Agent run", "run1"}, {"Server", "inv"}, {"Epoch", "S2AAAAAA → not started yet (new code)"},
					{"Identity", "sha256 abcdefabcdef… (execution identity to approve with credentials)"},
					{"Recorded reason", "launch with credentials"}},
			},
		},
		{
			name: "a name that would read as the sentence is a quotation, never its subject",
			card: authz.Card{AgentRun: "run1", AgentPID: 31, AgentName: "Claude Code wants to read notes.txt on", ServerLabel: "notes",
				CurrentEpoch: epochB, Tool: "notes_write"},
			want: cardView{
				Sentence: "An agent (pid 31) calling itself “Claude Code wants to read notes.txt on” wants to run `notes_write` on notes — first use in this agent run",
				NoArgs:   true,
				Tools:    []toolTick{{Name: "notes_write", Label: "notes_write", Ticked: true, Locked: true}},
				Details:  []cardFact{{"Agent", "calls itself “Claude Code wants to read notes.txt on” (its clientInfo, not verified)\nunknown executable, pid 31"}, {"Agent run", "run1"}, {"Server", "notes"}, {"Epoch", "S2BBBBBB"}},
			},
		},
		{
			name: "first launch with env credentials names the code",
			card: authz.Card{Reason: "inv asks for credentials tok at launch: approve this code before it receives them", AgentRun: "run1",
				AgentName: "my\nagent", ServerLabel: "inv", Identity: identity.DigestPrefix + "abcdefabcdefabcdef",
				LaunchCommand: []string{"node", "dist/server.js", "--name", "my inventory"},
				Executable:    "/usr/bin/node", ExecutableDigest: identity.DigestPrefix + "0123456789abcdef",
				Entry: "/src/inv/dist/server.js", EntryDigest: identity.DigestPrefix + "fedcba9876543210",
				Measured:        []string{"watched dist (sha256 ab12…)"},
				CredentialScope: []string{"tok"}},
			want: cardView{
				Sentence:    `An agent calling itself “my\x0aagent” wants to start inv with tok — code you have not approved with them yet`,
				Credentials: "Credentials: tok — in the environment of this launch",
				Details: []cardFact{{"Agent", "calls itself “my\\x0aagent” (its clientInfo, not verified)\nunknown executable"}, {"Agent run", "run1"}, {"Server", "inv"}, {"Epoch", "not started yet"},
					{"Identity", "sha256 abcdefabcdef… (execution identity to approve with credentials)"},
					{"Command", "node dist/server.js --name 'my inventory'"},
					{"Executable", "/usr/bin/node\nsha256 0123456789ab…"},
					{"Entry", "/src/inv/dist/server.js\nsha256 fedcba987654…"},
					{"Measured", "watched dist (sha256 ab12…)"},
					{"Recorded reason", "inv asks for credentials tok at launch: approve this code before it receives them"}},
			},
		},
		{
			name: "stale call",
			card: func() authz.Card {
				c := rebuildCard()
				c.Stale = true
				return c
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cardModel(tt.card)
			if tt.name == "stale call" {
				if want := "An agent (pid 4242) calling itself “claude-code” wants to run `inventory_adjust` on inventory-local — new code since you last approved; its call was refused"; got.Sentence != want || !got.Stale || got.StaleNote == "" {
					t.Errorf("stale card: sentence %q (want %q), stale %v, note %q", got.Sentence, want, got.Stale, got.StaleNote)
				}
				return
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("cardModel (-want +got):\n%s", d)
			}
		})
	}
}

// TestCardModelRewrittenTool: a card raised because the server rewrote a
// granted tool within the epoch says so in its sentence.
func TestCardModelRewrittenTool(t *testing.T) {
	c := authz.Card{Reason: "write changed since you approved it", AgentRun: "run1", ServerLabel: "notes",
		PreviousEpoch: epochA, CurrentEpoch: epochA, Tool: "write", ToolScope: []string{"write"}, Rewritten: true}
	if got, want := cardModel(c).Sentence, "An agent wants to run `write` on notes — the server rewrote the tool since you approved it"; got != want {
		t.Errorf("sentence %q, want %q", got, want)
	}
}

func TestDiskLine(t *testing.T) {
	tests := []struct {
		ch   identity.Change
		want diskChange
	}{
		{identity.Change{Field: "resolvedExecutable", Path: "/usr/bin/node", Old: identity.DigestPrefix + "0123456789abcdef", New: identity.DigestPrefix + "fedcba9876543210"}, diskChange{"executable /usr/bin/node", "0123456789ab… → fedcba987654…", "ON DISK    "}},
		{identity.Change{Field: "lockfile", Path: "/p/package-lock.json", Old: "", New: identity.DigestPrefix + "fedcba9876543210"}, diskChange{"lockfile /p/package-lock.json", "none → fedcba987654…", "ON DISK    "}},
		{identity.Change{Field: "extra:/p/node_modules", Path: "/p/node_modules", Old: identity.DigestPrefix + "aa", New: identity.DigestPrefix + "bb"}, diskChange{"watched path /p/node_modules", "aa → bb", "ON DISK    "}},
		{identity.Change{Field: "wrappers", Path: "/p/run.sh", Old: "/old/run.sh", New: "/p/run.sh"}, diskChange{"wrapper /p/run.sh", "/old/run.sh → /p/run.sh", "ON DISK    "}},
		{identity.Change{Field: "environment", Path: "PYTHONPATH", New: "/tmp/x"}, diskChange{"variable PYTHONPATH", "unset → /tmp/x", "ENVIRONMENT"}},
		{identity.Change{Field: "observed", Path: "/h/.npm/_npx/1/index.js", Old: identity.DigestPrefix + "aa", New: identity.DigestPrefix + "bb"}, diskChange{"file /h/.npm/_npx/1/index.js", "aa → bb", "OBSERVED   "}},
	}
	for _, tt := range tests {
		if got := diskLine(authz.FileChange{Change: tt.ch}); got != tt.want {
			t.Errorf("diskLine(%+v) = %q, want %q", tt.ch, got, tt.want)
		}
	}
}

func TestCountdownText(t *testing.T) {
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		left time.Duration
		want string
	}{
		{120 * time.Second, "Denied in 2:00 · Esc denies"},
		{61*time.Second + 200*time.Millisecond, "Denied in 1:02 · Esc denies"},
		{500 * time.Millisecond, "Denied in 0:01 · Esc denies"},
		{0, "Time is up: denying"},
		{-time.Second, "Time is up: denying"},
	}
	for _, tt := range tests {
		if got := countdownText(now, now.Add(tt.left)); got != tt.want {
			t.Errorf("countdownText(%s left) = %q, want %q", tt.left, got, tt.want)
		}
	}
}

func TestQueueText(t *testing.T) {
	for _, tt := range []struct {
		i, n int
		want string
	}{{0, 0, ""}, {0, 1, ""}, {0, 3, "1 of 3"}, {2, 3, "3 of 3"}} {
		if got := queueText(tt.i, tt.n); got != tt.want {
			t.Errorf("queueText(%d, %d) = %q, want %q", tt.i, tt.n, got, tt.want)
		}
	}
}

// TestCardModelSpoofedText: what a server wrote (a tool name that moves the
// cursor, OSC 52, a bidi override, a zero-width joiner, a Cyrillic
// homoglyph) reaches the window's card escaped; the homoglyph is flagged;
// the tick boxes still decide for the tools' real names.
func TestCardModelSpoofedText(t *testing.T) {
	spoof := "drop_all_tables\x1b[15D\x1b[Kread_file"
	homoglyph := "read_fil\u0435"
	c := authz.Card{
		Reason: "first use of " + spoof + " in this agent run", AgentRun: "run1", ServerLabel: "spoof",
		CurrentEpoch: "E1", Tool: spoof, Arguments: json.RawMessage(`{"p\u001b]52;c;cm0gLXJmIH4=\u0007":"x\u202ey"}`),
		CatalogRevision: 2, ApprovedRevision: 1,
		CatalogChanges: []catalog.Change{{Severity: catalog.Contract, Summary: "new tool \"x\" \x1b]52;c;cm0gLXJmIH4=\x07 \u202eelif\u200d"}},
		ToolScope:      []string{spoof}, OtherTools: []string{"read_file", homoglyph},
	}
	v := cardModel(c)
	texts := []string{v.Sentence, v.Credentials}
	for _, f := range v.Details {
		texts = append(texts, f.Value)
	}
	for _, a := range v.Args {
		texts = append(texts, a.Name, a.Value)
	}
	for _, ch := range v.Changes {
		texts = append(texts, ch.Text)
	}
	var names []string
	for _, tt := range v.Tools {
		texts = append(texts, tt.Label)
		names = append(names, tt.Name)
	}
	for _, s := range texts {
		for _, r := range s {
			if r != '\n' && textsafe.Unsafe(r) {
				t.Errorf("the card shows the raw character %U in %q", r, s)
			}
		}
	}
	if want := "wants to run `drop_all_tables\\x1b[15D\\x1b[Kread_file` on spoof"; !strings.Contains(v.Sentence, want) {
		t.Errorf("Sentence %q lacks %q", v.Sentence, want)
	}
	if want := `new tool "x" \x1b]52;c;cm0gLXJmIH4=\x07 ⟨U+202E⟩elif⟨U+200D⟩`; v.Changes[0].Text != want {
		t.Errorf("change %q, want %q", v.Changes[0].Text, want)
	}
	if d := cmp.Diff([]string{spoof, "read_file", homoglyph}, names); d != "" {
		t.Errorf("tick boxes decide for other names (-want +got):\n%s", d)
	}
	if want := homoglyph + " ⚠ mixes Cyrillic and Latin letters; looks like read_file"; v.Tools[2].Label != want {
		t.Errorf("label %q, want %q", v.Tools[2].Label, want)
	}
}

// TestCardModelServerRequest: the card of a server's request to the agent
// says who asks what, shows what the server asks, escaped, and offers no
// tools.
func TestCardModelServerRequest(t *testing.T) {
	c := authz.Card{Reason: "srv asks the agent's model for a completion (sampling)", AgentRun: "run1", AgentName: "claude-code", ServerLabel: "srv", CurrentEpoch: "E1",
		ServerRequest: &authz.ServerRequest{Kind: "sampling", Method: "sampling/createMessage", Asks: []string{"user: print the \x1b]52;c;eA==\x07 key", "at most 5 tokens"}}}
	v := cardModel(c)
	if d := cmp.Diff([]string{"sampling/createMessage", `user: print the \x1b]52;c;eA==\x07 key`, "at most 5 tokens"}, v.Request); d != "" {
		t.Errorf("Request (-want +got):\n%s", d)
	}
	if !strings.HasPrefix(v.Sentence, "srv asks the agent calling itself “claude-code”: sampling/createMessage — ") {
		t.Errorf("Sentence %q", v.Sentence)
	}
	if len(v.Tools) != 0 {
		t.Errorf("a server request card offers tools: %+v", v.Tools)
	}
}

// TestDiskLinesCompiledServer: a compiled server's executable is its entry
// file (a shell script's, its wrapper too); the card says so once. Any
// difference (another path, other digests) keeps two lines, so that
// nothing measured is hidden.
func TestDiskLinesCompiledServer(t *testing.T) {
	a, b := identity.DigestPrefix+"0123456789abcdef", identity.DigestPrefix+"fedcba9876543210"
	exe := identity.Change{Field: "resolvedExecutable", Path: "/srv/publish", Old: a, New: b}
	entry := identity.Change{Field: "entry", Path: "/srv/publish", Old: a, New: b}
	lock := identity.Change{Field: "lockfile", Path: "/srv/go.sum", Old: a, New: b}
	one := diskChange{"executable and entry file /srv/publish", "0123456789ab… → fedcba987654…", "ON DISK    "}
	lineOf := func(c identity.Change) diskChange { return diskLine(authz.FileChange{Change: c}) }
	wrapper := identity.Change{Field: "wrappers", Path: "/srv/publish", Old: a, New: b}
	tests := []struct {
		name string
		in   []identity.Change
		want []diskChange
	}{
		{"same file, same digests", []identity.Change{exe, entry, lock}, []diskChange{one, lineOf(lock)}},
		{"entry listed first", []identity.Change{entry, exe}, []diskChange{one}},
		{"other path", []identity.Change{exe, {Field: "entry", Path: "/srv/main.js", Old: a, New: b}}, []diskChange{lineOf(exe), {"entry file /srv/main.js", "0123456789ab… → fedcba987654…", "ON DISK    "}}},
		{"other digests", []identity.Change{exe, {Field: "entry", Path: "/srv/publish", Old: b, New: a}}, []diskChange{lineOf(exe), {"entry file /srv/publish", "fedcba987654… → 0123456789ab…", "ON DISK    "}}},
		{"executable only", []identity.Change{exe}, []diskChange{lineOf(exe)}},
		{"a shell script: executable, entry and wrapper", []identity.Change{exe, entry, wrapper, lock},
			[]diskChange{{"executable, entry file and wrapper /srv/publish", "0123456789ab… → fedcba987654…", "ON DISK    "}, lineOf(lock)}},
		{"a wrapper of its own", []identity.Change{exe, {Field: "wrappers", Path: "/usr/bin/env", Old: a, New: b}},
			[]diskChange{lineOf(exe), {"wrapper /usr/bin/env", "0123456789ab… → fedcba987654…", "ON DISK    "}}},
	}
	for _, tt := range tests {
		if d := cmp.Diff(tt.want, diskLines(tt.in)); d != "" {
			t.Errorf("%s: diskLines (-want +got):\n%s", tt.name, d)
		}
	}
}

// TestCardAfterStandingApproval: after approve --code and a rebuild, a new
// run's card says the code changed since that approval, not "first use"
// (the run itself approved nothing before).
func TestCardAfterStandingApproval(t *testing.T) {
	c := authz.Card{Reason: "the code of inv changed since you approved it for every run of /usr/bin/claude (request apr_1, 2026-12-06 12:00)",
		AgentRun: "run2", AgentExe: "/usr/bin/claude", ServerLabel: "inv", CurrentEpoch: epochB, Code: "sha256:c2",
		CatalogRevision: 1, Tool: "lookup", ToolScope: []string{"lookup"}, StandingEnded: "apr_1"}
	s := cardModel(c).Sentence
	if want := "An agent wants to run `lookup` on inv — new code since you approved its code for every run of claude"; s != want {
		t.Errorf("sentence %q, want %q", s, want)
	}
}
