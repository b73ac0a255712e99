package identity_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/identity"
)

// fakeProcs is a hand-written ProcessInfo: a fixed tree and executable contents.
type fakeProcs struct {
	tree  []identity.Observed
	exes  map[int]string
	fails map[int]error
}

var _ identity.ProcessInfo = (*fakeProcs)(nil)

func (f *fakeProcs) Tree(pid int) ([]identity.Observed, error) {
	if len(f.tree) == 0 || f.tree[0].PID != pid {
		return nil, fmt.Errorf("process %d: %w", pid, fs.ErrNotExist)
	}
	return append([]identity.Observed(nil), f.tree...), nil
}

func (f *fakeProcs) OpenExecutable(pid int) (io.ReadCloser, error) {
	if err := f.fails[pid]; err != nil {
		return nil, err
	}
	return io.NopCloser(strings.NewReader(f.exes[pid])), nil
}

func TestObserve(t *testing.T) {
	tree := []identity.Observed{
		{PID: 10, PPID: 1, Exe: "/bin/sh", StartTime: 5},
		{PID: 11, PPID: 10, Exe: "/usr/bin/node", StartTime: 6},
		{PID: 12, PPID: 10, Exe: "/usr/bin/gone", StartTime: 7},
	}
	pi := &fakeProcs{
		tree:  tree,
		exes:  map[int]string{10: "", 11: "abc"},
		fails: map[int]error{12: fmt.Errorf("process 12: %w", fs.ErrNotExist)},
	}
	got, err := identity.Observe(context.Background(), pi, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []identity.Observed{
		{PID: 10, PPID: 1, Exe: "/bin/sh", StartTime: 5, SHA256: "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{PID: 11, PPID: 10, Exe: "/usr/bin/node", StartTime: 6, SHA256: "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{PID: 12, PPID: 10, Exe: "/usr/bin/gone", StartTime: 7},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Observe (-want +got):\n%s", diff)
	}

	denied := errors.New("permission denied")
	pi.fails[11] = denied
	if _, err := identity.Observe(context.Background(), pi, 10); !errors.Is(err, denied) || !strings.Contains(err.Error(), "/usr/bin/node") {
		t.Errorf("read failure: %v", err)
	}
	if _, err := identity.Observe(context.Background(), pi, 99); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing pid: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := identity.Observe(ctx, pi, 10); !errors.Is(err, context.Canceled) {
		t.Errorf("ended ctx: %v", err)
	}
}
