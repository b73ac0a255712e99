package e2e

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/telemetry"
	"github.com/portcullis/portcullis/internal/harness"
	"github.com/portcullis/portcullis/internal/otlpreceiver"
)

// telemetryTo writes settings.telemetry with endpoint into h's
// configuration.
func telemetryTo(t *testing.T, h *harness.Home, endpoint string) {
	t.Helper()
	cfg, err := config.Load(h.ConfigFile())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	cfg.Settings.Telemetry = &config.Telemetry{Endpoint: endpoint, ResourceAttributes: map[string]string{"team": "e2e"}}
	if err := config.Save(h.ConfigFile(), cfg); err != nil {
		t.Fatal(err)
	}
}

// TestTelemetryApprovedCall: with settings.telemetry pointing at an
// OTLP/HTTP receiver on loopback, a call the person approved through the
// real daemon reaches the receiver as the span of the call, naming the
// tool, the epoch the daemon observed and the decision (grant), linked to
// the span of the wait on the person with its decider; no argument value
// or result is exported; status counts what was exported.
func TestTelemetryApprovedCall(t *testing.T) {
	r, err := otlpreceiver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := newHome(t)
	auditAddServer(t, h, "echo", config.Server{Command: echoBin}) // echo: approve (the default)
	telemetryTo(t, h, r.URL)
	startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("echo"), "")

	const secretArg = "arg-value-never-exported"
	pending := asyncCall(t, a.Session, "echo", map[string]any{"message": secretArg})
	req := waitApproval(t, h, "echo", forTool("echo", ""))
	decideCLI(t, h, "approve", string(req.ID))
	if got := okText(t, await(t, pending)); got != secretArg {
		t.Fatalf("echo answered %q", got)
	}

	var call, wait map[string]string
	var links [][]byte
	var waitID []byte
	found := r.Wait(10*time.Second, func(r *otlpreceiver.Receiver) bool {
		for _, s := range r.Spans() {
			attrs := map[string]string{}
			for _, a := range s.Attributes {
				attrs[a.Key] = otlpreceiver.Attr(s.Attributes, a.Key)
			}
			switch s.Name {
			case "execute_tool echo":
				call, links = attrs, nil
				for _, l := range s.Links {
					links = append(links, l.SpanId)
				}
			case "portcullis.approval":
				wait, waitID = attrs, s.SpanId
			}
		}
		return call != nil && wait != nil
	})
	if !found {
		t.Fatalf("within 10 s the receiver got no span of the call and of the approval: %d spans", len(r.Spans()))
	}
	for k, v := range map[string]string{
		telemetry.KeyToolName: "echo", telemetry.KeyMCPMethod: "tools/call", telemetry.KeyOperation: "execute_tool",
		telemetry.KeyTransport: "pipe", telemetry.KeyServer: "echo", telemetry.KeyEpoch: string(req.Card.CurrentEpoch),
		telemetry.KeyDecision: "grant", telemetry.KeyOutcome: "ok",
	} {
		if call[k] != v {
			t.Errorf("call span %s = %q, want %q", k, call[k], v)
		}
	}
	if call[telemetry.KeyEpoch] == "" || call[telemetry.KeyMCPSession] == "" || call[telemetry.KeyMCPSession] != call[telemetry.KeyAgentRun] {
		t.Errorf("call span: epoch %q, session %q, agent run %q", call[telemetry.KeyEpoch], call[telemetry.KeyMCPSession], call[telemetry.KeyAgentRun])
	}
	if wait[telemetry.KeyApprovalState] != "granted" || wait[telemetry.KeyRequest] != string(req.ID) || wait[telemetry.KeyDecider] != "cli" || wait[telemetry.KeyGrant] == "" || wait[telemetry.KeyGrant] != call[telemetry.KeyGrant] {
		t.Errorf("approval span %v; the call's grant %q", wait, call[telemetry.KeyGrant])
	}
	if len(links) != 1 || string(links[0]) != string(waitID) {
		t.Errorf("the call's span links %x, want the approval's %x", links, waitID)
	}
	r.Wait(10*time.Second, func(r *otlpreceiver.Receiver) bool { return len(r.Logs()) >= 3 })
	all := ""
	for _, s := range r.Spans() {
		b, _ := protojson.Marshal(s)
		all += string(b)
	}
	for _, l := range r.Logs() {
		b, _ := protojson.Marshal(l)
		all += string(b)
	}
	if strings.Contains(all, secretArg) {
		t.Errorf("an argument value or result was exported without settings.telemetry.arguments")
	}
	if !strings.Contains(all, "portcullis.approval_granted") || !strings.Contains(all, "portcullis.server_started") {
		t.Errorf("log records %d lack approval_granted or server_started", len(r.Logs()))
	}
	rep, err := h.Status(testContext(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Telemetry == nil || rep.Telemetry.Exported == 0 || !strings.Contains(rep.Telemetry.Destination, "127.0.0.1") {
		t.Errorf("status telemetry %+v", rep.Telemetry)
	}
}

// TestTelemetryCollectorDown: with the collector down, calls are answered
// as ever, and status counts the events that could not be exported.
func TestTelemetryCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	h := newHome(t)
	auditAddServer(t, h, "echo", config.Server{Command: echoBin}, "echo")
	telemetryTo(t, h, down)
	startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("echo"), "")
	ctx := testContext(t, 60*time.Second)
	for i := range 20 {
		res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "m"}})
		if err != nil || res.IsError {
			t.Fatalf("call %d with the collector down: %v %v", i, err, res)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rep, err := h.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tel := rep.Telemetry; tel != nil && tel.Dropped > 0 && tel.LastError != "" && tel.Exported == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status telemetry %+v: want drops counted and the error", rep.Telemetry)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestTelemetryEditHeld: settings.telemetry written into config.json by
// something other than the person's tools (an agent's shell) while the
// daemon runs is held: nothing is exported until the person confirms it
// at a terminal; then the calls' spans reach the receiver.
func TestTelemetryEditHeld(t *testing.T) {
	r, err := otlpreceiver.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := newHome(t)
	auditAddServer(t, h, "echo", config.Server{Command: echoBin}, "echo")
	startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("echo"), "")
	ctx := testContext(t, 60*time.Second)

	telemetryTo(t, h, r.URL) // as an agent would, with the file
	rep, err := h.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := rep.PendingChange
	if p == nil || len(p.Held) != 1 || p.Held[0].Kind != config.WidenTelemetry || !strings.Contains(p.Held[0].Text, r.URL) {
		t.Fatalf("status pendingChange %+v, want the telemetry endpoint held", p)
	}
	if rep.Telemetry != nil {
		t.Fatalf("exporting while the change is held: %+v", rep.Telemetry)
	}
	if _, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "held"}}); err != nil {
		t.Fatal(err)
	}

	if _, err := h.RunAtTerminal(ctx, "changes", "confirm", p.ID); err != nil {
		t.Fatal(err)
	}
	if rep, err = h.Status(ctx); err != nil || rep.Telemetry == nil || !strings.Contains(rep.Telemetry.Destination, "127.0.0.1") {
		t.Fatalf("status telemetry after the confirmation: %+v %v", rep.Telemetry, err)
	}
	if _, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "confirmed"}}); err != nil {
		t.Fatal(err)
	}
	if !r.Wait(10*time.Second, func(r *otlpreceiver.Receiver) bool {
		for _, s := range r.Spans() {
			if s.Name == "execute_tool echo" {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no call span within 10 s of the confirmation")
	}
}
