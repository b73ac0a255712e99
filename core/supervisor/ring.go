//go:build unix

package supervisor

import (
	"bytes"
	"strings"
	"sync"
)

// ring keeps the most recent stderr lines within a byte budget: each complete
// line costs its length plus one (so blank lines count too), the unterminated
// last line its length, and a line longer than the budget is cut to budget-1
// bytes. Old lines are dropped to stay within the budget. Writes never block
// on readers.
type ring struct {
	mu      sync.Mutex
	limit   int
	lines   []string // guarded by mu; oldest first, lines[head:] are live
	head    int      // guarded by mu
	bytes   int      // guarded by mu; cost of lines[head:]
	partial []byte   // guarded by mu; the unterminated last line, at most limit-1 bytes
}

func newRing(limit int) *ring {
	return &ring{limit: max(limit, 2)}
}

func (r *ring) write(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if room := r.limit - 1 - len(r.partial); room > 0 {
			r.partial = append(r.partial, chunk[:min(room, len(chunk))]...)
		}
		if i < 0 {
			r.evictLocked()
			return
		}
		line := lineText(r.partial)
		r.partial = r.partial[:0]
		r.pushLocked(line)
		b = b[i+1:]
	}
}

// lineText turns raw bytes into a line: a trailing CR dropped, invalid UTF-8
// (also from a cut) replaced.
func lineText(b []byte) string {
	b = bytes.TrimSuffix(b, []byte("\r"))
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func (r *ring) pushLocked(s string) {
	r.lines = append(r.lines, s)
	r.bytes += len(s) + 1
	r.evictLocked()
	// Compact once the dead prefix dominates, keeping appends amortized O(1).
	if r.head > 64 && r.head > len(r.lines)/2 {
		r.lines = append(r.lines[:0], r.lines[r.head:]...)
		r.head = 0
	}
}

// evictLocked drops the oldest lines until lines and partial fit the budget
// (a cut line alone always fits).
func (r *ring) evictLocked() {
	for r.bytes+len(r.partial) > r.limit && len(r.lines)-r.head > 0 {
		r.bytes -= len(r.lines[r.head]) + 1
		r.lines[r.head] = ""
		r.head++
	}
}

// tail returns up to n of the newest lines (all for n <= 0), the partial
// line last when there is one.
func (r *ring) tail(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	live := r.lines[r.head:]
	var out []string
	if len(r.partial) > 0 {
		out = []string{lineText(r.partial)}
	}
	want := len(live)
	if n > 0 {
		want = min(want, max(n-len(out), 0))
	}
	return append(append(make([]string, 0, want+len(out)), live[len(live)-want:]...), out...)
}
