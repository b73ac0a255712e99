package e2e

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/internal/harness"
)

// faultyTools are the tools of the faulty test server (testdata/servers/faulty).
var faultyTools = []string{"echo", "blob", "slow", "crash", "broken"}

// faultyBin builds testdata/servers/faulty into a temporary directory of t
// and returns its path (the build cache makes this about a second).
func faultyBin(t *testing.T) string {
	t.Helper()
	p, err := harness.BuildServer(testContext(t, 3*time.Minute), repoRoot, t.TempDir(), "faulty", "")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// addFaulty registers the faulty server under label with the given fault
// flags (through `portcullis servers add`) and allows all its tools.
func addFaulty(t *testing.T, h *harness.Home, label string, flags ...string) {
	t.Helper()
	addServer(t, h, label, append([]string{faultyBin(t)}, flags...)...)
	allowTools(t, h, label, faultyTools...)
}

// addFaultyShell registers the faulty server behind `/bin/sh -c script`
// where "$0" in the script is the faulty binary, with its sandbox off: the
// tests that use it watch the server's process group (its leader is the
// pid status shows) and what a killed daemon leaves for the next one,
// which is how a server without a sandbox (macOS, sandbox off) is
// supervised. Under bubblewrap the server is not its group's leader and
// ends with the daemon (contain_bwrap_test.go).
func addFaultyShell(t *testing.T, h *harness.Home, label, script string) {
	t.Helper()
	if err := h.AddServer(testContext(t, 30*time.Second), label, []string{"--sandbox", "off"}, "/bin/sh", "-c", script, faultyBin(t)); err != nil {
		t.Fatal(err)
	}
	allowTools(t, h, label, faultyTools...)
}

// setStartupTimeout edits config.json by hand, as a person would, to give
// label a startupTimeout of d.
func setStartupTimeout(t *testing.T, h *harness.Home, label string, d time.Duration) {
	t.Helper()
	cfg, err := config.Load(h.ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	srv := cfg.Servers[label]
	srv.StartupTimeout = config.Duration(d)
	cfg.Servers[label] = srv
	if err := config.Save(h.ConfigFile(), cfg); err != nil {
		t.Fatal(err)
	}
}

// wireMsg is one JSON-RPC message as the raw agent received it.
type wireMsg struct {
	Raw    string
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// refusal decodes the gateway refusal in the error's data.
func (m wireMsg) refusal(t *testing.T) control.Refusal {
	t.Helper()
	if m.Error == nil {
		t.Fatalf("want an error, got %.300s", m.Raw)
	}
	var r control.Refusal
	if err := json.Unmarshal(m.Error.Data, &r); err != nil {
		t.Fatalf("the error's data is not a refusal: %.300s", m.Raw)
	}
	if m.Error.Code != r.Error.Code() {
		t.Errorf("error code %d, want %d for %s", m.Error.Code, r.Error.Code(), r.Error)
	}
	return r
}

// text returns the first text content of a tools/call result.
func (m wireMsg) text(t *testing.T) string {
	t.Helper()
	var r struct {
		Content []struct{ Text string } `json:"content"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &r) != nil || len(r.Content) == 0 {
		t.Fatalf("want a tools/call result with text, got %.300s", m.Raw)
	}
	return r.Content[0].Text
}

// rawAgent drives `portcullis connect LABEL` with hand-written JSON-RPC lines,
// to send what an SDK never would and to see every byte that comes back.
type rawAgent struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan []byte // every line the shim writes, in order; closed at its EOF
	stderr *harness.SyncBuffer
	exited chan struct{} // closed once the shim was reaped
	code   int           // exit code; set before exited is closed
}

// startRaw starts the shim for label; the test's end kills it if still running.
func startRaw(t *testing.T, h *harness.Home, label string) *rawAgent {
	t.Helper()
	return startRawEnv(t, h, label)
}

// startRawEnv is startRaw with env added to the shim's environment.
func startRawEnv(t *testing.T, h *harness.Home, label string, env ...string) *rawAgent {
	t.Helper()
	cmd := h.ConnectCommand(label)
	cmd.Env = append(cmd.Env, env...)
	a := &rawAgent{t: t, cmd: cmd, lines: make(chan []byte, 1024), stderr: &harness.SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = a.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	a.in = in
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(a.lines)
		r := mcpwire.NewReader(out, 64<<20)
		for {
			line, err := r.ReadLine()
			if errors.Is(err, mcpwire.ErrTooLarge) {
				continue
			}
			if err != nil {
				return
			}
			a.lines <- append([]byte(nil), line...)
		}
	}()
	go func() {
		_ = cmd.Wait()
		a.code = cmd.ProcessState.ExitCode()
		close(a.exited)
	}()
	t.Cleanup(func() {
		a.in.Close()
		select {
		case <-a.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-a.exited
		}
	})
	return a
}

func (a *rawAgent) pid() int { return a.cmd.Process.Pid }

// send writes one line to the shim.
func (a *rawAgent) send(line string) {
	a.t.Helper()
	if _, err := io.WriteString(a.in, line+"\n"); err != nil {
		a.t.Fatalf("writing to the shim: %v", err)
	}
}

// request sends a request with the raw JSON id.
func (a *rawAgent) request(id, method string, params any) {
	a.t.Helper()
	b, err := mcpwire.NewRequest(json.RawMessage(id), method, params)
	if err != nil {
		a.t.Fatal(err)
	}
	a.send(string(b))
}

// next returns the next line, failing the test after d or at the shim's EOF.
// Every line must be a valid JSON-RPC message.
func (a *rawAgent) next(d time.Duration) wireMsg {
	a.t.Helper()
	select {
	case line, ok := <-a.lines:
		if !ok {
			a.t.Fatalf("the shim closed its output; stderr: %s", a.stderr.String())
		}
		if _, err := mcpwire.Parse(line); err != nil {
			a.t.Fatalf("the agent received a line that is not JSON-RPC (%v): %.300q", err, line)
		}
		m := wireMsg{Raw: string(line)}
		if err := json.Unmarshal(line, &m); err != nil {
			a.t.Fatal(err)
		}
		return m
	case <-time.After(d):
		a.t.Fatalf("nothing from the shim within %s; stderr: %s", d, a.stderr.String())
	}
	return wireMsg{}
}

// await reads until the response whose raw id is id and returns it with the
// messages that came before it.
func (a *rawAgent) await(id string, d time.Duration) (wireMsg, []wireMsg) {
	a.t.Helper()
	deadline := time.Now().Add(d)
	var before []wireMsg
	for {
		m := a.next(time.Until(deadline))
		if m.Method == "" && string(m.ID) == id {
			return m, before
		}
		before = append(before, m)
	}
}

// eof waits, at most d, for the end of the shim's output (the agent's
// stdin), passing over the lines before it, and fails the test otherwise.
func (a *rawAgent) eof(d time.Duration) {
	a.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case _, ok := <-a.lines:
			if !ok {
				return
			}
		case <-deadline:
			a.t.Fatalf("the agent's input did not end within %s; stderr: %s", d, a.stderr.String())
		}
	}
}

// call sends a request and waits for its answer.
func (a *rawAgent) call(id, method string, params any, d time.Duration) wireMsg {
	a.t.Helper()
	a.request(id, method, params)
	m, _ := a.await(id, d)
	return m
}

// handshake runs the legacy initialize handshake (2025-06-18) with the given
// request id and returns the initialize answer.
func (a *rawAgent) handshake(id string) wireMsg {
	a.t.Helper()
	m := a.call(id, "initialize", map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "raw-agent", "version": "1.0.0"},
	}, 60*time.Second)
	if m.Error != nil {
		a.t.Fatalf("initialize failed: %s", m.Raw)
	}
	a.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return m
}

// toolCall returns tools/call params.
func toolCall(name string, args map[string]any) map[string]any {
	return map[string]any{"name": name, "arguments": args}
}

// waitExited waits up to d for the shim to exit and returns its exit code.
func (a *rawAgent) waitExited(d time.Duration) int {
	a.t.Helper()
	select {
	case <-a.exited:
		return a.code
	case <-time.After(d):
		a.t.Fatalf("the shim did not exit within %s", d)
	}
	return 0
}

// groupGone waits until no process of process group pgid is left (zombies
// aside) and fails the test naming the survivors after d.
func groupGone(t *testing.T, pgid int, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left, err := harness.Leftovers(pgid, pgid)
		if errors.Is(err, harness.ErrNoProc) {
			t.Skipf("skipping: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: processes of group %d still running after %s: %+v", what, pgid, d, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// groupMembers returns the live processes of process group pgid.
func groupMembers(t *testing.T, pgid int) []harness.Proc {
	t.Helper()
	left, err := harness.Leftovers(pgid, pgid)
	if errors.Is(err, harness.ErrNoProc) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// readLines returns the lines of a file, none when it does not exist.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// verifyAudit runs `portcullis audit verify` and fails t unless the log verifies.
func verifyAudit(t *testing.T, h *harness.Home) {
	t.Helper()
	v, code := auditVerify(t, h)
	if code != 0 || !v.OK {
		t.Errorf("portcullis audit verify: exit %d, %+v", code, v)
	}
}

// eventsOf returns the audit events of the given type whose agentRun is run.
func eventsOf(t *testing.T, h *harness.Home, typ, run string) []audit.Event {
	t.Helper()
	var out []audit.Event
	for _, e := range auditEvents(t, h) {
		if e.Type == typ && auditFields(t, e)["agentRun"] == run {
			out = append(out, e)
		}
	}
	return out
}

// signalPID sends sig to pid, failing t when that is impossible.
func signalPID(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill -%d %d: %v", sig, pid, err)
	}
}

// faultyLog returns a path for the faulty server's -log file.
func faultyLog(t *testing.T) string { return filepath.Join(t.TempDir(), "faulty.log") }

// waitNoRuns waits until status lists no live agent run.
func waitNoRuns(t *testing.T, h *harness.Home, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		rep, err := h.Status(testContext(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Runs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d agent runs still live after %s", len(rep.Runs), d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startedPIDs returns the pid of every server_started event in the audit log.
func startedPIDs(t *testing.T, h *harness.Home) []int {
	t.Helper()
	var out []int
	for _, e := range auditEvents(t, h) {
		if e.Type != audit.TypeServerStarted {
			continue
		}
		if pid, ok := auditFields(t, e)["pid"].(float64); ok {
			out = append(out, int(pid))
		}
	}
	if len(out) == 0 {
		t.Fatal("no server_started event names a pid")
	}
	return out
}
