package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/secrets"
)

// signingHome is a data directory whose daemon signs with a key in an
// in-memory credential store.
type signingHome struct {
	dirs  paths.Dirs
	store *secrets.Memory
}

func newSigningHome(t *testing.T) *signingHome {
	t.Helper()
	// Short: the control socket's path must fit in sockaddr_un.
	dir, err := os.MkdirTemp("", "pcsign")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &signingHome{
		dirs:  paths.Dirs{Config: filepath.Join(dir, "c"), State: filepath.Join(dir, "s"), Runtime: filepath.Join(dir, "r")},
		store: &secrets.Memory{},
	}
}

// setSigning writes settings.auditSigning (nil: absent) to the
// configuration file, as Preferences or an editor would.
func (h *signingHome) setSigning(t *testing.T, on *bool) {
	t.Helper()
	if err := os.MkdirAll(h.dirs.Config, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Settings: config.Settings{AuditSigning: on}}
	if err := config.Save(h.dirs.ConfigFile(), cfg); err != nil {
		t.Fatal(err)
	}
}

// start creates and serves a daemon as the app does (Options.AuditSigner);
// stop ends it and waits for Serve to return.
func (h *signingHome) start(t *testing.T) (d *Daemon, stop func(), err error) {
	t.Helper()
	d, err = New(Options{Dirs: h.dirs, Secrets: h.store, Peers: selfPeers{}, AuditSigner: func(on bool) ([]byte, string, error) {
		return AuditSigning(h.store, AuditDir(h.dirs), on)
	}})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	// Serve accepts connections once the audit log is open: from then on
	// every change is on the record.
	for {
		if _, err := control.Call(h.dirs.Socket(), control.Hello{Op: control.OpPing}, time.Second); err == nil {
			break
		}
		select {
		case err := <-served:
			stopped = true
			return nil, nil, err
		case <-time.After(10 * time.Millisecond):
		}
	}
	return d, stop, nil
}

// confirmHeld checks that d holds a change of the configuration file of
// kind (a widening the file asks for and that is not in force), and
// confirms it as the person would.
func confirmHeld(t *testing.T, d *Daemon, kind string) {
	t.Helper()
	p := d.PendingChange()
	if p == nil || !slices.ContainsFunc(p.Held, func(w config.Widening) bool { return w.Kind == kind }) {
		t.Fatalf("pending change %+v, want one holding %s", p, kind)
	}
	if err := d.DecideChange(p.ID, true, "test"); err != nil {
		t.Fatal(err)
	}
	if p := d.PendingChange(); p != nil {
		t.Fatalf("still pending after confirmation: %+v", p)
	}
}

// waitAudit polls Status (which reads the configuration file again) until
// the audit part satisfies ok.
func waitAudit(t *testing.T, d *Daemon, what string, ok func(AuditStatus) bool) AuditStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := d.Status().Audit
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for the audit log to be %s: status %+v", what, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// events returns the log's events as "type" or "type+sig", and the fields
// of its config_changed events.
func (h *signingHome) events(t *testing.T) (types []string, changes [][]string) {
	t.Helper()
	evs, err := audit.Tail(AuditDir(h.dirs), 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		s := e.Type
		if e.Sig != "" {
			s += "+sig"
		}
		types = append(types, s)
		if e.Type == audit.TypeConfigChanged {
			var cc audit.ConfigChanged
			if err := e.DecodeFields(&cc); err != nil {
				t.Fatal(err)
			}
			changes = append(changes, cc.Changes)
		}
	}
	return types, changes
}

func (h *signingHome) verify(t *testing.T) audit.Report {
	t.Helper()
	key, err := ReadAuditKey(h.store)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Verify(AuditDir(h.dirs), key)
	if err != nil {
		t.Fatalf("Verify: %v (%+v)", err, rep)
	}
	return rep
}

var (
	signingOff = new(false)
	signingOn  = new(true)
)

// TestAuditSigningFollowsSettings drives a serving daemon through changes
// of settings.auditSigning: each applies at once to the open log, after the
// config_changed event that names it, and the log verifies with the key,
// reporting the stretches written with signing off.
func TestAuditSigningFollowsSettings(t *testing.T) {
	defer func(d time.Duration) { signRetry = d }(signRetry)
	signRetry = 50 * time.Millisecond
	h := newSigningHome(t)
	h.setSigning(t, nil)
	d, stop, err := h.start(t)
	if err != nil {
		t.Fatal(err)
	}
	waitAudit(t, d, "signed", func(st AuditStatus) bool { return st.Signed && st.Note == "" })

	// Turning signing off by editing the file is held until confirmed.
	h.setSigning(t, signingOff)
	if st := d.Status(); !st.Audit.Signed || st.PendingChange == nil {
		t.Fatalf("after the edit, before confirmation: signed %t, pending %+v; want signed, the change pending", st.Audit.Signed, st.PendingChange)
	}
	confirmHeld(t, d, config.WidenAuditSigning)
	st := waitAudit(t, d, "unsigned by the setting", func(st AuditStatus) bool { return !st.Signed })
	if st.Note != AuditSigningOffNote || st.SigningError != "" {
		t.Errorf("status %+v, want the note %q", st, AuditSigningOffNote)
	}
	h.setSigning(t, signingOn)
	waitAudit(t, d, "signed again", func(st AuditStatus) bool { return st.Signed && st.Note == "" })

	types, changes := h.events(t)
	want := []string{"daemon_started+sig", "config_changed+sig", "config_change_held+sig", "config_change_confirmed+sig", "config_changed+sig", "signing_disabled+sig", "config_changed", "signing_enabled+sig"}
	if !slices.Equal(types, want) {
		t.Fatalf("events %q, want %q", types, want)
	}
	if len(changes) != 3 || !slices.Contains(changes[1], "settings: auditSigning true → false") ||
		!slices.Contains(changes[2], "settings: auditSigning false → true") {
		t.Errorf("config_changed changes %q, want auditSigning true → false, then false → true", changes)
	}
	rep := h.verify(t)
	if len(rep.SigningOff) != 1 || rep.SigningOff[0].Disabled != 6 || rep.SigningOff[0].Enabled != 8 || rep.SigningOff[0].Reason != auditSigningOffReason {
		t.Errorf("SigningOff = %+v, want seq 6 to 8", rep.SigningOff)
	}

	// A locked credential store: turning signing on fails, says so, and
	// leaves the log unsigned (and verifiable); turning it off again ends
	// the disagreement, and on works once the store does.
	h.setSigning(t, signingOff)
	confirmHeld(t, d, config.WidenAuditSigning)
	waitAudit(t, d, "unsigned by the setting", func(st AuditStatus) bool { return !st.Signed })
	h.store.Fail(secrets.ErrLocked)
	h.setSigning(t, signingOn)
	st = waitAudit(t, d, "failing to sign", func(st AuditStatus) bool { return st.SigningError != "" })
	if st.Signed || !strings.Contains(st.SigningError, "settings.auditSigning is true but signing could not start") ||
		!strings.Contains(st.SigningError, "locked") || !strings.Contains(st.Note, "not signed") {
		t.Errorf("status %+v, want unsigned, with the locked store as the reason", st)
	}
	// Unlocked: the daemon tries again by itself (every signRetry).
	h.store.Fail(nil)
	waitAudit(t, d, "signing once the store works again", func(st AuditStatus) bool { return st.Signed && st.SigningError == "" })
	h.setSigning(t, signingOff)
	confirmHeld(t, d, config.WidenAuditSigning)
	waitAudit(t, d, "unsigned by the setting, without error", func(st AuditStatus) bool {
		return !st.Signed && st.SigningError == "" && st.Note == AuditSigningOffNote
	})
	stop()
	if rep := h.verify(t); len(rep.SigningOff) != 3 || rep.SigningOff[1].Enabled == 0 || rep.SigningOff[2].Enabled != 0 {
		t.Errorf("SigningOff = %+v, want a second stretch ended by the retry, and a third to the end", rep.SigningOff)
	}

	// Restarted with the setting off and the log unsigned: the store is not
	// needed (a locked one does not stop the daemon).
	h.store.Fail(secrets.ErrLocked)
	d, stop, err = h.start(t)
	if err != nil {
		t.Fatalf("start with signing off and a locked store: %v", err)
	}
	waitAudit(t, d, "unsigned by the setting", func(st AuditStatus) bool { return !st.Signed && st.Note == AuditSigningOffNote })
	stop()
	h.store.Fail(nil)

	// Restarted with the setting on: signing resumes with signing_enabled.
	h.setSigning(t, signingOn)
	d, stop, err = h.start(t)
	if err != nil {
		t.Fatal(err)
	}
	waitAudit(t, d, "signed", func(st AuditStatus) bool { return st.Signed })
	stop()
	types, _ = h.events(t)
	if i := slices.Index(types, "signing_enabled+sig"); i < 0 || !slices.Contains(types[len(types)-3:], "signing_enabled+sig") {
		t.Errorf("events %q, want signing_enabled near the end", types)
	}
	h.verify(t)
}

// TestAuditSigningOffAtStart: signing turned off in the file while no
// daemon ran is held at start (the log stays signed) until the person
// confirms it. A daemon started with the setting off in force on a log that
// signs (the confirmation recorded, the daemon gone before signing_disabled)
// writes signing_disabled before it serves; it refuses to start when the
// key cannot be read to sign it.
func TestAuditSigningOffAtStart(t *testing.T) {
	h := newSigningHome(t)
	h.setSigning(t, nil)
	d, stop, err := h.start(t)
	if err != nil {
		t.Fatal(err)
	}
	waitAudit(t, d, "signed", func(st AuditStatus) bool { return st.Signed })
	stop()

	h.setSigning(t, signingOff)
	d, stop, err = h.start(t)
	if err != nil {
		t.Fatal(err)
	}
	if st := d.Status(); !st.Audit.Signed || st.PendingChange == nil || !st.PendingChange.AtStart {
		t.Fatalf("started with signing off in the file: signed %t, pending %+v; want signed, the change pending since the start", st.Audit.Signed, st.PendingChange)
	}
	stop()
	types, _ := h.events(t)
	if got := types[len(types)-1]; got != "config_change_held+sig" {
		t.Errorf("events %q, want config_change_held last", types)
	}

	// The confirmation is on the record; the daemon is gone before it
	// turned signing off.
	data, err := os.ReadFile(h.dirs.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dirs.State, auditedConfigFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	// As the confirmation writes it: config_changed with the file's digest,
	// which the run record names with the configuration.
	key, err := ReadAuditKey(h.store)
	if err != nil {
		t.Fatal(err)
	}
	al, err := audit.Open(audit.Options{Dir: AuditDir(h.dirs), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := al.Append(t.Context(), audit.TypeConfigChanged, audit.ConfigChanged{File: h.dirs.ConfigFile(), Digest: digestOf(data), Changes: []string{}})
	seg := al.Segment()
	al.Close()
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := ReadRunRecord(RunRecordPath(h.dirs))
	if err != nil {
		t.Fatal(err)
	}
	rec.Config, rec.Head = string(data), &RecordHead{File: seg, Seq: ev.Seq, Hash: ev.Hash}
	if err := writeRunRecord(RunRecordPath(h.dirs), rec); err != nil {
		t.Fatal(err)
	}
	h.store.Fail(secrets.ErrLocked)
	if _, _, err := h.start(t); !errors.Is(err, ErrAuditKeyUnusable) || !errors.Is(err, secrets.ErrLocked) {
		t.Fatalf("start with signing off, a signed log and a locked store: %v, want ErrAuditKeyUnusable", err)
	}
	h.store.Fail(nil)
	d, stop, err = h.start(t)
	if err != nil {
		t.Fatal(err)
	}
	st := waitAudit(t, d, "unsigned by the setting", func(st AuditStatus) bool { return !st.Signed })
	if st.Note != AuditSigningOffNote {
		t.Errorf("status %+v", st)
	}
	stop()
	types, _ = h.events(t)
	if got := types[len(types)-1:]; !slices.Equal(got, []string{"signing_disabled+sig"}) {
		t.Errorf("events %q, want signing_disabled last", types)
	}
	if rep := h.verify(t); len(rep.SigningOff) != 1 {
		t.Errorf("SigningOff = %+v", rep.SigningOff)
	}
}
