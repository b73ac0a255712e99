package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
)

// The agent's stdio, handed over (fd mode). A shim whose stdin and stdout
// are pipes or stream sockets offers them in its connect Hello (Pass:
// PassStdio); a daemon that takes them answers with Reply.Pass PassStdio.
// The shim then sends one message on the socket, one byte with the two
// descriptors attached (SCM_RIGHTS; SendStdio), or one byte without them
// when it cannot after all (SendRelay); the daemon answers with one
// Handoff line. In ModeFD the daemon reads and writes the agent itself and
// the connection carries nothing but, at the run's end, one RunEnd line;
// the shim closes its own copies of the descriptors and waits for that
// line. In ModeRelay (and whenever the shim did not offer, or the daemon
// did not ask) the connection carries the agent's JSON-RPC as without a
// hand-off. A daemon that knows nothing of it ignores Hello.Pass and
// sets no Reply.Pass: the shim relays.
const PassStdio = "stdio"

// Modes of a Handoff.
const (
	ModeFD    = "fd"    // the daemon serves the agent's own stdin and stdout
	ModeRelay = "relay" // the agent's JSON-RPC goes through the shim, over this connection
)

// Handoff is the daemon's line after the shim's hand-off message: the mode
// of the run, and for ModeRelay after a hand-off that failed, why.
type Handoff struct {
	Mode   string `json:"mode"`
	Reason string `json:"reason,omitempty"`
}

// RunEnd is the daemon's last line to a shim in ModeFD, sent once the run
// ended and the daemon closed its copies of the agent's stdio: Exit is the
// shim's exit code (0 when the run ended because the agent closed its
// input), Reason, when Exit is not 0, what ended it, for the shim's stderr.
// A connection that ends without RunEnd means the daemon died.
type RunEnd struct {
	Exit   int    `json:"exit"`
	Reason string `json:"reason,omitempty"`
}

// The hand-off message's one byte.
const (
	handoffFD    = 'F' // with the agent's stdin and stdout attached
	handoffRelay = 'R' // without: relay
)

// ErrNoStdio is wrapped by ReceiveStdio when the shim sent no descriptors
// (it relays) and by StdioKind for descriptors that cannot be handed over.
var ErrNoStdio = errors.New("the agent's stdio was not handed over")

// SendRelay tells the daemon, instead of SendStdio, that the shim relays
// after all.
func SendRelay(c net.Conn) error {
	_, err := c.Write([]byte{handoffRelay})
	return err
}

// WriteLine writes v as one JSON line on c (Handoff, RunEnd).
func WriteLine(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.Write(append(b, '\n'))
	return err
}

// ReadHandoff reads the daemon's Handoff line from c.
func ReadHandoff(c *Conn) (Handoff, error) {
	var h Handoff
	line, err := c.Reader.ReadBytes('\n')
	if err != nil {
		return h, fmt.Errorf("reading the daemon's answer to the hand-off: %w", err)
	}
	if err := json.Unmarshal(line, &h); err != nil || (h.Mode != ModeFD && h.Mode != ModeRelay) {
		return h, fmt.Errorf("the daemon's answer to the hand-off is not valid: %.200q", line)
	}
	return h, nil
}
