package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/supervisor"
)

// fakeLineage answers with a fixed ancestry and environment marks.
type fakeLineage struct {
	chain []identity.Observed
	err   error
	marks map[int]string // pid → PORTCULLIS_EPOCH value
	// noTerminal: the peer's stdin and stdout are not a terminal;
	// terminalErr: that cannot be read.
	noTerminal  bool
	terminalErr error
}

var (
	_ Lineage   = (*fakeLineage)(nil)
	_ Terminals = (*fakeLineage)(nil)
)

func (f *fakeLineage) AtTerminal(pid int, start uint64) (bool, error) {
	if len(f.chain) == 0 || f.chain[0].PID != pid || f.chain[0].StartTime != start {
		return false, errors.New("not the peer")
	}
	return !f.noTerminal, f.terminalErr
}

func (f *fakeLineage) Peer(net.Conn) (int, int, error) {
	if len(f.chain) == 0 {
		return os.Getuid(), 4242, nil
	}
	return os.Getuid(), f.chain[0].PID, nil
}
func (f *fakeLineage) Parent(int) (int, string, error) { return 0, "", errors.New("not used") }
func (f *fakeLineage) Ancestry(net.Conn) ([]identity.Observed, error) {
	return f.chain, f.err
}
func (f *fakeLineage) Environ(pid int, _ uint64, name string) (string, bool, error) {
	if name != supervisor.EpochEnv {
		return "", false, nil
	}
	v, ok := f.marks[pid]
	return v, ok, nil
}
func (f *fakeLineage) Adopt(context.Context, *slog.Logger) error { return nil }

// peerOnly is a PeerInfo that cannot read ancestries.
type peerOnly struct{}

func (peerOnly) Peer(net.Conn) (int, int, error) { return os.Getuid(), 4242, nil }
func (peerOnly) Parent(int) (int, string, error) { return 0, "", errors.New("not used") }

func proc(pid int, start uint64) identity.Observed {
	return identity.Observed{PID: pid, StartTime: start, Exe: "/usr/bin/p" + strconv.Itoa(pid)}
}

func TestRequirePerson(t *testing.T) {
	self := os.Getpid()
	const epoch = "01EPOCHOFSRV"
	tests := []struct {
		name   string
		peers  PeerInfo
		agents map[ids.RunID]identity.Observed
		kind   string   // "" = allowed
		want   []string // in the refusal
	}{
		{"the person's terminal", &fakeLineage{chain: []identity.Observed{proc(900, 50), proc(800, 40), proc(1, 1)}}, nil, "", nil},
		{"a server process", &fakeLineage{chain: []identity.Observed{proc(910, 60), proc(self, 10), proc(1, 1)}}, nil,
			refusedSupervised, []string{"process 910", "descends from the Portcullis daemon", `the process tree of server "srv"`, personHint}},
		{"a process that left a server's tree", &fakeLineage{chain: []identity.Observed{proc(920, 70), proc(self, 10), proc(1, 1)}}, nil,
			refusedSupervised, []string{"process 920", "left a supervised server's process tree", personHint}},
		{"a marked process reparented to init", &fakeLineage{chain: []identity.Observed{proc(930, 80), proc(1, 1)}, marks: map[int]string{930: epoch}}, nil,
			refusedMarked, []string{"process 930", `server "srv"`, supervisor.EpochEnv + "=" + epoch, personHint}},
		{"the agent's shell", &fakeLineage{chain: []identity.Observed{proc(940, 90), proc(700, 30), proc(1, 1)}},
			map[ids.RunID]identity.Observed{"run1": proc(700, 30)},
			refusedAgent, []string{"process 940", "descends from the agent of agent run run1", personHint}},
		{"the agent's pid reused by another process", &fakeLineage{chain: []identity.Observed{proc(940, 90), proc(700, 31), proc(1, 1)}},
			map[ids.RunID]identity.Observed{"run1": proc(700, 30)}, "", nil},
		{"the person's user, not at a terminal (a pipe, a detached process)", &fakeLineage{chain: []identity.Observed{proc(950, 50), proc(1, 1)}, noTerminal: true}, nil,
			refusedNoTerminal, []string{"process 950", "does not run at a terminal", "nothing was decided", personHint}},
		{"a terminal that cannot be read", &fakeLineage{chain: []identity.Observed{proc(950, 50), proc(1, 1)}, terminalErr: errors.New("proc: permission denied")}, nil,
			refusedNoTerminal, []string{"cannot tell whether process 950 (/usr/bin/p950) runs at a terminal", "permission denied", personHint}},
		{"an unreadable ancestry", &fakeLineage{err: errors.New("proc: permission denied")}, nil,
			refusedUnverified, []string{"cannot tell which process asks", "permission denied", "nothing was decided", personHint}},
		{"a build without ancestry", peerOnly{}, nil,
			refusedUnverified, []string{"cannot read process ancestry on", personHint}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &Daemon{opts: Options{Peers: tc.peers}, log: slog.New(slog.DiscardHandler),
				children: map[int]child{910: {PID: 910, StartTime: 60, Label: "srv", Epoch: epoch}},
				agents:   tc.agents, labels: map[ids.RunID]string{"run1": "srv"}}
			c1, c2 := net.Pipe()
			defer c1.Close()
			defer c2.Close()
			err := d.requirePersonFor(c1, "approve approval request apr_1", "apr_1")
			if tc.kind == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var np *notPersonError
			if !errors.As(err, &np) || np.kind != tc.kind {
				t.Fatalf("err = %v, want a %s refusal", err, tc.kind)
			}
			for _, w := range append(tc.want, "refused to approve approval request apr_1") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestRequirePersonActionHint: a refused action that is not the decision
// of an approval request (an edit that widens trust, run through a pipe)
// says what happened and the one step that fits it: run the command again
// from a terminal of one's own; not "approve", which there is nothing to.
func TestRequirePersonActionHint(t *testing.T) {
	d := &Daemon{opts: Options{Peers: &fakeLineage{chain: []identity.Observed{proc(950, 50), proc(1, 1)}, noTerminal: true}}, log: slog.New(slog.DiscardHandler)}
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	err := d.requirePerson(c1, "widen trust in the configuration (tool echo of echo: allow)")
	if err == nil {
		t.Fatal("a process not at a terminal widened trust")
	}
	for _, w := range []string{"refused to widen trust in the configuration", "does not run at a terminal", "nothing was changed", "run the same portcullis command yourself, from a terminal of your own"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q lacks %q", err, w)
		}
	}
	for _, w := range []string{"approve", "nothing was decided"} {
		if strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q says %q, which does not fit an edit", err, w)
		}
	}
}
