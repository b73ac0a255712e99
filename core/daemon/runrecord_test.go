package daemon

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/secrets"
)

// TestReadRunRecord: a record the daemon wrote reads back; no record is no
// error; anything else is an error naming the file and wrapping
// ErrBadRunRecord, never an empty record (which would be a first start).
func TestReadRunRecord(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, RunRecordName)
	if _, ok, err := ReadRunRecord(path); ok || err != nil {
		t.Fatalf("no record: ok %t, err %v; want false, nil", ok, err)
	}
	cfgData, err := config.Marshal(&config.Config{Servers: map[string]config.Server{"srv": {Command: "/bin/true"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := RunRecord{Starts: 3, Head: &RecordHead{File: "audit-000002.jsonl", Seq: 17, Hash: "sha256:ab"}, Config: string(cfgData)}
	if err := writeRunRecord(path, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ReadRunRecord(path)
	if err != nil || !ok || got.Starts != 3 || *got.Head != *want.Head || got.Config != want.Config || got.ConfigDigest != digestOf(cfgData) {
		t.Fatalf("read back %+v, %t, %v", got, ok, err)
	}
	good, _ := os.ReadFile(path)
	edit := func(f func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, tc := range []struct{ name, data, want string }{
		{"empty file", "", "EOF"},
		{"not JSON", "garbage", "invalid character"},
		{"cut short", string(good[:len(good)/2]), "unexpected EOF"},
		{"unknown field", edit(func(m map[string]any) { m["firstStart"] = true }), "unknown field"},
		{"two records", string(good) + string(good), "data after the record"},
		{"another version", edit(func(m map[string]any) { m["version"] = 2 }), "version 2"},
		{"no start", edit(func(m map[string]any) { m["starts"] = 0 }), "no start"},
		{"head without hash", edit(func(m map[string]any) { m["head"].(map[string]any)["hash"] = "" }), "incomplete"},
		{"head in another directory", edit(func(m map[string]any) { m["head"].(map[string]any)["file"] = "../x.jsonl" }), "incomplete"},
		{"configuration edited", edit(func(m map[string]any) { m["config"] = strings.Replace(m["config"].(string), "/bin/true", "/bin/sh", 1) }), "digest"},
		{"digest without configuration", edit(func(m map[string]any) { m["config"] = "" }), "digest"},
		{"configuration invalid", edit(func(m map[string]any) {
			m["config"] = `{"servers": {}}`
			m["configDigest"] = digestOf([]byte(`{"servers": {}}`))
		}), "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			rec, ok, err := ReadRunRecord(path)
			if !errors.Is(err, ErrBadRunRecord) || ok {
				t.Fatalf("ok %t, err %v; want ErrBadRunRecord", ok, err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s and %q", err, path, tc.want)
			}
			if rec.Starts != 0 || rec.Config != "" {
				t.Errorf("a bad record read as %+v", rec)
			}
		})
	}
}

// TestStartCheck: what a start finds of earlier runs decides whether the
// configuration file is taken as it is (a first start only) and whether
// the start is log_tampered. Each row sets up a data directory whose
// config.json allows tool read of srv (a widening against what was
// confirmed, which allowed nothing).
func TestStartCheck(t *testing.T) {
	confirmed := &config.Config{Servers: map[string]config.Server{"srv": {Command: "/bin/true"}}}
	confirmedData, err := config.Marshal(confirmed)
	if err != nil {
		t.Fatal(err)
	}
	writeRecord := func(t *testing.T, d paths.Dirs, head *RecordHead) {
		if err := writeRunRecord(RunRecordPath(d), RunRecord{Starts: 1, Head: head, Config: string(confirmedData)}); err != nil {
			t.Fatal(err)
		}
	}
	writeEvent := func(t *testing.T, d paths.Dirs, typ string, fields map[string]any) RecordHead {
		al, err := audit.Open(audit.Options{Dir: AuditDir(d)})
		if err != nil {
			t.Fatal(err)
		}
		defer al.Close()
		ev, err := al.Append(t.Context(), typ, fields)
		if err != nil {
			t.Fatal(err)
		}
		return RecordHead{File: al.Segment(), Seq: ev.Seq, Hash: ev.Hash}
	}
	writeLog := func(t *testing.T, d paths.Dirs, typ string) RecordHead {
		return writeEvent(t, d, typ, map[string]any{})
	}
	// widened is config.json as the agent wrote it (read allowed).
	widened := func(t *testing.T, d paths.Dirs) string {
		b, err := os.ReadFile(d.ConfigFile())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	touch := func(t *testing.T, p string, data string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T, d paths.Dirs)
		first    bool   // the file is taken as it is
		tampered string // "" or a file the finding names
	}{
		{"nothing: a first start", func(*testing.T, paths.Dirs) {}, true, ""},
		{"record and its log", func(t *testing.T, d paths.Dirs) {
			h := writeEvent(t, d, audit.TypeConfigChanged, map[string]any{"file": d.ConfigFile(), "digest": digestOf(confirmedData), "changes": []string{}})
			writeRecord(t, d, &h)
		}, false, ""},
		{"record and its log, config.audited.json rewritten to config.json's widening", func(t *testing.T, d paths.Dirs) {
			h := writeEvent(t, d, audit.TypeConfigChanged, map[string]any{"file": d.ConfigFile(), "digest": digestOf(confirmedData), "changes": []string{}})
			writeRecord(t, d, &h)
			touch(t, filepath.Join(d.State, auditedConfigFile), widened(t, d))
		}, false, ""},
		{"record naming an event that records no configuration", func(t *testing.T, d paths.Dirs) {
			h := writeEvent(t, d, audit.TypeRunStarted, map[string]any{})
			writeRecord(t, d, &h)
		}, false, RunRecordName + " rewritten"},
		{"record, log deleted", func(t *testing.T, d paths.Dirs) {
			writeRecord(t, d, &RecordHead{File: "audit-000001.jsonl", Seq: 9, Hash: "sha256:00"})
		}, false, "audit/"},
		{"record, log replaced", func(t *testing.T, d paths.Dirs) {
			writeLog(t, d, TypeDaemonStarted)
			writeRecord(t, d, &RecordHead{File: "audit-000001.jsonl", Seq: 1, Hash: "sha256:00"})
		}, false, "audit-000001.jsonl"},
		{"record after rotate-key, no log", func(t *testing.T, d paths.Dirs) {
			touch(t, filepath.Join(d.State, "audit.rotated-20261206T000000Z", "audit-000001.jsonl"), "")
			writeRecord(t, d, nil)
		}, false, ""},
		{"record rewritten to name no event and config.json's widening, log deleted", func(t *testing.T, d paths.Dirs) {
			if err := writeRunRecord(RunRecordPath(d), RunRecord{Starts: 1, Config: widened(t, d)}); err != nil {
				t.Fatal(err)
			}
		}, false, RunRecordName + " rewritten"},
		{"record rewritten to name no event and config.json's widening, log kept", func(t *testing.T, d paths.Dirs) {
			writeLog(t, d, TypeDaemonStarted)
			if err := writeRunRecord(RunRecordPath(d), RunRecord{Starts: 1, Config: widened(t, d)}); err != nil {
				t.Fatal(err)
			}
		}, false, RunRecordName + " rewritten"},
		{"record unreadable", func(t *testing.T, d paths.Dirs) { touch(t, RunRecordPath(d), "{") }, false, RunRecordName},
		{"record deleted, the log shows it was kept", func(t *testing.T, d paths.Dirs) { writeLog(t, d, TypeDaemonStarted) }, false, RunRecordName},
		{"a log of a version without the record", func(t *testing.T, d paths.Dirs) { writeLog(t, d, audit.TypeRunStarted) }, false, ""},
		{"log and record deleted, catalog left", func(t *testing.T, d paths.Dirs) {
			cats, err := catalog.OpenStore(filepath.Join(d.State, "catalog"))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := cats.Update("srv", "e1", []catalog.Tool{{Name: "read", Raw: json.RawMessage(`{"name":"read","inputSchema":{"type":"object"}}`)}}); err != nil {
				t.Fatal(err)
			}
		}, false, "audit/"},
		{"log and record deleted, anchor left", func(t *testing.T, d paths.Dirs) { touch(t, AnchorPath(d), "{}") }, false, "audit/"},
		{"log and record deleted, sealing key file left", func(t *testing.T, d paths.Dirs) { touch(t, SealKeyPath(d), "{}") }, false, "audit/"},
		{"log and record deleted, config.audited.json left", func(t *testing.T, d paths.Dirs) {
			touch(t, filepath.Join(d.State, auditedConfigFile), string(confirmedData))
		}, false, "audit/"},
		// The agent writes what it cannot delete its way around.
		{"record and its log, the event names the record's configuration", func(t *testing.T, d paths.Dirs) {
			h := writeEvent(t, d, TypeDaemonStarted, map[string]any{"starts": 1, "configDigest": digestOf(confirmedData)})
			writeRecord(t, d, &h)
		}, false, ""},
		{"record rewritten to config.json's widening, its daemon_started kept", func(t *testing.T, d paths.Dirs) {
			h := writeEvent(t, d, TypeDaemonStarted, map[string]any{"starts": 1, "configDigest": digestOf(confirmedData)})
			if err := writeRunRecord(RunRecordPath(d), RunRecord{Starts: 1, Head: &h, Config: widened(t, d)}); err != nil {
				t.Fatal(err)
			}
		}, false, RunRecordName + " rewritten"},
		{"record rewritten to config.json's widening, its config_changed kept", func(t *testing.T, d paths.Dirs) {
			h := writeEvent(t, d, audit.TypeConfigChanged, map[string]any{"file": d.ConfigFile(), "digest": digestOf(confirmedData), "changes": []string{}})
			if err := writeRunRecord(RunRecordPath(d), RunRecord{Starts: 1, Head: &h, Config: widened(t, d)}); err != nil {
				t.Fatal(err)
			}
		}, false, RunRecordName + " rewritten"},
		{"record deleted, config.audited.json rewritten to config.json's widening", func(t *testing.T, d paths.Dirs) {
			writeLog(t, d, TypeDaemonStarted)
			touch(t, filepath.Join(d.State, auditedConfigFile), widened(t, d))
		}, false, RunRecordName},
		{"log and record deleted, config.audited.json rewritten to config.json's widening", func(t *testing.T, d paths.Dirs) {
			touch(t, filepath.Join(d.State, auditedConfigFile), widened(t, d))
		}, false, "audit/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := paths.Dirs{Config: filepath.Join(dir, "c"), State: filepath.Join(dir, "s"), Runtime: filepath.Join(dir, "r")}
			if err := d.Ensure(); err != nil {
				t.Fatal(err)
			}
			savePolicies(t, d.ConfigFile(), map[string]string{"read": "allow"})
			tc.setup(t, d)
			s := checkStart(d, sealKeysFor("linux", d, nil))
			if got := s.prev == nil; got != tc.first {
				t.Errorf("first start %t, want %t", got, tc.first)
			}
			var files []string
			for _, f := range s.missing {
				files = append(files, f.File+" "+f.Change)
			}
			switch {
			case tc.tampered == "" && s.tampered():
				t.Errorf("tampered: %v (%v)", s.detail, files)
			case tc.tampered != "" && !strings.Contains(strings.Join(files, ","), tc.tampered):
				t.Errorf("found %v (%v), want %s named", files, s.detail, tc.tampered)
			}
			dm, err := New(Options{Dirs: d})
			if err != nil {
				t.Fatal(err)
			}
			p := dm.pendingCopy()
			switch {
			case tc.first && p != nil:
				t.Errorf("a first start held %+v", p)
			case !tc.first && (p == nil || len(p.Held) != 1 || p.Held[0].Text != "srv: tool read approve → allow"):
				t.Errorf("pending %+v, want the allow of read held", p)
			case p != nil && p.LogTampered != (tc.tampered != ""):
				t.Errorf("pending logTampered %t, want %t", p.LogTampered, tc.tampered != "")
			}
		})
	}
}

// TestStartRecordsWhatWasMissing: a daemon started on a data directory
// whose run record is unreadable writes log_tampered naming it, holds the
// widening, and leaves a record whose head its log holds; the next start is
// not tampered (the log_tampered waits for the person) and still holds the
// widening, since the record holds what was confirmed.
func TestStartRecordsWhatWasMissing(t *testing.T) {
	dirs := shortHome(t)
	if err := dirs.Ensure(); err != nil {
		t.Fatal(err)
	}
	savePolicies(t, dirs.ConfigFile(), map[string]string{"read": "allow"})
	if err := os.WriteFile(RunRecordPath(dirs), []byte("not a record"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		d, err := New(Options{Dirs: dirs, Peers: selfPeers{}})
		if err != nil {
			t.Fatal(err)
		}
		if p := d.pendingCopy(); p == nil || p.LogTampered != (i == 0) {
			t.Fatalf("start %d: pending %+v", i, p)
		}
		stop := serve(t, d, dirs)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		rec, ok, err := ReadRunRecord(RunRecordPath(dirs))
		if err != nil || !ok || rec.Head == nil || rec.Starts != uint64(i+1) {
			t.Fatalf("start %d: record %+v, %t, %v", i, rec, ok, err)
		}
		if found, err := audit.HasEvent(AuditDir(dirs), rec.Head.File, rec.Head.Seq, rec.Head.Hash); !found || err != nil {
			t.Fatalf("start %d: the log does not hold the record's head %+v (%v)", i, rec.Head, err)
		}
		if c, _ := rec.config(); c.Servers["srv"].Policy("read") != config.PolicyApprove {
			t.Errorf("start %d: the record holds read %s, want approve (what was confirmed)", i, c.Servers["srv"].Policy("read"))
		}
	}
	evs, err := audit.Tail(AuditDir(dirs), 1000)
	if err != nil {
		t.Fatal(err)
	}
	var tampered []audit.LogTampered
	for _, e := range evs {
		if e.Type == audit.TypeLogTampered {
			var lt audit.LogTampered
			if err := json.Unmarshal(e.Fields, &lt); err != nil {
				t.Fatal(err)
			}
			tampered = append(tampered, lt)
		}
	}
	if len(tampered) != 1 || len(tampered[0].Files) == 0 || tampered[0].Files[0] != (audit.TamperedFile{File: RunRecordName, Change: "unreadable"}) || !strings.Contains(tampered[0].Detail, ErrBadRunRecord.Error()) {
		t.Errorf("log_tampered events %+v, want one naming %s unreadable", tampered, RunRecordName)
	}
}

// TestStartCheckSealKeyInKeychain: on macOS the sealing key lives in the
// Keychain, which deleting the state directory leaves: with it there, a
// data directory with nothing else is not a first start.
func TestStartCheckSealKeyInKeychain(t *testing.T) {
	d := paths.Dirs{State: t.TempDir()}
	store := &secrets.Memory{}
	if s := checkStart(d, sealKeysFor("darwin", d, store)); s.prev != nil || s.tampered() {
		t.Fatalf("no key: first start %t, tampered %v; want a first start", s.prev == nil, s.detail)
	}
	if err := store.Set(AuditSealScope, []byte("1:key")); err != nil {
		t.Fatal(err)
	}
	s := checkStart(d, sealKeysFor("darwin", d, store))
	if s.prev == nil || !s.tampered() || !strings.Contains(strings.Join(s.detail, " "), AuditSealScope) {
		t.Fatalf("key in the Keychain: first start %t, found %v; want log_tampered naming %s", s.prev == nil, s.detail, AuditSealScope)
	}
}
