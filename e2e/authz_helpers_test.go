package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/internal/harness"
)

// The creds test server (testdata/servers/creds): note_write needs a
// credential and has policy approve; note_read is allowed.
const (
	credsLabel = "notes"
	noteWrite  = "note_write"
	noteRead   = "note_read"
	credsRevB  = "-X main.revision=B"
)

// needSecretService skips t unless the throwaway Secret Service of
// scripts/with-secret-service.sh runs (as `make test` arranges): these tests
// store secrets, which must never land in a person's own keyring.
func needSecretService(t *testing.T) {
	t.Helper()
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" || os.Getenv("PORTCULLIS_TEST_KEYRING_PASSWORD") == "" {
		t.Skip("needs the throwaway Secret Service: run as `scripts/with-secret-service.sh go test ./e2e/` (make test does)")
	}
}

// newSecret returns a recognisable secret that appears nowhere else.
func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "PCSECRET-7f3a9c-" + hex.EncodeToString(b)
}

// digest is what the creds server records of a credential.
func digest(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// credsSetup is a PORTCULLIS_HOME with the creds server configured under
// credsLabel, its binary in binDir (rebuilt in place), and its call log.
type credsSetup struct {
	home    *harness.Home
	daemon  *harness.Daemon
	binDir  string
	bin     string
	callLog string
}

// credsScope is a credential to configure: set with `portcullis creds set
// SCOPE --meta` or `--env VAR`, the secret on stdin.
type credsScope struct {
	scope, envVar, secret string
	askEveryUse           bool
}

// newCredsSetup builds revision A of the creds server, stores the
// credentials through the CLI, registers the server with them, allows
// note_read, applies edit to the configuration (settings) and starts a
// daemon (unless noDaemon).
func newCredsSetup(t *testing.T, creds []credsScope, edit func(*config.Config), noDaemon bool) *credsSetup {
	t.Helper()
	s := &credsSetup{home: newHome(t), binDir: t.TempDir()}
	s.callLog = filepath.Join(t.TempDir(), "calls.jsonl")
	s.bin = buildCreds(t, s.binDir, "")
	flags := []string{"--cwd", s.binDir, "--env", "CREDS_CALL_LOG=" + s.callLog}
	for _, c := range creds {
		setCred(t, s.home, c)
		flags = append(flags, "--cred", c.scope)
		if c.envVar == "" {
			flags = append(flags, "--env", "CREDS_SCOPE="+c.scope)
		} else {
			flags = append(flags, "--env", "CREDS_ENV="+c.envVar)
		}
	}
	if err := s.home.AddServer(testContext(t, 30*time.Second), credsLabel, flags, s.bin); err != nil {
		t.Fatal(err)
	}
	if err := s.home.SetToolPolicy(credsLabel, config.PolicyAllow, noteRead); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		cfg, err := config.Load(s.home.ConfigFile())
		if err != nil {
			t.Fatal(err)
		}
		edit(cfg)
		if err := config.Save(s.home.ConfigFile(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	if !noDaemon {
		s.daemon = startDaemon(t, s.home)
	}
	return s
}

// setCred runs `portcullis creds set SCOPE --meta|--env VAR
// [--ask-every-use]` with the secret on stdin.
func setCred(t *testing.T, h *harness.Home, c credsScope) {
	t.Helper()
	args := []string{"creds", "set", c.scope}
	if c.envVar != "" {
		args = append(args, "--env", c.envVar)
	} else {
		args = append(args, "--meta")
	}
	if c.askEveryUse {
		args = append(args, "--ask-every-use")
	}
	cmd := h.Command(testContext(t, 30*time.Second), args...)
	cmd.Stdin = strings.NewReader(c.secret + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("portcullis %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if bytes.Contains(out, []byte(c.secret)) {
		t.Fatalf("creds set printed the secret: %s", out)
	}
}

// buildCreds runs `go build` of the creds server with ldflags into
// dir/creds (over what is there: a rebuild) and returns the path.
func buildCreds(t *testing.T, dir, ldflags string) string {
	t.Helper()
	p, err := harness.BuildServer(testContext(t, 3*time.Minute), repoRoot, dir, "creds", ldflags)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// credsCall is one line of the creds server's CREDS_CALL_LOG.
type credsCall struct {
	Tool     string `json:"tool"`
	Revision string `json:"revision"`
	PID      int    `json:"pid"`
	Meta     string `json:"meta"`
	Env      string `json:"env"`
}

// readCredsCalls returns the ledger of the creds servers, oldest first.
func readCredsCalls(t *testing.T, path string) []credsCall {
	t.Helper()
	return readJSONLines[credsCall](t, path)
}

// approvals runs `portcullis approvals --json`.
func approvals(t *testing.T, h *harness.Home) []authz.Request {
	t.Helper()
	r, err := h.Run(testContext(t, 30*time.Second), "approvals", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var reqs []authz.Request
	if err := json.Unmarshal([]byte(r.Stdout), &reqs); err != nil {
		t.Fatalf("approvals --json printed %q: %v", r.Stdout, err)
	}
	return reqs
}

// waitApproval polls `portcullis approvals --json` until a request whose
// card satisfies ok is pending, and returns it; it fails t after 30 s.
func waitApproval(t *testing.T, h *harness.Home, what string, ok func(authz.Card) bool) authz.Request {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		reqs := approvals(t, h)
		for _, r := range reqs {
			if ok(r.Card) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no approval request for %s within 30 s; pending: %+v", what, reqs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// forTool matches the card of a call of tool on epoch ("" = any).
func forTool(tool, epoch string) func(authz.Card) bool {
	return func(c authz.Card) bool {
		return c.Identity == "" && c.Tool == tool && (epoch == "" || string(c.CurrentEpoch) == epoch)
	}
}

// forIdentity matches the card of a launch that waits for env credentials.
func forIdentity(c authz.Card) bool { return c.Identity != "" }

// decideCLI runs `portcullis approve ID [--once]` or `portcullis deny ID`
// as the person: at a terminal of its own, outside the agent's process
// tree (harness.Home.RunAtTerminal).
func decideCLI(t *testing.T, h *harness.Home, args ...string) string {
	t.Helper()
	r, err := h.RunAtTerminal(testContext(t, 30*time.Second), args...)
	if err != nil {
		t.Fatal(err)
	}
	return r.Stdout
}

// asyncCall calls tool in the background; the result arrives on the channel.
type asyncResult struct {
	res *mcp.CallToolResult
	err error
}

func asyncCall(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any) <-chan asyncResult {
	t.Helper()
	ctx := testContext(t, 2*time.Minute)
	ch := make(chan asyncResult, 1)
	go func() {
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		ch <- asyncResult{res, err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan asyncResult) asyncResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(90 * time.Second):
		t.Fatal("a call got no answer within 90 s")
	}
	return asyncResult{}
}

// okText fails t unless r is a successful tool result, and returns its text.
func okText(t *testing.T, r asyncResult) string {
	t.Helper()
	if r.err != nil {
		t.Fatalf("call failed: %v", r.err)
	}
	txt := resultText(r.res)
	if r.res.IsError {
		t.Fatalf("tool error: %q", txt)
	}
	return txt
}

// wroteWith is the creds server's answer to note_write number n on revision
// rev with the credential secret.
func wroteWith(rev string, n int, secret string) string {
	return fmt.Sprintf("revision=%s wrote note %d (credential %s…)", rev, n, digest(secret)[:19])
}

// filesContaining lists the files under dir whose content contains s.
func filesContaining(t *testing.T, dir, s string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(s)) {
			hits = append(hits, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// epochOf waits until the run of the agent's shim is ready on an epoch
// other than old and returns that epoch.
func epochOf(t *testing.T, h *harness.Home, shimPID int, old string) string {
	t.Helper()
	return string(waitRun(t, h, shimPID, buildWait, "ready on a new epoch", readyOn(old)).Epoch)
}

// approvalTimeout sets settings.approvalTimeout.
func approvalTimeout(d time.Duration) func(*config.Config) {
	return func(c *config.Config) { c.Settings.ApprovalTimeout = config.Duration(d) }
}
