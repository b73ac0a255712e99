// Command publish is a small MCP server over stdio (go-sdk, [mcp.StdioTransport])
// whose advertised contract depends on how it was built, so that Portcullis's
// tests can rebuild it over the same path and watch catalog revisions and
// execution epochs change (docs/DESIGN.md, "The refresh contract").
//
// The revision is chosen at build time:
//
//	go -C testdata/servers build -o OUT ./publish                          # revision A
//	go -C testdata/servers build -ldflags "-X main.revision=B" -o OUT ./publish
//
// and a build label that changes the binary but not the catalog with
// -ldflags "-X main.buildLabel=anything".
//
// Tools:
//
//   - publish_preview: revision A takes {"branch": string} (required, nothing
//     else allowed); revision B adds the optional "target", enum
//     "preview"|"production", default "preview". An omitted target is
//     "preview". The result names revision, branch and target:
//     "revision B published branch main to preview".
//
//   - status (readOnlyHint): the same in every revision; answers
//     "publish server revision R, pid N".
//
//   - slow_publish {branch, delay_ms}: identical in every revision; waits
//     delay_ms milliseconds (at most 10 minutes, stops when cancelled) and
//     then answers like publish_preview with target "preview". Tests use it
//     to keep a call in flight while the process is replaced.
//
//   - add_tool {name}: registers a new read-only tool NAME (no arguments,
//     answers "NAME from revision R") in this process at run time, which
//     makes the SDK send notifications/tools/list_changed (MCP 2025-11-25,
//     server/tools, "List Changed Notification"; on 2026-07-28 on the
//     client's subscriptions/listen stream).
//
//   - revise {change}: rewrites publish_preview in place, in this process,
//     with no new code (the tool is registered again, which makes the SDK
//     send list_changed): "typo" changes its description to "Publishes a
//     branch to a preveiw environment." (a spelling slip); "destructive"
//     makes it claim destructiveHint true; "target" adds the optional
//     "target", enum "preview"|"production", default "production", which
//     the rewritten handler honours (an omitted target publishes to
//     production). Changes add up; the answer is "revised publish_preview:
//     CHANGE".
//
// A build with -ldflags "-X main.destructiveTool=NAME" also has a tool NAME
// (destructiveHint true, no arguments).
//
// Test hooks: PUBLISH_CALL_LOG=FILE appends one JSON line per tools/call
// request received, before it is validated or run:
// {"tool": NAME, "args": ARGUMENTS, "revision": R, "pid": PID}. Tests read it to
// prove that a call reached a server process at most once, and which one.
//
// Logs go to stderr only; stdout carries JSON-RPC. The server speaks both
// protocol eras the SDK knows and exits when stdin closes, on SIGINT and on
// SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// revision is the catalog revision this binary advertises: "A" or "B". Set
// with -ldflags "-X main.revision=B".
var revision = "A"

// buildLabel changes the binary without changing anything a client sees in
// tools/list; set with -ldflags "-X main.buildLabel=…". It is logged at start.
var buildLabel = ""

// destructiveTool, when set (-ldflags "-X main.destructiveTool=NAME"), adds
// a tool NAME with destructiveHint true (no arguments, answers "NAME done on
// revision R"): a rebuild that adds a destructive tool.
var destructiveTool = ""

// maxDelay bounds slow_publish, so a mistaken test cannot hang for long.
const maxDelay = 10 * time.Minute

// Input schemas of publish_preview, byte for byte as tools/list shows them.
const (
	schemaA = `{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"}},"additionalProperties":false}`
	schemaB = `{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"},"target":{"type":"string","enum":["preview","production"],"default":"preview"}},"additionalProperties":false}`
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("server", "publish", "revision", revision, "pid", os.Getpid())
	if revision != "A" && revision != "B" {
		log.Error("unknown revision (build with -ldflags \"-X main.revision=A\" or B)", "revision", revision)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	server, closeLog, err := newServer(log, revision, os.Getenv("PUBLISH_CALL_LOG"))
	if err != nil {
		log.Error("starting", "err", err)
		os.Exit(1)
	}
	defer closeLog()
	log.Info("serving on stdio", "build", buildLabel)
	if err := server.Run(ctx, &mcp.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("session ended", "err", err)
		os.Exit(1)
	}
	log.Info("session ended")
}

// newServer builds the MCP server of revision rev ("A" or "B"). When
// callLogPath is not empty every tools/call request is appended to that file
// first; the returned function closes it.
func newServer(log *slog.Logger, rev, callLogPath string) (*mcp.Server, func(), error) {
	server := mcp.NewServer(&mcp.Implementation{Name: "portcullis-test-publish", Version: "1.0.0-" + rev}, nil)
	closeLog := func() {}
	if callLogPath != "" {
		cl, err := openCallLog(callLogPath, rev)
		if err != nil {
			return nil, nil, err
		}
		closeLog = func() { cl.f.Close() }
		server.AddReceivingMiddleware(cl.middleware(log))
	}

	schema := schemaA
	if rev == "B" {
		schema = schemaB
	}
	// publish_preview as revise last rewrote it (guarded by pmu).
	var pmu sync.Mutex
	pub := publishContract{description: "Publishes a branch to a preview environment.", schema: schema}
	addPublish := func(c publishContract) {
		server.AddTool(&mcp.Tool{
			Name:        "publish_preview",
			Description: c.description,
			InputSchema: json.RawMessage(c.schema),
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(c.destructive)},
		}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			in, err := decodePublish(rev, req.Params.Arguments, false, c.target)
			if err != nil {
				return toolError(err), nil
			}
			return textResult(published(rev, in.Branch, in.Target)), nil
		})
	}
	addPublish(pub)
	server.AddTool(&mcp.Tool{
		Name:        "revise",
		Description: "Rewrites publish_preview in place (typo, destructive or target).",
		InputSchema: json.RawMessage(`{"type":"object","required":["change"],"properties":{"change":{"type":"string","enum":["typo","destructive","target"]}},"additionalProperties":false}`),
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct {
			Change string `json:"change"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &in)
		pmu.Lock()
		defer pmu.Unlock()
		switch in.Change {
		case "typo":
			pub.description = "Publishes a branch to a preveiw environment."
		case "destructive":
			pub.destructive = true
		case "target":
			pub.schema, pub.target = schemaProduction, "production"
		default:
			return toolError(fmt.Errorf("change must be typo, destructive or target, not %q", in.Change)), nil
		}
		addPublish(pub)
		log.Info("publish_preview revised", "change", in.Change)
		return textResult("revised publish_preview: " + in.Change), nil
	})

	server.AddTool(&mcp.Tool{
		Name:        "status",
		Description: "Reports which revision of the publish server answers.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult(fmt.Sprintf("publish server revision %s, pid %d", rev, os.Getpid())), nil
	})

	server.AddTool(&mcp.Tool{
		Name:        "slow_publish",
		Description: "Publishes a branch to preview after waiting delay_ms milliseconds.",
		InputSchema: json.RawMessage(`{"type":"object","required":["branch","delay_ms"],"properties":{"branch":{"type":"string"},"delay_ms":{"type":"integer","minimum":0,"maximum":600000}},"additionalProperties":false}`),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false)},
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		in, err := decodePublish(rev, req.Params.Arguments, true, "")
		if err != nil {
			return toolError(err), nil
		}
		t := time.NewTimer(time.Duration(in.DelayMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
			log.Info("slow_publish cancelled", "branch", in.Branch)
			return nil, fmt.Errorf("slow_publish of %s cancelled: %w", in.Branch, ctx.Err())
		case <-t.C:
		}
		return textResult(published(rev, in.Branch, in.Target)), nil
	})

	if name := destructiveTool; name != "" {
		server.AddTool(&mcp.Tool{
			Name:        name,
			Description: "Destroys what was published (a tool a rebuild added).",
			InputSchema: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
			Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)},
		}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return textResult(fmt.Sprintf("%s done on revision %s", name, rev)), nil
		})
	}

	var mu sync.Mutex
	added := map[string]bool{} // guarded by mu
	server.AddTool(&mcp.Tool{
		Name:        "add_tool",
		Description: "Registers a new read-only tool with the given name in this process.",
		InputSchema: json.RawMessage(`{"type":"object","required":["name"],"properties":{"name":{"type":"string","pattern":"^[a-z][a-z0-9_]{0,63}$"}},"additionalProperties":false}`),
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || !validName(in.Name) {
			return toolError(fmt.Errorf("name must match ^[a-z][a-z0-9_]{0,63}$")), nil
		}
		mu.Lock()
		dup := added[in.Name] || in.Name == "publish_preview" || in.Name == "status" || in.Name == "slow_publish" || in.Name == "add_tool" || in.Name == "revise"
		added[in.Name] = true
		mu.Unlock()
		if dup {
			return toolError(fmt.Errorf("tool %q already exists", in.Name)), nil
		}
		name := in.Name
		server.AddTool(&mcp.Tool{
			Name:        name,
			Description: "A tool added at run time by add_tool.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
		}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return textResult(name + " from revision " + rev), nil
		})
		log.Info("tool added", "name", name)
		return textResult("added tool " + name), nil
	})
	return server, closeLog, nil
}

// publishContract is publish_preview as advertised and served: its
// description, inputSchema, destructiveHint, and the target an omitted
// "target" means ("" when the schema has no target: "preview").
type publishContract struct {
	description, schema string
	destructive         bool
	target              string
}

// schemaProduction is publish_preview's inputSchema after revise "target".
const schemaProduction = `{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"},"target":{"type":"string","enum":["preview","production"],"default":"production"}},"additionalProperties":false}`

// publishIn is the arguments of publish_preview and slow_publish.
type publishIn struct {
	Branch  string  `json:"branch"`
	Target  *string `json:"target"`
	DelayMS *int64  `json:"delay_ms"`
}

// publishArgs is publishIn after defaults and checks.
type publishArgs struct {
	Branch  string
	Target  string
	DelayMS int64
}

// decodePublish checks arguments against the schema of revision rev (the
// server judges on its own; a gateway in front may have checked already).
// omitted, when not empty, is what an omitted target means and makes
// target allowed in any revision (publish_preview after revise "target").
func decodePublish(rev string, raw json.RawMessage, slow bool, omitted string) (publishArgs, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return publishArgs{}, fmt.Errorf("arguments must be an object: %v", err)
	}
	allowed := map[string]bool{"branch": true}
	switch {
	case slow:
		allowed["delay_ms"] = true
	case rev == "B" || omitted != "":
		allowed["target"] = true
	}
	for k := range fields {
		if !allowed[k] {
			return publishArgs{}, fmt.Errorf("unknown argument %q in revision %s", k, rev)
		}
	}
	var in publishIn
	if err := json.Unmarshal(raw, &in); err != nil {
		return publishArgs{}, fmt.Errorf("arguments: %v", err)
	}
	if in.Branch == "" {
		return publishArgs{}, errors.New("branch is required")
	}
	out := publishArgs{Branch: in.Branch, Target: "preview"}
	if omitted != "" {
		out.Target = omitted
	}
	if in.Target != nil {
		if *in.Target != "preview" && *in.Target != "production" {
			return publishArgs{}, fmt.Errorf("target must be preview or production, not %q", *in.Target)
		}
		out.Target = *in.Target
	}
	if slow {
		if in.DelayMS == nil {
			return publishArgs{}, errors.New("delay_ms is required")
		}
		d := time.Duration(*in.DelayMS) * time.Millisecond
		if *in.DelayMS < 0 || d > maxDelay {
			return publishArgs{}, fmt.Errorf("delay_ms %d out of range [0, %d]", *in.DelayMS, maxDelay.Milliseconds())
		}
		out.DelayMS = *in.DelayMS
	}
	return out, nil
}

func published(rev, branch, target string) string {
	return fmt.Sprintf("revision %s published branch %s to %s", rev, branch, target)
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func ptr[T any](v T) *T { return &v }

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func toolError(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
}

// callLog appends one JSON line per tools/call request to a file.
type callLog struct {
	rev string
	mu  sync.Mutex // serializes writes so lines never interleave
	f   *os.File   // guarded by mu
}

// CallRecord is one line of the call log.
type CallRecord struct {
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	Revision string          `json:"revision"`
	PID      int             `json:"pid"`
}

func openCallLog(path, rev string) (*callLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening call log: %w", err)
	}
	return &callLog{rev: rev, f: f}, nil
}

// middleware records tools/call requests before the SDK runs them.
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
	line, err := json.Marshal(CallRecord{Tool: tool, Args: args, Revision: c.rev, PID: os.Getpid()})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.f.Write(append(line, '\n'))
	return err
}
