//go:build unix

package supervisor

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"
)

// Secret is a credential's value injected into a server (its environment,
// or the _meta of its calls), with the name of its credential scope.
type Secret struct {
	Scope string
	Value string
}

// minFragment is the shortest end of a line that [Redactor.Redact] takes
// for the start of a secret cut by a line limit (shorter secrets: the whole
// secret).
const minFragment = 4

// Redactor replaces the values of secrets in text that comes from a server
// (its stderr, its non-JSON-RPC output, diagnostics), so that a server
// printing its own credential never has it kept in status, logs or the
// data directory (docs/DESIGN.md, "Authorization and credentials": secret
// values never in logs or errors). A nil *Redactor changes nothing.
type Redactor struct {
	secrets []Secret // longest first; none empty
	values  [][]byte // the secrets' values, in the same order
	repl    *strings.Replacer
}

// NewRedactor returns a Redactor for secrets (empty values are ignored);
// nil when there is nothing to redact.
func NewRedactor(secrets []Secret) *Redactor {
	var ss []Secret
	for _, s := range secrets {
		if s.Value != "" {
			ss = append(ss, s)
		}
	}
	if len(ss) == 0 {
		return nil
	}
	// Longest first: a secret that contains another is replaced whole.
	slices.SortStableFunc(ss, func(a, b Secret) int { return cmp.Compare(len(b.Value), len(a.Value)) })
	pairs := make([]string, 0, 2*len(ss))
	for _, s := range ss {
		pairs = append(pairs, s.Value, Placeholder(s.Scope))
	}
	values := make([][]byte, len(ss))
	for i, sec := range ss {
		values[i] = []byte(sec.Value)
	}
	return &Redactor{secrets: ss, values: values, repl: strings.NewReplacer(pairs...)}
}

// Placeholder is what replaces the value of a secret of scope: "…(scope)".
func Placeholder(scope string) string { return "…(" + scope + ")" }

// Redact returns s with every secret's value replaced by its
// [Placeholder], and a line that ends in the first bytes of a secret (at
// least 4 of them, or the whole of a shorter one), as a line cut by a
// length limit does, also before a final "…", with those bytes replaced too.
func (r *Redactor) Redact(s string) string {
	if r == nil || s == "" {
		return s
	}
	s = r.repl.Replace(s)
	body, ell := s, ""
	if b, ok := strings.CutSuffix(s, "…"); ok {
		body, ell = b, "…"
	}
	for _, sec := range r.secrets {
		for n := len(sec.Value) - 1; n >= min(minFragment, len(sec.Value)); n-- {
			if strings.HasSuffix(body, sec.Value[:n]) {
				return body[:len(body)-n] + Placeholder(sec.Scope) + ell
			}
		}
	}
	return s
}

// JSON returns the JSON text raw (a tools/list page, an initialize
// result) with every secret's value replaced by its [Placeholder] inside
// each string, member names included, whatever escapes the server wrote it
// with; a string that changes is written anew (encoding/json), the rest of
// raw is kept byte for byte. A number that holds a secret's value becomes
// the placeholder as a string. raw itself is returned when nothing
// changes; if a value is still found in the bytes afterwards (raw is not
// JSON), it is replaced as plain text.
func (r *Redactor) JSON(raw []byte) []byte {
	if r == nil || len(raw) == 0 {
		return raw
	}
	var out []byte
	last := 0
	splice := func(from, to int, text string) {
		out = append(out, raw[last:from]...)
		out = append(out, jsonString(text)...)
		last = to
	}
	for i := 0; i < len(raw); {
		switch c := raw[i]; {
		case c == '"':
			end := stringEnd(raw, i)
			if end < 0 {
				i = len(raw)
				break
			}
			body := raw[i+1 : end-1]
			if bytes.IndexByte(body, '\\') < 0 {
				// No escapes: the bytes are the string.
				if r.inBytes(body) {
					splice(i, end, r.repl.Replace(string(body)))
				}
			} else if str := ""; json.Unmarshal(raw[i:end], &str) == nil {
				if red := r.repl.Replace(str); red != str {
					splice(i, end, red)
				}
			}
			i = end
		case c == '-' || c >= '0' && c <= '9':
			j := i + 1
			for j < len(raw) && strings.IndexByte("+-.eE0123456789", raw[j]) >= 0 {
				j++
			}
			if r.inBytes(raw[i:j]) {
				splice(i, j, r.repl.Replace(string(raw[i:j])))
			}
			i = j
		default:
			i++
		}
	}
	if out != nil {
		out = append(out, raw[last:]...)
	} else {
		out = raw
	}
	if r.inBytes(out) {
		return []byte(r.repl.Replace(string(out)))
	}
	return out
}

// inBytes reports whether b holds the value of one of the secrets.
func (r *Redactor) inBytes(b []byte) bool {
	for _, v := range r.values {
		if bytes.Contains(b, v) {
			return true
		}
	}
	return false
}

// stringEnd returns the index just past the JSON string that starts at
// raw[i] (a quote), or -1 when it is not closed.
func stringEnd(raw []byte, i int) int {
	for j := i + 1; j < len(raw); j++ {
		switch raw[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// jsonString is s as a JSON string, without HTML escapes.
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// RedactAll redacts each line of lines in place and returns it.
func (r *Redactor) RedactAll(lines []string) []string {
	if r == nil {
		return lines
	}
	for i, l := range lines {
		lines[i] = r.Redact(l)
	}
	return lines
}

// Bounds of what the daemon's log receives from one epoch's output
// ([Process.LogOutput]): a burst of outputBurst lines, then outputRate a
// second, at most outputMax lines in all, each cut to outputLineMax bytes.
const (
	outputBurst   = 50
	outputRate    = 5
	outputMax     = 2000
	outputLineMax = 512
)

// outputLog bounds the lines of one epoch's output written to the daemon's
// log: a token bucket and a cap for the epoch; the lines it drops are
// counted, and the count is logged with the next line let through and when
// the epoch ends.
type outputLog struct {
	now func() time.Time

	mu      sync.Mutex
	tokens  float64   // guarded by mu
	last    time.Time // guarded by mu
	written int       // guarded by mu
	dropped int       // guarded by mu; since the last report
	total   int       // guarded by mu; dropped over the epoch
}

func newOutputLog(now func() time.Time) *outputLog {
	return &outputLog{now: now, tokens: outputBurst, last: now()}
}

// admit reports whether one more line may be logged, and how many were
// dropped since the last report (to be said with it).
func (o *outputLog) admit() (ok bool, dropped int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.now()
	o.tokens = min(outputBurst, o.tokens+t.Sub(o.last).Seconds()*outputRate)
	o.last = t
	if o.tokens < 1 || o.written >= outputMax {
		o.dropped++
		o.total++
		return false, 0
	}
	o.tokens--
	o.written++
	dropped, o.dropped = o.dropped, 0
	return true, dropped
}

// end returns the lines dropped over the epoch, and those not yet reported.
func (o *outputLog) end() (total, unreported int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	unreported, o.dropped = o.dropped, 0
	return o.total, unreported
}

// LogOutput writes text, a line of the server's output or a note about it
// (a diagnostic), to the daemon's log (Options.Logger) as msg, redacted
// ([Redactor]) and cut to 512 bytes, within the bounds of one epoch: a
// burst of 50 lines, then 5 a second, at most 2000 in all. Lines over the
// bounds are dropped and counted; the count is logged ("server output
// dropped from the log", with dropped=N) before the next line let through
// and when the process is stopped.
func (p *Process) LogOutput(msg, text string) {
	ok, dropped := p.outLog.admit()
	if !ok {
		return
	}
	if dropped > 0 {
		p.logger.Warn("server output dropped from the log", "dropped", dropped, "why", "rate limit")
	}
	if len(text) > outputLineMax {
		text = strings.ToValidUTF8(text[:outputLineMax], "") + "…"
	}
	p.logger.Info(msg, "line", p.redactor.Redact(text))
}

// logDropped reports, at the end of the epoch, the output lines dropped
// from the log.
func (p *Process) logDropped() {
	total, unreported := p.outLog.end()
	if total > 0 {
		p.logger.Warn("server output dropped from the log", "dropped", unreported, "droppedThisEpoch", total,
			"why", "at most 50 lines at once, then 5 a second, 2000 per epoch")
	}
}

// Redact returns s with the values of the secrets given to the server
// (Spec.Secrets) replaced by "…(scope)" ([Redactor.Redact]).
func (p *Process) Redact(s string) string { return p.redactor.Redact(s) }

// RedactJSON returns the JSON text raw with the values of the secrets
// given to the server replaced by "…(scope)" in its strings
// ([Redactor.JSON]).
func (p *Process) RedactJSON(raw []byte) []byte { return p.redactor.JSON(raw) }
