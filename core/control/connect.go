package control

import (
	"bytes"
	"time"

	"github.com/portcullis/portcullis/core/ids"
)

// EndOfInput is the line the `connect` shim sends when the agent's input
// ends (the agent closed its stdin, as MCP's stdio transport shuts down).
// The run then ends once every request the agent sent before is answered,
// at most the drain timeout later (Reply.DrainTimeoutMS): an agent that
// pipes its requests and closes its input at once still gets every answer,
// as from a server it had started itself. The shim keeps the connection
// open meanwhile, so that an end of the connection, with or without
// EndOfInput before, always means that the agent or its shim is gone
// (killed, crashed): the run ends at once. It begins with a NUL byte, which
// never begins a line of JSON, and the shim never forwards an agent's line
// beginning with one (see Reserved), so no agent can send it.
const EndOfInput = "\x00portcullis: end of agent input"

// Reserved reports whether line, from the agent, begins as the lines the
// shim itself sends to the daemon do (EndOfInput): such a line is never
// JSON and never forwarded.
func Reserved(line []byte) bool { return bytes.HasPrefix(line, []byte{0}) }

// DefaultDrainTimeout is the drain timeout of a daemon that does not say
// otherwise: how long an agent run goes on after EndOfInput for the answers
// to the requests sent before.
const DefaultDrainTimeout = 60 * time.Second

// CloseAllowance is how long, after its drain timeout, a daemon may take to
// end the run and close the connection: stopping the server (the gateway
// bounds a stop at 30 s) and the last writes to the agent (5 s each), with
// room to spare.
const CloseAllowance = 45 * time.Second

// Connect dials the daemon's socket as the `connect` shim of label: the
// Reply carries the new agent run (Run) and the run's drain timeout
// (DrainTimeout). Errors are Dial's.
func Connect(socket, label string, timeout time.Duration) (*Conn, error) {
	return Dial(socket, Hello{Op: OpConnect, Label: label}, timeout)
}

// ConnectReply is the daemon's Reply to a connect that became agent run
// run, whose drain timeout is drain.
func ConnectReply(run ids.RunID, drain time.Duration) Reply {
	return Reply{OK: true, Run: run, DrainTimeoutMS: drain.Milliseconds()}
}

// DrainTimeout is the drain timeout the daemon sent in its Reply to
// connect, DefaultDrainTimeout when it sent none.
func (r Reply) DrainTimeout() time.Duration {
	if r.DrainTimeoutMS <= 0 {
		return DefaultDrainTimeout
	}
	return time.Duration(r.DrainTimeoutMS) * time.Millisecond
}

// Shim lines: what a daemon tells a relaying shim that asked for them
// (Hello.ShimLines) besides the agent's messages. Like EndOfInput, each
// begins with a NUL byte, never the beginning of a line of JSON, so the
// shim tells them from the agent's messages and never passes them on.
const (
	heldPrefix     = "\x00portcullis: held "
	releasedPrefix = "\x00portcullis: released "
	// StoppingLine says the daemon stops on purpose (`portcullis stop`, a
	// signal, the app quitting): the shim answers what is in flight and
	// connects again at the agent's next request, starting a daemon then
	// if none runs.
	StoppingLine = "\x00portcullis: daemon stopping"
)

// HeldLine says the agent's request id waits for a person (an approval):
// it was not sent to the server.
func HeldLine(id []byte) []byte { return append([]byte(heldPrefix), id...) }

// ReleasedLine ends the wait HeldLine said.
func ReleasedLine(id []byte) []byte { return append([]byte(releasedPrefix), id...) }

// ParseShimLine reads a shim line: held (a HeldLine's id), released (a
// ReleasedLine's), or stopping. ok is false for any other line.
func ParseShimLine(line []byte) (held, released []byte, stopping, ok bool) {
	switch {
	case bytes.HasPrefix(line, []byte(heldPrefix)):
		return line[len(heldPrefix):], nil, false, true
	case bytes.HasPrefix(line, []byte(releasedPrefix)):
		return nil, line[len(releasedPrefix):], false, true
	case string(line) == StoppingLine:
		return nil, nil, true, true
	}
	return nil, nil, false, false
}
