package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/telemetry"
	"github.com/portcullis/portcullis/internal/harness"
)

// jaegerConfig is a Jaeger (v2, an OpenTelemetry Collector distribution)
// with memory storage, OTLP/HTTP in and the query API, on loopback ports
// of the test's choosing; its own metrics are off (no port 8888).
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: "127.0.0.1:%[1]d"
    grpc:
      endpoint: "127.0.0.1:%[2]d"
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 1000
receivers:
  otlp:
    protocols:
      http:
        endpoint: "127.0.0.1:%[3]d"
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// freePorts returns n loopback ports free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// buildJaeger builds the Jaeger of testdata/jaeger (its own module, so that
// the main module does not depend on it) into dir. It skips t when the
// build fails because a module cannot be downloaded.
func buildJaeger(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "jaeger")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "-C", filepath.Join(repoRoot, "testdata", "jaeger"), "build", "-o", bin, "github.com/jaegertracing/jaeger/cmd/jaeger")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		text := string(out)
		for _, s := range []string{"module lookup disabled", "no such host", "dial tcp", "reading https://", "GOPROXY", "not found: ", "410 Gone", "verifying module"} {
			if strings.Contains(text, s) {
				t.Skipf("Jaeger cannot be built here, a module is not served: %v\n%s", err, text)
			}
		}
		t.Fatalf("building Jaeger (testdata/jaeger): %v\n%s", err, text)
	}
	return bin
}

// jaegerSpan is a span as Jaeger's query API (/api/traces) gives it.
type jaegerSpan struct {
	OperationName string `json:"operationName"`
	Tags          []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

// TestTelemetryJaeger: a real Jaeger (built from its Go module), fed
// over OTLP/HTTP on loopback, has the span of a call the person approved
// within 10 s, found through Jaeger's query API: it names the tool
// (gen_ai.tool.name), the epoch the daemon observed and the person's
// decision, and holds no argument value.
func TestTelemetryJaeger(t *testing.T) {
	dir := t.TempDir()
	bin := buildJaeger(t, dir)
	ports := freePorts(t, 3)
	query, grpcPort, otlp := ports[0], ports[1], ports[2]
	cfgFile := filepath.Join(dir, "jaeger.yaml")
	must(t, os.WriteFile(cfgFile, fmt.Appendf(nil, jaegerConfig, query, grpcPort, otlp), 0o644))
	var jlog harness.SyncBuffer
	j := exec.Command(bin, "--config", cfgFile)
	// Jaeger's query service traces itself to the default OTLP endpoint
	// unless told not to.
	j.Env = append(os.Environ(), "OTEL_SDK_DISABLED=true", "OTEL_TRACES_EXPORTER=none")
	j.Stdout, j.Stderr = &jlog, &jlog
	must(t, j.Start())
	t.Cleanup(func() {
		_ = j.Process.Kill()
		_ = j.Wait()
		if t.Failed() {
			t.Logf("jaeger log:\n%s", jlog.String())
		}
	})
	api := fmt.Sprintf("http://127.0.0.1:%d", query)
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(api + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jaeger's query API does not answer within 60 s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	h := newHome(t)
	auditAddServer(t, h, "echo", config.Server{Command: echoBin}) // echo: approve (the default)
	telemetryTo(t, h, fmt.Sprintf("http://127.0.0.1:%d", otlp))
	startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("echo"), "")
	const secretArg = "arg-value-never-exported-to-jaeger"
	pending := asyncCall(t, a.Session, "echo", map[string]any{"message": secretArg})
	req := waitApproval(t, h, "echo", forTool("echo", ""))
	decideCLI(t, h, "approve", string(req.ID))
	if got := okText(t, await(t, pending)); got != secretArg {
		t.Fatalf("echo answered %q", got)
	}
	approved := time.Now()

	var call map[string]string
	var raw []byte
	for call == nil {
		resp, err := client.Get(api + "/api/traces?service=portcullis&limit=50")
		if err == nil {
			raw = nil
			var body struct {
				Data []struct {
					Spans []jaegerSpan `json:"spans"`
				} `json:"data"`
			}
			b := new(bytes.Buffer)
			_, _ = b.ReadFrom(resp.Body)
			resp.Body.Close()
			raw = b.Bytes()
			if json.Unmarshal(raw, &body) == nil {
				for _, tr := range body.Data {
					for _, s := range tr.Spans {
						if s.OperationName != "execute_tool echo" {
							continue
						}
						call = map[string]string{}
						for _, tag := range s.Tags {
							call[tag.Key] = fmt.Sprint(tag.Value)
						}
					}
				}
			}
		}
		if call == nil && time.Since(approved) > 10*time.Second {
			t.Fatalf("within 10 s of the approval Jaeger has no span of the call; /api/traces says: %.2000s", raw)
		}
		if call == nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
	for k, v := range map[string]string{
		telemetry.KeyToolName: "echo", telemetry.KeyEpoch: string(req.Card.CurrentEpoch), telemetry.KeyDecision: "grant",
		telemetry.KeyServer: "echo", telemetry.KeyOperation: "execute_tool",
	} {
		if call[k] != v {
			t.Errorf("Jaeger's span of the call: %s = %q, want %q", k, call[k], v)
		}
	}
	if call[telemetry.KeyEpoch] == "" || call[telemetry.KeyGrant] == "" {
		t.Errorf("Jaeger's span of the call names no epoch or grant: %v", call)
	}
	if bytes.Contains(raw, []byte(secretArg)) {
		t.Errorf("an argument value reached Jaeger")
	}
}
