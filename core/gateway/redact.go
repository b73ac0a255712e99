package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
)

// What the server writes may hold the values of the credentials it was
// given; a server printing its own token must not have it kept in the
// catalog store, the audit log, status or the daemon's log
// (docs/DESIGN.md, "Secrets never come back out"). *supervisor.Process
// redacts them; a Process without it (tests' fakes) has nothing to redact.

// jsonRedactor is what *supervisor.Process adds to Process for JSON that
// comes from the server: RedactJSON replaces the credentials' values in its
// strings by "…(scope)".
type jsonRedactor interface {
	RedactJSON(raw []byte) []byte
}

// redactJSON returns raw, JSON written by e's process, without the values
// of the credentials that process was given.
func redactJSON(e *epoch, raw json.RawMessage) json.RawMessage {
	if r, ok := e.Proc.(jsonRedactor); ok && raw != nil {
		return r.RedactJSON(raw)
	}
	return raw
}

// redactText returns text, written by e's process or quoting it, without
// the values of the credentials that process was given.
func redactText(e *epoch, text string) string {
	if r, ok := e.Proc.(serverOutput); ok {
		return r.Redact(text)
	}
	return text
}

// logRedactor holds the redaction of the newest epoch's process for a
// session's log: a server chooses the ids of its requests and answers, its
// methods and its error messages, which the log quotes.
type logRedactor struct {
	p atomic.Pointer[serverOutput]
}

// use makes e's process the one whose credentials are redacted.
func (l *logRedactor) use(e *epoch) {
	if r, ok := e.Proc.(serverOutput); ok {
		l.p.Store(&r)
	}
}

func (l *logRedactor) text(s string) string {
	if r := l.p.Load(); r != nil {
		return (*r).Redact(s)
	}
	return s
}

// redactingHandler passes a record's message and attributes (strings, and
// any other value as the text slog would write) through redact before
// inner writes it.
type redactingHandler struct {
	inner  slog.Handler
	redact *logRedactor
}

func (h redactingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.redact.p.Load() == nil {
		return h.inner.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, h.redact.text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.inner.Handle(ctx, out)
}

func (h redactingHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.redact.text(v.String()))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]any, len(attrs))
		for i, g := range attrs {
			out[i] = h.attr(g)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		if s := v.String(); h.redact.text(s) != s {
			return slog.String(a.Key, h.redact.text(s))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (h redactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.attr(a)
	}
	return redactingHandler{inner: h.inner.WithAttrs(red), redact: h.redact}
}

func (h redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{inner: h.inner.WithGroup(name), redact: h.redact}
}
