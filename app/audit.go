package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/textsafe"
	"github.com/portcullis/portcullis/platform"
)

// The audit commands read the log files directly (package audit's readers
// and Verify), so they work whether or not the daemon runs and never write;
// setup-keys and acknowledge ask the daemon, which writes the log.

const auditUsage = "audit needs a subcommand: tail [--json] [-n N] [-f], verify [--key K] [--dir D] [--json], setup-keys [--force], acknowledge, rotate-key, sessions [--server L] [--run R] [-n N] [--json], activity [--server L] [--run R] [-n N] [--json]"

func (a *App) runAudit(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("%s", auditUsage)
	}
	switch args[0] {
	case "tail":
		return a.auditTail(ctx, args[1:])
	case "verify":
		return a.auditVerify(args[1:])
	case "setup-keys":
		return a.auditSetupKeys(args[1:])
	case "acknowledge":
		return a.auditAcknowledge(args[1:])
	case "rotate-key":
		return a.auditRotateKey(args[1:])
	case "sessions":
		return a.auditSessions(args[1:])
	case "activity":
		return a.auditActivity(args[1:])
	}
	return usagef("unknown audit subcommand %q (tail, verify, setup-keys, acknowledge, rotate-key, sessions, activity)", args[0])
}

// auditDir returns the audit directory, or a message for a person when
// there is no log yet.
func (a *App) auditDir() (dir string, missing bool, err error) {
	return statAuditDir(daemon.AuditDir(a.Dirs))
}

// statAuditDir reports whether the audit directory dir is missing.
func statAuditDir(dir string) (string, bool, error) {
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return dir, true, nil
		}
		return dir, false, err
	}
	return dir, false, nil
}

func (a *App) auditTail(ctx context.Context, args []string) error {
	o := auditTailFlags()
	fs, asJSON, n, follow := o.fs, o.asJSON, o.n, o.follow
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("audit tail takes no arguments")
	}
	if *n < 0 {
		return usagef("audit tail: -n must not be negative")
	}
	dir, missing, err := a.auditDir()
	if err != nil {
		return err
	}
	emit := func(e audit.Event) error {
		if *asJSON {
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			_, err = a.Stdout.Write(append(textsafe.JSON(b), '\n')) // the same values, no raw control characters
			return err
		}
		_, err := fmt.Fprintln(a.Stdout, eventLine(e))
		return err
	}
	var from uint64 = 1
	if missing {
		if !*follow {
			if !*asJSON {
				fmt.Fprintf(a.Stdout, "No audit log yet in %s (the daemon starts it).\n", dir)
			}
			return nil
		}
		if err := waitForDir(ctx, dir); err != nil {
			return nil // interrupted
		}
	} else {
		evs, err := audit.Tail(dir, *n)
		if err != nil {
			return err
		}
		if len(evs) == 0 && *n > 0 && !*asJSON && !*follow {
			fmt.Fprintf(a.Stdout, "The audit log in %s holds no events yet.\n", dir)
		}
		for _, e := range evs {
			if err := emit(e); err != nil {
				return err
			}
		}
		if len(evs) > 0 {
			from = evs[len(evs)-1].Seq + 1
		} else if *n == 0 {
			// Start after the current end without printing anything.
			if last, err := audit.Tail(dir, 1); err == nil && len(last) == 1 {
				from = last[0].Seq + 1
			}
		}
	}
	if !*follow {
		return nil
	}
	out := make(chan audit.Event)
	done := make(chan error, 1)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { done <- audit.Follow(fctx, dir, from, out) }()
	for {
		select {
		case e := <-out:
			if err := emit(e); err != nil {
				return err
			}
		case err := <-done:
			if ctx.Err() != nil {
				return nil // interrupted: the normal end of -f
			}
			return err
		}
	}
}

// waitForDir polls until dir exists or ctx ends.
func waitForDir(ctx context.Context, dir string) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(dir); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// eventFields is the union of the fields eventLine shows, across event types.
type eventFields struct {
	AgentRun        ids.RunID         `json:"agentRun"`
	ServerLabel     string            `json:"serverLabel"`
	Epoch           ids.EpochID       `json:"epoch"`
	OldEpoch        ids.EpochID       `json:"oldEpoch"`
	NewEpoch        ids.EpochID       `json:"newEpoch"`
	CurrentEpoch    ids.EpochID       `json:"currentEpoch"`
	ApprovedEpoch   ids.EpochID       `json:"approvedEpoch"`
	Identity        string            `json:"identity"`
	PID             int               `json:"pid"`
	ExitCode        *int              `json:"exitCode"`
	Signal          string            `json:"signal"`
	Tool            string            `json:"tool"`
	Call            ids.CallID        `json:"call"`
	Decision        string            `json:"decision"`
	Grant           ids.GrantID       `json:"grant"`
	Reason          string            `json:"reason"`
	Outcome         string            `json:"outcome"`
	DurationMS      float64           `json:"durationMs"`
	Error           string            `json:"error"`
	Request         ids.RequestID     `json:"request"`
	Stale           bool              `json:"stale"`
	ToolScope       []string          `json:"toolScope"`
	CredentialScope []string          `json:"credentialScope"`
	ExpiresWhen     string            `json:"expiresWhen"`
	Revision        uint64            `json:"revision"`
	Digest          string            `json:"digest"`
	Tools           int               `json:"tools"`
	PassedThrough   bool              `json:"passedThrough"`
	Kind            string            `json:"kind"`
	Method          string            `json:"method"`
	Subscription    string            `json:"subscription"`
	CatalogRevision uint64            `json:"catalogRevision"`
	Diff            audit.DiffSummary `json:"diff"`
	Paths           []string          `json:"paths"`
	Digests         []string          `json:"digests"`
	Agent           audit.Agent       `json:"agent"`
	File            string            `json:"file"`
	Changes         []string          `json:"changes"`
	Failure         string            `json:"failure"`
	Offset          int64             `json:"offset"`
	Length          int64             `json:"length"`
	After           uint64            `json:"after"`
	UnsignedThrough uint64            `json:"unsignedThrough"`
	By              string            `json:"by"`
	ID              string            `json:"id"`
	ServerRequest   string            `json:"serverRequest"`
	Held            []string          `json:"held"`
	Keys            []string          `json:"keys"`
	Channel         string            `json:"channel"`
	Authentication  string            `json:"authentication"`
}

// eventLine renders one event for a person, on one line: UTC time with
// milliseconds, #seq (padded), type, then the event's key fields as key=value (server,
// run, epoch abbreviated (ids.EpochID.Short), tool, decision or reason…).
func eventLine(e audit.Event) string {
	var f eventFields
	_ = e.DecodeFields(&f) // unknown or odd fields: show what decodes
	var b strings.Builder
	// #seq is padded so that the columns after it stay aligned up to #999999.
	fmt.Fprintf(&b, "%s  %-7s  %-20s", e.TS.UTC().Format("2006-01-02T15:04:05.000Z"), "#"+strconv.FormatUint(e.Seq, 10), e.Type)
	kv := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, " %s=%s", k, quoteValue(v))
		}
	}
	kv("server", f.ServerLabel)
	kv("run", f.AgentRun.String())
	switch e.Type {
	case audit.TypeServerReplaced:
		kv("epoch", f.OldEpoch.Short()+"->"+f.NewEpoch.Short())
	case audit.TypeAuthorizationDenied:
		kv("epoch", f.CurrentEpoch.Short())
		kv("approvedEpoch", f.ApprovedEpoch.Short())
	case audit.TypeCallRefused:
		if f.Epoch != "" && f.CurrentEpoch != "" && f.Epoch != f.CurrentEpoch {
			kv("epoch", f.Epoch.Short()+"->"+f.CurrentEpoch.Short())
		} else if f.Epoch != "" {
			kv("epoch", f.Epoch.Short())
		} else {
			kv("epoch", f.CurrentEpoch.Short())
		}
		kv("approvedEpoch", f.ApprovedEpoch.Short())
	default:
		kv("epoch", f.Epoch.Short())
	}
	if f.Identity != "" {
		// A launch approval, before any epoch: the code it is for.
		kv("identity", identity.ShortDigest(f.Identity))
	}
	if f.PID != 0 {
		kv("pid", strconv.Itoa(f.PID))
	}
	kv("tool", f.Tool)
	if flag, ok := textsafe.Inspect([]string{f.Tool})[f.Tool]; ok && f.Tool != "" {
		kv("warning", flag.String())
	}
	switch e.Type {
	case audit.TypeToolCalled:
		kv("decision", f.Decision)
		kv("grant", f.Grant.String())
		if f.CatalogRevision != 0 {
			kv("catalog", strconv.FormatUint(f.CatalogRevision, 10))
		}
		kv("credentials", strings.Join(f.CredentialScope, ","))
	case audit.TypeToolCompleted:
		kv("outcome", f.Outcome)
		kv("ms", strconv.FormatFloat(f.DurationMS, 'f', -1, 64))
		kv("error", f.Error)
	case audit.TypeAuthorizationDenied:
		kv("reason", f.Reason)
	case audit.TypeCallRefused:
		kv("method", f.Method)
		kv("kind", f.Kind)
		kv("request", f.Request.String())
		if f.CatalogRevision != 0 {
			kv("catalog", strconv.FormatUint(f.CatalogRevision, 10))
		}
		kv("reason", f.Reason)
	case audit.TypeCatalogPresented:
		if f.PassedThrough {
			kv("passedThrough", "true")
		} else {
			kv("revision", strconv.FormatUint(f.Revision, 10))
			kv("digest", identity.ShortDigest(f.Digest))
		}
		kv("tools", strconv.Itoa(f.Tools))
	case audit.TypeListChangedSent:
		kv("revision", strconv.FormatUint(f.Revision, 10))
		kv("subscription", f.Subscription)
		kv("reason", f.Reason)
	case audit.TypeServerExited:
		if f.Signal != "" {
			kv("signal", f.Signal)
		} else if f.ExitCode != nil {
			kv("exit", strconv.Itoa(*f.ExitCode))
		}
	case audit.TypeBuildDetected:
		kv("changed", strings.Join(f.Digests, ","))
		kv("paths", strings.Join(f.Paths, ","))
	case audit.TypeCatalogRevised:
		kv("revision", strconv.FormatUint(f.Revision, 10))
		kv("added", strings.Join(f.Diff.Added, ","))
		kv("removed", strings.Join(f.Diff.Removed, ","))
		kv("changed", strings.Join(f.Diff.Changed, ","))
	case audit.TypeRunStarted:
		kv("agent", f.Agent.Executable)
		if f.Agent.PID != 0 {
			kv("agentPid", strconv.Itoa(f.Agent.PID))
		}
	case audit.TypeApprovalRequested, audit.TypeApprovalGranted, audit.TypeApprovalDenied:
		kv("request", f.Request.String())
		kv("serverRequest", f.ServerRequest)
		kv("tools", strings.Join(f.ToolScope, ","))
		kv("credentials", strings.Join(f.CredentialScope, ","))
		kv("expires", f.ExpiresWhen)
		if e.Type == audit.TypeApprovalDenied {
			kv("by", f.By)
		}
		if e.Type == audit.TypeApprovalGranted {
			kv("channel", f.Channel)
			kv("authentication", f.Authentication)
		}
		if f.Stale {
			kv("stale", "true") // raised with an authorization_stale refusal
		}
	case audit.TypeUnrequestedAnswer:
		kv("id", f.ID)
	case audit.TypeReservedMetaRemoved:
		kv("method", f.Method)
		kv("keys", strings.Join(f.Keys, ","))
	case audit.TypeServerRequest:
		kv("method", f.Method)
		kv("decision", f.Decision)
		kv("grant", f.Grant.String())
	case audit.TypeApprovalWithdrawn:
		kv("request", f.Request.String())
		kv("reason", f.Reason)
	case audit.TypeLogRecovered:
		kv("file", f.File)
		kv("offset", strconv.FormatInt(f.Offset, 10))
		kv("length", strconv.FormatInt(f.Length, 10))
		kv("after", strconv.FormatUint(f.After, 10))
	case audit.TypeSigningEnabled:
		kv("unsignedThrough", strconv.FormatUint(f.UnsignedThrough, 10))
	case audit.TypeLogResumed:
		kv("failure", f.Failure)
	case audit.TypeConfigChanged:
		kv("file", f.File)
		kv("changes", strings.Join(f.Changes, "; "))
		kv("by", f.By)
	case daemon.TypeConfigChangeHeld, daemon.TypeConfigChangeConfirmed, daemon.TypeConfigChangeRejected, daemon.TypeConfigChangeDropped:
		kv("change", f.ID)
		kv("held", strings.Join(f.Held, "; "))
		kv("by", f.By)
		kv("channel", f.Channel)
		kv("authentication", f.Authentication)
	}
	switch e.Type {
	case audit.TypeAuthorizationDenied, audit.TypeCallRefused, audit.TypeListChangedSent:
		// reason shown above, in its place
	default:
		kv("reason", f.Reason)
	}
	return strings.TrimRight(b.String(), " ")
}

// quoteValue quotes a value that holds spaces, quotes, backslashes, or
// characters that textsafe escapes (controls, bidi, zero-width:
// strconv.Quote writes them as escapes, and a backslash as \\, so the text
// \x1b and ESC do not look alike).
func quoteValue(v string) string {
	if strings.ContainsFunc(v, func(r rune) bool {
		return r <= ' ' || r == '"' || r == '\\' || textsafe.Unsafe(r) || r == utf8.RuneError
	}) {
		return strconv.Quote(v)
	}
	return v
}

// verifyResult is the JSON form of `portcullis audit verify --json`.
type verifyResult struct {
	Dir      string `json:"dir"`
	OK       bool   `json:"ok"`
	Events   uint64 `json:"events"`
	Files    int    `json:"files"`
	FirstBad uint64 `json:"firstBad,omitempty"`
	Problem  string `json:"problem,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Torn     bool   `json:"torn"`
	Signed   bool   `json:"signaturesChecked"`
	KeyNote  string `json:"keyNote,omitempty"`
	Unsigned uint64 `json:"unsigned,omitempty"`
	// Unchecked: the log has signed events, but no key was available to
	// check them; only the hash chain was verified (exit status 3).
	Unchecked    bool   `json:"signaturesUnchecked,omitempty"`
	SignedEvents uint64 `json:"signedEvents,omitempty"`
	// SigningOff are the stretches written with signing turned off
	// (settings.auditSigning false), oldest first: their events carry no
	// signature. Accepted, not a failure: each begins with a signed
	// signing_disabled event.
	SigningOff []signingOffJSON `json:"signingOff,omitempty"`
	Recovered  []recoveredJSON  `json:"recovered,omitempty"`
	Warnings   []string         `json:"warnings,omitempty"`
	sealJSON
}

// signingOffJSON is a stretch of the log written with signing off: from the
// signing_disabled event at seq disabled to the signing_enabled at seq
// enabled (absent: to the end of the log).
type signingOffJSON struct {
	Disabled uint64 `json:"disabled"`
	Enabled  uint64 `json:"enabled,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// recoveredJSON is a torn region that a log_recovered event accounts for.
type recoveredJSON struct {
	Seq    uint64 `json:"seq"` // of the log_recovered event
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
}

// auditKeyForVerify reads the signing key from the credential store. It
// returns nil and a note when signatures cannot be checked.
func auditKeyForVerify() ([]byte, string) {
	key, err := daemon.ReadAuditKey(platform.NewSecretStore())
	if err != nil {
		return nil, err.Error()
	}
	return key, ""
}

func (a *App) auditVerify(args []string) error {
	o := auditVerifyFlags()
	fs, asJSON, keyText := o.fs, o.asJSON, o.key
	anchorPath := daemon.AnchorPath(a.Dirs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("audit verify takes no arguments")
	}
	var opts audit.VerifyOptions
	if *keyText != "" {
		vk, err := audit.ParseVerificationKey(*keyText)
		if err != nil {
			return usagef("--key: %v", err)
		}
		opts.Seal = &vk
		if *o.dir != "" {
			anchorPath = filepath.Join(*o.dir, "anchor.json") // where rotate-key put it
		}
		if an, ok, err := audit.ReadAnchor(anchorPath); err != nil {
			return err
		} else if ok {
			opts.Anchor = &an
		}
	}
	dir, missing, err := a.auditDir()
	if *o.dir != "" {
		dir, missing, err = statAuditDir(*o.dir)
	}
	if err != nil {
		return err
	}
	if missing && opts.Seal != nil {
		res := verifyResult{Dir: dir, Problem: audit.ProblemEmpty, Detail: "no audit log in " + dir + ", but a verification key exists: the log was deleted"}
		if *asJSON {
			_ = writeJSON(a.Stdout, res)
		} else {
			writeVerify(a.Stdout, res)
		}
		return errExit1
	}
	if missing {
		if *asJSON {
			_ = writeJSON(a.Stdout, verifyResult{Dir: dir, Problem: "missing", Detail: "no audit log in " + dir})
		} else {
			fmt.Fprintf(a.Stdout, "No audit log in %s: nothing to verify.\n", dir)
		}
		return errExit1
	}
	key, keyNote := auditKeyForVerify()
	opts.Key = key
	rep, err := audit.VerifyWith(dir, opts)
	if err != nil && !errors.Is(err, audit.ErrBroken) {
		return err
	}
	res := verifyResult{Dir: dir, OK: !rep.Failed(), Events: rep.Events, Files: rep.Files, FirstBad: rep.FirstBad,
		Problem: rep.Problem, Detail: rep.Detail, Torn: rep.Problem == audit.ProblemTorn, Signed: rep.Signed,
		KeyNote: keyNote, Unsigned: rep.Unsigned, Warnings: rep.Warnings,
		Unchecked: !rep.Signed && rep.SignedEvents > 0, SignedEvents: rep.SignedEvents}
	for _, rc := range rep.Recovered {
		res.Recovered = append(res.Recovered, recoveredJSON(rc))
	}
	for _, so := range rep.SigningOff {
		res.SigningOff = append(res.SigningOff, signingOffJSON(so))
	}
	if res.Torn {
		res.FirstBad, res.Problem = 0, ""
	}
	res.sealJSON = sealResult(rep)
	if *asJSON {
		if err := writeJSON(a.Stdout, res); err != nil {
			return err
		}
	} else {
		writeVerify(a.Stdout, res)
	}
	switch {
	case !res.OK:
		return errExit1
	case res.Unchecked, res.SealsUnchecked:
		return errExit3
	}
	return nil
}

// writeVerify prints a verification result for a person.
func writeVerify(w io.Writer, r verifyResult) {
	if !r.OK {
		fmt.Fprintf(w, "Audit log FAILED verification at seq %d: %s\n  %s\n  %s before it verified (%s, %s).\n",
			r.FirstBad, r.Problem, r.Detail, count(r.Events, "event", "events"), r.Dir, count(r.Files, "file", "files"))
	} else {
		fmt.Fprintf(w, "Audit log OK: %s in %s verified (%s): hashes, chain and sequence intact.\n", count(r.Events, "event", "events"), count(r.Files, "file", "files"), r.Dir)
	}
	switch {
	case r.Signed && r.Unsigned > 0:
		fmt.Fprintf(w, "Signatures checked (HMAC-SHA256, key %s); the first %s signing.\n", daemon.AuditKeyScope, count(r.Unsigned, "event predates", "events predate"))
	case r.Signed:
		fmt.Fprintf(w, "Signatures checked (HMAC-SHA256, key %s).\n", daemon.AuditKeyScope)
	case r.Unchecked && r.OK:
		fmt.Fprintf(w, "NOT FULLY VERIFIED: %s signed, but no key from the credential store could check them (%s).\n"+
			"  The hash chain alone can be recomputed after an edit; restore the key %s and verify again (exit status 3).\n", count(r.SignedEvents, "event is", "events are"), r.KeyNote, daemon.AuditKeyScope)
	default:
		fmt.Fprintf(w, "Signatures were NOT checked: no key from the credential store (%s; --json has the whole reason, portcullis help audit explains).\n", shortAuditNote(r.KeyNote))
	}
	if r.OK {
		for _, so := range r.SigningOff {
			writeSigningOff(w, so, r.Events)
		}
	}
	if r.Torn {
		fmt.Fprintf(w, "The last line is torn (a crash while writing): %s\n  This is not a failure; the next daemon start records it with log_recovered.\n", r.Detail)
	}
	for _, rc := range r.Recovered {
		fmt.Fprintf(w, "Torn bytes recorded by log_recovered at seq %d: %d bytes at offset %d of %s.\n", rc.Seq, rc.Length, rc.Offset, rc.File)
	}
	writeSeals(w, r)
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "Warning: %s\n", warn)
	}
}

// writeSigningOff says that signing was turned off for a stretch of a log
// of last events.
func writeSigningOff(w io.Writer, so signingOffJSON, last uint64) {
	why := ""
	if so.Reason != "" {
		why = " (" + so.Reason + ")"
	}
	switch {
	case so.Enabled != 0:
		fmt.Fprintf(w, "Signing was turned off at seq %d%s and on again at seq %d: the events between carry no signature.\n", so.Disabled, why, so.Enabled)
	case last > so.Disabled:
		fmt.Fprintf(w, "Signing was turned off at seq %d%s: events %d to %d carry no signature, so someone who could write the log could have forged them.\n",
			so.Disabled, why, so.Disabled+1, last)
	default:
		fmt.Fprintf(w, "Signing was turned off at seq %d%s, the last event: the events after it will carry no signature.\n", so.Disabled, why)
	}
}

// auditFilterFlags parses --server, --run and -n for sessions and activity.
func auditFilterFlags(name string, args []string) (audit.Filter, bool, error) {
	o := auditFilterFlagSet(name)
	fs, server, run, n, asJSON := o.fs, o.server, o.run, o.n, o.asJSON
	if err := parseFlags(fs, args); err != nil {
		return audit.Filter{}, false, err
	}
	if fs.NArg() > 0 {
		return audit.Filter{}, false, usagef("%s takes no arguments (filter with --server LABEL, --run RUN)", name)
	}
	if *n < 0 {
		return audit.Filter{}, false, usagef("%s: -n must not be negative", name)
	}
	return audit.Filter{Server: *server, Run: ids.RunID(*run), Limit: *n}, *asJSON, nil
}

// sessionJSON is one agent run in `portcullis audit sessions --json`.
type sessionJSON struct {
	AgentRun    ids.RunID   `json:"agentRun"`
	ServerLabel string      `json:"serverLabel"`
	Agent       audit.Agent `json:"agent"`
	Started     *time.Time  `json:"started,omitempty"`
	Ended       *time.Time  `json:"ended,omitempty"`
	EndReason   string      `json:"endReason,omitempty"`
	StartSeq    uint64      `json:"startSeq"`
	EndSeq      uint64      `json:"endSeq,omitempty"`
	Grants      []grantJSON `json:"grants"`
	Calls       int         `json:"calls"`
	Denied      int         `json:"denied"`
}

type grantJSON struct {
	Seq             uint64        `json:"seq"`
	TS              time.Time     `json:"ts"`
	Request         ids.RequestID `json:"request"`
	Epoch           ids.EpochID   `json:"epoch"`
	ToolScope       []string      `json:"toolScope,omitempty"`
	CredentialScope []string      `json:"credentialScope,omitempty"`
	ExpiresWhen     string        `json:"expiresWhen"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (a *App) auditSessions(args []string) error {
	f, asJSON, err := auditFilterFlags("audit sessions", args)
	if err != nil {
		return err
	}
	dir, missing, err := a.auditDir()
	if err != nil {
		return err
	}
	var ss []audit.Session
	if !missing {
		if ss, err = audit.Sessions(dir, f); err != nil {
			return err
		}
	}
	if asJSON {
		out := make([]sessionJSON, 0, len(ss))
		for _, s := range ss {
			j := sessionJSON{AgentRun: s.AgentRun, ServerLabel: s.ServerLabel, Agent: s.Agent, Started: timePtr(s.Started),
				Ended: timePtr(s.Ended), EndReason: s.EndReason, StartSeq: s.StartSeq, EndSeq: s.EndSeq,
				Grants: []grantJSON{}, Calls: s.Calls, Denied: s.Denied}
			for _, g := range s.Grants {
				j.Grants = append(j.Grants, grantJSON(g))
			}
			out = append(out, j)
		}
		return writeJSON(a.Stdout, out)
	}
	if len(ss) == 0 {
		fmt.Fprintf(a.Stdout, "No agent runs recorded in %s.\n", dir)
		return nil
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSERVER\tSTARTED\tENDED\tCALLS\tDENIED\tGRANTS\tAGENT")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", s.AgentRun, s.ServerLabel, fmtTime(s.Started), fmtTime(s.Ended),
			s.Calls, s.Denied, len(s.Grants), textsafe.Line(agentText(s.Agent)))
	}
	return tw.Flush()
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

func agentText(ag audit.Agent) string {
	s := ag.Executable
	if ag.Name != "" {
		s = strings.TrimSpace(ag.Name + " " + ag.Version + " " + s)
	}
	if ag.PID != 0 {
		s += fmt.Sprintf(" (pid %d)", ag.PID)
	}
	if s == "" {
		return "-"
	}
	return s
}

// callJSON is one call in `portcullis audit activity --json`.
type callJSON struct {
	Seq             uint64      `json:"seq"`
	TS              time.Time   `json:"ts"`
	Call            ids.CallID  `json:"call,omitempty"`
	AgentRun        ids.RunID   `json:"agentRun"`
	ServerLabel     string      `json:"serverLabel"`
	Tool            string      `json:"tool"`
	Epoch           ids.EpochID `json:"epoch,omitempty"`
	CatalogRevision uint64      `json:"catalogRevision,omitempty"`
	Decision        string      `json:"decision"`
	Grant           ids.GrantID `json:"grant,omitempty"`
	Reason          string      `json:"reason,omitempty"`
	ArgsDigest      string      `json:"argsDigest,omitempty"`
	ArgKeys         []string    `json:"argKeys,omitempty"`
	Completed       bool        `json:"completed"`
	CompletedSeq    uint64      `json:"completedSeq,omitempty"`
	Outcome         string      `json:"outcome,omitempty"`
	DurationMS      float64     `json:"durationMs,omitempty"`
	Error           string      `json:"error,omitempty"`
}

func (a *App) auditActivity(args []string) error {
	f, asJSON, err := auditFilterFlags("audit activity", args)
	if err != nil {
		return err
	}
	dir, missing, err := a.auditDir()
	if err != nil {
		return err
	}
	var calls []audit.Call
	if !missing {
		if calls, err = audit.Activity(dir, f); err != nil {
			return err
		}
	}
	if asJSON {
		out := make([]callJSON, 0, len(calls))
		for _, c := range calls {
			out = append(out, callJSON{Seq: c.Seq, TS: c.TS, Call: c.Call, AgentRun: c.AgentRun, ServerLabel: c.ServerLabel,
				Tool: c.Tool, Epoch: c.Epoch, CatalogRevision: c.CatalogRevision, Decision: c.Decision, Grant: c.Grant,
				Reason: c.Reason, ArgsDigest: c.ArgsDigest, ArgKeys: c.ArgKeys, Completed: c.Completed,
				CompletedSeq: c.CompletedSeq, Outcome: c.Outcome, DurationMS: float64(c.Duration.Microseconds()) / 1000, Error: c.Error})
		}
		return writeJSON(a.Stdout, out)
	}
	if len(calls) == 0 {
		fmt.Fprintf(a.Stdout, "No tool calls recorded in %s.\n", dir)
		return nil
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tSEQ\tSERVER\tRUN\tEPOCH\tTOOL\tDECISION\tOUTCOME\tMS")
	for _, c := range calls {
		decision := c.Decision
		if c.Reason != "" {
			decision += " (" + c.Reason + ")"
		}
		outcome, ms := "-", "-"
		if c.Completed {
			outcome, ms = c.Outcome, strconv.FormatFloat(float64(c.Duration.Microseconds())/1000, 'f', 1, 64)
			if c.Error != "" {
				outcome += ": " + c.Error
			}
		} else if c.Decision != "denied" {
			outcome = "no completion recorded"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.TS.UTC().Format("2006-01-02T15:04:05.000Z"), c.Seq,
			c.ServerLabel, c.AgentRun.Short(), c.Epoch.Short(), textsafe.Name(c.Tool, nil), decision, textsafe.Line(outcome), ms)
	}
	return tw.Flush()
}

// sealJSON is what audit verify found of the forward-secure seals.
type sealJSON struct {
	// SealEvents counts log_sealed events; SealsUnchecked: there are
	// seals but no --key was given (exit status 3).
	SealEvents     uint64 `json:"sealEvents,omitempty"`
	SealsUnchecked bool   `json:"sealsUnchecked,omitempty"`
	// With --key: seals proven by the verification key, the last one,
	// seals before a re-keying (not the key's to prove), and the first
	// event no proven seal covers.
	SealsProven  int        `json:"sealsProven,omitempty"`
	SealsEarlier int        `json:"sealsEarlier,omitempty"`
	LastSeal     *sealPoint `json:"lastSeal,omitempty"`
	UnsealedFrom uint64     `json:"unsealedFrom,omitempty"`
	// Tampered are the log_tampered events the person acknowledged.
	Tampered []uint64 `json:"tamperedAcknowledged,omitempty"`
}

type sealPoint struct {
	Epoch uint64    `json:"epoch"`
	Seq   uint64    `json:"seq"`
	TS    time.Time `json:"ts"`
}

func sealResult(rep audit.Report) sealJSON {
	s := sealJSON{SealEvents: rep.SealEvents, Tampered: rep.Tampered}
	if rep.Seals == nil {
		s.SealsUnchecked = rep.SealEvents > 0 && !rep.Failed()
		return s
	}
	s.SealsProven, s.SealsEarlier, s.UnsealedFrom = rep.Seals.Proven, rep.Seals.Earlier, rep.Seals.UnsealedFrom
	if rep.Seals.Proven > 0 {
		s.LastSeal = &sealPoint{Epoch: rep.Seals.Last.Epoch, Seq: rep.Seals.Last.Seq, TS: rep.Seals.Last.TS}
	}
	return s
}

// writeSeals prints what verify could and could not check of the seals.
func writeSeals(w io.Writer, r verifyResult) {
	for _, seq := range r.Tampered {
		fmt.Fprintf(w, "The daemon found files of the log replaced or deleted under it (log_tampered at seq %d); the person acknowledged it.\n", seq)
	}
	switch {
	case r.SealsUnchecked:
		fmt.Fprintf(w, "NOT CHECKED: %d forward-secure seals; pass the verification key shown by `portcullis audit setup-keys` with --key to check them (exit status 3).\n", r.SealEvents)
	case r.LastSeal != nil && r.OK:
		fmt.Fprintf(w, "Seals checked with the verification key: %d, from the genesis to seal epoch %d at seq %d (%s).\n",
			r.SealsProven, r.LastSeal.Epoch, r.LastSeal.Seq, r.LastSeal.TS.Local().Format(time.RFC3339))
		if r.SealsEarlier > 0 {
			fmt.Fprintf(w, "  %s not this key's to prove; the hash chain up to its first seal is.\n", count(r.SealsEarlier, "seal before the keys were replaced is", "seals before the keys were replaced are"))
		}
		if r.UnsealedFrom > 0 {
			fmt.Fprintf(w, "  Events from seq %d on are not sealed yet: whoever holds the current sealing key could rewrite them.\n", r.UnsealedFrom)
		}
		fmt.Fprintln(w, "  A log cut back to an earlier seal, together with the anchor outside it, is not detectable offline: check that the last seal's time fits.")
	}
}

func (a *App) auditSetupKeys(args []string) error {
	o := auditSetupKeysFlags()
	fs, force := o.fs, o.force
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("audit setup-keys takes no arguments")
	}
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpAuditSetupKeys, Force: *force}, 30*time.Second)
	if err != nil {
		return daemonError(err)
	}
	var r daemon.SetupKeysReply
	if err := json.Unmarshal(data, &r); err != nil || r.Key == "" {
		return fmt.Errorf("the daemon's answer holds no verification key: %s", data)
	}
	fmt.Fprintf(a.Stdout, "The audit log is sealed. Its verification key (shown only now):\n\n  %s\n\n"+
		"Keep it outside this computer (on paper, in a password manager). `portcullis audit verify --key KEY`\n"+
		"checks every seal with it; without it, code running as you could rewrite the log unnoticed.\n", r.Key)
	return nil
}

func (a *App) auditAcknowledge(args []string) error {
	fs := commandFlags["audit acknowledge"]()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("audit acknowledge takes no arguments")
	}
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpAuditAcknowledge}, 10*time.Second)
	if err != nil {
		return daemonError(err)
	}
	var r struct {
		Seq uint64 `json:"seq"`
	}
	_ = json.Unmarshal(data, &r)
	fmt.Fprintf(a.Stdout, "Acknowledged log_tampered at seq %d: approvals are asked again. `portcullis audit verify --key KEY` still shows what changed.\n", r.Seq)
	return nil
}

// auditRotateKey is `portcullis audit rotate-key`: with no daemon running,
// at the person's terminal, it moves aside a signed audit log whose key is
// gone, so that the next daemon start begins a new signed log
// (daemon.RotateAuditLog).
func (a *App) auditRotateKey(args []string) error {
	fs := commandFlags["audit rotate-key"]()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("audit rotate-key takes no arguments")
	}
	if !isTerminal(a.Stdin) || !isTerminal(a.Stdout) {
		// A supervised server or the agent must not start a log of its
		// choosing: this is the person's.
		return fmt.Errorf("%w: portcullis audit rotate-key moves your audit log aside, so it runs only at a terminal of your own (stdin and stdout a terminal, not a pipe or a file); nothing was changed", errNoTerminal)
	}
	switch _, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpStatus}, 5*time.Second); {
	case err == nil:
		return errors.New("a daemon is running, so the audit log's key works (a daemon does not start on a log whose key is gone); nothing was changed. Stop Portcullis first if you mean to start a new log anyway")
	case !errors.Is(err, control.ErrNoDaemon):
		return fmt.Errorf("cannot tell whether a daemon is running (%w); nothing was changed", err)
	}
	r, err := daemon.RotateAuditLog(a.Dirs, platform.NewSecretStore(), time.Now())
	if errors.Is(err, daemon.ErrNothingToRotate) {
		fmt.Fprintf(a.Stdout, "Nothing to rotate: %v.\n", strings.TrimPrefix(err.Error(), daemon.ErrNothingToRotate.Error()+": "))
		return nil
	}
	if r.Dir == "" {
		return err
	}
	fmt.Fprintf(a.Stdout, "Moved the audit log aside to %s.\n", r.Dir)
	verify := "portcullis audit verify --dir " + r.Dir
	if r.Sealed {
		verify += " --key KEY"
	}
	fmt.Fprintf(a.Stdout, "  It stays verifiable: %s checks its hash chain%s; its signatures only with the old key %s, if you find it again.\n",
		verify, map[bool]string{true: " and, with the verification key you kept, its seals", false: ""}[r.Sealed], daemon.AuditKeyScope)
	fmt.Fprintln(a.Stdout, "The next start of Portcullis begins a new audit log, signed with a new key.")
	if r.Sealed {
		fmt.Fprintln(a.Stdout, "The old sealing key is deleted: once the daemon runs, portcullis audit setup-keys seals the new log and shows its new verification key.")
	}
	if err != nil {
		return fmt.Errorf("the log was moved, but: %w", err)
	}
	return nil
}
