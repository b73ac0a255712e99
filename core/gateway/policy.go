package gateway

import (
	"fmt"
	"slices"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
)

// Tool policies (docs/DESIGN.md, "Authorization and credentials"), as the
// configuration declares them.
const (
	policyAllow   = config.PolicyAllow   // no approval
	policyApprove = config.PolicyApprove // a person approves per agent run and epoch (the default)
	policyDeny    = config.PolicyDeny    // hidden from the agent and refused
)

// policy returns the policy in force for tool now.
func (s *Session) policy(tool string) config.Policy {
	if s.opts.Policy == nil {
		return policyApprove
	}
	return s.opts.Policy(tool)
}

// visibleTools lists, sorted, the names of cat's tools that the agent is
// shown under the policy in force now: every tool not denied.
func (s *Session) visibleTools(cat *catalog.Catalog) []string {
	out := make([]string, 0, len(cat.Tools))
	for _, t := range cat.Tools {
		if s.policy(t.Name) != policyDeny {
			out = append(out, t.Name)
		}
	}
	slices.Sort(out)
	return out
}

// PolicyChanged is called after the tool policies of the session's server
// may have changed (the configuration file was edited). When the tools the
// agent would now be shown differ from those it was last shown or told of
// (a tool became denied and so hidden, or stopped being denied), the agent
// is sent notifications/tools/list_changed in the form of its protocol era,
// after its handshake only, and its next tools/list shows the change. A
// change that leaves the visible tools as they were (allow ↔ approve) says
// nothing: it takes effect at the next call.
//
// Calls waiting for a person re-check their tool's policy at once (see
// awaitApproval): denied now, they are refused; allowed now, they go on
// without a grant. A pending approval request of the run whose tool scope
// holds a tool denied now is withdrawn (a denied tool is never granted, and
// its card would say otherwise); the calls still waiting on it raise a new
// one with the scope in force now.
func (s *Session) PolicyChanged() {
	s.mu.Lock()
	e := s.cur
	if s.policyWake != nil {
		close(s.policyWake)
		s.policyWake = nil
	}
	s.mu.Unlock()
	s.withdrawDenied()
	if e != nil {
		s.announceTools(e, false)
	}
}

// policyWakeLocked returns the channel PolicyChanged closes next.
func (s *Session) policyWakeLocked() <-chan struct{} {
	if s.policyWake == nil {
		s.policyWake = make(chan struct{})
	}
	return s.policyWake
}

// withdrawDenied withdraws the pending approval requests of the run whose
// tool scope holds a tool denied now.
func (s *Session) withdrawDenied() {
	a := s.opts.Authority
	if a == nil {
		return
	}
	for _, r := range a.Pending() {
		c := r.Card
		if c.AgentRun != s.opts.RunID || c.Identity != "" {
			continue
		}
		for _, t := range append(slices.Clone(c.ToolScope), c.Tool) {
			if t == "" || s.policy(t) != policyDeny {
				continue
			}
			if err := a.Withdraw(r.ID, fmt.Sprintf("the person's policy denies %s now", t)); err == nil {
				s.log.Info("approval request withdrawn: a tool of its scope is denied now", "request", r.ID, "tool", t)
			}
			break
		}
	}
}

// announceTools tells the agent that its tool list changed when force is
// set (e's catalog has a revision the agent has not fetched) or when the
// tools it would be shown from e's catalog now differ from those it was
// last shown. Nothing is said before the agent has listed the tools once
// (it lists them anyway), while e has no catalog or passes tools/list
// through, or once e ended.
func (s *Session) announceTools(e *epoch, force bool) {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	s.mu.Lock()
	cat, fallback, ended := e.catalog, e.fallback, e.ended
	announced := s.announced
	s.mu.Unlock()
	if cat == nil || fallback || ended || announced == nil {
		return
	}
	visible := s.visibleTools(cat)
	same := slices.Equal(visible, announced)
	if same && !force {
		return
	}
	if !same {
		hidden, shown := difference(announced, visible), difference(visible, announced)
		s.log.Info("the tools the agent sees changed", "epoch", e.ID, "revision", cat.Revision, "hidden", hidden, "shown", shown)
	}
	s.mu.Lock()
	newEpoch := s.announcedEpoch != e.ID
	s.mu.Unlock()
	why := "the person's policy changed which tools the agent sees"
	switch {
	case force && newEpoch:
		why = fmt.Sprintf("new execution epoch %s (catalog revision %d)", e.ID, cat.Revision)
	case force:
		why = fmt.Sprintf("new catalog revision %d", cat.Revision)
	}
	if s.notifyToolsChanged(e, why) {
		s.mu.Lock()
		s.announced = visible
		s.announcedEpoch = e.ID
		s.mu.Unlock()
	}
}

// difference lists the members of sorted a that sorted b lacks.
func difference(a, b []string) []string {
	var out []string
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			out = append(out, x)
		}
	}
	return out
}
