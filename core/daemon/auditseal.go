package daemon

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/secrets"
)

// The audit log's forward-secure seals (docs/AUDIT-FORMAT.md): the daemon
// seals every SealEvery and when it stops; `portcullis audit setup-keys`
// makes the first key pair and shows the verification key once. The
// sealing key and the anchor live in the data directory, outside the audit
// directory, so that deleting the log leaves them.

// SealEvery is how often the daemon seals the audit log when events were
// written since the last seal (a variable for tests).
var SealEvery = 15 * time.Minute

// SealKeyPath is the file that holds the current sealing key (mode 0600).
func SealKeyPath(d paths.Dirs) string { return filepath.Join(d.State, "audit-seal.key") }

// AnchorPath is the file where the daemon records the last seal.
func AnchorPath(d paths.Dirs) string { return filepath.Join(d.State, "audit-anchor.json") }

// auditOptions are the audit.Options the daemon opens its log with.
func (d *Daemon) auditOptions() audit.Options {
	return audit.Options{Dir: AuditDir(d.opts.Dirs), Key: d.opts.AuditKey, Logger: d.log, Observer: &d.tel,
		SealKeys: sealKeysFor(runtime.GOOS, d.opts.Dirs, d.opts.Secrets), AnchorPath: AnchorPath(d.opts.Dirs)}
}

// AuditSealScope is the credential scope of the sealing key where it lives
// in the credential store (macOS).
const AuditSealScope = "portcullis-audit-seal"

// sealKeysFor chooses where the sealing key lives: on macOS in the
// Keychain, whose items the creating app reads without a prompt and other
// programs only after the person allows it (not yet run on a Mac); on
// Linux in a file of the data directory, since any process of the uid
// can read the Secret Service as well as the file.
func sealKeysFor(goos string, dirs paths.Dirs, store secrets.Store) audit.SealKeyStore {
	if goos == "darwin" && store != nil {
		return secretSealKeys{store: store}
	}
	return audit.SealKeyFile{Path: SealKeyPath(dirs)}
}

// secretSealKeys keeps the sealing key in a credential store under
// AuditSealScope as "EPOCH:BASE64SEED", with ":BASE64SEED" of SealKey.Next
// while a seal is written; Set replaces the item in place.
type secretSealKeys struct{ store secrets.Store }

func (s secretSealKeys) Load() (audit.SealKey, error) {
	v, err := s.store.Get(AuditSealScope)
	if errors.Is(err, secrets.ErrNotFound) {
		return audit.SealKey{}, audit.ErrNoSealKey
	}
	if err != nil {
		return audit.SealKey{}, err
	}
	defer clear(v)
	bad := fmt.Errorf("credential scope %s does not hold an audit sealing key", AuditSealScope)
	parts := strings.Split(strings.TrimSpace(string(v)), ":")
	if len(parts) != 2 && len(parts) != 3 {
		return audit.SealKey{}, bad
	}
	e, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil {
		return audit.SealKey{}, bad
	}
	k := audit.SealKey{Epoch: e}
	for i, p := range parts[1:] {
		b, err := base64.StdEncoding.DecodeString(p)
		if err != nil || len(b) != ed25519.SeedSize {
			return audit.SealKey{}, bad
		}
		if i == 0 {
			k.Private = ed25519.NewKeyFromSeed(b)
		} else {
			k.Next = ed25519.NewKeyFromSeed(b)
		}
		clear(b)
	}
	return k, nil
}

func (s secretSealKeys) Replace(k audit.SealKey) error {
	v := []byte(strconv.FormatUint(k.Epoch, 10) + ":" + base64.StdEncoding.EncodeToString(k.Private.Seed()))
	if k.Next != nil {
		v = append(v, ":"+base64.StdEncoding.EncodeToString(k.Next.Seed())...)
	}
	defer clear(v)
	return s.store.Set(AuditSealScope, v)
}

// checkAnchor compares the freshly opened log with the last seal the
// anchor records: a log that no longer holds it was deleted, replaced or
// cut while no daemon ran. It returns what it found, in words ("" when the
// log holds the seal or there is no anchor); the start records it as
// log_tampered (approvals stop until the person acknowledges it).
func (d *Daemon) checkAnchor() (string, error) {
	a, ok, err := audit.ReadAnchor(AnchorPath(d.opts.Dirs))
	if err != nil {
		return "the audit anchor cannot be read: " + err.Error(), nil
	}
	if !ok {
		return "", nil
	}
	found, err := audit.HasEvent(AuditDir(d.opts.Dirs), a.File, a.Seq, a.Hash)
	if err != nil || found {
		return "", err
	}
	return fmt.Sprintf("the log no longer holds seal epoch %d (seq %d, %s) that the anchor records: it was deleted, replaced or cut while no daemon ran", a.Epoch, a.Seq, a.TS.Format(time.RFC3339)), nil
}

// sealAudit seals the log every SealEvery until ctx ends (a service).
func (d *Daemon) sealAudit(ctx context.Context) error {
	t := time.NewTicker(SealEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		d.mu.Lock()
		al := d.audit
		d.mu.Unlock()
		if err := al.Seal(ctx, audit.SealSchedule); err != nil && ctx.Err() == nil {
			d.log.Error("sealing the audit log", "err", err)
		}
		d.notify()
	}
}

// SetupKeysReply is the control Reply.Data of OpAuditSetupKeys.
type SetupKeysReply struct {
	// Key is the verification key (audit.VerificationKey.String).
	Key   string `json:"key"`
	Epoch uint64 `json:"epoch"`
}

// setupKeys answers control.OpAuditSetupKeys: only the person sets up (or,
// with force, replaces) the keys whose verification key they keep.
func (d *Daemon) setupKeys(ctx context.Context, c net.Conn, force bool) {
	what := "set up the audit log's sealing keys"
	if force {
		what = "replace the audit log's sealing keys"
	}
	if err := d.requirePerson(c, what); err != nil {
		reply(c, control.Reply{Error: err.Error(), Code: codeNotPerson})
		return
	}
	d.mu.Lock()
	al := d.audit
	d.mu.Unlock()
	vk, err := al.SetupSeals(ctx, force)
	if errors.Is(err, audit.ErrSealKeysExist) {
		reply(c, control.Reply{Error: "the audit log is sealed already; its verification key was shown when the keys were set up. Replacing the keys (the old verification key then proves the log only up to now) needs --force", Code: "keys_exist"})
		return
	}
	if err != nil {
		reply(c, control.Reply{Error: "setting up the sealing keys: " + err.Error(), Code: "seal_failed"})
		return
	}
	d.notify()
	b, _ := json.Marshal(SetupKeysReply{Key: vk.String(), Epoch: vk.Epoch})
	reply(c, control.Reply{Data: b})
}

// ErrAuditNotOpen is returned by SetupAuditKeys before Serve has opened
// the audit log.
var ErrAuditNotOpen = errors.New("the audit log is not open yet")

// SetupAuditKeys sets up the audit log's first sealing keys, as
// `portcullis audit setup-keys` does, for the menu-bar app's first start:
// the app runs the daemon in its own process and shows the verification
// key to the person once, in its window. It returns audit.ErrSealKeysExist
// when the log is sealed already, ErrAuditNotOpen before Serve opened it.
func (d *Daemon) SetupAuditKeys(ctx context.Context) (SetupKeysReply, error) {
	d.mu.Lock()
	al := d.audit
	d.mu.Unlock()
	if al == nil {
		return SetupKeysReply{}, ErrAuditNotOpen
	}
	vk, err := al.SetupSeals(ctx, false)
	if err != nil {
		return SetupKeysReply{}, err
	}
	d.notify()
	return SetupKeysReply{Key: vk.String(), Epoch: vk.Epoch}, nil
}

// acknowledgeTampered answers control.OpAuditAcknowledge.
func (d *Daemon) acknowledgeTampered(ctx context.Context, c net.Conn) {
	if err := d.requirePerson(c, "acknowledge that the audit log was tampered with"); err != nil {
		reply(c, control.Reply{Error: err.Error(), Code: codeNotPerson})
		return
	}
	d.mu.Lock()
	al := d.audit
	d.mu.Unlock()
	t, ok := al.TamperedEvent()
	if !ok {
		reply(c, control.Reply{Error: "the audit log has no tampering to acknowledge", Code: "not_tampered"})
		return
	}
	if err := al.AcknowledgeTampered(ctx, "cli"); err != nil {
		reply(c, control.Reply{Error: "recording the acknowledgement: " + err.Error(), Code: "audit_unavailable"})
		return
	}
	d.notify()
	b, _ := json.Marshal(map[string]uint64{"seq": t.Seq})
	reply(c, control.Reply{Data: b})
}
