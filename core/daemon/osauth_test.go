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
	for _, tc := range []struct {
		mode   string
		card   authz.Card
		choice authz.Choice
		want   bool
	}{
		{config.AuthOff, withCreds, authz.ApproveRun, false},
		{config.AuthCredentials, withCreds, authz.ApproveRun, true},
		{config.AuthCredentials, withCreds, authz.ApproveOnce, true},
		{config.AuthCredentials, plain, authz.ApproveRun, false},
		{config.AuthAlways, plain, authz.ApproveOnce, true},
		{config.AuthAlways, withCreds, authz.Deny, false},
		{config.AuthCredentials, withCreds, authz.Deny, false},
	} {
		if got := AuthenticationApplies(tc.mode, tc.card, tc.choice); got != tc.want {
			t.Errorf("AuthenticationApplies(%s, creds=%v, %s) = %v, want %v", tc.mode, tc.card.CredentialScope, tc.choice, got, tc.want)
		}
	}
}

func TestAuthStatus(t *testing.T) {
	down := errors.New("no polkitd on the system bus")
	for _, tc := range []struct {
		name    string
		setting string
		auth    Authenticator
		mode    string
		note    string // "" = none
	}{
		{"absent, available", "", &fakeAuth{}, config.AuthCredentials, ""},
		{"absent, unavailable", "", &fakeAuth{avail: down}, config.AuthOff, "is not set and the system cannot authenticate you (no polkitd on the system bus): approvals need no OS authentication"},
		{"absent, no mechanism", "", nil, config.AuthOff, "this build has no operating-system authentication"},
		{"always, unavailable", config.AuthAlways, &fakeAuth{avail: down}, config.AuthAlways, `is "always" but the system cannot authenticate you (no polkitd on the system bus): such approvals are refused`},
		{"off", config.AuthOff, &fakeAuth{}, config.AuthOff, ""},
		{"credentials", config.AuthCredentials, &fakeAuth{}, config.AuthCredentials, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := authDaemon(t, tc.setting, tc.auth).Status().Authentication
			if st.Mode != tc.mode || st.Setting != tc.setting {
				t.Errorf("status %+v, want mode %s", st, tc.mode)
			}
			if (tc.note == "") != (st.Note == "") || !strings.Contains(st.Note, tc.note) {
				t.Errorf("note %q, want %q", st.Note, tc.note)
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
				if !strings.Contains(tc.auth.reason[0], "approve request "+id+" of srv") {
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
