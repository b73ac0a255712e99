package gateway

import (
	"strings"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// reservedPrefix starts the _meta names Portcullis reserves for what it
// adds to a message itself (metaCredentialKey). MCP basic/index, "_meta":
// a prefix of reversed-DNS labels followed by a slash names the party that
// owns the key, and the agent is not that party.
const reservedPrefix = "dev.portcullis/"

// Bounds of the names a reserved_meta_removed event keeps.
const (
	maxReservedNames   = 16
	maxReservedNameLen = 128
)

func isReserved(name string) bool { return strings.HasPrefix(name, reservedPrefix) }

// stripReserved returns m without the members of its _meta (params._meta of
// a request or notification, result._meta of an answer) whose names
// Portcullis reserves: whatever the agent sends under them never reaches a
// server, on every method and every policy, so that a server can trust
// that a "dev.portcullis/credentials" it receives was put there by
// Portcullis (authorize.go), never forged by the agent. Every such member
// is removed, also a name written with escapes or given twice. The first
// message of the run that carried one is recorded (reserved_meta_removed),
// later ones only logged. m is returned as it is when it has none; an error
// means the agent's reader cannot go on (the message could not be rebuilt,
// which a valid message never causes).
//
// It runs on the agent's reading loop (readAgent), before anything reads m.
func (s *Session) stripReserved(m *mcpwire.Message) (*mcpwire.Message, error) {
	path := []string{"params", "_meta"}
	if m.Kind == mcpwire.KindResponse {
		path[0] = "result"
	}
	meta := mcpwire.GetPath(m.Raw, path...)
	if len(meta) == 0 || meta[0] != '{' {
		return m, nil
	}
	kept, names, err := mcpwire.DeleteMembers(meta, isReserved)
	if err != nil || len(names) == 0 {
		return m, err // an error: the message is not forwarded, the run ends
	}
	raw, err := mcpwire.SetPath(m.Raw, path, kept)
	if err != nil {
		return m, err
	}
	out, err := mcpwire.Parse(raw)
	if err != nil {
		return m, err
	}
	out.Replaced = m.Replaced
	s.log.Warn("the agent sent _meta members under names Portcullis reserves; removed before the server sees them",
		"method", m.Method, "id", string(m.ID), "names", len(names))
	if !s.reservedNoted {
		s.reservedNoted = true
		ev := audit.ReservedMetaRemoved{AgentRun: s.opts.RunID, ServerLabel: s.opts.Label, Method: m.Method}
		for i, n := range names {
			if i == maxReservedNames {
				break
			}
			ev.Keys = append(ev.Keys, truncate(n, maxReservedNameLen))
		}
		s.record(audit.TypeReservedMetaRemoved, ev)
	}
	return out, nil
}
