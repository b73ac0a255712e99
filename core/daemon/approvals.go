package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/secrets"
)

// credentialsOf lists the credential scopes a server declares.
func credentialsOf(cfg *config.Config, srv config.Server) []gateway.Credential {
	var out []gateway.Credential
	for _, scope := range srv.Credentials {
		c, ok := cfg.Credentials[scope]
		if !ok {
			continue
		}
		out = append(out, gateway.Credential{Scope: scope, Inject: c.Inject, EnvVar: c.EnvVar, AskEveryUse: c.AskEveryUse})
	}
	return out
}

// secret reads a credential scope from the keychain.
func (d *Daemon) secret(scope string) ([]byte, error) {
	if d.opts.Secrets == nil {
		return nil, fmt.Errorf("no credential store is available on this system")
	}
	return d.opts.Secrets.Get(scope)
}

// secretCheck says, without reading it, whether scope's secret can be had
// (see gateway.Options.SecretCheck): nil, or the store's error (matching
// secrets.ErrNotFound, ErrLocked, ErrUnavailable…).
func (d *Daemon) secretCheck(scope string) error {
	if d.opts.Secrets == nil {
		return &secrets.Error{Store: "credential store", Op: "look up", Scope: scope, Kind: secrets.ErrUnavailable, Detail: "no credential store is available on this system"}
	}
	return d.opts.Secrets.Exists(scope)
}

// agentNameWait is how long a launch card waits for the agent's handshake,
// to name the agent as it calls itself: the first launch starts as the
// agent connects, and an agent sends its initialize at once.
const agentNameWait = time.Second

// envCredentials returns the "env" credentials of srv as K=V pairs, after a
// person approved this execution identity for them: a new identity waits for
// approval, and its card shows what changed on disk. A secret that cannot be
// read fails the launch: nothing is ever launched with an empty secret in its
// place. A credential that asks on every use waits for a person at every
// launch, of approved builds too.
//
// After a rebuild the launch card also proposes the tools the person chose
// for the run's previous epoch (authz.Authority.ProposeLaunch): one card
// for the launch credentials and the tools (unless the server also has a
// per-call credential, approved on the card of a call). The launch grant is returned
// (nil when nobody was asked) so that its tools are granted on the epoch
// the launch starts (authz.Authority.BindLaunch).
func (d *Daemon) envCredentials(ctx context.Context, cfg *config.Config, srv config.Server, label string, run ids.RunID, agent gateway.Agent, rec identity.Record, asked *identity.Record) ([]string, *authz.Grant, error) {
	var scopes []string
	var creds []gateway.Credential
	askEvery, perCall := false, false
	for _, c := range credentialsOf(cfg, srv) {
		if c.Inject == config.InjectEnv {
			scopes = append(scopes, c.Scope)
			creds = append(creds, c)
			askEvery = askEvery || c.AskEveryUse
		} else {
			perCall = true
		}
	}
	if len(scopes) == 0 {
		return nil, nil, nil
	}
	// A secret that is not there fails the launch before anyone is asked
	// to approve a launch that could not happen.
	var locked []string
	for _, scope := range scopes {
		switch err := d.secretCheck(scope); {
		case errors.Is(err, secrets.ErrLocked):
			locked = append(locked, scope) // the person may unlock it while deciding
		case err != nil:
			return nil, nil, credentialUnavailable(label, scope, err)
		}
	}
	ident := authz.IdentityDigest(rec)
	var launch *authz.Grant
	if askEvery || !d.authz.IdentityApproved(run, ident, scopes) {
		// No epoch yet: the process starts once this is approved, so
		// CurrentEpoch stays empty and the card names the code instead.
		card := authz.Card{
			Reason:           fmt.Sprintf("%s asks for credentials %s at launch: approve this code before it receives them", label, strings.Join(scopes, ", ")),
			AskEveryUse:      askEvery,
			AgentRun:         run,
			AgentExe:         agent.Exe,
			AgentPID:         agent.PID,
			ServerLabel:      label,
			Identity:         ident,
			LaunchCommand:    rec.LaunchCommand,
			Executable:       rec.ResolvedExecutable.Path,
			ExecutableDigest: rec.ResolvedExecutable.SHA256,
			CredentialScope:  scopes,
			Measured:         authz.MeasuredParts(rec),
			Code:             ident,
		}
		if rec.Entry != "" && rec.Entry != rec.ResolvedExecutable.Path {
			card.Entry, card.EntryDigest = rec.Entry, rec.EntryDigest
		}
		if prev, ok := d.lastRecord(run); ok {
			card.PreviousEpoch = prev.Epoch
			card.IdentityChanges = identity.Diff(prev, rec)
		}
		if asked != nil {
			// The code changed on disk during the launch (typically while
			// a person read the card of the build before): this card
			// shows what changed since that build.
			card.Reason = fmt.Sprintf("the code of %s changed on disk during its launch: approve this build before it receives credentials %s", label, strings.Join(scopes, ", "))
			card.IdentityChanges = identity.Diff(*asked, rec)
		}
		if len(locked) > 0 {
			card.Reason += fmt.Sprintf(" (the keychain holding %s is locked: unlock it before you approve, or the launch fails)", strings.Join(locked, ", "))
		}
		d.mu.Lock()
		aw := d.auditW
		d.mu.Unlock()
		if err := aw.Err(); err != nil {
			// Nobody is asked to approve what the audit log could not record.
			return nil, nil, fmt.Errorf("%s was not launched: its credentials need an approval, and %w", label, err)
		}
		d.mu.Lock()
		sess := d.runs[run]
		d.mu.Unlock()
		if sess != nil {
			card.AgentName = sess.AgentName(ctx, agentNameWait)
		}
		if !perCall {
			// A per-call credential is approved on the call's card,
			// which shows it; without one, the tools come with the launch.
			card = d.authz.ProposeLaunch(card)
		}
		if len(card.ToolScope) > 0 {
			card.Reason += fmt.Sprintf("; approving also grants %s on the new process, for this run, as you chose for the previous code", strings.Join(card.ToolScope, ", "))
		}
		id := d.authz.Raise(card)
		g, err := d.authz.WaitRun(ctx, id, run)
		if err != nil {
			return nil, nil, fmt.Errorf("credentials %s were not approved for this build of %s (%w); it was not launched", strings.Join(scopes, ", "), label, err)
		}
		launch = g
	}
	var env []string
	for _, c := range creds {
		secret, err := d.secret(c.Scope)
		if err == nil && len(secret) == 0 {
			err = fmt.Errorf("the stored secret is empty")
		}
		if err != nil {
			return nil, nil, credentialUnavailable(label, c.Scope, err)
		}
		env = append(env, c.EnvVar+"="+string(secret))
	}
	return env, launch, nil
}

// credentialUnavailable is the launch failure of label when scope's secret
// cannot be had, with what to do about it.
func credentialUnavailable(label, scope string, err error) error {
	var what, fix string
	switch {
	case errors.Is(err, secrets.ErrNotFound):
		what, fix = fmt.Sprintf("no secret is stored for credential scope %q", scope), fmt.Sprintf("store it with `portcullis creds set %s` (secret on stdin)", scope)
	case errors.Is(err, secrets.ErrLocked):
		what, fix = fmt.Sprintf("the keychain holding credential scope %q is locked (%v)", scope, err), "unlock it"
	case errors.Is(err, secrets.ErrUnavailable):
		what, fix = fmt.Sprintf("no keychain answers for credential scope %q (%v)", scope, err), "start the system keychain (Secret Service) in this session"
	default:
		what, fix = fmt.Sprintf("credential scope %q cannot be read (%v)", scope, err), fmt.Sprintf("check it with `portcullis creds list`, or set it again with `portcullis creds set %s`", scope)
	}
	return fmt.Errorf("%w: %s; %s was not launched — %s", gateway.ErrCredentialUnavailable, what, label, fix)
}

// lastRecord is the execution record of the current epoch of run.
func (d *Daemon) lastRecord(run ids.RunID) (identity.Record, bool) {
	d.mu.Lock()
	s := d.runs[run]
	d.mu.Unlock()
	if s == nil {
		return identity.Record{}, false
	}
	ep, ok := s.Record()
	if !ok {
		return identity.Record{}, false
	}
	return ep.Record, true
}

func (d *Daemon) session(run ids.RunID) *gateway.Session {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runs[run]
}

func (d *Daemon) approvalRequested(r authz.Request) {
	rec, ok := d.lastRecord(r.Card.AgentRun)
	d.code.requested(r, rec, ok && rec.Epoch == r.Card.CurrentEpoch)
	d.appendAudit(audit.TypeApprovalRequested, audit.ApprovalRequested{
		Request: r.ID, AgentRun: r.Card.AgentRun, ServerLabel: r.Card.ServerLabel, Epoch: r.Card.CurrentEpoch, Identity: r.Card.Identity,
		CatalogRevision: r.Card.CatalogRevision, ToolScope: r.Card.ToolScope, CredentialScope: r.Card.CredentialScope,
		Reason: r.Card.Reason, OtherTools: r.Card.OtherTools, Stale: r.Card.Stale, ServerRequest: serverRequestKind(r.Card),
		ToolContracts: r.Card.ToolContracts, AlsoRuns: alsoRuns(r.Card),
	})
}

// alsoRuns lists, for the audit log, the runs a folded card decides
// besides its own.
func alsoRuns(c authz.Card) []audit.RunEpoch {
	var out []audit.RunEpoch
	for _, rc := range c.AlsoRuns {
		out = append(out, audit.RunEpoch{AgentRun: rc.AgentRun, Epoch: rc.CurrentEpoch})
	}
	return out
}

// approvalGranted records a grant in the audit log before it can be used;
// a grant the log cannot record is not made (authz.Options.OnGranted).
func (d *Daemon) approvalGranted(r authz.Request, g authz.Grant) error {
	var who audit.Decider
	if r.Decider != nil {
		who = *r.Decider
	}
	if err := d.appendAudit(audit.TypeApprovalGranted, audit.ApprovalGranted{
		Decider: who,
		Request: r.ID, Grant: g.ID, AgentRun: g.AgentRun, ServerLabel: g.ServerLabel, Epoch: g.ExecutionEpoch, Identity: g.Identity,
		ToolScope: g.ToolScope, CredentialScope: g.CredentialScope, ExpiresWhen: g.ExpiresWhen, ServerRequest: g.ServerRequest,
		ToolContracts: g.Contracts,
	}); err != nil {
		return err
	}
	d.code.decided(r.ID, g.ServerRequest == "")
	if s := d.session(g.AgentRun); s != nil && g.Identity == "" {
		s.NoteGranted(g)
	}
	return nil
}

func (d *Daemon) approvalDenied(r authz.Request, reason string) {
	d.code.decided(r.ID, false)
	d.appendAudit(audit.TypeApprovalDenied, audit.ApprovalDenied{
		Request: r.ID, AgentRun: r.Card.AgentRun, ServerLabel: r.Card.ServerLabel, Epoch: r.Card.CurrentEpoch, Identity: r.Card.Identity, Reason: reason,
		By: r.DecidedBy, Stale: r.Card.Stale,
	})
}

// approvalWithdrawn records a request withdrawn without a decision: not a
// person's denial (authz.Options.OnWithdrawn).
func (d *Daemon) approvalWithdrawn(r authz.Request, why string) {
	d.code.decided(r.ID, false)
	d.appendAudit(audit.TypeApprovalWithdrawn, audit.ApprovalWithdrawn{
		Request: r.ID, AgentRun: r.Card.AgentRun, ServerLabel: r.Card.ServerLabel, Epoch: r.Card.CurrentEpoch, Identity: r.Card.Identity,
		Tool: r.Card.Tool, Reason: why,
	})
}

func (d *Daemon) appendAudit(typ string, fields any) error {
	d.mu.Lock()
	w := d.auditW
	d.mu.Unlock()
	if w == nil {
		return nil
	}
	_, err := w.Append(context.Background(), typ, fields)
	if err != nil {
		d.log.Error("audit log write failed", "type", typ, "err", err)
	}
	return err
}

// serverRequestKind is the kind of server request card c is about, "" for
// a card of a call or a launch.
func serverRequestKind(c authz.Card) string {
	if c.ServerRequest == nil {
		return ""
	}
	return c.ServerRequest.Kind
}
