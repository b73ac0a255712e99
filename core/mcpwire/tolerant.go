package mcpwire

import (
	"bufio"
	"bytes"
	"io"
)

// NewTolerantReader returns a Reader for the output of an MCP server, which
// reads past what real servers get wrong around their messages instead of
// losing the messages (and leaving the requests they answer to hang):
//
//   - a UTF-8 byte-order mark (.NET and PowerShell write one at the start
//     of stdout), terminal escape sequences (colour codes, OSC titles),
//     other control bytes and white space around a message are stripped;
//   - several messages on one line are read one by one: a lone '\r' (the
//     classic Mac line end) or nothing between them. A line that ends with
//     a lone '\r' right after a complete JSON value ends there, even when no
//     '\n' follows, so a server that ends every line with '\r' is read too;
//   - a JSON-RPC batch, an array of messages (MCP 2025-03-26 allows them),
//     is read as its messages, one by one;
//   - a JSON-RPC response with text before or after it on the same line (a
//     log line written without a newline) is read as the response, and
//     the text as a line of its own. Only a response, which parses
//     cleanly, is taken out of text: a request or notification echoed in
//     a log line must not become a message.
//
// Everything else is returned as it was read, for the caller to report:
// ReadLine's lines are then either one message (a JSON object or a batch
// element) or a line that is not one; lines of nothing but white space,
// byte-order marks and escape sequences are skipped. A message is returned
// byte for byte as the server wrote it; only what lies around it is
// dropped. A line over the limit is a *TooLargeError as with NewReader; its
// id is found past a byte-order mark or escape sequences, and in a batch it
// is the id of the batch's one response (see IDScanner). note, when not
// nil, is called the first time each kind of repair is made, with a
// sentence for the server's diagnostics.
//
// The agent side of the gateway keeps NewReader: an agent's request that is
// not valid JSON is answered with a parse error naming what is wrong, and a
// batch from an agent needs an answer of its own (an array), which the
// gateway does not give.
func NewTolerantReader(r io.Reader, max int, note func(string)) *Reader {
	rd := NewReader(r, max)
	rd.tolerant = true
	rd.note = note
	return rd
}

// The repairs a tolerant Reader reports, once each.
const (
	noteBOM uint8 = 1 << iota
	noteControl
	noteSplit
	noteText
	noteBatch
)

var noteSentences = map[uint8]string{
	noteBOM:     "stripped a UTF-8 byte-order mark (EF BB BF) before a JSON-RPC message (reported once)",
	noteControl: "stripped terminal escape sequences or control bytes around a JSON-RPC message (reported once)",
	noteSplit:   "several JSON-RPC messages on one line (a lone carriage return or nothing between them); read them one by one (reported once)",
	noteText:    "a JSON-RPC response shared its line with other text; used the response and kept the text as a diagnostic (reported once)",
	noteBatch:   "a JSON-RPC batch (an array of messages, as MCP 2025-03-26 allows); read its messages one by one (reported once)",
}

// Bounds on looking for a response inside a line of text.
const (
	maxTextCandidates = 16   // '{' bytes tried
	maxTextPrefix     = 4096 // bytes of text before the response
)

func (r *Reader) noteOnce(k uint8) {
	if r.noted&k != 0 {
		return
	}
	r.noted |= k
	if r.note != nil {
		r.note(noteSentences[k])
	}
}

func (r *Reader) noteJunk(kinds uint8) {
	if kinds&junkBOM != 0 {
		r.noteOnce(noteBOM)
	}
	if kinds&junkControl != 0 {
		r.noteOnce(noteControl)
	}
}

// readTolerant is ReadLine of a tolerant Reader: the next message of the
// current line, reading lines until one holds something.
func (r *Reader) readTolerant() ([]byte, error) {
	for r.qi == len(r.queue) {
		afterCR := r.cr.ended
		line, err := r.readLine()
		if err != nil {
			return nil, err
		}
		if afterCR && len(line) > 0 {
			// The line before ended at a '\r' that was not the first
			// half of a "\r\n".
			r.noteOnce(noteSplit)
		}
		r.queueUnter = r.unterminated
		r.queue, r.qi = r.split(line, r.queue[:0]), 0
	}
	p := r.queue[r.qi]
	r.qi++
	// Only the last message of a line can have been cut by the stream's end.
	r.unterminated = r.queueUnter && r.qi == len(r.queue)
	return p, nil
}

// nextChunk is ReadSlice('\n') for a tolerant Reader, which must not wait for
// more input while what it holds already ends a line with a lone '\r'. It
// returns bufio.ErrBufferFull with a chunk that does not end the line.
func (r *Reader) nextChunk() ([]byte, error) {
	for {
		if n := r.br.Buffered(); n > 0 {
			p, _ := r.br.Peek(n)
			if i := bytes.IndexByte(p, '\n'); i >= 0 {
				p = p[:i+1]
				_, _ = r.br.Discard(len(p))
				return p, nil
			}
			// Valid until the next read, and the caller copies it first.
			_, _ = r.br.Discard(n)
			return p, bufio.ErrBufferFull
		}
		if _, err := r.br.Peek(1); err != nil {
			return nil, err
		}
	}
}

// crScan follows the nesting of the current line as it arrives, so that a
// lone '\r' can be told to end a complete JSON value without scanning the
// line again each time.
type crScan struct {
	pos   int  // bytes of the line looked at
	depth int  // open objects and arrays
	inStr bool // inside a string (tracked inside objects and arrays only)
	esc   bool // after a backslash in a string
	value bool // an object or array closed at the top level
	ended bool // the line ended at a lone '\r' (endsAtCR)
}

// endsAtCR reports whether a tolerant Reader, holding r.buf and about to
// wait for more input, holds a whole line: r.buf ends with '\r' right after
// one or more complete objects or arrays (and text between them).
func (r *Reader) endsAtCR() bool {
	if !r.tolerant || len(r.buf) == 0 || r.buf[len(r.buf)-1] != '\r' {
		return false
	}
	s := &r.cr
	for _, c := range r.buf[s.pos:] {
		switch {
		case s.inStr:
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.inStr = false
			}
		case c == '"' && s.depth > 0:
			s.inStr = true
		case c == '{' || c == '[':
			s.depth++
		case (c == '}' || c == ']') && s.depth > 0:
			s.depth--
			if s.depth == 0 {
				s.value = true
			}
		}
	}
	s.pos = len(r.buf)
	return s.depth == 0 && s.value
}

// split appends the messages and other lines found in line to q.
func (r *Reader) split(line []byte, q [][]byte) [][]byte {
	i, kinds := skipJunk(line, 0)
	r.noteJunk(kinds)
	for i < len(line) {
		if messageStart(line, i) {
			if end, ok := valueEnd(line, i); ok {
				next, kinds := skipJunk(line, end)
				if next == len(line) || messageStart(line, next) {
					r.noteJunk(kinds)
					if next < len(line) {
						r.noteOnce(noteSplit)
					}
					q = r.appendValue(q, line[i:end])
					i = next
					continue
				}
			}
		}
		// Text, or a message that text follows or that does not end:
		// up to a lone '\r' that a message follows, or the line's end.
		end := textEnd(line, i)
		q = r.appendText(q, line[i:end])
		next, kinds := skipJunk(line, end)
		r.noteJunk(kinds)
		if next < len(line) {
			r.noteOnce(noteSplit)
		}
		i = next
	}
	return q
}

// messageStart reports whether a message can start at b[i]: an object, or
// an array whose first element is one (a batch).
func messageStart(b []byte, i int) bool {
	switch b[i] {
	case '{':
		return true
	case '[':
		j := skipSpace(b, i+1)
		return j < len(b) && b[j] == '{'
	}
	return false
}

// textEnd returns where the text that starts at b[i] ends: at a '\r' after
// which (past junk) a message starts, or at the end of b.
func textEnd(b []byte, i int) int {
	for k := i; ; {
		j := bytes.IndexByte(b[k:], '\r')
		if j < 0 {
			return len(b)
		}
		j += k
		if n, _ := skipJunk(b, j); n < len(b) && messageStart(b, n) {
			return j
		}
		k = j + 1
	}
}

// appendValue appends the object v, or the elements of the batch v.
func (r *Reader) appendValue(q [][]byte, v []byte) [][]byte {
	if v[0] == '{' {
		return append(q, v)
	}
	r.noteOnce(noteBatch)
	for i := 1; i < len(v); {
		i = skipSpace(v, i)
		if i >= len(v) || v[i] == ']' {
			break
		}
		end := elementEnd(v, i)
		if el := bytes.TrimRight(v[i:end], " \t\r\n"); len(el) > 0 {
			q = append(q, el)
		}
		if end >= len(v) || v[end] == ']' {
			break
		}
		i = end + 1 // past the ','
	}
	return q
}

// elementEnd returns the offset of the ',' or ']' that ends the array
// element starting at v[i] (len(v) when there is none).
func elementEnd(v []byte, i int) int {
	for j := i; j < len(v); j++ {
		switch v[j] {
		case '"':
			k := stringEnd(v, j+1)
			if k < 0 {
				return len(v)
			}
			j = k
		case '{', '[':
			e, ok := valueEnd(v, j)
			if !ok {
				return len(v)
			}
			j = e - 1
		case ',', ']':
			return j
		}
	}
	return len(v)
}

// appendText appends t (which starts with neither junk nor a clean
// message): as it is, or split around the JSON-RPC response it holds.
func (r *Reader) appendText(q [][]byte, t []byte) [][]byte {
	t = bytes.TrimRight(t, " \t\r\n")
	from := 0
	for range maxTextCandidates {
		j := bytes.IndexByte(t[from:], '{')
		if j < 0 || from+j > maxTextPrefix {
			break
		}
		j += from
		if end, ok := valueEnd(t, j); ok {
			if m, err := Parse(t[j:end]); err == nil && m.Kind == KindResponse {
				r.noteOnce(noteText)
				if before := bytes.TrimRight(t[:j], " \t"); len(before) > 0 {
					if n, _ := skipJunk(before, 0); n < len(before) {
						q = append(q, before)
					}
				}
				q = append(q, t[j:end])
				if after, kinds := skipJunk(t, end); after < len(t) {
					q = append(q, t[after:])
				} else {
					r.noteJunk(kinds)
				}
				return q
			}
		}
		from = j + 1
	}
	if len(t) > 0 {
		q = append(q, t)
	}
	return q
}
