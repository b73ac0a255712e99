// Package mcpwire reads, classifies and rewrites JSON-RPC 2.0 messages on the
// MCP stdio transport without re-encoding them.
//
// The MCP stdio transport (spec, basic/transports, "stdio") frames each
// JSON-RPC message as one line of UTF-8 terminated by '\n'; messages must not
// contain embedded newlines. Portcullis stands between an agent and a server,
// so every byte it does not deliberately change (unknown fields, number
// spellings, key order, whitespace inside values) must reach the other side as
// it was sent. This package therefore never decodes a message into typed
// structs for forwarding: it locates the top-level members of a message by
// scanning, and splices replacement values (request ids, progress tokens,
// subscription ids) into the original bytes.
package mcpwire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxMessage is the default limit on one message, in bytes (32 MiB).
// Real tool results reach several megabytes (images, file contents); the limit
// exists so that a runaway peer cannot make the gateway buffer without bound.
const DefaultMaxMessage = 32 << 20

// ErrTooLarge is wrapped by every *TooLargeError.
var ErrTooLarge = errors.New("message too large")

// TooLargeError reports a line longer than the reader's limit. The line has
// been consumed up to and including its newline, so the stream continues with
// the next message.
//
// While it discards the line, the reader runs an IDScanner over all of it, so
// that only that message fails: ID is the line's top-level "id" wherever it
// stands (the official TypeScript SDK writes it last), nil when there is no
// usable one (see IDScanner.ID); HasMethod reports a top-level "method"
// member, which makes the line a request or a notification, never an answer,
// and Method is its name when it could be read. Prefix holds the first bytes
// of the line (at most PrefixKeep), for diagnostics.
type TooLargeError struct {
	Size      int64           // bytes in the line, without the newline
	Limit     int             // the reader's limit, in bytes
	Prefix    []byte          // first bytes of the line
	ID        json.RawMessage // the top-level id, a string or a number as written; nil when none
	Method    string          // the top-level method, when HasMethod and it is a string
	HasMethod bool            // the line has a top-level "method" member
}

// PrefixKeep is how many leading bytes of an oversized line TooLargeError keeps.
const PrefixKeep = 4096

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("message of %d bytes exceeds the %d-byte limit", e.Size, e.Limit)
}

// Unwrap makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// Reader splits a byte stream into newline-delimited messages. A trailing
// '\r' before the newline is removed (peers that write "\r\n" work), and a
// final line without a newline at end of stream is returned as a message.
// NewTolerantReader makes one for a server's output, which also reads past a
// byte-order mark, escape sequences, lone '\r' line ends, several messages
// on a line and batches. Reader is not safe for concurrent use.
type Reader struct {
	br   *bufio.Reader
	max  int
	buf  []byte
	scan IDScanner // reset for each oversized line

	unterminated bool // the last line ended with the stream (Unterminated)

	// Set by NewTolerantReader (see tolerant.go).
	tolerant   bool
	note       func(string) // may be nil
	noted      uint8        // the notes given so far
	queue      [][]byte     // the messages of the current line
	qi         int          // how many of them were returned
	queueUnter bool         // the current line ended with the stream
	cr         crScan       // the structure of the current line, for a lone '\r'
}

// NewReader returns a Reader over r that accepts lines of at most max bytes
// (DefaultMaxMessage when max <= 0).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = DefaultMaxMessage
	}
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// ReadLine returns the next non-empty line without its line terminator. The
// returned slice is valid only until the next call. It returns a
// *TooLargeError for a line over the limit (the stream stays usable), io.EOF
// at a clean end of stream, and other errors from the underlying reader.
// Lines made only of white space are skipped. A tolerant Reader returns one
// message (or one line that is not a message) at a time, see
// NewTolerantReader.
func (r *Reader) ReadLine() ([]byte, error) {
	if r.tolerant {
		return r.readTolerant()
	}
	for {
		line, err := r.readLine()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return line, nil
	}
}

// Unterminated reports whether the line ReadLine returned last ended with
// the stream, without a newline: what a writer that stopped in the middle of
// a message (a process that died) leaves, unless it was a whole message
// sent without its newline.
func (r *Reader) Unterminated() bool { return r.unterminated }

func (r *Reader) readLine() ([]byte, error) {
	r.buf = r.buf[:0]
	r.unterminated = false
	r.cr = crScan{}
	var size int64
	tooLarge := false
	for {
		var chunk []byte
		var err error
		if r.tolerant {
			chunk, err = r.nextChunk()
		} else {
			chunk, err = r.br.ReadSlice('\n')
		}
		size += int64(len(chunk))
		if !tooLarge {
			if len(r.buf)+len(chunk) > r.max+2 { // room for "\r\n"
				tooLarge = true
				r.scan = IDScanner{key: r.scan.key[:0], val: r.scan.val[:0]}
				_, _ = r.scan.Write(r.buf)
				_, _ = r.scan.Write(chunk)
				keep := min(PrefixKeep, len(r.buf)+len(chunk))
				prefix := make([]byte, 0, keep)
				prefix = append(prefix, r.buf[:min(len(r.buf), keep)]...)
				prefix = append(prefix, chunk[:keep-len(prefix)]...)
				r.buf = append(r.buf[:0], prefix...)
			} else {
				r.buf = append(r.buf, chunk...)
			}
		} else {
			_, _ = r.scan.Write(chunk)
		}
		switch {
		case err == nil:
			// Complete line.
		case errors.Is(err, bufio.ErrBufferFull):
			if tooLarge || !r.endsAtCR() {
				continue
			}
			// A tolerant reader about to wait for more input right
			// after a lone '\r' that ends a complete JSON value: the
			// line ends there.
			r.cr.ended = true
		case errors.Is(err, io.EOF):
			if size == 0 {
				return nil, io.EOF
			}
			// Last line without a newline.
			r.unterminated = true
		default:
			return nil, err
		}
		n := size
		if !tooLarge {
			line := trimEOL(r.buf)
			if len(line) <= r.max {
				return line, nil
			}
			n = int64(len(line))
			r.scan = IDScanner{key: r.scan.key[:0], val: r.scan.val[:0]}
			_, _ = r.scan.Write(line)
			r.buf = r.buf[:min(len(r.buf), PrefixKeep)]
		} else {
			n = size - eolLen(chunk)
		}
		_ = r.scan.Close()
		tl := &TooLargeError{Size: n, Limit: r.max, Prefix: bytes.Clone(r.buf), ID: bytes.Clone(r.scan.ID())}
		tl.Method, tl.HasMethod = r.scan.Method()
		return nil, tl
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte{'\n'})
	return bytes.TrimSuffix(b, []byte{'\r'})
}

func eolLen(chunk []byte) int64 {
	return int64(len(chunk) - len(trimEOL(chunk)))
}
