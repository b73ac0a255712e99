//go:build linux

package supervisor_test

import (
	"bufio"
	"context"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/supervisor"
)

// BenchmarkCheckTree is the cost of the tree check that runs before every
// forwarded call carrying authority, for a two-process tree (a shell loop
// and its Python worker) that did not change: a read of the tree from
// /proc, the pipes each process holds, and no digest.
func BenchmarkCheckTree(b *testing.B) {
	py := realPython(b)
	script := b.TempDir() + "/worker.py"
	if err := writeFile(script, worker); err != nil {
		b.Fatal(err)
	}
	o := fast
	o.TreePoll = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := supervisor.Start(ctx, supervisor.Spec{Label: "bench", Command: "/bin/sh",
		Args: []string{"-c", "while :; do " + py + " " + script + "; done"}}, o)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Stop(context.Background())
	if _, err := bufio.NewReader(p.Stdout()).ReadString('\n'); err != nil {
		b.Fatal(err)
	}
	obs, err := p.Settled(ctx)
	if err != nil || len(obs) != 2 {
		b.Fatalf("Settled = %d processes, %v; want 2", len(obs), err)
	}
	p.Arm()
	for b.Loop() {
		ch, err := p.CheckTree(ctx)
		if err != nil || ch != nil {
			b.Fatalf("CheckTree = %+v, %v", ch, err)
		}
	}
}
