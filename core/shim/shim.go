// Package shim is `portcullis connect LABEL`: the stdio program an agent
// launches in place of an MCP server. It connects to the daemon's control
// socket (starting a daemon when none answers), then relays the agent's
// newline-delimited JSON-RPC (MCP stdio transport) in both directions.
//
// The shim keeps track of the agent's requests that have not been answered,
// so that whatever happens to the daemon the agent is never left hanging: if
// no daemon can be reached, each of the agent's requests is answered with a
// server_unavailable error saying why; if the daemon goes away mid-session,
// every request in flight is answered the same way. The reason is also
// written on stderr, which agents show in their logs.
package shim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// Options configure Run.
type Options struct {
	Socket string // the daemon's control socket
	Label  string // server label to connect to
	// Start launches a daemon in the background; nil never starts one.
	Start func() error
	// StartWait bounds the wait for a started daemon to answer (default 10 s).
	StartWait time.Duration
	// StartLog is where a started daemon writes its output, named in the
	// error when it does not come up.
	StartLog   string
	Stdin      io.Reader
	Stdout     io.Writer
	Stderr     io.Writer
	MaxMessage int // mcpwire.DefaultMaxMessage when 0
}

// Run relays until the agent closes its input (exit code 0) or the daemon
// connection fails (exit code 1).
func Run(ctx context.Context, o Options) int {
	if o.StartWait <= 0 {
		o.StartWait = 10 * time.Second
	}
	conn, err := dial(ctx, o)
	if err != nil {
		ref := unavailable(o, err.Error())
		var re *control.RefusedError
		if errors.As(err, &re) {
			ref = refused(o, re.Reply)
		}
		fmt.Fprintf(o.Stderr, "portcullis connect %s: %s\n", o.Label, ref.Reason)
		answerRequests(o, ref)
		return 1
	}
	defer conn.Close()
	return relay(ctx, o, conn)
}

func dial(ctx context.Context, o Options) (*control.Conn, error) {
	hello := control.Hello{Op: control.OpConnect, Label: o.Label}
	conn, err := control.Dial(o.Socket, hello, 10*time.Second)
	if err == nil || !errors.Is(err, control.ErrNoDaemon) || o.Start == nil {
		return conn, err
	}
	if serr := o.Start(); serr != nil {
		return nil, fmt.Errorf("no daemon was running and starting one failed: %w", serr)
	}
	deadline := time.Now().Add(o.StartWait)
	for {
		conn, err = control.Dial(o.Socket, hello, 10*time.Second)
		if err == nil || !errors.Is(err, control.ErrNoDaemon) {
			return conn, err
		}
		if time.Now().After(deadline) {
			where := ""
			if o.StartLog != "" {
				where = "; its output is in " + o.StartLog
			}
			return nil, fmt.Errorf("started a daemon but it did not answer within %s%s", o.StartWait, where)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func unavailable(o Options, reason string) *gateway.Refusal {
	return &gateway.Refusal{
		Error: gateway.ServerUnavailable, Server: o.Label, Reason: reason,
		Retry: "start Portcullis (run `portcullis` or `portcullis daemon`) and reconnect",
	}
}

// refused words a daemon's refusal of the connection for the agent.
func refused(o Options, r control.Reply) *gateway.Refusal {
	ref := unavailable(o, r.Error)
	switch r.Code {
	case "unknown_server":
		ref.Retry = "ask the person to add it (portcullis servers add " + o.Label + " -- COMMAND ARGS…) or to fix the label in the agent's configuration"
	case "version_mismatch":
		ref.Retry = "ask the person to restart Portcullis so that the daemon and this shim come from the same build"
	default:
		ref.Retry = "ask the person to check Portcullis"
	}
	return ref
}

// answerRequests answers every request the agent sends, until its input
// ends, with the reason no daemon could serve it: a dual-era client sends
// server/discover first and falls back to initialize on an error, so
// answering only the first request would leave the initialize that follows
// without an answer and the agent would see a bare EOF instead of the reason.
func answerRequests(o Options, ref *gateway.Refusal) {
	r := mcpwire.NewReader(o.Stdin, o.MaxMessage)
	for {
		line, err := r.ReadLine()
		if err != nil {
			if errors.Is(err, mcpwire.ErrTooLarge) {
				continue
			}
			return
		}
		m, err := mcpwire.Parse(line)
		if err != nil || m.Kind != mcpwire.KindRequest {
			continue
		}
		if _, err := o.Stdout.Write(append(ref.Response(m.ID), '\n')); err != nil {
			return
		}
	}
}

// inflight is the set of the agent's request ids not yet answered.
type inflight struct {
	mu  sync.Mutex
	ids map[string]json.RawMessage // guarded by mu
}

func (f *inflight) add(id json.RawMessage) {
	f.mu.Lock()
	f.ids[string(id)] = bytes.Clone(id)
	f.mu.Unlock()
}

func (f *inflight) done(id json.RawMessage) {
	f.mu.Lock()
	delete(f.ids, string(id))
	f.mu.Unlock()
}

func (f *inflight) drain() []json.RawMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]json.RawMessage, 0, len(f.ids))
	for _, id := range f.ids {
		out = append(out, id)
	}
	clear(f.ids)
	return out
}

func relay(ctx context.Context, o Options, conn *control.Conn) int {
	pend := &inflight{ids: map[string]json.RawMessage{}}
	var wmu sync.Mutex // serializes writes to the agent
	writeAgent := func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := o.Stdout.Write(b)
		return err
	}

	agentDone := make(chan error, 1)
	go func() {
		r := mcpwire.NewReader(o.Stdin, o.MaxMessage)
		var err error
		for {
			var line []byte
			line, err = r.ReadLine()
			if err != nil {
				var tl *mcpwire.TooLargeError
				if errors.As(err, &tl) {
					// Never forwarded: answered here with the id it carries.
					if id := mcpwire.PeekID(tl.Prefix); id != nil {
						_ = writeAgent(append(refusalTooLarge(o, tl).Response(id), '\n'))
					}
					continue
				}
				break
			}
			if m, perr := mcpwire.Parse(line); perr == nil && m.Kind == mcpwire.KindRequest {
				pend.add(m.ID)
			}
			buf := make([]byte, 0, len(line)+1)
			if _, err = conn.Write(append(append(buf, line...), '\n')); err != nil {
				break
			}
		}
		// Tell the daemon the agent is gone: it stops the server and closes.
		if uc, ok := conn.Conn.(*net.UnixConn); ok {
			_ = uc.CloseWrite()
		}
		agentDone <- err
	}()

	daemonErr := make(chan error, 1)
	go func() {
		r := mcpwire.NewReader(conn.Reader, o.MaxMessage)
		for {
			line, err := r.ReadLine()
			if err != nil {
				if errors.Is(err, mcpwire.ErrTooLarge) {
					continue // the daemon never sends more than the limit
				}
				daemonErr <- err
				return
			}
			if m, perr := mcpwire.Parse(line); perr == nil && m.Kind == mcpwire.KindResponse {
				pend.done(m.ID)
			}
			buf := make([]byte, 0, len(line)+1)
			if err := writeAgent(append(append(buf, line...), '\n')); err != nil {
				daemonErr <- err
				return
			}
		}
	}()

	select {
	case err := <-daemonErr:
		// The daemon closed first: it stopped, crashed or was killed.
		select {
		case <-agentDone:
			return 0 // the agent had already finished
		default:
		}
		reason := "the connection to the Portcullis daemon was lost"
		if err != nil && !errors.Is(err, io.EOF) {
			reason += ": " + err.Error()
		}
		fmt.Fprintf(o.Stderr, "portcullis connect %s: %s\n", o.Label, reason)
		for _, id := range pend.drain() {
			_ = writeAgent(append(unavailable(o, reason).Response(id), '\n'))
		}
		return 1
	case <-agentDone:
		// Wait (bounded) for the daemon to answer what is in flight and to
		// close once it has stopped the server.
		select {
		case <-daemonErr:
		case <-time.After(60 * time.Second):
		case <-ctx.Done():
		}
		return 0
	case <-ctx.Done():
		return 1
	}
}

func refusalTooLarge(o Options, tl *mcpwire.TooLargeError) *gateway.Refusal {
	return &gateway.Refusal{
		Error: gateway.MessageTooLarge, Server: o.Label, Limit: tl.Limit,
		Reason: fmt.Sprintf("the request is %d bytes, over the %d-byte limit", tl.Size, tl.Limit),
	}
}
