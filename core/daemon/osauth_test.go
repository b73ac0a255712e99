package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
)

// fakeAuth is an Authenticator whose availability and answer the test
// sets; it records the subjects it was asked about.
type fakeAuth struct {
	avail  error
	answer error
	asked  []AuthSubject
	reason []string
}

var _ Authenticator = (*fakeAuth)(nil)

func (f *fakeAuth) Mechanism() string { return "fakeauth" }
func (f *fakeAuth) Available() error  { return f.avail }
func (f *fakeAuth) Authenticate(_ context.Context, s AuthSubject, reason string) error {
	f.asked = append(f.asked, s)
	f.reason = append(f.reason, reason)
	return f.answer
}

// authDaemon is a daemon whose configuration sets approvalAuthentication
// to setting, with auth as its Authenticator (nil: none).
func authDaemon(t *testing.T, setting string, auth Authenticator) *Daemon {
	t.Helper()
	dirs := configHome(t)
	cfg := &config.Config{Servers: map[string]config.Server{"srv": {Command: "/bin/true"}}, Settings: config.Settings{ApprovalAuthentication: setting}}
	if err := config.Save(dirs.ConfigFile(), cfg); err != nil {
		t.Fatal(err)
	}
	o := Options{Dirs: dirs}
	if auth != nil {
		o.Authenticator = auth
	}
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestAuthenticationApplies(t *testing.T) {
	withCreds := authz.Card{CredentialScope: []string{"api"}}
	plain := authz.Card{ToolScope: []string{"read"}}
	cli, window := audit.ChannelCLI, audit.ChannelWindow
	for _, tc := range []struct {
		mode    string
		channel string
		card    authz.Card
		choice  authz.Choice
		want    bool
	}{
		{config.AuthOff, cli, withCreds, authz.ApproveRun, false},
		{config.AuthCredentials, cli, withCreds, authz.ApproveRun, true},
		{config.AuthCredentials, window, withCreds, authz.ApproveOnce, true},
		{config.AuthCredentials, cli, plain, authz.ApproveRun, false},
		{config.AuthCredentials, window, plain, authz.ApproveRun, false},
		// The default where the system can authenticate: any approval made
		// with the command (which code of the person's user can fake at a
		// terminal of its own), and the window's of a card with credentials.
		{config.AuthCLI, cli, plain, authz.ApproveRun, true},
		{config.AuthCLI, cli, plain, authz.ApproveOnce, true},
		{config.AuthCLI, cli, withCreds, authz.ApproveRun, true},
		{config.AuthCLI, window, withCreds, authz.ApproveRun, true},
		{config.AuthCLI, window, plain, authz.ApproveRun, false},
		{config.AuthCLI, cli, plain, authz.Deny, false},
		{config.AuthAlways, cli, plain, authz.ApproveOnce, true},
		{config.AuthAlways, window, plain, authz.ApproveOnce, true},
		{config.AuthAlways, cli, withCreds, authz.Deny, false},
		{config.AuthCredentials, cli, withCreds, authz.Deny, false},
	} {
		if got := AuthenticationApplies(tc.mode, tc.channel, tc.card, tc.choice); got != tc.want {
			t.Errorf("AuthenticationApplies(%s, %s, creds=%v, %s) = %v, want %v", tc.mode, tc.channel, tc.card.CredentialScope, tc.choice, got, tc.want)
		}
	}
}

func TestAuthStatus(t *testing.T) {
	down := errors.New("no polkitd on the system bus")
	noAction := &UnavailableError{Reason: AuthReasonNoAction, Text: "polkit does not know the action dev.portcullis.approve: install it with: sudo install …"}
	root := &UnavailableError{Reason: AuthReasonRoot, Text: "polkit authorizes root without asking"}
	for _, tc := range []struct {
		name    string
		setting string
		auth    Authenticator
		mode    string
		authed  bool
		reason  string
		note    string   // "" = none
		meaning []string // in Meaning
	}{
		{"absent, available", "", &fakeAuth{}, config.AuthCLI, true, "", "",
			[]string{"Approvals are OS-authenticated", "made with the portcullis command asks fakeauth", "in the window, approvals of a card that carries a credential ask it too"}},
		{"absent, unavailable", "", &fakeAuth{avail: down}, config.AuthOff, false, AuthReasonUnavailable,
			"is not set and the system cannot authenticate you (no polkitd on the system bus): approvals need no OS authentication",
			[]string{"Approvals are not OS-authenticated (fakeauth cannot authenticate you now)", "resist only code that stays in the process trees Portcullis sees", "approve any card and confirm held changes"}},
		{"absent, action not installed", "", &fakeAuth{avail: noAction}, config.AuthOff, false, AuthReasonNoAction, "install it with: sudo install",
			[]string{"Approvals are not OS-authenticated (fakeauth does not know Portcullis's action (it is not installed))"}},
		{"absent, root daemon", "", &fakeAuth{avail: root}, config.AuthOff, false, AuthReasonRoot, "polkit authorizes root without asking",
			[]string{"the daemon runs as root, whom fakeauth lets through without asking", "they resist only code that stays in the process trees Portcullis sees"}},
		{"absent, no mechanism", "", nil, config.AuthOff, false, AuthReasonUnsupported, "this build has no operating-system authentication",
			[]string{"this system has no mechanism Portcullis can ask"}},
		{"always, unavailable", config.AuthAlways, &fakeAuth{avail: down}, config.AuthAlways, false, AuthReasonUnavailable,
			`is "always" but the system cannot authenticate you (no polkitd on the system bus): such approvals are refused`,
			[]string{`Approvals that settings.approvalAuthentication "always" asks OS authentication for are refused until the system can authenticate you`}},
		{"always", config.AuthAlways, &fakeAuth{}, config.AuthAlways, true, "", "", []string{"every approval, in the window too"}},
		{"off", config.AuthOff, &fakeAuth{}, config.AuthOff, false, AuthReasonOff, "", []string{"not OS-authenticated (settings.approvalAuthentication is off)"}},
		{"credentials", config.AuthCredentials, &fakeAuth{}, config.AuthCredentials, true, "", "",
			[]string{"Only approvals of a card that carries a credential", "the others are not OS-authenticated", "approve them and confirm other held changes"}},
		{"cli", config.AuthCLI, &fakeAuth{}, config.AuthCLI, true, "", "", []string{"made with the portcullis command"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := authDaemon(t, tc.setting, tc.auth).Status().Authentication
			if st.Mode != tc.mode || st.Setting != tc.setting || st.OSAuthenticated != tc.authed || st.Reason != tc.reason {
				t.Errorf("status %+v, want mode %s, osAuthenticated %v, reason %q", st, tc.mode, tc.authed, tc.reason)
			}
			if (tc.note == "") != (st.Note == "") || !strings.Contains(st.Note, tc.note) {
				t.Errorf("note %q, want %q", st.Note, tc.note)
			}
			for _, m := range tc.meaning {
				if !strings.Contains(st.Meaning, m) {
					t.Errorf("meaning %q lacks %q", st.Meaning, m)
				}
			}
			if st.Available == (st.Unavailable != "") {
				t.Errorf("available %v with unavailable %q", st.Available, st.Unavailable)
			}
		})
	}
}

// TestAuthenticateDecision: the decision path with a fake authenticator —
// success lets the grant go ahead with the peer as the subject; a
// cancellation or failure denies the request and grants nothing; an
// unavailable mechanism under "always" refuses and leaves the request
// pending; a denial and a card outside the mode are never asked about.
func TestAuthenticateDecision(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setting  string
		auth     *fakeAuth
		creds    bool
		choice   authz.Choice
		asked    bool
		want     []string // in the error; nil = no error
		pending  bool     // the request is still pending after the error
		deniedBy string   // the request was denied, with this reason
	}{
		{"success", config.AuthAlways, &fakeAuth{}, false, authz.ApproveRun, true, nil, false, ""},
		{"cancelled", config.AuthAlways, &fakeAuth{answer: fmt.Errorf("pkcheck: %w", ErrAuthDismissed)}, false, authz.ApproveRun, true,
			[]string{"not approved: fakeauth was cancelled", "was denied and nothing was granted", `approvalAuthentication is "always"`, "the agent can call again"}, false, "portcullis approve: fakeauth was cancelled"},
		{"wrong password", config.AuthCredentials, &fakeAuth{answer: fmt.Errorf("pkcheck: %w", ErrAuthFailed)}, true, authz.ApproveOnce, true,
			[]string{"not approved: fakeauth did not authenticate you", "was denied"}, false, "portcullis approve: fakeauth did not authenticate you"},
		{"always, unavailable", config.AuthAlways, &fakeAuth{avail: errors.New("no polkitd on the system bus")}, false, authz.ApproveRun, false,
			[]string{"refused to approve approval request", "no polkitd on the system bus", "nothing was granted and the request is still pending", "portcullis deny", `"off"`}, true, ""},
		{"credentials mode, no credentials", config.AuthCredentials, &fakeAuth{answer: ErrAuthFailed}, false, authz.ApproveRun, false, nil, false, ""},
		// The default where the system can authenticate: an approval of a
		// card without credentials made with the command (what an agent's
		// escaped `script -qec 'portcullis approve ID'` sends) is asked and,
		// unconfirmed, denied.
		{"absent, available: a plain card from the command", "", &fakeAuth{answer: fmt.Errorf("pkcheck: %w", ErrAuthFailed)}, false, authz.ApproveRun, true,
			[]string{"not approved: fakeauth did not authenticate you", `approvalAuthentication is "cli"`}, false, "portcullis approve: fakeauth did not authenticate you"},
		{"absent, available: success", "", &fakeAuth{}, false, authz.ApproveOnce, true, nil, false, ""},
		{"a denial", config.AuthAlways, &fakeAuth{answer: ErrAuthFailed}, false, authz.Deny, false, nil, false, ""},
		{"off", config.AuthOff, &fakeAuth{answer: ErrAuthFailed}, true, authz.ApproveRun, false, nil, false, ""},
		{"absent, unavailable: off", "", &fakeAuth{avail: errors.New("down"), answer: ErrAuthFailed}, true, authz.ApproveRun, false, nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := authDaemon(t, tc.setting, tc.auth)
			card := authz.Card{ServerLabel: "srv", AgentRun: "run1", Tool: "read", ToolScope: []string{"read"}, CurrentEpoch: "01EP"}
			if tc.creds {
				card.CredentialScope = []string{"api"}
			}
			id := d.authz.Raise(card)
			_, err := d.authenticateDecision(context.Background(), nil, id, tc.choice, 4242)
			if asked := len(tc.auth.asked) > 0; asked != tc.asked {
				t.Fatalf("authenticator asked = %v, want %v", asked, tc.asked)
			}
			if tc.asked {
				if s := tc.auth.asked[0]; s.PID != 4242 || s.UID != d.uid {
					t.Errorf("subject %+v, want pid 4242 and the daemon's uid", s)
				}
				if !strings.Contains(tc.auth.reason[0], "approve request "+string(id)+" of srv") {
					t.Errorf("reason %q", tc.auth.reason[0])
				}
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("err = %v, want the decision to go ahead", err)
				}
				if err := d.authz.Decide(id, authz.Decision{Choice: tc.choice, By: "cli"}); err != nil {
					t.Fatalf("Decide after authentication: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error, want a refusal")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			still := false
			for _, r := range d.authz.Pending() {
				still = still || r.ID == id
			}
			if still != tc.pending {
				t.Errorf("pending = %v, want %v", still, tc.pending)
			}
			if tc.deniedBy != "" {
				g, werr := d.authz.Wait(context.Background(), id)
				if g != nil || !errors.Is(werr, authz.ErrDenied) {
					t.Errorf("Wait = %v, %v; want a denial", g, werr)
				}
				if err := d.authz.Decide(id, authz.Decision{Choice: authz.ApproveRun, By: "cli"}); !errors.Is(err, authz.ErrNoRequest) {
					t.Errorf("approve after a failed authentication: %v, want ErrNoRequest", err)
				}
			}
		})
	}
}

// blockingAuth answers Authenticate with what the test sends on answer.
type blockingAuth struct {
	avail  error
	asked  chan AuthSubject
	answer chan error
}

func (b *blockingAuth) Mechanism() string { return "blockingauth" }
func (b *blockingAuth) Available() error  { return b.avail }
func (b *blockingAuth) Authenticate(ctx context.Context, s AuthSubject, _ string) error {
	b.asked <- s
	select {
	case err := <-b.answer:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestWindowApprovals: the window's Decide does not block on the
// authentication (the window's event loop calls it): it returns at once,
// the grant follows a success and a denial a failure, with the app's own
// process as the subject; an unavailable mechanism under "always" is an
// error at once and leaves the request pending; a card outside the mode is
// decided directly.
func TestWindowApprovals(t *testing.T) {
	card := authz.Card{ServerLabel: "srv", AgentRun: "run1", Tool: "read", ToolScope: []string{"read"}, CurrentEpoch: "01EP"}
	for _, tc := range []struct {
		name   string
		answer error
		grant  bool
	}{{"success", nil, true}, {"failure", ErrAuthFailed, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ba := &blockingAuth{asked: make(chan AuthSubject, 1), answer: make(chan error, 1)}
			d := authDaemon(t, config.AuthAlways, ba)
			id := d.authz.Raise(card)
			if err := d.WindowApprovals().Decide(id, authz.Decision{Choice: authz.ApproveRun, Tools: []string{"read"}, By: "app"}); err != nil {
				t.Fatalf("Decide: %v", err)
			}
			s := <-ba.asked // asked after Decide returned, the request still pending
			if s.PID != os.Getpid() {
				t.Errorf("subject pid %d, want the app's own %d", s.PID, os.Getpid())
			}
			if len(d.authz.Pending()) != 1 {
				t.Errorf("pending while authenticating: %d, want 1", len(d.authz.Pending()))
			}
			ba.answer <- tc.answer
			g, err := d.authz.Wait(context.Background(), id)
			if tc.grant && (err != nil || g == nil) {
				t.Fatalf("Wait = %v, %v; want a grant", g, err)
			}
			if !tc.grant && (g != nil || !errors.Is(err, authz.ErrDenied)) {
				t.Fatalf("Wait = %v, %v; want a denial", g, err)
			}
		})
	}
	t.Run("unavailable", func(t *testing.T) {
		d := authDaemon(t, config.AuthAlways, &fakeAuth{avail: errors.New("no polkitd")})
		id := d.authz.Raise(card)
		err := d.WindowApprovals().Decide(id, authz.Decision{Choice: authz.ApproveRun, By: "app"})
		if err == nil || !strings.Contains(err.Error(), "no polkitd") || len(d.authz.Pending()) != 1 {
			t.Fatalf("Decide = %v with %d pending; want the reason and the request pending", err, len(d.authz.Pending()))
		}
	})
	t.Run("outside the mode", func(t *testing.T) {
		fa := &fakeAuth{answer: ErrAuthFailed}
		d := authDaemon(t, config.AuthCredentials, fa)
		al, err := audit.Open(d.auditOptions())
		if err != nil {
			t.Fatal(err)
		}
		defer al.Close()
		d.audit, d.auditW = al, &recovering{log: al, retryEvery: time.Second}
		id := d.authz.Raise(card)
		if err := d.WindowApprovals().Decide(id, authz.Decision{Choice: authz.ApproveRun, By: "app"}); err != nil {
			t.Fatal(err)
		}
		if g, err := d.authz.Wait(context.Background(), id); err != nil || g == nil || len(fa.asked) != 0 {
			t.Fatalf("Wait = %v, %v (asked %d); want a grant without authentication", g, err, len(fa.asked))
		}
		// The record names the window, the app's process and that the OS
		// was not asked under this mode.
		evs, err := audit.Tail(AuditDir(d.opts.Dirs), 10)
		if err != nil {
			t.Fatal(err)
		}
		var g audit.ApprovalGranted
		for _, e := range evs {
			if e.Type == audit.TypeApprovalGranted {
				if err := e.DecodeFields(&g); err != nil {
					t.Fatal(err)
				}
			}
		}
		exe, _ := os.Executable()
		want := audit.Decider{Channel: audit.ChannelWindow, PID: os.Getpid(), Executable: exe, Authentication: audit.AuthNotAsked, AuthenticationMode: config.AuthCredentials}
		if g.Request != id || !reflect.DeepEqual(g.Decider, want) {
			t.Errorf("approval_granted %+v; want request %s decided by %+v", g, id, want)
		}
	})
}

func TestChangeNeedsAuthentication(t *testing.T) {
	policy := config.Widening{Kind: config.WidenPolicy, Server: "srv", Tool: "write"}
	cred := config.Widening{Kind: config.WidenCredential, Server: "srv", Scope: "api"}
	lower := config.Widening{Kind: config.WidenApprovalAuthentication}
	for _, tc := range []struct {
		mode string
		held []config.Widening
		want bool
	}{
		{config.AuthAlways, []config.Widening{policy}, true},
		{config.AuthAlways, nil, false},
		{config.AuthCredentials, []config.Widening{policy}, false},
		// The default where the system can authenticate: every widening
		// made or confirmed with the command.
		{config.AuthCLI, []config.Widening{policy}, true},
		{config.AuthCLI, []config.Widening{{Kind: config.WidenAuditSigning}}, true},
		{config.AuthCLI, nil, false},
		{config.AuthCredentials, []config.Widening{policy, cred}, true},
		{config.AuthCredentials, []config.Widening{lower}, true},
		{config.AuthCredentials, []config.Widening{{Kind: config.WidenLaunch, Server: "srv"}}, true},
		{config.AuthCredentials, []config.Widening{{Kind: config.WidenAuditSigning}}, false},
		{config.AuthOff, []config.Widening{cred, lower}, false},
	} {
		if got := ChangeNeedsAuthentication(tc.mode, tc.held); got != tc.want {
			t.Errorf("ChangeNeedsAuthentication(%s, %+v) = %v, want %v", tc.mode, tc.held, got, tc.want)
		}
	}
}

// TestAuthenticateChange: a widening change that needs the OS's
// authentication goes ahead after it and is refused, with the reason, when
// it fails or cannot be asked.
func TestAuthenticateChange(t *testing.T) {
	held := []config.Widening{{Kind: config.WidenApprovalAuthentication, Text: "settings: approvalAuthentication always → off"}}
	for _, tc := range []struct {
		name string
		auth *fakeAuth
		want []string // nil: allowed
	}{
		{"success", &fakeAuth{}, nil},
		{"failure", &fakeAuth{answer: fmt.Errorf("%w: pkcheck: Not authorized.", ErrAuthFailed)},
			[]string{"not done: fakeauth did not confirm it is you", "Not authorized.", "confirm change c1 of the configuration was refused and nothing was changed"}},
		{"unavailable", &fakeAuth{avail: errors.New("no polkitd")}, []string{"refused to confirm change c1 of the configuration", "no polkitd", "nothing was changed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := authDaemon(t, config.AuthAlways, tc.auth)
			auth, err := d.authenticateChange(nil, 4242, "confirm change c1 of the configuration", held)
			if tc.want == nil {
				if err != nil || len(tc.auth.asked) != 1 || tc.auth.asked[0].PID != 4242 {
					t.Fatalf("err = %v, asked %+v; want one authentication of pid 4242 and no error", err, tc.auth.asked)
				}
				if auth.by != tc.auth.Mechanism() || auth.mode != config.AuthAlways {
					t.Errorf("recorded authentication %+v, want %s under %s", auth, tc.auth.Mechanism(), config.AuthAlways)
				}
				return
			}
			if err == nil {
				t.Fatal("allowed, want a refusal")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestAuthenticateChangeByDefault: with settings.approvalAuthentication
// absent and the mechanism available, confirming any held widening (here a
// tool allowed, which bears on no credential) asks the operating system,
// and an unconfirmed one is refused; with the mechanism unavailable the
// default is off and nothing is asked.
func TestAuthenticateChangeByDefault(t *testing.T) {
	held := []config.Widening{{Kind: config.WidenPolicy, Server: "srv", Tool: "write", Text: "srv: tool write policy approve → allow"}}
	fa := &fakeAuth{answer: fmt.Errorf("%w: pkcheck: Not authorized.", ErrAuthFailed)}
	d := authDaemon(t, "", fa)
	if _, err := d.authenticateChange(nil, 4242, "confirm change c1 of the configuration", held); err == nil || len(fa.asked) != 1 ||
		!strings.Contains(err.Error(), "nothing was changed") || !strings.Contains(err.Error(), `approvalAuthentication is "cli"`) {
		t.Fatalf("err = %v, asked %d; want one authentication and a refusal", err, len(fa.asked))
	}
	off := &fakeAuth{avail: errors.New("no polkitd"), answer: ErrAuthFailed}
	d = authDaemon(t, "", off)
	auth, err := d.authenticateChange(nil, 4242, "confirm change c1 of the configuration", held)
	if err != nil || len(off.asked) != 0 || auth.mode != config.AuthOff || auth.by != audit.AuthNotAsked {
		t.Fatalf("unavailable: %+v, %v, asked %d; want it confirmed unasked under off", auth, err, len(off.asked))
	}
}
