// Package control is the protocol spoken on the daemon's Unix socket by the
// `portcullis connect` shim and by the other CLI commands.
//
// Every connection starts with one line of JSON from the client, a Hello,
// and one line of JSON from the daemon, a Reply. For "connect", the
// connection then carries the agent's newline-delimited JSON-RPC messages in
// both directions (MCP stdio framing) until either side closes: the shim
// keeps the agent's stdin and stdout and relays them. For every other
// operation the Reply is the whole answer and the daemon closes the
// connection.
//
// This package is the whole contract between the shim and the daemon: the
// connect handshake (Connect, ConnectReply), the line that ends the agent's
// input (EndOfInput), the drain timeout the daemon sends in its reply, and
// the shape of the refusals both answer the agent with (Refusal).
//
// The socket lives in a directory of mode 0700 and is itself 0600; the
// daemon also checks the peer's uid from the kernel (SO_PEERCRED,
// LOCAL_PEERCRED) and refuses other users. A decision (OpDecide) is
// accepted only from the person: the daemon refuses, with Reply.Code
// "not_a_person", a peer whose ancestry shows it is a supervised server's
// process (or left one's tree) or a descendant of an agent; when
// settings.approvalAuthentication asks for the operating system's
// authentication and it fails or cannot be asked, the answer has
// Reply.Code "authentication_failed".
package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/portcullis/portcullis/core/ids"
)

// Version is the control protocol version carried in every Hello.
const Version = 1

// Operations a Hello may name.
const (
	OpConnect   = "connect"   // become an agent run of Label
	OpStatus    = "status"    // Reply.Data: []gateway.Status and the configured servers
	OpPing      = "ping"      // is a daemon there?
	OpStop      = "stop"      // stop the daemon: every server stopped, shims told (StoppingLine); only the person (Reply.Code "not_a_person" otherwise)
	OpPerson    = "person"    // is this the person, about to do What? Audited; Reply.Code "not_a_person" when not
	OpRestart   = "restart"   // replace the process of every agent run of Label with a new epoch
	OpApprovals = "approvals" // Reply.Data: the pending approval requests ([]authz.Request)
	OpDecide    = "decide"    // answer approval request Request with Choice; Reply.Data: the grant made (authz.Grant), absent for a denial
	OpCode      = "code"      // Reply.Data: what changed in the source tree of pending request Request's server since the code last approved (codediff.Report)
	// OpRevokeStanding ends the standing approval (approve --code) of
	// request Request; Reply.Data: the approval ended (authz.StandingApproval).
	// It narrows trust: no person check, no OS authentication.
	OpRevokeStanding = "revoke_standing"

	// The configuration, through the daemon (the person's tools never write
	// config.json while a daemon runs; see core/daemon configtrust.go).
	OpConfig       = "config"        // Reply.Data: daemon.ConfigState (the configuration in force, its digest, the change waiting)
	OpConfigEdit   = "config-edit"   // put Config in force (written to config.json), edited from the configuration whose digest is Base
	OpChangeDecide = "change-decide" // ChoiceConfirm or ChoiceReject the change waiting, whose id is Request

	// OpAuditSetupKeys makes the audit log's first sealing key pair (Force:
	// replace existing ones); Reply.Data: the verification key.
	OpAuditSetupKeys = "audit_setup_keys"
	// OpAuditAcknowledge records that the person saw a log_tampered event.
	OpAuditAcknowledge = "audit_acknowledge"
)

// Choices of OpChangeDecide.
const (
	ChoiceConfirm = "confirm"
	ChoiceReject  = "reject"
)

// Hello is the first line a client sends.
type Hello struct {
	Op      string `json:"op"`
	Version int    `json:"version"`
	Label   string `json:"label,omitempty"`
	Request string `json:"request,omitempty"` // approval request id, for decide
	Choice  string `json:"choice,omitempty"`  // approve-run, approve-once or deny, for decide
	// Tools are what an approve-run decision grants: tools of the card's
	// ToolScope and OtherTools, the called tool always included (nil: the
	// card's ToolScope, what it proposed). A tool the card did not show
	// refuses the decision.
	Tools []string `json:"tools,omitempty"`
	// Runs are the agent runs of a card of several runs that a decision
	// answers (nil: every run the card shows); a run left out stays held.
	Runs []ids.RunID `json:"runs,omitempty"`
	// Config is the whole edited configuration file, for config-edit.
	Config json.RawMessage `json:"config,omitempty"`
	// Base is the digest of the configuration Config was edited from.
	Base string `json:"base,omitempty"`
	// Force, for audit_setup_keys, replaces existing sealing keys.
	Force bool `json:"force,omitempty"`
	// What, for person, says what the person is about to do ("put the
	// secrets back into claude-code's configuration").
	What string `json:"what,omitempty"`
	// ShimLines, for connect, says the shim reads the daemon's shim lines
	// (HeldLine, ReleasedLine, StoppingLine) and never passes them on: a
	// daemon sends them only to such a shim that relays.
	ShimLines bool `json:"shimLines,omitempty"`
	// Continues, for connect, is the agent run this connection continues:
	// its shim lost the daemon that served it and reconnected (see
	// Continuation). What the shim says; the daemon records it.
	Continues *Continuation `json:"continues,omitempty"`
}

// Continuation is, in a reconnecting shim's Hello, the run it served
// before: the run's ULID and the pid of the daemon that served it (both
// from that daemon's Reply), and why the connection to it ended.
type Continuation struct {
	Run       ids.RunID `json:"run"`
	DaemonPID int       `json:"daemonPid,omitempty"`
	Why       string    `json:"why"`
}

// CodeResolvedPrefix starts the Reply.Code of a decision refused because
// its request is no longer pending but remembered: "request_withdrawn",
// "request_approved", "request_denied", "request_timeout"… (Reply.Error
// says how it ended and why).
const CodeResolvedPrefix = "request_"

// Reply is the daemon's answer to a Hello. Code is a stable machine-readable
// name for the failure (for example "unknown_server", "config_invalid"),
// Error the text for a person.
type Reply struct {
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
	Code  string    `json:"code,omitempty"`
	Run   ids.RunID `json:"run,omitempty"` // the new agent run's ULID, for connect
	// DrainTimeoutMS is, for connect, how long the run goes on after
	// EndOfInput for the answers to the requests sent before, in
	// milliseconds (see Reply.DrainTimeout).
	DrainTimeoutMS int64 `json:"drainTimeoutMs,omitempty"`
	// DaemonPID, for connect, is the daemon's pid: a shim that reconnects
	// names it in its Continuation.
	DaemonPID int             `json:"daemonPid,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
}

// ErrNoDaemon is wrapped when nothing listens on the socket.
var ErrNoDaemon = errors.New("no Portcullis daemon is running")

// RefusedError is a Reply with OK false, as an error.
type RefusedError struct{ Reply Reply }

func (e *RefusedError) Error() string { return e.Reply.Error }

// Conn is a client connection after a successful exchange of Hello and Reply.
// Reader holds whatever the daemon sent after the Reply.
type Conn struct {
	net.Conn
	Reader *bufio.Reader
	Reply  Reply
}

// Dial connects to the daemon's socket, sends h and reads the Reply. It
// returns an error wrapping ErrNoDaemon when no daemon listens, one
// wrapping ErrForeign, before anything is sent, when the socket's
// directory is not a private directory of this user, the socket not this
// user's, or the process answering on it (its uid from the kernel) another
// user's, and a *RefusedError when the daemon answered with OK false.
func Dial(socket string, h Hello, timeout time.Duration) (*Conn, error) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if err := checkOwned(socket); err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("unix", socket, timeout)
	if err != nil {
		return nil, fmt.Errorf("%w (socket %s: %v)", ErrNoDaemon, socket, err)
	}
	if err := checkPeer(c, socket); err != nil {
		c.Close()
		return nil, err
	}
	h.Version = Version
	b, _ := json.Marshal(h)
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(append(b, '\n')); err != nil {
		c.Close()
		return nil, fmt.Errorf("sending %s to the daemon: %w", h.Op, err)
	}
	br := bufio.NewReader(c)
	line, err := br.ReadBytes('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("reading the daemon's reply to %s: %w", h.Op, err)
	}
	_ = c.SetDeadline(time.Time{})
	var r Reply
	if err := json.Unmarshal(line, &r); err != nil {
		c.Close()
		return nil, fmt.Errorf("the daemon's reply to %s is not valid: %w", h.Op, err)
	}
	if !r.OK {
		c.Close()
		return nil, &RefusedError{Reply: r}
	}
	return &Conn{Conn: c, Reader: br, Reply: r}, nil
}

// Call sends h and returns the Reply's data, closing the connection.
func Call(socket string, h Hello, timeout time.Duration) (json.RawMessage, error) {
	c, err := Dial(socket, h, timeout)
	if err != nil {
		return nil, err
	}
	c.Close()
	return c.Reply.Data, nil
}
