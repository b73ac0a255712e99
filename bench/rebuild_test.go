package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/internal/harness"
)

// rebuildSettle is the daemon's default settle delay (core/daemon
// Options.Settle): how long writes must pause before a build counts.
const rebuildSettle = 300 * time.Millisecond

// rebuildStages are daemon log messages that mark the steps from a build to
// a ready epoch, in order, with the name each stage's figure gets.
var rebuildStages = []struct{ name, msg string }{
	{"settle+measure", `msg="build complete: `},       // watcher settled, identity measured and diffed
	{"launch", `msg="epoch started"`},                 // identity measured again, process started, observed
	{"handshake+tools/list", `msg="catalog revised"`}, // handshake replayed, catalog fetched and stored
}

// BenchmarkRebuildToReady measures the rebuild of a server as a developer
// sees it: the publish test server (testdata/servers/publish) runs under
// `portcullis daemon` with restart on-change, a go-sdk agent is connected
// through `portcullis connect` (protocol 2026-07-28), and each iteration
// replaces the executable the configuration points at with the other
// revision (A ↔ B, so the catalog changes every time) the way `go build`
// installs its output: written next to it, then renamed over it. The time
// runs from that rename (the last write of the artifact) to the agent
// receiving notifications/tools/list_changed, which the gateway sends once
// the new epoch's catalog is stored.
//
// Metrics (medians over the iterations; run with -benchtime=20x for a
// stable figure):
//
//   - ready-ms: rename → list_changed at the agent;
//   - startup-ms: the server's own start-up, exec → first answer to
//     initialize when started directly (measured before the loop);
//   - artifact-hash-ms: one cold SHA-256 of the executable (identity
//     measurement hashes it on every launch while it is racily new);
//   - over-settle-ms: ready-ms − settle (300 ms) − startup-ms, what
//     Portcullis adds (target: under 50 ms);
//   - stage figures from the daemon's log (millisecond timestamps): rename →
//     "build complete" (settle + first identity measurement),
//     → "epoch started" (second measurement, exec, process observation),
//     → "catalog revised" (handshake replay, tools/list, catalog store),
//     → list_changed at the agent;
//   - launch.start-ms and launch.exec-ms, the launch stage's two parts:
//     "build complete" → the supervisor's "server started" (the second
//     identity measurement and the clone), → the daemon's "server started"
//     (the sandbox's launcher exec'd the server, the kernel's view of the
//     executable checked); PORTCULLIS_BENCH_SANDBOX=off|standard|strict
//     sets the server's sandbox, to see the launcher's share;
//   - identified-ms: rename → "epoch identified" (the new epoch's observed
//     identity, which a tools/call waits for; not on list_changed's path).
func BenchmarkRebuildToReady(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := harness.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	pc, err := harness.BuildPortcullis(ctx, root, dir)
	if err != nil {
		b.Fatal(err)
	}
	bins := map[string]string{}
	for _, rev := range []string{"A", "B"} {
		d := filepath.Join(dir, "rev"+rev)
		if bins[rev], err = harness.BuildServer(ctx, root, d, "publish", "-X main.revision="+rev); err != nil {
			b.Fatal(err)
		}
	}
	liveDir := filepath.Join(dir, "live")
	live := filepath.Join(liveDir, "publish")
	if err := os.MkdirAll(liveDir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := installArtifact(bins["A"], live); err != nil {
		b.Fatal(err)
	}

	startup := serverStartup(b, live, 9)
	hash := artifactHash(b, live, 9)

	home, err := harness.NewHome(pc, filepath.Join(dir, "home"))
	if err != nil {
		b.Fatal(err)
	}
	addArgs := []string{"--cwd", liveDir, "--restart", "on-change"}
	if sb := os.Getenv("PORTCULLIS_BENCH_SANDBOX"); sb != "" {
		addArgs = append(addArgs, "--sandbox", sb) // off, standard or strict: the launch's cost apart
	}
	if err := home.AddServer(ctx, "pub", addArgs, live); err != nil {
		b.Fatal(err)
	}
	if err := home.SetToolPolicy("pub", config.PolicyAllow, "publish_preview", "status", "slow_publish", "add_tool"); err != nil {
		b.Fatal(err)
	}
	logs := &harness.SyncBuffer{}
	d, err := home.StartDaemon(ctx, logs)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := d.Stop(30 * time.Second); err != nil {
			b.Error(err)
		}
	}()

	changed := make(chan time.Time, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "rebuild-bench", Version: "1.0.0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- time.Now():
			default: // an extra notification the loop does not wait for
			}
		},
	})
	agent, err := harness.Connect(ctx, client, home.ConnectCommand("pub"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer agent.Close()
	if _, err := agent.Session.ListTools(ctx, nil); err != nil {
		b.Fatal(err)
	}

	var ready []time.Duration
	var epochs []string    // the new epoch of each iteration
	var writes []time.Time // and when its artifact was installed

	var launchStart, launchExec []time.Duration // the launch stage's two parts
	stages := make([][]time.Duration, len(rebuildStages)+1)
	rev := "A"
	for b.Loop() {
		b.StopTimer()
		if rev == "A" {
			rev = "B"
		} else {
			rev = "A"
		}
		logStart := len(logs.String())
		b.StartTimer()
		if err := installArtifact(bins[rev], live); err != nil {
			b.Fatal(err)
		}
		written := time.Now()
		var got time.Time
		select {
		case got = <-changed:
		case <-time.After(30 * time.Second):
			b.Fatalf("no tools/list_changed within 30 s of installing revision %s; daemon log:\n%s", rev, logs.String())
		}
		b.StopTimer()
		ready = append(ready, got.Sub(written))
		prev := written
		for i, at := range stageTimes(logs.String()[logStart:]) {
			if at.IsZero() {
				b.Fatalf("stage %q missing from the daemon log of revision %s:\n%s", rebuildStages[i].name, rev, logs.String()[logStart:])
			}
			stages[i] = append(stages[i], at.Sub(prev))
			prev = at
		}
		stages[len(rebuildStages)] = append(stages[len(rebuildStages)], got.Sub(prev))
		if start, execd := launchTimes(logs.String()[logStart:]); !start.IsZero() && !execd.IsZero() && len(stages[0]) > 0 {
			built := written.Add(stages[0][len(stages[0])-1])
			launchStart = append(launchStart, start.Sub(built))
			launchExec = append(launchExec, execd.Sub(start))
		}
		if ep := attrValues(logs.String()[logStart:], `msg="epoch started"`, "epoch"); len(ep) > 0 {
			epochs = append(epochs, ep[0])
			writes = append(writes, written)
		}
		// The agent refetches, as a real one does after list_changed.
		res, err := agent.Session.ListTools(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := checkRevision(res, rev); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	// The new epoch's identity, which a tools/call waits for and
	// list_changed does not: logged off that path, maybe after the loop
	// looked (and absent from builds before it was logged).
	var identified []time.Duration
	all := logs.String()
	for i, ep := range epochs {
		if at := logTime(all, `msg="epoch identified"`, "epoch="+ep); !at.IsZero() {
			identified = append(identified, at.Sub(writes[i]))
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	r := digestMedian(ready)
	b.ReportMetric(ms(r), "ready-ms")
	b.ReportMetric(ms(startup), "startup-ms")
	b.ReportMetric(ms(hash), "artifact-hash-ms")
	b.ReportMetric(ms(r-rebuildSettle-startup), "over-settle-ms")
	for i, s := range rebuildStages {
		b.ReportMetric(ms(digestMedian(stages[i])), s.name+"-ms")
	}
	b.ReportMetric(ms(digestMedian(stages[len(rebuildStages)])), "notify-ms")
	if len(launchStart) > 0 {
		b.ReportMetric(ms(digestMedian(launchStart)), "launch.start-ms")
		b.ReportMetric(ms(digestMedian(launchExec)), "launch.exec-ms")
	}
	if len(identified) > 0 {
		b.ReportMetric(ms(digestMedian(identified)), "identified-ms")
	}
}

// artifactHash returns the median of n cold digests of path (a fresh
// identity.Measurer each time, so no cache): what one identity measurement
// of the executable costs.
func artifactHash(b *testing.B, path string, n int) time.Duration {
	b.Helper()
	var ds []time.Duration
	for range n {
		start := time.Now()
		if _, err := identity.NewMeasurer(nil).DigestFile(path); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	return digestMedian(ds)
}

// installArtifact puts a copy of src at dst the way `go build -o dst`
// installs its output: a new file in dst's directory, renamed over dst, so
// that a running dst is never written to.
func installArtifact(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".build-*")
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// serverStartup returns the median of n start-ups of the stdio MCP server
// bin run directly: from exec to the first line it answers to an
// initialize request (MCP 2025-06-18, basic/lifecycle).
func serverStartup(b *testing.B, bin string, n int) time.Duration {
	b.Helper()
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"rebuild-bench","version":"1"}}}` + "\n"
	var ds []time.Duration
	for range n {
		cmd := exec.Command(bin)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		if _, err := io.WriteString(stdin, initialize); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		d := time.Since(start)
		stdin.Close()
		_ = cmd.Wait()
		if err != nil || !strings.Contains(line, `"result"`) {
			b.Fatalf("%s answered initialize with %q (%v)", bin, line, err)
		}
		ds = append(ds, d)
	}
	return digestMedian(ds)
}

// stageTimes returns, for each of rebuildStages, the time of the first log
// line after the previous stage's that carries its message; zero when
// missing. Lines are slog text records starting "time=<RFC 3339>".
func stageTimes(log string) []time.Time {
	out := make([]time.Time, len(rebuildStages))
	i := 0
	for _, line := range strings.Split(log, "\n") {
		if i == len(rebuildStages) {
			break
		}
		if !strings.Contains(line, rebuildStages[i].msg) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			out[i] = t
			i++
		}
	}
	return out
}

// launchTimes returns the times of the two "server started" lines of one
// launch in log: the supervisor's, once the process was cloned (its launcher
// started; it names the path), and the daemon's, once the launcher exec'd the
// server and the kernel's view of the executable was checked. Zero when
// missing.
func launchTimes(log string) (start, execd time.Time) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="server started"`) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		if strings.Contains(line, " path=") {
			if start.IsZero() {
				start = t
			}
		} else if !start.IsZero() && execd.IsZero() {
			execd = t
		}
	}
	return start, execd
}

// checkRevision reports an error unless publish_preview in res is the one
// of revision rev (only B has the "target" property).
func checkRevision(res *mcp.ListToolsResult, rev string) error {
	for _, t := range res.Tools {
		if t.Name != "publish_preview" {
			continue
		}
		props, _ := t.InputSchema.(map[string]any)["properties"].(map[string]any)
		if _, hasTarget := props["target"]; hasTarget != (rev == "B") {
			return fmt.Errorf("after installing revision %s the agent lists publish_preview with properties %v", rev, props)
		}
		return nil
	}
	return fmt.Errorf("publish_preview missing after installing revision %s", rev)
}
