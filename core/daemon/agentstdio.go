package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/internal/rawio"
)

// agentStdio is the agent's own stdin and stdout, handed over by its shim
// (control.ModeFD): the run reads and writes the agent with no hop through
// the shim. As an io.Reader it is what the shim's connection is in relay
// mode: the agent's lines, then control.EndOfInput once the agent closed
// its input, then io.EOF once the shim is gone (its connection, which
// carries nothing else in this mode, ended). When the shim goes first (the
// agent killed it), both descriptors are closed at once, so that the agent
// sees its server's stdout end as it would in relay mode, and a read in
// progress returns io.EOF: the run ends at once.
type agentStdio struct {
	in, out *os.File
	r       io.Reader     // in, read through the runtime's poller
	w       io.Writer     // out, written through the runtime's poller
	ctl     *bufio.Reader // the shim's connection
	gone    chan struct{} // closed when the shim's connection ended
	once    sync.Once

	// Owned by the one reader (the gateway's agent reader goroutine).
	atStart bool   // the next byte from the agent begins a line
	rest    []byte // what is left to return of the EndOfInput line
	ended   bool   // the agent closed its input (read by end after Serve)
	mu      sync.Mutex
}

func newAgentStdio(in, out *os.File, ctl *bufio.Reader) *agentStdio {
	// Both are nonblocking (control.ReceiveStdio), but the open file
	// descriptions are the shim's, shared with whatever else holds them (a
	// wrapper script, a launcher that passed its own stdio on), and any of
	// those may switch them back to blocking. A plain raw read or write
	// would then block inside the kernel unseen by the Go scheduler,
	// holding a processor and stopping the whole daemon at its next garbage
	// collection. So they are read and written with RWF_NOWAIT
	// (rawio.NewSharedReader), which never blocks whatever the mode: no
	// wake-up of the runtime's monitor thread per message, as with the
	// server's pipes. Where the kernel refuses RWF_NOWAIT for them, they
	// are ordinary files, which merely block their own thread.
	a := &agentStdio{in: in, out: out, r: rawio.NewSharedReader(in), w: rawio.NewSharedWriter(out), ctl: ctl, gone: make(chan struct{}), atStart: true}
	go func() {
		// The shim sends nothing more in this mode: any return is its end
		// (or the daemon's closing of the connection after the run).
		var b [1]byte
		_, _ = a.ctl.Read(b[:])
		close(a.gone)
		a.close()
	}()
	return a
}

// Read implements io.Reader for the gateway's agent reader.
func (a *agentStdio) Read(p []byte) (int, error) {
	if len(a.rest) > 0 {
		n := copy(p, a.rest)
		a.rest = a.rest[n:]
		return n, nil
	}
	a.mu.Lock()
	ended := a.ended
	a.mu.Unlock()
	if ended {
		<-a.gone
		return 0, io.EOF
	}
	n, err := a.r.Read(p)
	a.escape(p[:n])
	switch {
	case errors.Is(err, io.EOF):
		// The agent closed its input: as the shim does in relay mode.
		end := control.EndOfInput + "\n"
		if !a.atStart {
			end = "\n" + end // the agent's last line had no newline
		}
		a.rest = []byte(end)
		a.mu.Lock()
		a.ended = true
		a.mu.Unlock()
		if n > 0 {
			return n, nil
		}
		return a.Read(p)
	case errors.Is(err, os.ErrClosed):
		return n, io.EOF // the shim is gone: close closed it
	}
	return n, err
}

// escape keeps every line from the agent from beginning with a NUL byte,
// which only the daemon's own EndOfInput line does (control.Reserved): a
// leading NUL becomes 0x01, so such a line is still answered as a parse
// error (a control byte before the message) and cannot end the run's input.
func (a *agentStdio) escape(b []byte) {
	for len(b) > 0 {
		if a.atStart && b[0] == 0 {
			b[0] = 1
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			a.atStart = false
			return
		}
		a.atStart = true
		b = b[i+1:]
	}
}

// Write implements io.Writer: the agent's stdout.
func (a *agentStdio) Write(p []byte) (int, error) { return a.w.Write(p) }

// SetWriteDeadline bounds the writes to the agent once its run ends (see
// gateway.Session.Serve).
func (a *agentStdio) SetWriteDeadline(t time.Time) error { return a.out.SetWriteDeadline(t) }

// close closes both descriptors (once): the agent sees its stdout end.
func (a *agentStdio) close() {
	a.once.Do(func() {
		a.in.Close()
		a.out.Close()
	})
}

// inputEnded reports whether the agent closed its input.
func (a *agentStdio) inputEnded() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ended
}

// takeStdio receives the agent's stdio the shim hands over on c after a
// Reply that asked for it, and answers with the run's mode. It returns
// nil and why the run relays (the shim relays after all, or what it sent
// cannot be served), or an error when the shim is gone.
func (d *Daemon) takeStdio(c net.Conn, br *bufio.Reader) (*agentStdio, string, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	in, out, err := control.ReceiveStdio(c)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil && !errors.Is(err, control.ErrNoStdio) {
		return nil, "", err
	}
	if err != nil {
		why := err.Error()
		if werr := control.WriteLine(c, control.Handoff{Mode: control.ModeRelay, Reason: why}); werr != nil {
			return nil, "", werr
		}
		return nil, why, nil
	}
	a := newAgentStdio(in, out, br)
	if err := control.WriteLine(c, control.Handoff{Mode: control.ModeFD}); err != nil {
		a.close()
		return nil, "", err
	}
	return a, "", nil
}

// end tells the shim, after the run, how it ended (control.RunEnd), once
// the agent's descriptors are closed. ctxErr is the daemon's context's
// error, serveErr what the run's Serve returned.
func (a *agentStdio) end(c net.Conn, ctxErr, serveErr error) {
	a.close()
	select {
	case <-a.gone:
		return // the shim is gone: nobody to tell
	default:
	}
	r := control.RunEnd{}
	switch {
	case a.inputEnded() && ctxErr == nil:
	case ctxErr != nil:
		r = control.RunEnd{Exit: 1, Reason: "the Portcullis daemon stopped, ending the agent's connection"}
	case serveErr != nil:
		r = control.RunEnd{Exit: 1, Reason: "the agent's connection failed: " + serveErr.Error()}
	default:
		r = control.RunEnd{Exit: 1, Reason: "the run ended before the agent closed its input"}
	}
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_ = control.WriteLine(c, r)
}
