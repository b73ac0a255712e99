// Command inventory is the demo MCP server over stdio (go-sdk, [mcp.StdioTransport]):
// a tiny in-memory stock list with one read tool and one write tool, the shape of
// server that Portcullis puts between an agent and a credential.
//
// Tools:
//
//   - inventory_lookup {sku}: the quantity on hand. Annotations: readOnlyHint true.
//   - inventory_adjust {sku, delta}: adds delta (may be negative) and returns the new
//     quantity; refuses to go below zero. Annotations: readOnlyHint false,
//     destructiveHint false.
//
// The stock starts as [seedStock] in every process: state lives in memory only, so a
// restarted server starts over. When INVENTORY_TOKEN is set, inventory_adjust reports
// "authorized with token ending …XXXX" (its last four characters, and only when the
// token is long enough that they do not give most of it away); the full token is never
// written anywhere.
//
// Building with -ldflags "-X main.schemaRevision=2" gives inventory_adjust a required
// "reason" argument: a rebuild whose catalog really changed, for demos and tests.
//
// Building with -ldflags "-X main.buildLabel=B" gives another binary with the same
// catalog (a code-only rebuild); the label is logged at start.
//
// INVENTORY_CALL_LOG=FILE appends one JSON line per tools/call request received, before
// it is validated or run: {"tool": NAME, "args": ARGUMENTS, "revision": R, "build": B,
// "pid": PID, "process": P}, the ledger tests read to see which process received which
// call: P is drawn at random when the process starts, since PID repeats across sandboxes
// (each server is pid 2 of a PID namespace of its own).
//
// Logs go to stderr only; stdout carries JSON-RPC and nothing else.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// schemaRevision selects the tool contract: "1" (default) or "2" (adjust needs a reason).
// Set it at build time with -ldflags "-X main.schemaRevision=2".
var schemaRevision = "1"

// buildLabel changes the binary without changing its catalog; set with
// -ldflags "-X main.buildLabel=…".
var buildLabel = ""

// process names this process in the call log (see the package comment).
var process = rand.Text()

// seedStock is the quantity of each SKU when the process starts.
var seedStock = map[string]int64{
	"WIDGET-1": 40,
	"GADGET-2": 12,
	"GIZMO-3":  0,
}

// minTokenForHint is the shortest token whose last four characters may be shown.
const minTokenForHint = 12

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("server", "inventory", "pid", os.Getpid())
	if schemaRevision != "1" && schemaRevision != "2" {
		log.Error("unknown schemaRevision (want 1 or 2)", "schemaRevision", schemaRevision)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	inv := newInventory(seedStock)
	server := newServer(inv, schemaRevision, os.Getenv("INVENTORY_TOKEN"))
	if p := os.Getenv("INVENTORY_CALL_LOG"); p != "" {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			log.Error("opening the call log", "err", err)
			os.Exit(1)
		}
		defer f.Close()
		server.AddReceivingMiddleware(callLog(f, log))
	}
	log.Info("serving on stdio", "schemaRevision", schemaRevision, "build", buildLabel, "skus", inv.skus(),
		"token", os.Getenv("INVENTORY_TOKEN") != "")
	if err := server.Run(ctx, &mcp.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("session ended", "err", err)
		os.Exit(1)
	}
	log.Info("session ended")
}

// inventory is the in-memory stock list.
type inventory struct {
	mu    sync.Mutex
	stock map[string]int64 // guarded by mu
}

func newInventory(seed map[string]int64) *inventory {
	stock := make(map[string]int64, len(seed))
	for k, v := range seed {
		stock[k] = v
	}
	return &inventory{stock: stock}
}

func (inv *inventory) skus() []string {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	out := make([]string, 0, len(inv.stock))
	for k := range inv.stock {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (inv *inventory) lookup(sku string) (int64, error) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	q, ok := inv.stock[sku]
	if !ok {
		return 0, inv.unknownLocked(sku)
	}
	return q, nil
}

func (inv *inventory) adjust(sku string, delta int64) (int64, error) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	q, ok := inv.stock[sku]
	if !ok {
		return 0, inv.unknownLocked(sku)
	}
	if q+delta < 0 {
		return 0, fmt.Errorf("cannot adjust %s by %d: only %d on hand", sku, delta, q)
	}
	inv.stock[sku] = q + delta
	return q + delta, nil
}

func (inv *inventory) unknownLocked(sku string) error {
	known := make([]string, 0, len(inv.stock))
	for k := range inv.stock {
		known = append(known, k)
	}
	sort.Strings(known)
	return fmt.Errorf("unknown sku %q (known: %s)", sku, strings.Join(known, ", "))
}

type lookupIn struct {
	SKU string `json:"sku" jsonschema:"stock keeping unit, for example WIDGET-1"`
}

type lookupOut struct {
	SKU      string `json:"sku" jsonschema:"the SKU looked up"`
	Quantity int64  `json:"quantity" jsonschema:"units on hand"`
}

type adjustIn struct {
	SKU   string `json:"sku" jsonschema:"stock keeping unit, for example WIDGET-1"`
	Delta int64  `json:"delta" jsonschema:"units to add (negative to remove)"`
}

type adjustInV2 struct {
	SKU    string `json:"sku" jsonschema:"stock keeping unit, for example WIDGET-1"`
	Delta  int64  `json:"delta" jsonschema:"units to add (negative to remove)"`
	Reason string `json:"reason" jsonschema:"why the stock changes, kept with the adjustment"`
}

type adjustOut struct {
	SKU      string `json:"sku" jsonschema:"the SKU adjusted"`
	Quantity int64  `json:"quantity" jsonschema:"units on hand after the adjustment"`
}

func newServer(inv *inventory, revision, token string) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "portcullis-test-inventory", Version: "1.0." + revision}, nil)
	authz := authorizationNote(token)

	mcp.AddTool(server, &mcp.Tool{
		Name:        "inventory_lookup",
		Title:       "Look up stock",
		Description: "Returns the quantity on hand for a SKU.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in lookupIn) (*mcp.CallToolResult, lookupOut, error) {
		q, err := inv.lookup(in.SKU)
		if err != nil {
			return nil, lookupOut{}, err
		}
		return textResult(fmt.Sprintf("%s: %d on hand", in.SKU, q)), lookupOut{SKU: in.SKU, Quantity: q}, nil
	})

	adjustTool := &mcp.Tool{
		Name:        "inventory_adjust",
		Title:       "Adjust stock",
		Description: "Adds delta units (negative to remove) to a SKU and returns the new quantity.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: new(false)},
	}
	adjust := func(sku string, delta int64, reason string) (*mcp.CallToolResult, adjustOut, error) {
		q, err := inv.adjust(sku, delta)
		if err != nil {
			return nil, adjustOut{}, err
		}
		text := fmt.Sprintf("%s adjusted by %+d: %d on hand", sku, delta, q)
		if reason != "" {
			text += fmt.Sprintf(" (reason: %s)", reason)
		}
		if authz != "" {
			text += "; " + authz
		}
		return textResult(text), adjustOut{SKU: sku, Quantity: q}, nil
	}
	if revision == "2" {
		adjustTool.Description = "Adds delta units (negative to remove) to a SKU, recording why, and returns the new quantity."
		mcp.AddTool(server, adjustTool, func(_ context.Context, _ *mcp.CallToolRequest, in adjustInV2) (*mcp.CallToolResult, adjustOut, error) {
			if strings.TrimSpace(in.Reason) == "" {
				return nil, adjustOut{}, errors.New("reason must not be empty")
			}
			return adjust(in.SKU, in.Delta, in.Reason)
		})
	} else {
		mcp.AddTool(server, adjustTool, func(_ context.Context, _ *mcp.CallToolRequest, in adjustIn) (*mcp.CallToolResult, adjustOut, error) {
			return adjust(in.SKU, in.Delta, "")
		})
	}
	return server
}

// authorizationNote says whether a token is present without revealing it: its last
// four characters when it has at least minTokenForHint, otherwise only its presence.
func authorizationNote(token string) string {
	switch {
	case token == "":
		return ""
	case len(token) < minTokenForHint:
		return "authorized with a token (too short to show its ending)"
	default:
		return "authorized with token ending …" + token[len(token)-4:]
	}
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// callLog returns middleware that appends every tools/call request to f (one
// JSON line each, one write per line) before the SDK runs it.
func callLog(f *os.File, log *slog.Logger) mcp.Middleware {
	var mu sync.Mutex
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if call, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" {
				args := call.Params.Arguments
				if len(args) == 0 {
					args = json.RawMessage("null")
				}
				line, err := json.Marshal(map[string]any{"tool": call.Params.Name, "args": args,
					"revision": schemaRevision, "build": buildLabel, "pid": os.Getpid(), "process": process})
				if err == nil {
					mu.Lock()
					_, err = f.Write(append(line, '\n'))
					mu.Unlock()
				}
				if err != nil {
					log.Error("writing the call log", "err", err)
				}
			}
			return next(ctx, method, req)
		}
	}
}
