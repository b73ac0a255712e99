// Command creds is a small MCP server over stdio (go-sdk, [mcp.StdioTransport])
// that needs a credential for its write tool, so that Portcullis's tests can
// prove which execution epoch received which credential across rebuilds
// (docs/DESIGN.md, "Authorization and credentials").
//
// The revision is chosen at build time:
//
//	go -C testdata/servers build -o OUT ./creds                              # revision A
//	go -C testdata/servers build -ldflags "-X main.revision=B" -o OUT ./creds
//
// Tools:
//
//   - note_write {text} (destructiveHint false): stores a note in memory. It
//     needs a credential: a "meta" credential in the call's
//     params._meta["dev.portcullis/credentials"] (an object of scope → secret;
//     the scope named by CREDS_SCOPE, default "notes-api") or an "env"
//     credential in the environment variable named by CREDS_ENV (default
//     NOTES_TOKEN). Without either it answers a tool error ("no credential"),
//     unless CREDS_OPTIONAL=1 (then "… (no credential)"; the demo uses it
//     where no keychain is available). The result is
//     "revision=R wrote note N (credential sha256:<12 hex>…)".
//     Revision B adds an optional "tag" string argument (a catalog change).
//   - note_read {} (readOnlyHint): "revision=R holds N notes"; needs nothing.
//
// Test hooks: CREDS_CALL_LOG=FILE appends one JSON line per tools/call request
// received, before it is validated or run:
//
//	{"tool":NAME,"revision":R,"pid":PID,"meta":"sha256:…","env":"sha256:…"}
//
// where meta and env are the SHA-256 digests of the credential the call
// carried in _meta and of the one the process got in its environment ("" when
// absent). The secret itself is never written to the log, stderr or a result.
//
// Logs go to stderr only; stdout carries JSON-RPC. The server speaks both
// protocol eras the SDK knows and exits when stdin closes, on SIGINT and on
// SIGTERM.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// revision is "A" or "B"; set with -ldflags "-X main.revision=B".
var revision = "A"

// buildLabel changes the binary without changing anything a client sees in
// tools/list (a code-only rebuild); set with -ldflags "-X
// main.buildLabel=…". It is logged at start.
var buildLabel = ""

// metaKey is the params._meta key under which Portcullis injects "meta"
// credentials.
const metaKey = "dev.portcullis/credentials"

// Input schemas of note_write, byte for byte as tools/list shows them.
const (
	writeSchemaA = `{"type":"object","required":["text"],"properties":{"text":{"type":"string"}},"additionalProperties":false}`
	writeSchemaB = `{"type":"object","required":["text"],"properties":{"text":{"type":"string"},"tag":{"type":"string"}},"additionalProperties":false}`
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("server", "creds", "revision", revision, "build", buildLabel, "pid", os.Getpid())
	if revision != "A" && revision != "B" {
		log.Error("unknown revision (build with -ldflags \"-X main.revision=A\" or B)", "revision", revision)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{
		rev:      revision,
		scope:    envOr("CREDS_SCOPE", "notes-api"),
		envCred:  os.Getenv(envOr("CREDS_ENV", "NOTES_TOKEN")),
		logPath:  os.Getenv("CREDS_CALL_LOG"),
		optional: os.Getenv("CREDS_OPTIONAL") == "1",
		leak:     os.Getenv("CREDS_LEAK") == "1",
	}
	server, closeLog, err := newServer(log, cfg)
	if err != nil {
		log.Error("starting", "err", err)
		os.Exit(1)
	}
	defer closeLog()
	log.Info("serving on stdio", "envCredential", cfg.envCred != "")
	if err := server.Run(ctx, &mcp.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("session ended", "err", err)
		os.Exit(1)
	}
	log.Info("session ended")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// config is what one process serves with.
type config struct {
	rev     string // "A" or "B"
	scope   string // the meta credential scope to look for
	envCred string // the env credential, "" when none
	logPath string // CREDS_CALL_LOG
	// optional lets note_write work without a credential (CREDS_OPTIONAL=1).
	optional bool
	// leak puts the env credential into note_read's title, description
	// and input schema, and the server's instructions (CREDS_LEAK=1), as a
	// server that gives its own token away would.
	leak bool
}

// Digest returns "sha256:<hex>" of secret, or "" for an empty one: the only
// form in which this server ever writes a credential down.
func Digest(secret string) string {
	if secret == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// metaCredential returns the meta credential of scope carried by a call.
func metaCredential(meta mcp.Meta, scope string) string {
	creds, ok := meta[metaKey].(map[string]any)
	if !ok {
		return ""
	}
	s, _ := creds[scope].(string)
	return s
}

func newServer(log *slog.Logger, cfg config) (*mcp.Server, func(), error) {
	var opts *mcp.ServerOptions
	readTool := &mcp.Tool{
		Name:        "note_read",
		Description: "Counts the notes.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}
	if cfg.leak {
		opts = &mcp.ServerOptions{Instructions: "Use the token " + cfg.envCred + " when asked."}
		readTool.Title = "Notes (token " + cfg.envCred + ")"
		readTool.Description = "Counts the notes. It uses the token " + cfg.envCred + "."
		schema, _ := json.Marshal(map[string]any{"type": "object", "additionalProperties": false,
			"properties": map[string]any{"token": map[string]any{"type": "string", "default": cfg.envCred, "description": "defaults to " + cfg.envCred}}})
		readTool.InputSchema = json.RawMessage(schema)
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "portcullis-test-creds", Version: "1.0.0-" + cfg.rev}, opts)
	closeLog := func() {}
	if cfg.logPath != "" {
		cl, err := openCallLog(cfg)
		if err != nil {
			return nil, nil, err
		}
		closeLog = func() { cl.f.Close() }
		server.AddReceivingMiddleware(cl.middleware(log))
	}

	var mu sync.Mutex
	var notes []string // guarded by mu
	schema := writeSchemaA
	if cfg.rev == "B" {
		schema = writeSchemaB
	}
	server.AddTool(&mcp.Tool{
		Name:        "note_write",
		Description: "Stores a note; needs the notes credential.",
		InputSchema: json.RawMessage(schema),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false)},
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct {
			Text string  `json:"text"`
			Tag  *string `json:"tag"`
		}
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.Text == "" {
			return toolError("text is required"), nil
		}
		if in.Tag != nil && cfg.rev != "B" {
			return toolError("unknown argument \"tag\" in revision " + cfg.rev), nil
		}
		cred := metaCredential(req.Params.Meta, cfg.scope)
		if cred == "" {
			cred = cfg.envCred
		}
		if cred == "" && !cfg.optional {
			return toolError("no credential: set one with portcullis creds set " + cfg.scope), nil
		}
		mu.Lock()
		notes = append(notes, in.Text)
		n := len(notes)
		mu.Unlock()
		if cred == "" {
			return textResult(fmt.Sprintf("revision=%s wrote note %d (no credential)", cfg.rev, n)), nil
		}
		return textResult(fmt.Sprintf("revision=%s wrote note %d (credential %s…)", cfg.rev, n, Digest(cred)[:19])), nil
	})
	server.AddTool(readTool, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		n := len(notes)
		mu.Unlock()
		return textResult(fmt.Sprintf("revision=%s holds %d notes", cfg.rev, n)), nil
	})
	return server, closeLog, nil
}

func ptr[T any](v T) *T { return &v }

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// CallRecord is one line of the call log: digests of the credentials a call
// carried, never the values.
type CallRecord struct {
	Tool     string `json:"tool"`
	Revision string `json:"revision"`
	PID      int    `json:"pid"`
	Meta     string `json:"meta"` // Digest of the meta credential, "" when absent
	Env      string `json:"env"`  // Digest of the env credential, "" when absent
}

// callLog appends one JSON line per tools/call request to a file.
type callLog struct {
	cfg config
	mu  sync.Mutex // serializes writes so lines never interleave
	f   *os.File   // guarded by mu
}

func openCallLog(cfg config) (*callLog, error) {
	f, err := os.OpenFile(cfg.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening call log: %w", err)
	}
	return &callLog{cfg: cfg, f: f}, nil
}

// middleware records tools/call requests before the SDK runs them.
func (c *callLog) middleware(log *slog.Logger) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if call, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" {
				rec := CallRecord{Tool: call.Params.Name, Revision: c.cfg.rev, PID: os.Getpid(),
					Meta: Digest(metaCredential(call.Params.Meta, c.cfg.scope)), Env: Digest(c.cfg.envCred)}
				if err := c.record(rec); err != nil {
					log.Error("writing call log", "err", err)
				}
			}
			return next(ctx, method, req)
		}
	}
}

func (c *callLog) record(rec CallRecord) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.f.Write(append(line, '\n'))
	return err
}
