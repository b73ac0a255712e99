package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/internal/harness"
	"github.com/portcullis/portcullis/platform"
)

// TestRebuildVoidsGrants is the rebuild story with a real go-sdk agent in
// both protocol eras: the creds server's revision A runs; the person
// approves note_write for the run (`portcullis approve` after polling
// `portcullis approvals --json`) and the call reaches A with the meta
// credential. The developer rebuilds B with `go build`; the agent's call,
// prepared before it refreshed, is refused as authorization_stale naming
// both epochs (code −31020), and the approval request for B is raised at
// the same moment, its card showing the old and new epoch, the changed
// digest and the catalog diff. After tools/list and approval the call
// reaches B. The server saw the credential only in approved calls, and the
// audit log tells the story in order.
func TestRebuildVoidsGrants(t *testing.T) {
	needSecretService(t)
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			secret := newSecret(t)
			scope := "notes-api"
			s := newCredsSetup(t, []credsScope{{scope: scope, secret: secret}}, nil, false)
			a := connectListChanged(t, s.home, credsLabel, era.version)
			ctx := testContext(t, 3*time.Minute)
			if _, err := a.Session.ListTools(ctx, nil); err != nil {
				t.Fatal(err)
			}
			epochA := epochOf(t, s.home, a.PID(), "")

			// An allow tool needs no approval and gets no credential.
			if got := callText(t, a.Session, noteRead, map[string]any{}); got != "revision=A holds 0 notes" {
				t.Errorf("note_read: %q", got)
			}
			// The write waits for a person.
			pending := asyncCall(t, a.Session, noteWrite, map[string]any{"text": "first"})
			req := waitApproval(t, s.home, "note_write on A", forTool(noteWrite, epochA))
			if !slices.Equal(req.Card.CredentialScope, []string{scope}) || !slices.Contains(req.Card.ToolScope, noteWrite) || slices.Contains(req.Card.ToolScope, noteRead) {
				t.Errorf("card of A: tools %v credentials %v", req.Card.ToolScope, req.Card.CredentialScope)
			}
			if calls := readCredsCalls(t, s.callLog); len(calls) != 1 {
				t.Fatalf("before approval the server received %+v, want only note_read", calls)
			}
			if out := decideCLI(t, s.home, "approve", string(req.ID)); !strings.Contains(out, "Approved "+string(req.ID)) {
				t.Errorf("approve printed %q", out)
			}
			if got := okText(t, await(t, pending)); got != wroteWith("A", 1, secret) {
				t.Errorf("note_write on A: %q, want %q", got, wroteWith("A", 1, secret))
			}

			// Rebuild B over the same path.
			buildCreds(t, s.binDir, credsRevB)
			epochB := epochOf(t, s.home, a.PID(), epochA)

			// The call the agent prepared before refreshing is refused.
			_, err := a.Session.CallTool(ctx, callParamsOf(noteWrite, map[string]any{"text": "stale"}))
			code, ref := refusalOf(t, err)
			if code != -31020 || ref.Error != control.AuthorizationStale || string(ref.ApprovedEpoch) != epochA || string(ref.CurrentEpoch) != epochB ||
				ref.Request == "" || !strings.Contains(ref.Retry, "approval request "+string(ref.Request)+"); call "+noteWrite+" again once they approve") {
				t.Errorf("stale call: code %d, refusal %+v; want authorization_stale %s → %s", code, ref, epochA, epochB)
			}
			// … and the request for B was raised with it.
			reqB := waitApproval(t, s.home, "note_write on B", forTool(noteWrite, epochB))
			if reqB.ID != ref.Request {
				t.Errorf("the refusal names request %s, the request raised is %s", ref.Request, reqB.ID)
			}
			c := reqB.Card
			if string(c.PreviousEpoch) != epochA || len(c.IdentityChanges) == 0 || c.CatalogRevision == c.ApprovedRevision {
				t.Errorf("card of B: previous %s, identity changes %+v, catalog %d → %d", c.PreviousEpoch, c.IdentityChanges, c.ApprovedRevision, c.CatalogRevision)
			}
			lines := strings.Join(c.Lines(), "\n")
			for _, want := range []string{"Epoch: " + epochA + " → " + epochB + " (new code)", "changed on disk:", "Catalog: revision", "tag"} {
				if !strings.Contains(lines, want) {
					t.Errorf("card of B lacks %q:\n%s", want, lines)
				}
			}

			// Refetch, approve, call again.
			if _, err := a.Session.ListTools(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if !reqB.Card.Stale {
				t.Errorf("the card raised with the stale refusal is not marked stale: %+v", reqB.Card)
			}
			pending = asyncCall(t, a.Session, noteWrite, map[string]any{"text": "second", "tag": "b"})
			// The retry has other arguments than the refused call the
			// stale card showed: it waits for a card of its own, which
			// allowing the new code on the stale card does not decide.
			retry := waitApproval(t, s.home, "the retry on B", func(c authz.Card) bool {
				return forTool(noteWrite, epochB)(c) && strings.Contains(string(c.Arguments), "second")
			})
			if retry.ID == reqB.ID || retry.Card.Stale {
				t.Fatalf("the retry's card %+v: want its own, not stale", retry)
			}
			if r, err := s.home.RunAtTerminal(testContext(t, 30*time.Second), "approve", string(reqB.ID), "--once"); err == nil || !strings.Contains(r.Stderr, "refused already") {
				t.Errorf("approve --once of the stale card: %v, stderr %q; want it refused", err, r.Stderr)
			}
			decideCLI(t, s.home, "approve", string(reqB.ID))
			if !slices.ContainsFunc(approvals(t, s.home), func(r authz.Request) bool { return r.ID == retry.ID }) {
				t.Fatal("the retry's own card went away when the stale card was approved")
			}
			decideCLI(t, s.home, "approve", string(retry.ID))
			if got := okText(t, await(t, pending)); got != wroteWith("B", 1, secret) {
				t.Errorf("note_write on B: %q, want %q", got, wroteWith("B", 1, secret))
			}

			// The server received the credential only in approved calls.
			want := []credsCall{
				{Tool: noteRead, Revision: "A"},
				{Tool: noteWrite, Revision: "A", Meta: digest(secret)},
				{Tool: noteWrite, Revision: "B", Meta: digest(secret)},
			}
			got := readCredsCalls(t, s.callLog)
			for i := range got {
				got[i].PID = 0
			}
			if !slices.Equal(want, got) {
				t.Errorf("calls the server received:\n got %+v\nwant %+v", got, want)
			}

			run := waitRun(t, s.home, a.PID(), time.Second, "known", func(gateway.Status) bool { return true }).Run
			evs := auditEvents(t, s.home)
			is := func(k, v string) func(map[string]any) bool { return func(f map[string]any) bool { return f[k] == v } }
			found := auditFindInOrder(t, evs, []auditStep{
				{"epoch A started", audit.TypeServerStarted, is("epoch", epochA)},
				{"A approved", audit.TypeApprovalGranted, func(f map[string]any) bool {
					return f["epoch"] == epochA && f["agentRun"] == string(run) && f["expiresWhen"] == authz.ExpiresRunEnds && f["request"] == string(req.ID)
				}},
				{"write on A", audit.TypeToolCalled, func(f map[string]any) bool {
					return f["epoch"] == epochA && f["tool"] == noteWrite && f["decision"] == "grant"
				}},
				{"A replaced by B", audit.TypeServerReplaced, func(f map[string]any) bool { return f["oldEpoch"] == epochA && f["newEpoch"] == epochB }},
				{"stale call refused", audit.TypeCallRefused, func(f map[string]any) bool {
					return f["kind"] == "authorization_stale" && f["approvedEpoch"] == epochA && f["currentEpoch"] == epochB && f["request"] == string(reqB.ID)
				}},
				{"B approved", audit.TypeApprovalGranted, func(f map[string]any) bool { return f["epoch"] == epochB && f["request"] == string(reqB.ID) }},
				{"write on B", audit.TypeToolCalled, func(f map[string]any) bool {
					return f["epoch"] == epochB && f["tool"] == noteWrite && f["decision"] == "grant"
				}},
			})
			// The stale card is marked as such in the audit log: it was
			// raised with the gateway's authorization_stale refusal, not
			// answered by a person's denial.
			staleMarked := false
			for _, e := range evs {
				if f := auditFields(t, e); e.Type == audit.TypeApprovalRequested && f["request"] == string(reqB.ID) {
					staleMarked = f["stale"] == true
				}
			}
			if !staleMarked {
				t.Errorf("approval_requested of %s is not marked stale", reqB.ID)
			}
			if g := auditFields(t, found[6])["grant"]; g == auditFields(t, found[2])["grant"] {
				t.Errorf("the call on B used A's grant %v", g)
			}
			for _, e := range evs {
				if strings.Contains(string(e.Fields), secret) {
					t.Errorf("audit event %d (%s) holds the secret", e.Seq, e.Type)
				}
			}
		})
	}
}

// TestApprovalChoices: deny gives approval_denied (audit approval_denied
// "denied"); no answer within settings.approvalTimeout gives
// approval_timeout (audit "timeout"); approve --once covers one call, the
// next needs a new decision; a credential with --ask-every-use asks on every
// call: any approval of its card is for that call only.
func TestApprovalChoices(t *testing.T) {
	needSecretService(t)
	secret := newSecret(t)
	s := newCredsSetup(t, []credsScope{{scope: "notes-api", secret: secret}}, approvalTimeout(6*time.Second), false) // room for a loaded machine to decide in time
	a := connectListChanged(t, s.home, credsLabel, "")
	ctx := testContext(t, 3*time.Minute)
	if _, err := a.Session.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	epoch := epochOf(t, s.home, a.PID(), "")
	write := func(text string) <-chan asyncResult {
		return asyncCall(t, a.Session, noteWrite, map[string]any{"text": text})
	}

	// Deny.
	pending := write("denied")
	req := waitApproval(t, s.home, "the first call", forTool(noteWrite, epoch))
	decideCLI(t, s.home, "deny", string(req.ID))
	code, ref := refusalOf(t, await(t, pending).err)
	if code != -31021 || ref.Error != control.ApprovalDenied || !strings.Contains(ref.Reason, string(req.ID)) {
		t.Errorf("denied call: %d %+v", code, ref)
	}

	// Nobody answers.
	start := time.Now()
	code, ref = refusalOf(t, await(t, write("ignored")).err)
	if code != -31022 || ref.Error != control.ApprovalTimeout || !strings.Contains(ref.Reason, "6s") {
		t.Errorf("unanswered call: %d %+v", code, ref)
	}
	if took := time.Since(start); took < 6*time.Second || took > 30*time.Second {
		t.Errorf("approval_timeout after %s, want about 6s", took)
	}

	// Approve once, twice.
	var onceIDs []string
	for i, text := range []string{"once-1", "once-2"} {
		pending := write(text)
		req := waitApproval(t, s.home, "a call approved once", forTool(noteWrite, epoch))
		if slices.Contains(onceIDs, string(req.ID)) {
			t.Fatalf("call %d shares the spent request %s", i+1, req.ID)
		}
		onceIDs = append(onceIDs, string(req.ID))
		if out := decideCLI(t, s.home, "approve", string(req.ID), "--once"); !strings.Contains(out, "for the call shown") {
			t.Errorf("approve --once printed %q", out)
		}
		if got := okText(t, await(t, pending)); got != wroteWith("A", i+1, secret) {
			t.Errorf("call approved once: %q", got)
		}
	}

	// Ask every use: turn it on (a new agent run reads the configuration).
	setCred(t, s.home, credsScope{scope: "notes-api", secret: secret, askEveryUse: true})
	b := connectListChanged(t, s.home, credsLabel, "")
	if _, err := b.Session.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	epochB := epochOf(t, s.home, b.PID(), "")
	var everyIDs []string
	for i := range 2 {
		pending := asyncCall(t, b.Session, noteWrite, map[string]any{"text": "every"})
		req := waitApproval(t, s.home, "an ask-every-use call", forTool(noteWrite, epochB))
		if !req.Card.AskEveryUse || slices.Contains(everyIDs, string(req.ID)) {
			t.Errorf("call %d: card %+v (seen %v)", i+1, req.Card, everyIDs)
		}
		everyIDs = append(everyIDs, string(req.ID))
		decideCLI(t, s.home, "approve", string(req.ID)) // never for the run: this call only
		if got := okText(t, await(t, pending)); got != wroteWith("A", i+1, secret) {
			t.Errorf("ask-every-use call %d: %q", i+1, got)
		}
	}

	// The audit log has the decisions.
	var kinds []string
	for _, e := range auditEvents(t, s.home) {
		f := auditFields(t, e)
		switch e.Type {
		case audit.TypeApprovalDenied:
			kinds = append(kinds, "denied:"+f["reason"].(string)+" by "+f["by"].(string))
		case audit.TypeApprovalGranted:
			kinds = append(kinds, "granted:"+f["expiresWhen"].(string))
		}
	}
	want := []string{"denied:denied by cli", "denied:timeout by timeout", "granted:once", "granted:once", "granted:once", "granted:once"}
	if !slices.Equal(kinds, want) {
		t.Errorf("approval decisions in the audit log: %v, want %v", kinds, want)
	}
	if n := len(readCredsCalls(t, s.callLog)); n != 4 {
		t.Errorf("the server received %d calls, want the 4 approved ones", n)
	}
}

// TestEnvCredentialsWaitForIdentityApproval: a server with an env credential
// is launched only after the person approved its execution identity; a
// rebuild (a new identity) waits again and the card lists the changed
// digest; the server got the secret only in approved identities. With the
// secret removed from the keychain, a relaunch fails with a
// credential_unavailable message and nothing is launched; a daemon without
// a session bus (no keychain) refuses the launch the same way.
func TestEnvCredentialsWaitForIdentityApproval(t *testing.T) {
	needSecretService(t)
	secret := newSecret(t)
	scope := "notes-token"
	s := newCredsSetup(t, []credsScope{{scope: scope, envVar: "NOTES_TOKEN", secret: secret}}, nil, false)

	connected := make(chan *listChangedAgent, 1)
	go func() { connected <- connectListChanged(t, s.home, credsLabel, "2025-06-18") }()
	req := waitApproval(t, s.home, "the first launch", forIdentity)
	if req.Card.CurrentEpoch != "" || !slices.Equal(req.Card.CredentialScope, []string{scope}) || len(req.Card.ToolScope) != 0 {
		t.Errorf("identity card %+v", req.Card)
	}
	if req.Card.Executable == "" || req.Card.ExecutableDigest == "" || len(req.Card.LaunchCommand) == 0 {
		t.Errorf("identity card without the code it approves: %+v", req.Card)
	}
	if req.Card.AgentName != "portcullis-e2e-refresh" {
		t.Errorf("identity card names the agent %q, want its clientInfo name", req.Card.AgentName)
	}
	if lines := strings.Join(req.Card.Lines(), "\n"); !strings.Contains(lines, "Epoch: not started yet") || !strings.Contains(lines, "Executable: "+req.Card.Executable) {
		t.Errorf("identity card text:\n%s", lines)
	}
	if rep, err := s.home.Status(testContext(t, 30*time.Second)); err != nil || len(rep.Runs) != 1 || rep.Runs[0].PID != 0 {
		t.Errorf("before approval: runs %+v (%v), want one run with no process", rep.Runs, err)
	}
	a := approveLaunch(t, s.home, string(req.ID), connected, "identity approval")
	epochA := epochOf(t, s.home, a.PID(), "")

	pending := asyncCall(t, a.Session, noteWrite, map[string]any{"text": "env"})
	decideCLI(t, s.home, "approve", string(waitApproval(t, s.home, "note_write", forTool(noteWrite, epochA)).ID))
	if got := okText(t, await(t, pending)); got != wroteWith("A", 1, secret) {
		t.Errorf("note_write with the env credential: %q", got)
	}

	// Rebuild: a new identity waits for approval before launch.
	buildCreds(t, s.binDir, credsRevB)
	req = waitApproval(t, s.home, "the rebuilt identity", forIdentity)
	lines := strings.Join(req.Card.Lines(), "\n")
	if string(req.Card.PreviousEpoch) != epochA || len(req.Card.IdentityChanges) == 0 || !strings.Contains(lines, "changed on disk: ") || req.Card.AgentName != "portcullis-e2e-refresh" {
		t.Errorf("identity card after the rebuild (agent %q):\n%s", req.Card.AgentName, lines)
	}
	if st := waitRun(t, s.home, a.PID(), time.Second, "status", func(gateway.Status) bool { return true }); st.Epochs != 1 {
		t.Errorf("before the approval %d epochs were launched, want 1", st.Epochs)
	}
	decideCLI(t, s.home, "approve", string(req.ID))
	epochB := epochOf(t, s.home, a.PID(), epochA)
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	pending = asyncCall(t, a.Session, noteWrite, map[string]any{"text": "env-b"})
	decideCLI(t, s.home, "approve", string(waitApproval(t, s.home, "note_write on B", forTool(noteWrite, epochB)).ID))
	if got := okText(t, await(t, pending)); got != wroteWith("B", 1, secret) {
		t.Errorf("note_write on B: %q", got)
	}

	// The secret is removed; rebuilding A again (an approved identity)
	// cannot launch: nothing is launched with an empty secret.
	// (`portcullis creds remove` refuses a scope still configured, so the
	// keychain item goes the way a person deleting it in Seahorse would.)
	if err := platform.NewSecretStore().Delete(scope); err != nil {
		t.Fatal(err)
	}
	buildCreds(t, s.binDir, "")
	st := waitRun(t, s.home, a.PID(), buildWait, "a warning about the credential", func(r gateway.Status) bool {
		return slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "credential_unavailable") })
	})
	if st.Epochs != 2 || string(st.Epoch) != epochB {
		t.Errorf("after the failed relaunch: %d epochs, current %s; want 2, %s still running", st.Epochs, st.Epoch, epochB)
	}
	// A build never approved, with the secret still missing: nobody is
	// asked to approve a launch that could not receive its credential.
	credWarnings := func(r gateway.Status) (n int) {
		for _, w := range r.Warnings {
			if strings.Contains(w, "credential_unavailable") && strings.Contains(w, scope) {
				n++
			}
		}
		return n
	}
	before := credWarnings(st)
	buildCreds(t, s.binDir, "-X main.revision=C")
	waitRun(t, s.home, a.PID(), buildWait, "a warning about the credential for revision C", func(r gateway.Status) bool {
		return credWarnings(r) > before && r.Epochs == 2
	})
	if p := approvals(t, s.home); len(p) != 0 {
		t.Errorf("approval requests raised for a launch whose secret is missing: %+v", p)
	}
	for _, c := range readCredsCalls(t, s.callLog) {
		if c.Env != digest(secret) {
			t.Errorf("a process got env credential %q: %+v", c.Env, c)
		}
	}

	// No keychain at all: a daemon without a session bus.
	t.Run("no keychain", func(t *testing.T) {
		s := newCredsSetup(t, []credsScope{{scope: scope, envVar: "NOTES_TOKEN", secret: secret}}, nil, true)
		s.home.Env = append(s.home.Env, "DBUS_SESSION_BUS_ADDRESS=", "XDG_RUNTIME_DIR="+t.TempDir())
		startDaemon(t, s.home)
		errc := make(chan error, 1)
		go func() {
			client := mcp.NewClient(&mcp.Implementation{Name: "portcullis-e2e-authz", Version: "1.0.0"}, nil)
			a, err := harness.Connect(testContext(t, 2*time.Minute), client, s.home.ConnectCommand(credsLabel), &mcp.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
			if err == nil {
				a.Close()
			}
			errc <- err
		}()
		// Nobody is asked: without a keychain the launch cannot happen.
		var err error
		select {
		case err = <-errc:
		case <-time.After(60 * time.Second):
			t.Fatalf("the agent's connection did not end (approval requests: %+v)", approvals(t, s.home))
		}
		if p := approvals(t, s.home); len(p) != 0 {
			t.Errorf("approval requests raised without a keychain: %+v", p)
		}
		if err == nil || !strings.Contains(err.Error(), scope) {
			t.Fatalf("connecting without a keychain: %v, want a credential_unavailable failure naming %s", err, scope)
		}
		if code, ref := refusalOf(t, err); code != -31023 || ref.Error != control.CredentialUnavailable || !strings.Contains(ref.Reason, "no keychain answers") || !strings.Contains(ref.Retry, "reconnect") {
			t.Errorf("connecting without a keychain: code %d, refusal %+v; want -31023 credential_unavailable", code, ref)
		}
		if calls := readCredsCalls(t, s.callLog); len(calls) != 0 {
			t.Errorf("a server process ran: %+v", calls)
		}
		rep, err := s.home.Status(testContext(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range append(rep.Runs, rep.Ended...) {
			if r.Epochs != 0 || r.PID != 0 {
				t.Errorf("run %s launched %d epochs (pid %d), want none", r.Run, r.Epochs, r.PID)
			}
		}
		for _, e := range auditEvents(t, s.home) {
			if e.Type == audit.TypeServerStarted {
				t.Errorf("server_started %s without a keychain", e.Fields)
			}
		}
	})
}

// TestApprovedCodeIsWhatRuns: the binary is replaced while its launch
// waits for approval. Approving the card of the old build does not launch
// the new one: a new card names the new build, and only once that is
// approved does a process start, with the credential, running it.
func TestApprovedCodeIsWhatRuns(t *testing.T) {
	needSecretService(t)
	secret := newSecret(t)
	scope := "notes-token"
	s := newCredsSetup(t, []credsScope{{scope: scope, envVar: "NOTES_TOKEN", secret: secret}}, nil, false)

	connected := make(chan *listChangedAgent, 1)
	go func() { connected <- connectListChanged(t, s.home, credsLabel, "2025-06-18") }()
	first := waitApproval(t, s.home, "the first launch", forIdentity)
	buildCreds(t, s.binDir, credsRevB) // swapped while the person reads the card
	decideCLI(t, s.home, "approve", string(first.ID))

	second := waitApproval(t, s.home, "a new card for the swapped build", func(c authz.Card) bool {
		return c.Identity != "" && c.Identity != first.Card.Identity
	})
	if second.Card.ExecutableDigest == first.Card.ExecutableDigest {
		t.Errorf("the new card shows the old executable digest %s", first.Card.ExecutableDigest)
	}
	if !strings.Contains(second.Card.Reason, "changed on disk during its launch") ||
		!slices.ContainsFunc(second.Card.IdentityChanges, func(c identity.Change) bool {
			return c.Old == first.Card.ExecutableDigest && c.New == second.Card.ExecutableDigest
		}) {
		t.Errorf("the new card does not say what changed since the first: reason %q, changes %+v", second.Card.Reason, second.Card.IdentityChanges)
	}
	select {
	case <-connected:
		t.Fatal("the agent connected before the swapped build was approved")
	default:
	}
	if rep, err := s.home.Status(testContext(t, 30*time.Second)); err != nil || len(rep.Runs) != 1 || rep.Runs[0].Epochs != 0 {
		t.Fatalf("before the second approval: runs %+v (%v), want one run with nothing launched", rep.Runs, err)
	}
	a := approveLaunch(t, s.home, string(second.ID), connected, "second approval")
	epoch := epochOf(t, s.home, a.PID(), "")
	st := waitRun(t, s.home, a.PID(), time.Second, "status", func(gateway.Status) bool { return true })
	if st.Epochs != 1 {
		t.Errorf("%d epochs launched, want 1", st.Epochs)
	}
	pending := asyncCall(t, a.Session, noteWrite, map[string]any{"text": "swapped"})
	decideCLI(t, s.home, "approve", string(waitApproval(t, s.home, "note_write", forTool(noteWrite, epoch)).ID))
	if got := okText(t, await(t, pending)); got != wroteWith("B", 1, secret) {
		t.Errorf("note_write: %q, want revision B's answer", got)
	}
	for _, e := range auditEvents(t, s.home) {
		if e.Type == audit.TypeServerStarted && !strings.Contains(string(e.Fields), second.Card.ExecutableDigest) {
			t.Errorf("server_started does not record the approved digest %s: %s", second.Card.ExecutableDigest, e.Fields)
		}
	}
}

// TestPipelinedHandshakeWhileLaunchWaits: an agent that sends initialize,
// notifications/initialized and tools/list without waiting for answers, while
// the launch waits for a person to approve its env credential, has them
// reach the server in that order once the launch is approved: tools/list is
// answered with the catalog and the run becomes ready (the notification was
// once dropped, and the server refused tools/list as sent before the
// handshake was complete).
func TestPipelinedHandshakeWhileLaunchWaits(t *testing.T) {
	needSecretService(t)
	s := newCredsSetup(t, []credsScope{{scope: "notes-token", envVar: "NOTES_TOKEN", secret: newSecret(t)}}, nil, false)
	a := startRaw(t, s.home, credsLabel)
	a.request("1", "initialize", map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "pipelining-agent", "version": "1.0.0"},
	})
	a.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	a.request("2", "tools/list", nil)
	decideCLI(t, s.home, "approve", string(waitApproval(t, s.home, "the launch", forIdentity).ID))
	if m, _ := a.await("1", 60*time.Second); m.Error != nil {
		t.Fatalf("initialize: %s", m.Raw)
	}
	m, _ := a.await("2", 60*time.Second)
	var list struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &list) != nil || len(list.Tools) == 0 {
		t.Fatalf("tools/list sent ahead: %s", m.Raw)
	}
	st := waitRun(t, s.home, a.pid(), buildWait, "ready with a catalog", func(r gateway.Status) bool {
		return r.State == gateway.StateReady && r.CatalogRevision > 0
	})
	if st.AgentRevision != st.CatalogRevision {
		t.Errorf("the agent holds revision %d, the catalog is at %d", st.AgentRevision, st.CatalogRevision)
	}
}

// TestApprovalTimeoutReloads: settings.approvalTimeout changed while the
// daemon runs sets the deadline of the next approval request.
func TestApprovalTimeoutReloads(t *testing.T) {
	s := newCredsSetup(t, nil, nil, false)
	a := connectListChanged(t, s.home, credsLabel, "2025-06-18")
	epoch := epochOf(t, s.home, a.PID(), "")
	cfg, err := config.Load(s.home.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	approvalTimeout(7 * time.Minute)(cfg)
	if err := config.Save(s.home.ConfigFile(), cfg); err != nil {
		t.Fatal(err)
	}
	// A hand edit is in force within the configuration watcher's latency;
	// status reads the file as it is now, so the edit is in force after it.
	if _, err := s.home.Status(testContext(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	pending := asyncCall(t, a.Session, noteWrite, map[string]any{"text": "deadline"})
	req := waitApproval(t, s.home, "note_write", forTool(noteWrite, epoch))
	if d := req.Deadline.Sub(req.Created); d != 7*time.Minute {
		t.Errorf("request deadline %s after it was raised, want 7m0s from the reloaded settings", d)
	}
	decideCLI(t, s.home, "deny", string(req.ID))
	await(t, pending)
}

// TestLaunchApprovalNeedsTheAuditLog: while the audit log cannot be written,
// a launch whose env credentials need approval asks nobody: the agent gets
// audit_unavailable (−31050) and no process starts. (How the log is made
// unwritable: see TestAuditUnwritableFailsClosed.)
func TestLaunchApprovalNeedsTheAuditLog(t *testing.T) {
	needSecretService(t)
	s := newCredsSetup(t, []credsScope{{scope: "notes-token", envVar: "NOTES_TOKEN", secret: newSecret(t)}}, nil, false)
	if err := unix.Prlimit(s.daemon.PID(), unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 1, Max: unix.RLIM_INFINITY}, nil); err != nil {
		t.Fatalf("prlimit on the daemon: %v", err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "portcullis-e2e-authz", Version: "1.0.0"}, nil)
	a, err := harness.Connect(testContext(t, 2*time.Minute), client, s.home.ConnectCommand(credsLabel), &mcp.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	if err == nil {
		a.Close()
		t.Fatal("the agent connected while the audit log could not record the launch's approval")
	}
	if code, ref := refusalOf(t, err); code != -31050 || ref.Error != control.AuditUnavailable {
		t.Errorf("connecting: code %d, %+v; want audit_unavailable", code, ref)
	}
	if p := approvals(t, s.home); len(p) != 0 {
		t.Errorf("approval requests raised while the audit log fails: %+v", p)
	}
	if calls := readCredsCalls(t, s.callLog); len(calls) != 0 {
		t.Errorf("a server process ran: %+v", calls)
	}
}

// TestEnvCredentialAskEveryUse: an "env" credential marked askEveryUse asks
// a person at every launch (also of a build approved before: a restart) and
// for every tools/call of an "approve" tool, since the process holds the
// secret for all of them. A run grant does not carry over to the next call.
func TestEnvCredentialAskEveryUse(t *testing.T) {
	needSecretService(t)
	secret := newSecret(t)
	scope := "notes-token"
	s := newCredsSetup(t, []credsScope{{scope: scope, envVar: "NOTES_TOKEN", secret: secret, askEveryUse: true}}, nil, false)

	connected := make(chan *listChangedAgent, 1)
	go func() { connected <- connectListChanged(t, s.home, credsLabel, "2025-06-18") }()
	req := waitApproval(t, s.home, "the first launch", forIdentity)
	if !req.Card.AskEveryUse {
		t.Errorf("launch card %+v does not say the credential asks on every use", req.Card)
	}
	a := approveLaunch(t, s.home, string(req.ID), connected, "launch approval")
	epoch := epochOf(t, s.home, a.PID(), "")

	for i := 1; i <= 2; i++ {
		pending := asyncCall(t, a.Session, noteWrite, map[string]any{"text": fmt.Sprint("every-", i)})
		req := waitApproval(t, s.home, fmt.Sprint("note_write call ", i), forTool(noteWrite, epoch))
		if !strings.Contains(req.Card.Reason, "every use") {
			t.Errorf("call %d: card reason %q does not say why it asks again", i, req.Card.Reason)
		}
		if out := decideCLI(t, s.home, "approve", string(req.ID)); !strings.Contains(out, "for the call shown only") {
			t.Errorf("call %d: approve printed %q, want it to say it covers this call only", i, out)
		}
		if got := okText(t, await(t, pending)); got != wroteWith("A", i, secret) {
			t.Errorf("call %d: %q", i, got)
		}
	}

	// A restart of the same build asks again before the new process gets
	// the secret; `portcullis restart` waits for that launch and, denied,
	// exits non-zero saying so.
	restarted := make(chan harness.Result, 1)
	rctx := testContext(t, 60*time.Second)
	go func() {
		res, _ := s.home.Run(rctx, "restart", credsLabel)
		restarted <- res
	}()
	req = waitApproval(t, s.home, "the relaunch of an approved build", forIdentity)
	if req.Card.ExecutableDigest == "" || !req.Card.AskEveryUse {
		t.Errorf("relaunch card %+v", req.Card)
	}
	decideCLI(t, s.home, "deny", string(req.ID))
	select {
	case res := <-restarted:
		if res.Code == 0 || !strings.Contains(res.Stdout, "ask on every use: the relaunch waits for your approval") || !strings.Contains(res.Stderr, "keeps serving") {
			t.Errorf("restart denied at launch: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
		}
	case <-rctx.Done():
		t.Fatal("portcullis restart did not return after the launch was denied")
	}
	st := waitRun(t, s.home, a.PID(), buildWait, "the denied relaunch to leave the old epoch running", func(r gateway.Status) bool {
		return slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "not approved") })
	})
	if st.Epochs != 1 {
		t.Errorf("%d epochs after a denied relaunch, want 1", st.Epochs)
	}
	if calls := readCredsCalls(t, s.callLog); len(calls) != 2 {
		t.Errorf("the server saw %d calls, want 2: %+v", len(calls), calls)
	}
	for _, e := range auditEvents(t, s.home) {
		if f := auditFields(t, e); e.Type == audit.TypeApprovalGranted && f["expiresWhen"] != authz.ExpiresOnce {
			t.Errorf("a grant for a credential that asks on every use expires %v, want once", f["expiresWhen"])
		}
	}
}

// approveLaunch approves launch request id with `portcullis approve` and
// returns the agent that connected once the launch went ahead (what names
// the approval, for the failure message).
func approveLaunch(t *testing.T, h *harness.Home, id string, connected <-chan *listChangedAgent, what string) *listChangedAgent {
	t.Helper()
	decideCLI(t, h, "approve", id)
	select {
	case a := <-connected:
		return a
	case <-time.After(60 * time.Second):
		t.Fatalf("the agent did not connect after the %s", what)
		return nil
	}
}

// callParamsOf is a tools/call of tool with args.
func callParamsOf(tool string, args map[string]any) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: tool, Arguments: args}
}
