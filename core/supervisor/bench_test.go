//go:build linux

package supervisor_test

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
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
	loopChecks(b, p, ctx)
}

// loopChecks runs the benchmark's checks of p's unchanged tree and
// reports the share the quick check answered (quick/op: it depends on
// how often anything on the machine forks, so a busy machine reads the
// whole tree more often).
func loopChecks(b *testing.B, p *supervisor.Process, ctx context.Context) {
	b.Helper()
	q0 := supervisor.QuickChecks(p)
	var r0, r1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	for b.Loop() {
		ch, err := p.CheckTree(ctx)
		if err != nil || ch != nil {
			b.Fatalf("CheckTree = %+v, %v", ch, err)
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	cpu := time.Duration(r1.Utime.Nano()+r1.Stime.Nano()-r0.Utime.Nano()-r0.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(supervisor.QuickChecks(p)-q0)/float64(b.N), "quick/op")
	// This process's CPU time (utime+stime, all threads) per check: less
	// disturbed by a loaded machine than the wall time of ns/op.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

// nodeServer is a node server with the children such servers have: a
// worker that shares the server's stdio (spawned with stdio "inherit", as
// a watcher's worker is), a worker with pipes of its own (stdio "pipe", as
// an esbuild or tsc service is) and a helper with no stdio ("ignore").
const nodeServer = `const { spawn } = require("child_process");
const idle = ["-e", "setInterval(() => {}, 1 << 30)"];
const kids = [
  spawn(process.execPath, idle, { stdio: "inherit" }),
  spawn(process.execPath, idle, { stdio: "pipe" }),
  spawn("/bin/sleep", ["600"], { stdio: "ignore" }),
];
let up = 0;
for (const k of kids) k.on("spawn", () => { if (++up === kids.length) console.log("ready"); });
process.stdin.on("end", () => { for (const k of kids) k.kill(); process.exit(0); });
process.stdin.resume();
`

// BenchmarkCheckTreeNode is the tree check before a call carrying
// authority for a realistic node server: the server and three children
// (one holding the server's stdio, one with pipes of its own, one with
// none), unchanged since the epoch was recorded. Each check reads the four
// processes from /proc (stat, exe, cmdline), reuses what it knew of
// processes that did not exec, and hashes nothing.
func BenchmarkCheckTreeNode(b *testing.B) { benchNodeTree(b, false) }

// BenchmarkCheckTreeNodeFull is BenchmarkCheckTreeNode with the kernel's
// fork counter moving before every check: each one reads the whole tree
// (every thread's children, the daemon's main thread's children for
// orphans), as on a machine where something forks between two checks.
func BenchmarkCheckTreeNodeFull(b *testing.B) { benchNodeTree(b, true) }

func benchNodeTree(b *testing.B, full bool) {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skip("no node")
	}
	script := filepath.Join(b.TempDir(), "server.js")
	if err := writeFile(script, nodeServer); err != nil {
		b.Fatal(err)
	}
	o := fast
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := supervisor.Start(ctx, supervisor.Spec{Label: "bench", Command: node, Args: []string{script}}, o)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Stop(context.Background())
	if line, err := bufio.NewReader(p.Stdout()).ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("server said %q, %v", line, err)
	}
	if _, err := p.Settled(ctx); err != nil {
		b.Fatal(err)
	}
	// The launch may have settled before the children started; before
	// Arm, a check records them as the launch epoch's tree.
	if ch, err := p.CheckTree(ctx); err != nil || ch != nil {
		b.Fatalf("CheckTree before Arm = %+v, %v", ch, err)
	}
	if obs := p.Observed(); len(obs) != 4 {
		b.Fatalf("Observed = %+v; want 4 processes", obs)
	}
	p.Arm()
	if full {
		// Every check finds the counter moved, as after a fork anywhere
		// on the machine: the whole tree is read each time.
		var n atomic.Uint64
		supervisor.SetForkCounter(p, func() (uint64, bool) { return n.Add(1), true })
	}
	loopChecks(b, p, ctx)
}
