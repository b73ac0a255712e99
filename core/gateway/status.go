package gateway

import (
	"time"

	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/supervisor"
)

// Status is a snapshot of one agent run, as `portcullis status --json` shows
// it. Record is the execution record of the current epoch (absent when no
// process could be launched); Exit is set once that process has exited.
type Status struct {
	Run         string               `json:"run"`
	Label       string               `json:"label"`
	State       State                `json:"state"`
	Agent       Agent                `json:"agent"`
	StartedAt   time.Time            `json:"startedAt"`
	Epoch       string               `json:"epoch,omitempty"`
	PID         int                  `json:"pid,omitempty"`
	Record      *identity.Record     `json:"record,omitempty"`
	Reason      string               `json:"reason,omitempty"` // why the state is failed
	Exit        *supervisor.ExitInfo `json:"exit,omitempty"`
	StderrTail  []string             `json:"stderrTail,omitempty"`
	Diagnostics []string             `json:"diagnostics,omitempty"` // non-JSON-RPC lines the server wrote on stdout
	InFlight    int                  `json:"inFlight"`              // requests waiting for the server
}

// Status returns a snapshot of the session.
func (s *Session) Status() Status {
	s.mu.Lock()
	st := Status{
		Run:         s.opts.RunID,
		Label:       s.opts.Label,
		State:       s.state,
		Agent:       s.opts.Agent,
		StartedAt:   s.startedAt,
		Diagnostics: append([]string(nil), s.diagnostics...),
		InFlight:    len(s.pending),
	}
	e := s.cur
	if e != nil {
		st.Epoch = e.ID
		if e.ended {
			st.Reason = e.endWhy
		}
	}
	s.mu.Unlock()
	if e != nil && e.Proc != nil {
		rec := e.Record
		st.Record = &rec
		st.PID = e.Proc.Pid()
		st.StderrTail = e.Proc.StderrTail(20)
		select {
		case <-e.Proc.Done():
			exit := e.Proc.Exit()
			st.Exit = &exit
		default:
		}
	}
	return st
}
