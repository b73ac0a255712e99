// Command echo is a small MCP server over stdio (go-sdk, [mcp.StdioTransport]) that
// Portcullis's tests drive as a real child process.
//
// Tools:
//
//   - echo {message}: returns message as its only text content, unchanged.
//   - slow {duration_ms, steps}: waits duration_ms milliseconds in total, split evenly
//     over steps (default 1). After each step it sends notifications/progress
//     (progress = steps done, total = steps) when the request carried a progress token
//     (MCP spec, basic/utilities/progress). It stops early when the request is cancelled
//     (notifications/cancelled, basic/utilities/cancellation) or the session ends, and
//     otherwise returns "done after N steps".
//   - add {a, b}: integer sum, as text and as structured content {"sum": N}.
//
// Test hooks:
//
//   - ECHO_CALL_LOG=FILE appends one JSON line per tools/call request received, before
//     it is validated or run: {"tool": NAME, "args": ARGUMENTS, "pid": PID}. Tests read
//     it to prove that a call reached the server at most once.
//   - The -banner flag, or ECHO_BANNER set to a non-empty value, first writes one line
//     that is not JSON to stdout, as careless servers do; clients must survive it.
//   - -versions V1,V2 restricts the protocol versions the server accepts (default: all
//     the go-sdk knows, 2024-11-05 up to 2026-07-28); "-versions 2025-11-25" makes a
//     legacy-only server that answers server/discover with an error, as older servers do.
//
// Logs go to stderr only; stdout carries JSON-RPC and nothing else (banner aside).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bannerLine is what -banner writes to stdout before the MCP session starts.
const bannerLine = "echo test server starting (this line is not JSON-RPC)"

// Limits on slow's arguments keep a mistaken test from hanging for long.
const (
	maxSlowDuration = 10 * time.Minute
	maxSlowSteps    = 10000
)

func main() {
	banner := flag.Bool("banner", false, "write a non-JSON line to stdout before serving")
	versions := flag.String("versions", "", "comma-separated protocol versions to accept (default: all the SDK supports)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("server", "echo", "pid", os.Getpid())

	if *banner || os.Getenv("ECHO_BANNER") != "" {
		fmt.Fprintln(os.Stdout, bannerLine)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	vs := splitList(*versions)
	for _, v := range vs {
		if !slices.Contains(mcp.SupportedProtocolVersions(), v) {
			log.Error("unknown protocol version", "version", v, "known", mcp.SupportedProtocolVersions())
			os.Exit(2)
		}
	}
	server, closeLog, err := newServer(log, os.Getenv("ECHO_CALL_LOG"), vs)
	if err != nil {
		log.Error("starting", "err", err)
		os.Exit(1)
	}
	defer closeLog()

	log.Info("serving on stdio")
	if err := server.Run(ctx, &mcp.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("session ended", "err", err)
		os.Exit(1)
	}
	log.Info("session ended")
}

// newServer builds the MCP server with its three tools. When callLogPath is not
// empty every tools/call request is appended to that file first; the returned
// function closes it. A non-empty versions list restricts the protocol versions
// the server negotiates.
func newServer(log *slog.Logger, callLogPath string, versions []string) (*mcp.Server, func(), error) {
	server := mcp.NewServer(&mcp.Implementation{Name: "portcullis-test-echo", Version: "1.0.0"},
		&mcp.ServerOptions{SupportedProtocolVersions: versions})
	closeLog := func() {}
	if callLogPath != "" {
		cl, err := openCallLog(callLogPath)
		if err != nil {
			return nil, nil, err
		}
		closeLog = func() { cl.f.Close() }
		server.AddReceivingMiddleware(cl.middleware(log))
	}

	mcp.AddTool(server, &mcp.Tool{
		Name:        "echo",
		Description: "Returns the message unchanged.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return textResult(in.Message), nil, nil
	})

	mcp.AddTool(server, &mcp.Tool{
		Name:        "slow",
		Description: "Waits duration_ms milliseconds split over steps, reporting progress after each step; honours cancellation.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
		return runSlow(ctx, log, req, in)
	})

	mcp.AddTool(server, &mcp.Tool{
		Name:        "add",
		Description: "Adds two integers.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
		sum := in.A + in.B
		return textResult(strconv.FormatInt(sum, 10)), addOut{Sum: sum}, nil
	})
	return server, closeLog, nil
}

type echoIn struct {
	Message string `json:"message" jsonschema:"text to send back"`
}

type slowIn struct {
	DurationMS int64 `json:"duration_ms" jsonschema:"total time to take, in milliseconds"`
	Steps      int   `json:"steps,omitempty" jsonschema:"number of equal steps (default 1); progress is reported after each"`
}

type addIn struct {
	A int64 `json:"a" jsonschema:"first addend"`
	B int64 `json:"b" jsonschema:"second addend"`
}

type addOut struct {
	Sum int64 `json:"sum" jsonschema:"a + b"`
}

func runSlow(ctx context.Context, log *slog.Logger, req *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
	total := time.Duration(in.DurationMS) * time.Millisecond
	if in.DurationMS < 0 || total > maxSlowDuration {
		return nil, nil, fmt.Errorf("duration_ms %d out of range [0, %d]", in.DurationMS, maxSlowDuration.Milliseconds())
	}
	steps := in.Steps
	if steps == 0 {
		steps = 1
	}
	if steps < 0 || steps > maxSlowSteps {
		return nil, nil, fmt.Errorf("steps %d out of range [1, %d]", in.Steps, maxSlowSteps)
	}
	token := req.Params.GetProgressToken()
	per := total / time.Duration(steps)
	timer := time.NewTimer(per)
	defer timer.Stop()
	for done := 1; done <= steps; done++ {
		select {
		case <-ctx.Done():
			log.Info("slow cancelled", "stepsDone", done-1, "steps", steps)
			return nil, nil, fmt.Errorf("cancelled after %d of %d steps: %w", done-1, steps, ctx.Err())
		case <-timer.C:
		}
		if token != nil {
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      float64(done),
				Total:         float64(steps),
				Message:       fmt.Sprintf("step %d of %d", done, steps),
			})
			if err != nil {
				log.Warn("sending progress", "err", err)
			}
		}
		timer.Reset(per)
	}
	return textResult(fmt.Sprintf("done after %d steps", steps)), nil, nil
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// callLog appends one JSON line per tools/call request to a file.
type callLog struct {
	mu sync.Mutex // serializes writes so lines never interleave
	f  *os.File   // guarded by mu
}

// callRecord is one line of the call log.
type callRecord struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
	PID  int             `json:"pid"`
}

func openCallLog(path string) (*callLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening call log: %w", err)
	}
	return &callLog{f: f}, nil
}

// middleware records tools/call requests before the SDK validates and runs them.
func (c *callLog) middleware(log *slog.Logger) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if call, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" {
				if err := c.record(call.Params.Name, call.Params.Arguments); err != nil {
					log.Error("writing call log", "err", err)
				}
			}
			return next(ctx, method, req)
		}
	}
}

func (c *callLog) record(tool string, args json.RawMessage) error {
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	line, err := json.Marshal(callRecord{Tool: tool, Args: args, PID: os.Getpid()})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.f.Write(append(line, '\n'))
	return err
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
