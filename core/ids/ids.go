// Package ids declares the identifiers that Portcullis mints and shows to
// a person, each as its own string type, and the one way each is
// abbreviated on screen (Short), so that the CLI, the tray menu, the
// approval card and the audit viewer show the same few characters for the
// same thing.
//
// Every identifier is a ULID (github.com/ulid/spec), some behind a short
// prefix naming their kind. A ULID's first ten characters are its time in
// milliseconds, shared by identifiers minted close together; its last
// sixteen are random. Short keeps the last ShortLen characters (and the
// prefix, when there is one): enough to tell apart the epochs, runs and
// requests a person sees at once, never enough to name one in a command,
// which takes the identifier in full.
//
// Each kind is minted by its own function (NewEpoch, NewRun, NewCall,
// NewRequest, NewGrant), from one monotonic source.
//
// The types are strings underneath: their JSON is the same as before they
// had types, and a string converts to them and back without cost.
package ids

import "strings"

// EpochID names an execution epoch: which code receives a call. The
// supervisor mints it at launch, never the server (docs/DESIGN.md,
// "Vocabulary").
type EpochID string

// RunID names an agent run: one connection of an agent through the
// `connect` shim, minted by the daemon when the shim connects.
type RunID string

// CallID names one tools/call of an agent run in the audit log.
type CallID string

// RequestID names an approval request ("apr_" and a ULID); `portcullis
// approve` and `portcullis deny` take it in full.
type RequestID string

// GrantID names a grant ("grt_" and a ULID).
type GrantID string

// ShortLen is how many characters of an identifier's ULID Short keeps.
const ShortLen = 8

// Short is the abbreviation of id shown to a person: its last ShortLen
// characters.
func (id EpochID) Short() string { return short(string(id)) }

// Short is the abbreviation of id shown to a person: its last ShortLen
// characters.
func (id RunID) Short() string { return short(string(id)) }

// Short is the abbreviation of id shown to a person: its last ShortLen
// characters.
func (id CallID) Short() string { return short(string(id)) }

// Short is the abbreviation of id shown to a person: its prefix and the
// last ShortLen characters of its ULID ("apr_7Q2M9XKD").
func (id RequestID) Short() string { return short(string(id)) }

// Short is the abbreviation of id shown to a person: its prefix and the
// last ShortLen characters of its ULID ("grt_7Q2M9XKD").
func (id GrantID) Short() string { return short(string(id)) }

func (id EpochID) String() string   { return string(id) }
func (id RunID) String() string     { return string(id) }
func (id CallID) String() string    { return string(id) }
func (id RequestID) String() string { return string(id) }
func (id GrantID) String() string   { return string(id) }

// short keeps a kind prefix ("apr_") and the last ShortLen characters of
// what follows it; an identifier no longer than that is kept whole.
func short(id string) string {
	prefix, rest := "", id
	if i := strings.IndexByte(id, '_'); i >= 0 {
		prefix, rest = id[:i+1], id[i+1:]
	}
	if len(rest) <= ShortLen {
		return id
	}
	return prefix + rest[len(rest)-ShortLen:]
}

// Strings returns list as plain strings, for joining into a message.
func Strings[T ~string](list []T) []string {
	out := make([]string, len(list))
	for i, id := range list {
		out[i] = string(id)
	}
	return out
}
