package demoscript

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/internal/harness"
)

// The approval chapter's server: testdata/servers/creds under the label
// "notes", whose note_write needs approval and a credential and whose
// note_read is allowed.
const (
	notesLabel = "notes"
	notesScope = "notes-api"
	noteWrite  = "note_write"
	noteRead   = "note_read"
	// demoSecret is the demo credential; it is never printed.
	demoSecret = "demo-secret-do-not-print-4711"
)

// authStory is the approval chapter: grants bound to epochs, told with a
// rebuild (docs/DESIGN.md, "The refresh contract", "Authorization and
// credentials"). The person's decisions are made on the command line
// (`portcullis approvals`, `portcullis approve ID`).
type authStory struct {
	*script
	dir    string // the notes server's build directory (its cwd)
	bin    string
	agent  *harness.Agent
	cred   bool // a throwaway keychain is available: the meta credential is used
	epochA ids.EpochID
	epochB ids.EpochID
	stale  string // the request raised with the stale refusal
}

// authChapter plays the approval chapter's steps; whatever it starts is
// stopped before it returns.
func (s *script) authChapter(ctx context.Context) error {
	a := &authStory{script: s, dir: filepath.Join(s.work, "notes")}
	defer func() {
		if a.agent != nil {
			_ = a.agent.Close()
		}
	}()
	for _, st := range []func(context.Context) error{
		a.register,
		a.connect,
		a.firstWrite,
		a.rebuild,
		a.staleCall,
		a.newCard,
		a.approveAgain,
		a.auditTrail,
	} {
		if err := st(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (a *authStory) register(ctx context.Context) error {
	a.step("Chapter 2 — approvals bound to epochs. Build the notes server (revision A) and register it")
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return err
	}
	var err error
	if a.bin, err = harness.BuildServer(ctx, a.root, a.dir, "creds", ""); err != nil {
		return err
	}
	// Only a throwaway keychain (scripts/with-secret-service.sh) gets the
	// demo's secret, never a person's own.
	a.cred = os.Getenv("DBUS_SESSION_BUS_ADDRESS") != "" && os.Getenv("PORTCULLIS_TEST_KEYRING_PASSWORD") != ""
	args := []string{"servers", "add", notesLabel, "--cwd", a.dir}
	if a.cred {
		cmd := a.home.Command(ctx, "creds", "set", notesScope, "--meta")
		cmd.Stdin = strings.NewReader(demoSecret)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("portcullis creds set: %w\n%s", err, out)
		}
		a.detail("portcullis creds set %s --meta   (secret on stdin, kept in the keychain)", notesScope)
		args = append(args, "--cred", notesScope, "--env", "CREDS_SCOPE="+notesScope)
	} else {
		a.detail("no throwaway keychain here (run `scripts/with-secret-service.sh make demo` to see the credential too):")
		a.detail("the notes server runs without its credential")
		args = append(args, "--env", "CREDS_OPTIONAL=1")
	}
	// At a terminal of the person's own: a server that receives a
	// credential widens trust, which this process (the agent of the
	// inventory run) may not do.
	r, err := a.home.RunAtTerminal(ctx, append(args, "--", a.bin)...)
	if err != nil {
		return err
	}
	a.detail("%s", strings.TrimSpace(r.Stdout))
	if err := a.home.SetToolPolicy(notesLabel, config.PolicyAllow, noteRead); err != nil {
		return err
	}
	a.detail("policy: note_write needs approval (the default), note_read is allowed")
	return nil
}

func (a *authStory) connect(ctx context.Context) error {
	a.step("An agent connects to %s and lists the tools", notesLabel)
	client := mcp.NewClient(&mcp.Implementation{Name: "demo-agent", Version: "1.0.0"}, nil)
	var err error
	if a.agent, err = harness.Connect(ctx, client, a.home.ConnectCommand(notesLabel), nil); err != nil {
		return err
	}
	if _, err := a.agent.Session.ListTools(ctx, nil); err != nil {
		return err
	}
	st, err := a.waitEpoch(ctx, "")
	if err != nil {
		return err
	}
	a.epochA = st.Epoch
	a.detail("epoch A = %s (pid %d)", a.epochA, st.PID)
	txt, err := a.callOK(ctx, noteRead, map[string]any{})
	if err != nil {
		return err
	}
	a.detail("note_read (allowed) → %q", txt)
	return nil
}

func (a *authStory) firstWrite(ctx context.Context) error {
	a.step("The agent calls note_write: the call is held until a person decides")
	done := a.callAsync(ctx, noteWrite, map[string]any{"text": "hello"})
	req, err := a.waitRequest(ctx, a.epochA)
	if err != nil {
		return err
	}
	if err := a.showApprovals(ctx); err != nil {
		return err
	}
	return a.approve(ctx, string(req.ID), "A", done)
}

func (a *authStory) rebuild(ctx context.Context) error {
	a.step("The developer rebuilds: go build -ldflags \"-X main.revision=B\" (same path, new code)")
	if _, err := harness.BuildServer(ctx, a.root, a.dir, "creds", "-X main.revision=B"); err != nil {
		return err
	}
	st, err := a.waitEpoch(ctx, a.epochA)
	if err != nil {
		return err
	}
	a.epochB = st.Epoch
	a.detail("the daemon replaced the process: epoch A %s → epoch B %s (pid %d)", a.epochA, a.epochB, st.PID)
	a.detail("the grant for epoch A is void before anything reaches B")
	return nil
}

func (a *authStory) staleCall(ctx context.Context) error {
	a.step("The agent calls note_write again, with what it knew before the rebuild")
	_, err := a.agent.Session.CallTool(ctx, &mcp.CallToolParams{Name: noteWrite, Arguments: map[string]any{"text": "stale"}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		return fmt.Errorf("%w: the stale call answered %v, want a refusal", ErrUnexpected, err)
	}
	var r control.Refusal
	if err := json.Unmarshal(we.Data, &r); err != nil || r.Error != control.AuthorizationStale || r.ApprovedEpoch != a.epochA || r.CurrentEpoch != a.epochB {
		return fmt.Errorf("%w: the stale call was refused with %d %s", ErrUnexpected, we.Code, we.Data)
	}
	a.detail("refused, error %d %s", we.Code, r.Error)
	a.detail("approvedEpoch %s, currentEpoch %s", r.ApprovedEpoch, r.CurrentEpoch)
	a.detail("retry: %s", r.Retry)
	return nil
}

func (a *authStory) newCard(ctx context.Context) error {
	a.step("The refusal raised an approval request for epoch B at once: portcullis approvals")
	req, err := a.waitRequest(ctx, a.epochB)
	if err != nil {
		return err
	}
	if req.Card.PreviousEpoch != a.epochA || len(req.Card.IdentityChanges) == 0 {
		return fmt.Errorf("%w: the card for B shows previous epoch %q and %d identity changes", ErrUnexpected, req.Card.PreviousEpoch, len(req.Card.IdentityChanges))
	}
	a.stale = string(req.ID)
	return a.showApprovals(ctx)
}

func (a *authStory) approveAgain(ctx context.Context) error {
	a.step("The person allows the new code for this run on that card; the agent refreshes (tools/list) and calls again")
	r, err := a.home.RunAtTerminal(ctx, "approve", a.stale)
	if err != nil {
		return err
	}
	a.detail("$ portcullis approve %s", a.stale)
	a.detail("%s", strings.TrimSpace(r.Stdout))
	if _, err := a.agent.Session.ListTools(ctx, nil); err != nil {
		return err
	}
	txt, err := a.callOK(ctx, noteWrite, map[string]any{"text": "hello again", "tag": "b"})
	if err != nil {
		return err
	}
	if want := "revision=B wrote note 1"; !strings.HasPrefix(txt, want) {
		return fmt.Errorf("%w: the call on the new code answered %q, want %q…", ErrUnexpected, txt, want)
	}
	a.detail("the call goes through on the new code → %q", txt)
	return nil
}

func (a *authStory) auditTrail(ctx context.Context) error {
	a.step("The audit log tells the same story: portcullis audit tail")
	r, err := a.home.Run(ctx, "audit", "tail", "-n", "200")
	if err != nil {
		return err
	}
	keep := []string{"server_started", "approval_granted", "tool_called", "server_replaced", "call_refused"}
	shown := 0
	for _, line := range strings.Split(r.Stdout, "\n") {
		if !strings.Contains(line, "server="+notesLabel) {
			continue
		}
		for _, k := range keep {
			if strings.Contains(line, " "+k+" ") {
				a.detail("%s", line)
				shown++
				break
			}
		}
	}
	if shown < 7 {
		return fmt.Errorf("%w: the audit log shows %d events of the story, want at least 7", ErrUnexpected, shown)
	}
	if strings.Contains(r.Stdout, demoSecret) {
		return fmt.Errorf("%w: the audit log holds the secret", ErrUnexpected)
	}
	return nil
}

// showApprovals prints `portcullis approvals` as a person sees it.
func (a *authStory) showApprovals(ctx context.Context) error {
	r, err := a.home.Run(ctx, "approvals")
	if err != nil {
		return err
	}
	if strings.Contains(r.Stdout, demoSecret) {
		return fmt.Errorf("%w: an approval card shows the secret", ErrUnexpected)
	}
	for _, line := range strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n") {
		a.detail("%s", line)
	}
	return nil
}

// approve runs `portcullis approve ID` and waits for the held call, which
// must be answered by revision rev.
func (a *authStory) approve(ctx context.Context, id, rev string, done <-chan callOutcome) error {
	r, err := a.home.RunAtTerminal(ctx, "approve", id)
	if err != nil {
		return err
	}
	a.detail("$ portcullis approve %s", id)
	a.detail("%s", strings.TrimSpace(r.Stdout))
	var out callOutcome
	select {
	case out = <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if out.err != nil {
		return fmt.Errorf("the approved call failed: %w", out.err)
	}
	want := fmt.Sprintf("revision=%s wrote note 1", rev)
	if !strings.HasPrefix(out.text, want) {
		return fmt.Errorf("%w: the approved call answered %q, want %q…", ErrUnexpected, out.text, want)
	}
	a.detail("the held call goes through → %q", out.text)
	return nil
}

type callOutcome struct {
	text string
	err  error
}

func (a *authStory) callAsync(ctx context.Context, tool string, args map[string]any) <-chan callOutcome {
	ch := make(chan callOutcome, 1)
	go func() {
		txt, err := a.callOK(ctx, tool, args)
		ch <- callOutcome{txt, err}
	}()
	return ch
}

func (a *authStory) callOK(ctx context.Context, tool string, args map[string]any) (string, error) {
	res, err := a.agent.Session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", err
	}
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	txt := strings.Join(parts, "\n")
	if res.IsError {
		return "", fmt.Errorf("%w: %s answered a tool error: %s", ErrUnexpected, tool, txt)
	}
	return txt, nil
}

// waitEpoch waits until the agent's run is ready on an epoch other than
// old, with its catalog fetched.
func (a *authStory) waitEpoch(ctx context.Context, old ids.EpochID) (gateway.Status, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		rep, err := a.home.Status(ctx)
		if err != nil {
			return gateway.Status{}, err
		}
		if r, ok := harness.RunByShim(rep, a.agent.PID()); ok && r.State == gateway.StateReady && r.Epoch != "" && r.Epoch != old && r.CatalogRevision != 0 {
			return r, nil
		}
		if time.Now().After(deadline) {
			return gateway.Status{}, fmt.Errorf("%w: the notes server was not ready on a new epoch within 30 s", ErrUnexpected)
		}
		select {
		case <-ctx.Done():
			return gateway.Status{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitRequest polls `portcullis approvals --json` for a note_write request
// on epoch.
func (a *authStory) waitRequest(ctx context.Context, epoch ids.EpochID) (authz.Request, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := a.home.Run(ctx, "approvals", "--json")
		if err != nil {
			return authz.Request{}, err
		}
		var reqs []authz.Request
		if err := json.Unmarshal([]byte(r.Stdout), &reqs); err != nil {
			return authz.Request{}, fmt.Errorf("approvals --json: %w", err)
		}
		for _, q := range reqs {
			if q.Card.Tool == noteWrite && q.Card.CurrentEpoch == epoch {
				return q, nil
			}
		}
		if time.Now().After(deadline) {
			return authz.Request{}, fmt.Errorf("%w: no approval request for note_write on %s within 30 s", ErrUnexpected, epoch)
		}
		select {
		case <-ctx.Done():
			return authz.Request{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
