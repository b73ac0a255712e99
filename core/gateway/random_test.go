package gateway

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/ids"
)

var (
	randomSeed  = flag.Uint64("authz.seed", 0, "seed of TestRandomInterleavings (0: from the clock)")
	randomRuns  = flag.Int("authz.runs", 100, "agent runs in TestRandomInterleavings")
	randomSteps = flag.Int("authz.steps", 100, "steps per agent run in TestRandomInterleavings")
)

// TestRandomInterleavings drives agent runs through random sequences of
// rebuilds (Replace), calls to an approve tool and an allow tool, approvals
// for the run or once, denials, approval timeouts, tool list fetches and
// server list_changed signals, and checks after every step:
//
//   - every call to the approve tool that a server process received was
//     authorized by a grant bound to that process's epoch (the tool_called
//     intent names the grant, and the grant's epoch is the epoch of the
//     process that read the call), made before the call arrived;
//   - a once grant (and a grant of an ask-every-use credential) served at
//     most one call;
//   - the meta credential reached a process only in calls authorized for
//     its epoch, and always whole (never empty); the allow tool never got it;
//   - no call reached a process twice, and every call has its intent in the
//     audit log, naming the epoch that received it.
//
// At the end of each run every request has been answered. Each run is a
// synctest bubble, so its timeouts are the bubble's clock; its goroutines
// still run concurrently. The action sequence is reproducible from the
// seed printed (-authz.seed); the goroutine schedule is not, which is the
// point of running many.
func TestRandomInterleavings(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with go test ./core/gateway -run TestRandomInterleavings -authz.seed=%d)", seed, seed)
	src := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	steps := 0
	for run := range *randomRuns {
		rs := src.Uint64()
		ok := t.Run(fmt.Sprintf("run%03d", run), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				steps += randomRun(t, rand.New(rand.NewPCG(rs, uint64(run))))
			})
		})
		if !ok {
			t.Fatalf("run %d failed (seed %d)", run, seed)
		}
	}
	t.Logf("%d steps over %d agent runs", steps, *randomRuns)
	if steps < 10000 && *randomRuns*(*randomSteps) >= 10000 {
		t.Errorf("only %d steps", steps)
	}
}

// randomState is what the driver remembers of one agent run.
type randomState struct {
	t        *testing.T
	r        *rig
	creds    bool
	askEvery bool
	nextN    int64
	sent     map[int64]string // call number → tool
	byDigest map[string]int64 // args digest → call number
	other    []int64          // ids of tools/list requests
	checked  int              // received calls already checked
	perGrant map[string]int   // grant id → calls it served
	seen     map[int64]bool   // call numbers received
}

func randomRun(t *testing.T, rnd *rand.Rand) int {
	o := rigOptions{
		approvalTimeout: time.Duration(5+rnd.IntN(40)) * time.Millisecond,
		holdTimeout:     300 * time.Millisecond,
		askEveryUse:     rnd.IntN(4) == 0,
		noCredentials:   rnd.IntN(6) == 0,
		auditDelay:      time.Duration(rnd.IntN(3)) * time.Duration(rnd.IntN(400)) * time.Microsecond,
		launchDelay:     time.Duration(rnd.IntN(2)) * time.Duration(rnd.IntN(400)) * time.Microsecond,
	}
	if rnd.IntN(10) == 0 {
		o.secrets = func(string) ([]byte, error) { return nil, errLocked }
	}
	r := newRig(t, o)
	defer r.close()
	r.handshake()
	st := &randomState{t: t, r: r, creds: !o.noCredentials, askEvery: o.askEveryUse && !o.noCredentials, nextN: 1,
		sent: map[int64]string{}, byDigest: map[string]int64{}, perGrant: map[string]int{}, seen: map[int64]bool{}}
	replacing := make(chan struct{}, 1)
	for range *randomSteps {
		switch k := rnd.IntN(100); {
		case k < 28:
			st.call(toolWrite, rnd)
		case k < 36:
			st.call(toolRead, rnd)
		case k < 44:
			id := 500_000 + st.nextN
			st.nextN++
			st.other = append(st.other, id)
			r.agent.request(id, "tools/list", nil)
		case k < 51:
			select {
			case replacing <- struct{}{}:
				go func() {
					r.sess.Replace("rebuild")
					<-replacing
				}()
			default:
			}
		case k < 63:
			st.decide(rnd, authz.ApproveRun)
		case k < 71:
			st.decide(rnd, authz.ApproveOnce)
		case k < 78:
			st.decide(rnd, authz.Deny)
		case k < 81:
			p := r.launcher.last()
			go p.write(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
		default:
			// Time passes (the bubble's clock): approvals and held calls
			// may time out meanwhile.
			time.Sleep(time.Duration(rnd.IntN(2000)) * time.Microsecond)
		}
		st.check()
		if t.Failed() {
			return 0
		}
	}
	// Every request is answered: approvals time out, held calls are
	// released or refused, forwarded calls are answered.
	deadline := time.Now().Add(15 * time.Second)
	for n, tool := range st.sent {
		if _, ok := r.agent.within(n, time.Until(deadline)); !ok {
			t.Fatalf("call %d (%s) got no response; status %+v; pending %+v", n, tool, r.sess.Status(), r.auth.Pending())
		}
	}
	for _, id := range st.other {
		r.agent.wait(id, time.Until(deadline)+time.Second)
	}
	replacing <- struct{}{} // a Replace still running has returned
	st.check()
	return *randomSteps
}

func (st *randomState) call(tool string, rnd *rand.Rand) {
	n := st.nextN
	st.nextN++
	st.sent[n] = tool
	digest, _ := audit.ArgsSummary(json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)))
	st.byDigest[digest] = n
	token := ""
	if rnd.IntN(3) == 0 {
		token = fmt.Sprintf("tok-%d", n)
	}
	st.r.agent.request(n, "tools/call", callParams(tool, n, token))
}

func (st *randomState) decide(rnd *rand.Rand, c authz.Choice) {
	p := st.r.auth.Pending()
	if len(p) == 0 {
		return
	}
	q := p[rnd.IntN(len(p))]
	if c == authz.ApproveOnce && q.Card.Stale {
		c = authz.ApproveRun // a stale card offers no approve once
	}
	if err := st.r.auth.Decide(q.ID, authz.Decision{Choice: c, By: "cli"}); err != nil && !errors.Is(err, authz.ErrNoRequest) {
		st.t.Errorf("Decide: %v", err)
	}
}

// check verifies the invariants for every call received since the last
// check.
func (st *randomState) check() {
	t := st.t
	calls := st.r.launcher.received()
	if len(calls) == st.checked {
		return
	}
	intents := map[int64]audit.ToolCalled{}
	intentAt := map[int64]int64{}
	for _, e := range st.r.audit.entries() {
		if tc, ok := e.Fields.(audit.ToolCalled); ok {
			n, known := st.byDigest[tc.ArgsDigest]
			if !known {
				t.Errorf("tool_called for arguments never sent: %+v", tc)
				continue
			}
			if _, dup := intents[n]; dup {
				t.Errorf("two tool_called intents for call %d", n)
			}
			intents[n], intentAt[n] = tc, e.Seq
		}
	}
	grants := map[ids.GrantID]authz.Grant{}
	for _, g := range st.r.grants() {
		grants[g.ID] = g
	}
	st.r.mu.Lock()
	grantAt := make(map[string]int64, len(st.r.grantAt))
	for k, v := range st.r.grantAt {
		grantAt[k] = v
	}
	st.r.mu.Unlock()

	for _, c := range calls[st.checked:] {
		where := fmt.Sprintf("call %d (%s) received by epoch %s", c.N, c.Tool, c.Epoch)
		if st.seen[c.N] {
			t.Errorf("%s: received twice", where)
		}
		st.seen[c.N] = true
		if st.sent[c.N] != c.Tool {
			t.Errorf("%s: the agent sent %q", where, st.sent[c.N])
		}
		in, ok := intents[c.N]
		if !ok || intentAt[c.N] > c.Seq {
			t.Errorf("%s: no tool_called intent before it", where)
			continue
		}
		if string(in.Epoch) != c.Epoch {
			t.Errorf("%s: the intent and its authorization name epoch %s", where, in.Epoch)
		}
		switch c.Tool {
		case toolRead:
			if c.Creds != nil || in.Decision != "allow" {
				t.Errorf("%s: allow tool got credentials %s, decision %q", where, c.Creds, in.Decision)
			}
		case toolWrite:
			g, ok := grants[in.Grant]
			if in.Decision != "grant" || !ok {
				t.Errorf("%s: forwarded without a grant (decision %q, grant %q)", where, in.Decision, in.Grant)
				continue
			}
			if grantAt[string(g.ID)] > c.Seq {
				t.Errorf("%s: grant %s was made after the call arrived", where, g.ID)
			}
			if string(g.ExecutionEpoch) != c.Epoch || !g.Covers(toolWrite, nil) {
				t.Errorf("%s: grant %s is bound to epoch %s, tools %v", where, g.ID, g.ExecutionEpoch, g.ToolScope)
			}
			st.perGrant[string(g.ID)]++
			if (g.ExpiresWhen == authz.ExpiresOnce || st.askEvery) && st.perGrant[string(g.ID)] > 1 {
				t.Errorf("%s: grant %s (%s, ask every use %v, request %s) served %d calls", where, g.ID, g.ExpiresWhen, st.askEvery, g.Request, st.perGrant[string(g.ID)])
				for n, in := range intents {
					if in.Grant == g.ID {
						t.Logf("call %d: intent %+v", n, in)
					}
				}
			}
			switch {
			case st.creds && c.Cred != st.r.secret:
				t.Errorf("%s: credential %q, want the whole secret", where, c.Cred)
			case st.creds && !slices.Contains(g.CredentialScope, credScope):
				t.Errorf("%s: credential sent under grant %s without the credential scope", where, g.ID)
			case !st.creds && c.Creds != nil:
				t.Errorf("%s: credentials %s sent for a server that has none", where, c.Creds)
			}
		default:
			t.Errorf("%s: unknown tool", where)
		}
		if strings.Contains(in.Tool+string(in.Grant)+in.Decision, st.r.secret) {
			t.Errorf("%s: the secret is in the audit intent", where)
		}
	}
	st.checked = len(calls)
}
