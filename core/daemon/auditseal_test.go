package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/secrets"
)

func TestSealKeysFor(t *testing.T) {
	dirs := paths.Dirs{State: t.TempDir()}
	if _, ok := sealKeysFor("linux", dirs, &secrets.Memory{}).(audit.SealKeyFile); !ok {
		t.Error("linux: want the key file")
	}
	if _, ok := sealKeysFor("darwin", dirs, nil).(audit.SealKeyFile); !ok {
		t.Error("darwin without a credential store: want the key file")
	}
	store := &secrets.Memory{}
	ks, ok := sealKeysFor("darwin", dirs, store).(secretSealKeys)
	if !ok {
		t.Fatal("darwin: want the credential store")
	}
	if _, err := ks.Load(); !errors.Is(err, audit.ErrNoSealKey) {
		t.Fatalf("Load of an empty store = %v, want ErrNoSealKey", err)
	}
	// A log sealed through the store: the stored key follows the epochs.
	l, err := audit.Open(audit.Options{Dir: filepath.Join(dirs.State, "audit"), SealKeys: ks})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	vk, err := l.SetupSeals(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ks.Load()
	if err != nil || k.Epoch != 1 {
		t.Fatalf("stored key after setup: epoch %d, %v; want 1", k.Epoch, err)
	}
	rep, err := audit.VerifyWith(filepath.Join(dirs.State, "audit"), audit.VerifyOptions{Seal: &vk})
	if err != nil || rep.Seals.Proven != 1 {
		t.Fatalf("VerifyWith = %+v, %v", rep, err)
	}
	store.Set(AuditSealScope, []byte("not a key"))
	if _, err := ks.Load(); err == nil || errors.Is(err, audit.ErrNoSealKey) {
		t.Fatalf("Load of a foreign value = %v, want an error", err)
	}
}

// controlReply runs op against c1 and returns the reply read from c2.
func controlReply(t *testing.T, op func(c net.Conn)) control.Reply {
	t.Helper()
	c1, c2 := net.Pipe()
	defer c2.Close()
	go func() {
		defer c1.Close()
		op(c1)
	}()
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c2).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var r control.Reply
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestAuditOpsNeedThePerson: a supervised server's process can neither
// acknowledge tampering (which would let approvals resume) nor set up or
// replace the sealing keys; the person's terminal can.
func TestAuditOpsNeedThePerson(t *testing.T) {
	self := os.Getpid()
	dirs := paths.Dirs{State: t.TempDir()}
	server := &fakeLineage{chain: []identity.Observed{proc(910, 60), proc(self, 10), proc(1, 1)}}
	person := &fakeLineage{chain: []identity.Observed{proc(900, 50), proc(800, 40), proc(1, 1)}}
	d := &Daemon{opts: Options{Dirs: dirs, Peers: server}, log: slog.New(slog.DiscardHandler),
		children: map[int]child{910: {PID: 910, StartTime: 60, Label: "srv"}}, agents: map[ids.RunID]identity.Observed{}}
	al, err := audit.Open(d.auditOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	d.audit, d.auditW = al, &recovering{log: al, retryEvery: time.Second}
	ctx := context.Background()
	if err := al.RecordTampered(ctx, "test: the log was replaced"); err != nil {
		t.Fatal(err)
	}
	if err := d.auditW.Err(); !errors.Is(err, audit.ErrTampered) || !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("Err while tampered = %v; want audit_unavailable for approvals", err)
	}
	if st := d.auditStatus(); !strings.Contains(st.Tampered, "test: the log was replaced") {
		t.Fatalf("status %+v", st)
	}

	for name, op := range map[string]func(net.Conn){
		"acknowledge": func(c net.Conn) { d.acknowledgeTampered(ctx, c) },
		"setup-keys":  func(c net.Conn) { d.setupKeys(ctx, c, true) },
	} {
		if r := controlReply(t, op); r.Code != codeNotPerson {
			t.Errorf("%s from a server's process: %+v; want %s", name, r, codeNotPerson)
		}
	}
	if al.Tampered() == nil {
		t.Fatal("a server's process acknowledged the tampering")
	}
	if _, ok := al.Sealing(); ok {
		t.Fatal("a server's process set up sealing keys")
	}

	d.opts.Peers = person
	if r := controlReply(t, func(c net.Conn) { d.acknowledgeTampered(ctx, c) }); !r.OK {
		t.Fatalf("acknowledge by the person: %+v", r)
	}
	if err := d.auditW.Err(); err != nil {
		t.Fatalf("Err after acknowledgement = %v", err)
	}
	r := controlReply(t, func(c net.Conn) { d.setupKeys(ctx, c, false) })
	var sk SetupKeysReply
	if !r.OK || json.Unmarshal(r.Data, &sk) != nil {
		t.Fatalf("setup-keys by the person: %+v", r)
	}
	if _, err := audit.ParseVerificationKey(sk.Key); err != nil {
		t.Fatalf("setup-keys answered %q: %v", sk.Key, err)
	}
	if r := controlReply(t, func(c net.Conn) { d.setupKeys(ctx, c, false) }); r.Code != "keys_exist" || !strings.Contains(r.Error, "--force") {
		t.Fatalf("setup-keys again without force: %+v", r)
	}
}
