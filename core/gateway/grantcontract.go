package gateway

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/identity"
)

// A grant covers the contract its card showed (docs/DESIGN.md,
// "Authorization and credentials"): each tool is granted with the digest of
// the tool as the catalog offered it then (authz.Grant.Contracts). A server
// that rewrites a granted tool within the epoch (list_changed, a new
// revision) keeps the grant only when the classified diff from the granted
// contract to the current one has no authority change: a spelling fix in a
// description keeps it; a new argument, a new default, destructiveHint or
// openWorldHint now claimed, a reworded description take it away, and the
// next call gets a card showing that diff.

// contractJudge returns, for tool as e's catalog offers it now, the
// function that says whether a grant made for the contract of digest
// granted still covers it (authz.Authority.CheckContract); nil when e has
// no catalog or no such tool (the server judges; nothing to compare). The
// function calls nothing of the Authority nor of the session's lock.
func (s *Session) contractJudge(e *epoch, tool string) func(granted string) bool {
	cur, ok := s.currentTool(e, tool)
	if !ok {
		return nil
	}
	return s.contractJudgeOf(tool, cur)
}

// contractJudgeOf is contractJudge for cur, the tool as the catalog offers
// it now.
func (s *Session) contractJudgeOf(tool string, cur catalog.Tool) func(granted string) bool {
	return func(granted string) bool {
		if granted == "" || granted == cur.Digest {
			return true
		}
		key := [2]string{granted, cur.Digest}
		s.verdicts.mu.Lock()
		covered, known := s.verdicts.m[key]
		s.verdicts.mu.Unlock()
		if known {
			return covered
		}
		_, widened := s.contractChanges(tool, granted, cur)
		covered = len(widened) == 0
		s.verdicts.mu.Lock()
		if s.verdicts.m == nil || len(s.verdicts.m) >= maxVerdicts {
			s.verdicts.m = map[[2]string]bool{}
		}
		s.verdicts.m[key] = covered
		s.verdicts.mu.Unlock()
		return covered
	}
}

// maxVerdicts bounds contractVerdicts: past it the cache starts afresh.
const maxVerdicts = 256

// contractVerdicts remembers, per granted and current contract digest of a
// tool, whether the granted one covers the current one, so that the calls
// under a grant whose tool had a benign change do not diff it each time.
// Its own lock: it is used under the Authority's, never with the session's.
type contractVerdicts struct {
	mu sync.Mutex
	m  map[[2]string]bool // guarded by mu
}

// currentTool returns tool as e's catalog offers it now.
func (s *Session) currentTool(e *epoch, tool string) (catalog.Tool, bool) {
	s.mu.Lock()
	cat := e.catalog
	s.mu.Unlock()
	if cat == nil {
		return catalog.Tool{}, false
	}
	return cat.Lookup(tool)
}

// contractChanges returns the changes of tool from the contract of digest
// granted to cur, and those among them that widen what a call may do
// (authority). A granted contract no stored revision of the label holds any
// more cannot be compared: it counts as one authority change, so the person
// is asked again rather than the grant trusted blindly.
func (s *Session) contractChanges(tool, granted string, cur catalog.Tool) (all, widened []catalog.Change) {
	if before, ok := s.storedContract(tool, granted); ok {
		all = catalog.CompareTool(&before, cur)
		return all, catalog.Widening(all)
	}
	c := catalog.Change{Tool: tool, Kind: catalog.KindToolChanged, Severity: catalog.Authority,
		Summary: fmt.Sprintf("%s changed since it was approved, and the contract approved (%s) is no longer stored to compare", tool, identity.ShortDigest(granted))}
	return []catalog.Change{c}, []catalog.Change{c}
}

// storedContract finds tool with digest among the stored revisions of the
// session's label, newest first.
func (s *Session) storedContract(tool, digest string) (catalog.Tool, bool) {
	if s.opts.Catalog == nil {
		return catalog.Tool{}, false
	}
	for _, rev := range slices.Backward(s.opts.Catalog.Revisions(s.opts.Label)) {
		c, ok := s.opts.Catalog.Get(s.opts.Label, rev)
		if !ok {
			continue
		}
		if t, ok := c.Lookup(tool); ok && t.Digest == digest {
			return t, true
		}
	}
	return catalog.Tool{}, false
}

// outgrown returns, when a live grant of the run on e names tool but the
// server has since rewritten the tool beyond the contract that grant was
// made for, that grant and the tool's changes from its contract (all of
// them, for the card); nil otherwise.
func (s *Session) outgrown(e *epoch, tool string) (*authz.Grant, []catalog.Change) {
	a := s.opts.Authority
	judge := s.contractJudge(e, tool)
	if a == nil || judge == nil {
		return nil, nil
	}
	g := a.Outgrown(s.opts.RunID, e.ID, tool, judge)
	if g == nil {
		return nil, nil
	}
	cur, _ := s.currentTool(e, tool)
	all, _ := s.contractChanges(tool, g.Contract(tool), cur)
	return g, all
}

// contractHolds reports whether grant g, made on e, still covers tool as
// e's catalog offers it now.
func (s *Session) contractHolds(e *epoch, g *authz.Grant, tool string) bool {
	judge := s.contractJudge(e, tool)
	return judge == nil || judge(g.Contract(tool))
}

// outgrownReason is the card's reason for a call of tool whose grant the
// server's rewrite outgrew: what widened.
func outgrownReason(tool string, changes []catalog.Change) string {
	var what []string
	for _, c := range catalog.Widening(changes) {
		what = append(what, c.Summary)
	}
	return fmt.Sprintf("%s changed since you approved it, within the same execution epoch, in a way your approval does not cover (%s); approve the tool as it is now, or deny",
		tool, strings.Join(what, "; "))
}

// toolContracts is the contract of each of tools in cat, for a card.
func toolContracts(cat *catalog.Catalog, tools []string) map[string]string {
	if cat == nil {
		return nil
	}
	var out map[string]string
	for _, name := range tools {
		if t, ok := cat.Lookup(name); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = t.Digest
		}
	}
	return out
}
