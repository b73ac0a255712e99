package gateway

import (
	"slices"

	"github.com/portcullis/portcullis/core/catalog"
)

// Tool policies (DESIGN.md, "Authorization and credentials").
const (
	policyAllow   = "allow"   // no approval
	policyApprove = "approve" // a person approves per agent run and epoch (the default)
	policyDeny    = "deny"    // hidden from the agent and refused
)

// policy returns the policy in force for tool now.
func (s *Session) policy(tool string) string {
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
func (s *Session) PolicyChanged() {
	s.mu.Lock()
	e := s.cur
	s.mu.Unlock()
	if e != nil {
		s.announceTools(e, false)
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
	if s.notifyToolsChanged() {
		s.mu.Lock()
		s.announced = visible
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
