package gateway

import "encoding/json"

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
