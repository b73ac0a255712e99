package audit

import (
	"fmt"
	"time"
)

// Durability says which events a Log makes durable (synced to the disk)
// before the action they record, as settings.auditDurability names it.
//
// Every event, whatever the tier, is written to the file (write(2), so it is
// in the kernel's page cache) before Append or AppendRecord returns: a crash
// of the daemon, even SIGKILL, loses nothing that was acknowledged. The
// tiers differ in what a crash of the whole machine (power loss, kernel
// panic) can lose:
//
//   - authority events (Append: a person's decision, a call under a grant or
//     of a server with credentials, a launch, configuration and signing
//     changes, seals) are synced — fdatasync(2) on Linux, fcntl(F_FULLFSYNC)
//     on macOS — before Append returns, so before the action: a power loss
//     loses none of them;
//   - record events (AppendRecord: calls of allow-policy tools on servers
//     without credentials, completions, what the agent was shown) are synced by a group commit at
//     most Options.RecordWindow (10 ms) after the first of them was written,
//     after Options.RecordMaxEvents (256) of them, or with the next
//     authority event, whichever comes first: a power loss can lose the
//     record events of that last window, never an authority event nor
//     anything before it. What is lost is the end of the log (a torn last
//     line is recorded by log_recovered at the next Open), so the chain of
//     what remains still verifies.
//
// Under DurabilityStrict AppendRecord is Append: every event is synced
// before the action and a power loss loses nothing acknowledged.
type Durability string

const (
	// DurabilityAuthority syncs authority events before the action and
	// record events within the group-commit window (the default).
	DurabilityAuthority Durability = "authority"
	// DurabilityStrict syncs every event before the action.
	DurabilityStrict Durability = "strict"
)

// Defaults of Options.RecordWindow and Options.RecordMaxEvents.
const (
	DefaultRecordWindow    = 10 * time.Millisecond
	DefaultRecordMaxEvents = 256
)

// ParseDurability returns the Durability named s (settings.auditDurability):
// "strict", or "authority" and "" (the default). Other values are an error
// naming the ones accepted.
func ParseDurability(s string) (Durability, error) {
	switch Durability(s) {
	case "", DurabilityAuthority:
		return DurabilityAuthority, nil
	case DurabilityStrict:
		return DurabilityStrict, nil
	}
	return "", fmt.Errorf("audit durability %q: must be %q or %q", s, DurabilityStrict, DurabilityAuthority)
}

// SetDurability changes the tier of the events AppendRecord appends from
// now on (events already written keep theirs; a switch to strict does not
// sync the ones waiting for their group commit, which follows within
// Options.RecordWindow as before).
func (l *Log) SetDurability(d Durability) error {
	d, err := ParseDurability(string(d))
	if err != nil {
		return err
	}
	l.strict.Store(d == DurabilityStrict)
	return nil
}

// Durability returns the durability in force (see SetDurability).
func (l *Log) Durability() Durability {
	if l.strict.Load() {
		return DurabilityStrict
	}
	return DurabilityAuthority
}
