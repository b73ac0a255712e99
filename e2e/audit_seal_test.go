package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/internal/harness"
	"github.com/portcullis/portcullis/platform"
)

// The seal tests play the person (setup-keys, acknowledge, verify --key)
// and a same-uid attacker (who can read the key file and the Secret
// Service's HMAC key, and rewrite any file of the data directory), against
// a real daemon; every verdict is checked by `portcullis audit verify --key`
// and by the independent verifier in testdata/servers/auditverify.

var (
	auditVerifyOnce sync.Once
	auditVerifyBin  string
	auditVerifyErr  error
)

func independentVerifier(t *testing.T) string {
	t.Helper()
	auditVerifyOnce.Do(func() {
		dir, err := os.MkdirTemp("", "auditverify")
		if err != nil {
			auditVerifyErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		auditVerifyBin, auditVerifyErr = harness.BuildServer(ctx, repoRoot, dir, "auditverify", "")
	})
	if auditVerifyErr != nil {
		t.Fatal(auditVerifyErr)
	}
	return auditVerifyBin
}

// sealVerdict is what both verifiers said of the log.
type sealVerdict struct {
	Code    int    // portcullis audit verify --key exit code
	Problem string // its problem
	Detail  string
	Indep   struct {
		OK      bool   `json:"ok"`
		Problem string `json:"problem"`
		Detail  string `json:"detail"`
	}
}

func verifyWithKey(t *testing.T, h *harness.Home, key string) sealVerdict {
	t.Helper()
	r := auditRun(t, h, "audit", "verify", "--json", "--key", key)
	var out struct {
		OK      bool   `json:"ok"`
		Problem string `json:"problem"`
		Detail  string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("audit verify --key printed %q: %v\n%s", r.Stdout, err, r.Stderr)
	}
	v := sealVerdict{Code: r.Code, Problem: out.Problem, Detail: out.Detail}
	args := []string{"-key", key, "-anchor", filepath.Join(h.Dir, "audit-anchor.json")}
	if k := hmacKey(t); k != nil {
		args = append(args, "-hmac", hex.EncodeToString(k))
	}
	cmd := exec.Command(independentVerifier(t), append(args, filepath.Join(h.Dir, "audit"))...)
	b, _ := cmd.Output()
	if err := json.Unmarshal(b, &v.Indep); err != nil {
		t.Fatalf("auditverify printed %q: %v", b, err)
	}
	return v
}

// hmacKey is the audit HMAC key as a same-uid process reads it from the
// Secret Service; nil when the daemon has none.
func hmacKey(t *testing.T) []byte {
	k, err := daemon.ReadAuditKey(platform.NewSecretStore())
	if err != nil {
		return nil
	}
	return k
}

var vkRE = regexp.MustCompile(`PCVK1(-[A-Z2-7]{1,4})+`)

func setupKeys(t *testing.T, h *harness.Home, args ...string) (string, string) {
	t.Helper()
	r, err := h.RunAtTerminal(testContext(t, 30*time.Second), append([]string{"audit", "setup-keys"}, args...)...)
	if err != nil {
		return "", r.Stdout
	}
	return vkRE.FindString(r.Stdout), r.Stdout
}

// snapshot copies the audit directory, the anchor, the key file and the
// daemon's run record (which names an event of the log).
type snapshot map[string][]byte

func takeSnapshot(t *testing.T, h *harness.Home) snapshot {
	t.Helper()
	s := snapshot{}
	for _, p := range []string{filepath.Join(h.Dir, "audit-seal.key"), filepath.Join(h.Dir, "audit-anchor.json"), filepath.Join(h.Dir, daemon.RunRecordName)} {
		if b, err := os.ReadFile(p); err == nil {
			s[p] = b
		}
	}
	ents, _ := os.ReadDir(filepath.Join(h.Dir, "audit"))
	for _, e := range ents {
		p := filepath.Join(h.Dir, "audit", e.Name())
		if b, err := os.ReadFile(p); err == nil {
			s[p] = b
		}
	}
	return s
}

func (s snapshot) restore(t *testing.T, h *harness.Home) {
	t.Helper()
	os.RemoveAll(filepath.Join(h.Dir, "audit"))
	os.MkdirAll(filepath.Join(h.Dir, "audit"), 0o700)
	for p, b := range s {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// forgeLog rewrites audit-000001.jsonl as a same-uid attacker holding
// stolen (a copy of the key file) and the HMAC key would: edit changes the
// event at seq at, every hash and HMAC after it is recomputed, and every
// seal from the stolen key's epoch on is signed again (the epochs before
// it are kept: their keys are erased).
func forgeLog(t *testing.T, h *harness.Home, stolen []byte, at uint64, edit func([]byte) []byte) {
	t.Helper()
	var kf struct {
		Epoch uint64 `json:"epoch"`
		Seed  []byte `json:"seed"`
	}
	if err := json.Unmarshal(stolen, &kf); err != nil {
		t.Fatal(err)
	}
	priv := ed25519.NewKeyFromSeed(kf.Seed)
	mac := hmacKey(t)
	path := filepath.Join(h.Dir, "audit", "audit-000001.jsonl")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	prev := audit.Genesis
	var out bytes.Buffer
	for _, ln := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var e struct {
			Fields json.RawMessage `json:"fields"`
			Seq    uint64          `json:"seq"`
			TS     string          `json:"ts"`
			Type   string          `json:"type"`
			Sig    string          `json:"sig"`
		}
		if err := json.Unmarshal(ln, &e); err != nil {
			t.Fatal(err)
		}
		fields := []byte(e.Fields)
		if e.Seq == at {
			fields = edit(fields)
		}
		if e.Type == audit.TypeLogSealed {
			var s audit.LogSealed
			json.Unmarshal(fields, &s)
			if s.Epoch >= kf.Epoch {
				pub, next, _ := ed25519.GenerateKey(nil)
				s.Next = "ed25519:" + hex.EncodeToString(pub)
				s.Sig = "ed25519:" + hex.EncodeToString(ed25519.Sign(priv, audit.SealMessage(e.Seq, prev, e.TS, s)))
				priv = next
				// The fields in canonical form: keys in order, no spaces.
				fields = fmt.Appendf(nil, `{"epoch":%d,"genesis":%q,"genesisTs":%q,"next":%q,"reason":%q,"sig":%q}`, s.Epoch, s.Genesis, s.GenesisTS, s.Next, s.Reason, s.Sig)
			}
		}
		body := fmt.Appendf(nil, `{"fields":%s,"prev":%q,"seq":%d,"ts":%q,"type":%q}`, fields, prev, e.Seq, e.TS, e.Type)
		sum := sha256.Sum256(append([]byte(prev), body...))
		hash := "sha256:" + hex.EncodeToString(sum[:])
		out.Write(body[:len(body)-1])
		fmt.Fprintf(&out, `,"hash":%q`, hash)
		if e.Sig != "" && mac != nil {
			m := hmac.New(sha256.New, mac)
			m.Write([]byte(hash))
			fmt.Fprintf(&out, `,"sig":"hmac-sha256:%x"`, m.Sum(nil))
		}
		out.WriteString("}\n")
		prev = hash
	}
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(h.Dir, "audit", "head.json"))
}

func sealEchoCalls(t *testing.T, h *harness.Home, n int, tag string) {
	t.Helper()
	a := connectCmd(t, h.ConnectCommand("echo"), "")
	ctx := testContext(t, 30*time.Second)
	for i := range n {
		if _, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": fmt.Sprintf("%s %d", tag, i)}}); err != nil {
			t.Fatal(err)
		}
	}
	a.Session.Close()
}

func wantVerdict(t *testing.T, what string, v sealVerdict, problem string) {
	t.Helper()
	if problem == "" {
		if v.Code != 0 && v.Code != 3 || v.Problem != "" || !v.Indep.OK {
			t.Errorf("%s: verify --key exit %d %s (%s); independent %+v; want a log that verifies", what, v.Code, v.Problem, v.Detail, v.Indep)
		}
		return
	}
	if v.Code != 1 || v.Problem != problem {
		t.Errorf("%s: verify --key exit %d, problem %q (%s); want exit 1, %q", what, v.Code, v.Problem, v.Detail, problem)
	}
	if v.Indep.OK {
		t.Errorf("%s: the independent verifier accepted the log", what)
	}
}

func TestAuditSeals(t *testing.T) {
	h := newHome(t)
	auditAddServer(t, h, "echo", config.Server{Command: echoBin}, "echo")
	d := startDaemon(t, h)
	key, out := setupKeys(t, h)
	if key == "" {
		t.Fatalf("setup-keys showed no verification key:\n%s", out)
	}
	if again, out := setupKeys(t, h); again != "" || !strings.Contains(out, "--force") {
		t.Fatalf("setup-keys a second time without --force: %q\n%s", again, out)
	}
	sealEchoCalls(t, h, 5, "epoch 1")
	if err := d.Stop(30 * time.Second); err != nil { // seals (stop)
		t.Fatal(err)
	}
	stolenAtT, err := os.ReadFile(filepath.Join(h.Dir, "audit-seal.key"))
	if err != nil {
		t.Fatal(err)
	}
	evsAtT := auditEvents(t, h)
	d = startDaemon(t, h)
	sealEchoCalls(t, h, 5, "epoch 2")
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	wantVerdict(t, "the intact log", verifyWithKey(t, h, key), "")
	if r := auditRun(t, h, "audit", "verify"); r.Code != 3 || !strings.Contains(r.Stdout, "--key") {
		t.Errorf("verify without the key: exit %d\n%s; want 3, naming --key", r.Code, r.Stdout)
	}
	snap := takeSnapshot(t, h)
	current := snap[filepath.Join(h.Dir, "audit-seal.key")]

	editMsg := func(f []byte) []byte {
		e := bytes.Replace(f, []byte(`"tool":"echo"`), []byte(`"tool":"add"`), 1)
		if bytes.Equal(e, f) {
			t.Fatalf("edit found nothing to change in %s", f)
		}
		return e
	}
	firstCall := func(evs []audit.Event) uint64 {
		for _, e := range evs {
			if e.Type == audit.TypeToolCalled {
				return e.Seq
			}
		}
		t.Fatal("no tool_called")
		return 0
	}
	before := firstCall(evsAtT)
	after := firstCall(auditEvents(t, h)[len(evsAtT):])

	t.Run("forged with the current key", func(t *testing.T) {
		snap.restore(t, h)
		forgeLog(t, h, current, before, editMsg)
		wantVerdict(t, "a sealed event rewritten with the current key", verifyWithKey(t, h, key), audit.ProblemBadSeal)
		snap.restore(t, h)
		forgeLog(t, h, current, after, editMsg)
		wantVerdict(t, "an event of the last sealed epoch rewritten with the current key", verifyWithKey(t, h, key), audit.ProblemBadSeal)
	})
	t.Run("key stolen at T", func(t *testing.T) {
		snap.restore(t, h)
		forgeLog(t, h, stolenAtT, before, editMsg)
		wantVerdict(t, "a change before T with the key stolen at T", verifyWithKey(t, h, key), audit.ProblemBadSeal)
		// What forward security does not promise: the stolen key's own
		// epoch (after T) can be rewritten.
		snap.restore(t, h)
		forgeLog(t, h, stolenAtT, after, editMsg)
		os.Remove(filepath.Join(h.Dir, "audit-anchor.json")) // it names the real last seal
		wantVerdict(t, "a change after T with the key stolen at T", verifyWithKey(t, h, key), "")
	})
	t.Run("log deleted", func(t *testing.T) {
		snap.restore(t, h)
		os.RemoveAll(filepath.Join(h.Dir, "audit"))
		wantVerdict(t, "rm -rf audit", verifyWithKey(t, h, key), audit.ProblemEmpty)
		// A daemon started on the deleted log notices, and so does verify.
		d := startDaemon(t, h)
		st := waitAuditStatus(t, h, "tampered", func(s daemon.AuditStatus) bool { return s.Tampered != "" })
		if !strings.Contains(st.Tampered, "anchor") {
			t.Errorf("status tampered: %q", st.Tampered)
		}
		if err := d.Stop(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		v := verifyWithKey(t, h, key)
		if v.Code != 1 || v.Indep.OK {
			t.Errorf("the log a daemon started after rm -rf: %+v", v)
		}
	})
	t.Run("tail cut", func(t *testing.T) {
		path := filepath.Join(h.Dir, "audit", "audit-000001.jsonl")
		headPath := filepath.Join(h.Dir, "audit", "head.json")
		for _, hd := range []string{"emptied", "copied"} {
			snap.restore(t, h)
			b := snap[path]
			lines := bytes.SplitAfter(b, []byte("\n"))
			lines = lines[:len(lines)-1-6] // the final seal and 5 events before it
			os.WriteFile(path, bytes.Join(lines, nil), 0o600)
			if hd == "emptied" {
				os.WriteFile(headPath, nil, 0o600)
			} else {
				var e struct {
					Seq  uint64 `json:"seq"`
					Hash string `json:"hash"`
					Sig  string `json:"sig"`
				}
				json.Unmarshal(lines[len(lines)-1], &e)
				os.WriteFile(headPath, fmt.Appendf(nil, `{"hash":%q,"seq":%d,"sig":%q}`, e.Hash, e.Seq, e.Sig), 0o600)
			}
			wantVerdict(t, "tail cut, head.json "+hd, verifyWithKey(t, h, key), audit.ProblemEndsEarly)
		}
	})
	t.Run("cp+mv under a running daemon", func(t *testing.T) {
		snap.restore(t, h)
		d := startDaemon(t, h)
		a := connectCmd(t, h.ConnectCommand("echo"), "")
		ctx := testContext(t, 30*time.Second)
		call := func(msg string) {
			if _, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}}); err != nil {
				t.Fatal(err)
			}
		}
		call("before the swap")
		for _, name := range []string{"audit-000001.jsonl", "head.json"} {
			p := filepath.Join(h.Dir, "audit", name)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(p+".copy", b, 0o600)
			if err := os.Rename(p+".copy", p); err != nil {
				t.Fatal(err)
			}
		}
		call("after the swap") // one commit: its intent
		rep, err := h.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(rep.Audit.Tampered, "audit-000001.jsonl replaced") {
			t.Fatalf("status after one commit: %+v", rep.Audit)
		}
		// Approvals stop: a tool that needs one is refused.
		_, err = a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 1, "b": 2}})
		if code, ref := refusalOf(t, err); code != int64(control.AuditUnavailable.Code()) || !strings.Contains(ref.Reason, "acknowledge") {
			t.Errorf("an approval while tampered: code %d, %+v", code, ref)
		}
		a.Session.Close()
		wantVerdict(t, "cp+mv under the daemon", verifyWithKey(t, h, key), audit.ProblemTampered)
		r, err := h.RunAtTerminal(testContext(t, 30*time.Second), "audit", "acknowledge")
		if err != nil {
			t.Fatalf("acknowledge: %v\n%s", err, r.Stdout)
		}
		if rep, _ := h.Status(ctx); rep.Audit.Tampered != "" {
			t.Errorf("still tampered after acknowledge: %+v", rep.Audit)
		}
		if err := d.Stop(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		// Acknowledged, and nothing was lost: the log verifies again.
		wantVerdict(t, "after acknowledge", verifyWithKey(t, h, key), "")
	})
	t.Run("re-keying", func(t *testing.T) {
		snap.restore(t, h)
		startDaemon(t, h)
		key2, out := setupKeys(t, h, "--force")
		if key2 == "" || key2 == key {
			t.Fatalf("setup-keys --force: %q\n%s", key2, out)
		}
		sealEchoCalls(t, h, 2, "after re-keying")
		wantVerdict(t, "old key after re-keying", verifyWithKey(t, h, key), "")
		wantVerdict(t, "new key after re-keying", verifyWithKey(t, h, key2), "")
	})
}
