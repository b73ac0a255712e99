package authz

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/portcullis/portcullis/core/ids"
)

// standingLog records what an Authority reports of standing approvals.
type standingLog struct {
	mu      sync.Mutex
	fail    error
	granted []StandingApproval
	ended   []string // "id why"
}

func (l *standingLog) options(o Options) Options {
	o.OnStanding = func(st StandingApproval) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.fail != nil {
			return l.fail
		}
		l.granted = append(l.granted, st)
		return nil
	}
	o.OnStandingEnded = func(st StandingApproval, why string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ended = append(l.ended, string(st.ID)+" "+why)
	}
	return o
}

// firstUse is the card of a new agent run's first call of tool on epoch,
// which runs code: the run approved nothing before.
func firstUse(run ids.RunID, epoch ids.EpochID, code, tool string) Card {
	c := codeCard(run, "/usr/bin/agent", epoch, code, tool)
	c.PreviousEpoch, c.Reason = "", "first use of "+tool+" in this agent run"
	return c
}

// TestStandingApprovalEndsWithItsCode: after approve --code and a rebuild,
// the card of a new run says that the code changed since the standing
// approval (not "first use"), and the approval is reported ended.
func TestStandingApprovalEndsWithItsCode(t *testing.T) {
	var rec recorder
	var sl standingLog
	a := New(sl.options(rec.options(Options{})))
	id := a.Raise(firstUse("runA", "EA", "sha256:old", "greet"))
	if err := a.Decide(id, Decision{Choice: ApproveCode, Tools: []string{"greet"}}); err != nil {
		t.Fatal(err)
	}
	if st := a.Standing(); len(st) != 1 || st[0].ID != id || st[0].Code != "sha256:old" || !slices.Equal(st[0].Tools, []string{"greet"}) || len(sl.granted) != 1 {
		t.Fatalf("standing %+v, reported %+v", st, sl.granted)
	}
	next := a.Raise(firstUse("runB", "EB", "sha256:rebuilt", "greet"))
	var reason string
	for _, r := range a.Pending() {
		if r.ID == next {
			reason = r.Card.Reason
			if r.Card.StandingEnded != id {
				t.Errorf("the card names standing approval %q it ended, want %s", r.Card.StandingEnded, id)
			}
		}
	}
	if !strings.Contains(reason, "the code of srv changed since you approved it for every run of /usr/bin/agent (request "+string(id)) || strings.Contains(reason, "first use") {
		t.Errorf("the card for the rebuilt code reads %q", reason)
	}
	if len(a.Standing()) != 0 || len(sl.ended) != 1 || !strings.HasPrefix(sl.ended[0], string(id)+" the code of srv changed") {
		t.Errorf("standing %+v, ended %q: want the approval ended by the new code", a.Standing(), sl.ended)
	}
}

// TestRevokeStanding: a revoked standing approval grants nothing more:
// the next run of the program on the same code is asked.
func TestRevokeStanding(t *testing.T) {
	var rec recorder
	var sl standingLog
	a := New(sl.options(rec.options(Options{})))
	id := a.Raise(firstUse("runA", "EA", "sha256:c", "greet"))
	if err := a.Decide(id, Decision{Choice: ApproveCode, Tools: []string{"greet"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RevokeStanding("apr_nosuch", "test"); !errors.Is(err, ErrNoStanding) {
		t.Errorf("revoking an unknown id: %v", err)
	}
	if st, err := a.RevokeStanding(id, "revoked by the person"); err != nil || st.ID != id {
		t.Fatalf("revoke: %+v %v", st, err)
	}
	a.Raise(firstUse("runB", "EB", "sha256:c", "greet"))
	if n := len(a.Pending()); n != 1 {
		t.Errorf("pending %d after the revocation, want the new run asked", n)
	}
	if len(sl.ended) != 1 || sl.ended[0] != string(id)+" revoked by the person" {
		t.Errorf("ended %q", sl.ended)
	}
}

// TestStandingNotKeptUnrecorded: a standing approval that cannot be
// recorded is not kept (the decision's own grant stands).
func TestStandingNotKeptUnrecorded(t *testing.T) {
	var rec recorder
	sl := standingLog{fail: errors.New("disk full")}
	a := New(sl.options(rec.options(Options{})))
	id := a.Raise(firstUse("runA", "EA", "sha256:c", "greet"))
	if err := a.Decide(id, Decision{Choice: ApproveCode, Tools: []string{"greet"}}); err != nil {
		t.Fatal(err)
	}
	if g, err := waitRun(t, a, id, "runA"); err != nil || g == nil {
		t.Fatalf("the decision's grant: %v %v", g, err)
	}
	if len(a.Standing()) != 0 {
		t.Errorf("standing %+v kept although it could not be recorded", a.Standing())
	}
	a.Raise(firstUse("runB", "EB", "sha256:c", "greet"))
	if n := len(a.Pending()); n != 1 {
		t.Errorf("pending %d, want the next run asked", n)
	}
}
