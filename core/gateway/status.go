package gateway

import (
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/supervisor"
)

// Status is a snapshot of one agent run, as `portcullis status --json` shows
// it. Record is the execution record of the current epoch (absent when no
// process could be launched); Exit is set once that process has exited.
type Status struct {
	Run       ids.RunID   `json:"run"`
	Label     string      `json:"label"`
	State     State       `json:"state"`
	Reason    string      `json:"reason,omitempty"` // why the state is what it is
	Agent     Agent       `json:"agent"`
	StartedAt time.Time   `json:"startedAt"`
	Epoch     ids.EpochID `json:"epoch,omitempty"`
	PID       int         `json:"pid,omitempty"`
	Epochs    int         `json:"epochs"` // epochs launched for this run so far
	// CatalogRevision is the revision of the current epoch's catalog (0:
	// not fetched yet); AgentRevision the one the agent last fetched.
	CatalogRevision uint64               `json:"catalogRevision,omitempty"`
	AgentRevision   uint64               `json:"agentRevision,omitempty"`
	Record          *identity.Record     `json:"record,omitempty"`
	Build           string               `json:"build,omitempty"` // a build on disk that is not running
	Exit            *supervisor.ExitInfo `json:"exit,omitempty"`
	// LastExit is the latest process of this run to exit (a crash, a
	// replaced epoch), with its stderr tail, kept after a restart.
	LastExit    *EpochExit `json:"lastExit,omitempty"`
	StderrTail  []string   `json:"stderrTail,omitempty"`
	Diagnostics []string   `json:"diagnostics,omitempty"` // non-JSON-RPC lines the server wrote on stdout
	Warnings    []string   `json:"warnings,omitempty"`
	// Sandbox says what confines the epoch's process ("standard: hides
	// …"); "" when nothing does.
	Sandbox  string `json:"sandbox,omitempty"`
	InFlight int    `json:"inFlight"` // requests waiting for the server
	// Cgroup says which cgroup holds the epoch's process
	// ("/sys/fs/cgroup/…/portcullis-EPOCH (killed whole when the epoch
	// ends)", "none — why"); "" when the daemon puts servers in none.
	Cgroup string `json:"cgroup,omitempty"`
	// Grants are the live grants of the run (none once it ended: grants
	// expire with the agent run).
	Grants []authz.Grant `json:"grants,omitempty"`
	// Withdrawn are the approval requests of the run withdrawn without a
	// decision (their epoch ended, their call went away), with the reason.
	Withdrawn []authz.Withdrawal `json:"withdrawn,omitempty"`
	// EndedAt is when the run ended (nil while it runs).
	EndedAt *time.Time `json:"endedAt,omitempty"`
	// Check is set on an ended run that was a health check (`claude mcp
	// list`, `gemini mcp list`): it lasted at most HealthCheckWindow and
	// sent nothing but the handshake, lists (tools, prompts, resources,
	// resource templates), subscriptions/listen and ping.
	Check bool `json:"check,omitempty"`
}

// HealthCheckWindow is the longest an agent run that only connects and
// lists may last to count as a health check (see Status.Check).
var HealthCheckWindow = 5 * time.Second

// checkMethods are the requests a health check sends: the handshake, the
// lists and ping.
var checkMethods = map[string]bool{
	methodInitialize: true, methodDiscover: true, methodPing: true, methodToolsList: true, methodListen: true,
	"prompts/list": true, "resources/list": true, "resources/templates/list": true,
}

// EpochExit is how the process of one epoch ended.
type EpochExit struct {
	Epoch ids.EpochID         `json:"epoch"`
	PID   int                 `json:"pid"`
	Exit  supervisor.ExitInfo `json:"exit"`
}

// Status returns a snapshot of the session.
func (s *Session) Status() Status {
	s.mu.Lock()
	st := Status{
		Run:           s.opts.RunID,
		Label:         s.opts.Label,
		State:         s.state,
		Reason:        s.reason,
		Agent:         s.opts.Agent,
		StartedAt:     s.startedAt,
		Epochs:        s.epochs,
		AgentRevision: s.agentRev,
		Build:         s.buildNote,
		Diagnostics:   append([]string(nil), s.diagnostics...),
		Warnings:      append([]string(nil), s.warnings...),
		InFlight:      len(s.flight.pending),
		LastExit:      s.lastExit,
	}
	if !s.endedAt.IsZero() {
		at := s.endedAt
		st.EndedAt = &at
		st.Check = !s.acted && at.Sub(s.startedAt) <= HealthCheckWindow
	}
	e := s.cur
	var rec identity.Record
	if e != nil {
		rec = e.Record // completed by the epoch's identity (identify), under mu
		st.Epoch = e.ID
		if e.catalog != nil {
			st.CatalogRevision = e.catalog.Revision
		}
		if e.ended && st.Reason == "" {
			st.Reason = e.endWhy
		}
	}
	s.mu.Unlock()
	if s.opts.Authority != nil {
		st.Grants = s.opts.Authority.Grants(s.opts.RunID)
		st.Withdrawn = s.opts.Authority.Withdrawn(s.opts.RunID)
	}
	if e != nil {
		st.Record = &rec
		st.PID = e.Proc.Pid()
		st.StderrTail = e.Proc.StderrTail(20)
		if sb, ok := e.Proc.(interface{ Sandbox() string }); ok {
			st.Sandbox = sb.Sandbox()
		}
		if cg, ok := e.Proc.(interface{ Cgroup() string }); ok {
			st.Cgroup = cg.Cgroup()
		}
		select {
		case <-e.Proc.Done():
			exit := e.Proc.Exit()
			st.Exit = &exit
		default:
		}
	}
	return st
}
