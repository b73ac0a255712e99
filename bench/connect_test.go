package bench

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/internal/harness"
)

// connectStages are daemon log messages on the way from an agent's
// `portcullis connect` to its initialize answer, in order, with the name
// each stage's figure gets (the time from the previous mark).
var connectStages = []struct{ name, msg, also string }{
	// The shim started, found the socket, dialed and sent its hello; the
	// daemon accepted, checked the peer and created the run.
	{"shim+accept", `msg="agent run started"`, ""},
	// The identity measured (digests, runtime version) and the process
	// started (fork and exec; the supervisor's own line names the path).
	{"measure+spawn", `msg="server started"`, " path="},
	// The started executable compared with the measurement, the child
	// recorded, the epoch handed to the gateway.
	{"launch", `msg="epoch started"`, ""},
	// initialize forwarded (it waited for the launch at the gate) and
	// answered by the server: mostly the server's own start-up.
	{"initialize", `msg="epoch answered"`, ""},
}

// BenchmarkConnect measures what a connection costs through Portcullis
// against starting the server directly: the echo test server
// (testdata/servers/echo) runs under `portcullis daemon`, and each
// iteration connects a go-sdk client (protocol 2025-06-18) once directly
// and once through `portcullis connect` (a new agent run, which launches
// its own server), measuring from starting the client's command to the
// initialize answer (the SDK's Connect). PORTCULLIS_BENCH_BINARY names a
// portcullis executable to run instead of building this tree's (an older
// build, for a comparison: a front with its portcullis-app beside it, or an
// older single executable).
//
// Metrics (medians): direct-ms, portcullis-ms, over-direct-ms (their
// difference; target ≤ 30 ms); stage figures from the daemon's log
// (millisecond timestamps) — connectStages, then "answer-to-client"
// (initialize answer → the client has it, through the shim), and
// "identified-ms", from the start of the command to the epoch's identity
// (the tree read after the launch settled and after the first answer),
// which tools/call waits for and the handshake does not;
// "daemon-cpu-ms/connect", the daemon's utime+stime over the loop per
// connection.
func BenchmarkConnect(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	logs := &harness.SyncBuffer{}
	e := startEchoDaemon(ctx, b, "home", logs)
	home, d, echo := e.home, e.daemon, e.echo
	defer d.Stop(30 * time.Second) // on a failure; stopped below
	connect := func(cmd *exec.Cmd) (time.Time, time.Time) {
		client := mcp.NewClient(&mcp.Implementation{Name: "connect-bench", Version: "1.0.0"}, nil)
		t0 := time.Now()
		a, err := harness.Connect(ctx, client, cmd, &mcp.ClientSessionOptions{ProtocolVersion: Protocol})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := a.Close(); err != nil {
			b.Fatal(err)
		}
		return t0, t1
	}
	var direct, through []time.Duration
	var starts, answers []time.Time // of each connection through Portcullis
	cpu0, cpuErr := CPUTime(d.PID())
	for b.Loop() {
		t0, t1 := connect(exec.Command(echo))
		direct = append(direct, t1.Sub(t0))
		t0, t1 = connect(home.ConnectCommand("echo"))
		through = append(through, t1.Sub(t0))
		starts, answers = append(starts, t0), append(answers, t1)
	}
	b.StopTimer()
	cpu1, err := CPUTime(d.PID())
	if err == nil && cpuErr == nil {
		// The daemon's own CPU (its servers are processes of their own)
		// per connection, with what the run costs until the client closes.
		b.ReportMetric(float64(cpu1-cpu0)/float64(time.Millisecond)/float64(len(starts)), "daemon-cpu-ms/connect")
	}
	if err := d.Stop(30 * time.Second); err != nil { // every line written
		b.Fatal(err)
	}
	// Each connection is one agent run, in order; its lines are found by
	// its run and epoch (a run's identity may be logged after the next
	// run started).
	log := logs.String()
	runs := attrValues(log, `msg="agent run started"`, "run")
	if len(runs) != len(starts) {
		b.Fatalf("%d agent runs in the daemon log, want %d:\n%s", len(runs), len(starts), log)
	}
	var toClient, identified []time.Duration
	stages := make([][]time.Duration, len(connectStages))
	for i, run := range runs {
		epoch := ""
		if e := attrValues(log, `msg="epoch started"`, "epoch", "run="+run); len(e) == 1 {
			epoch = e[0]
		}
		prev := starts[i]
		for j, s := range connectStages {
			key := "epoch=" + epoch
			if j == 0 {
				key = "run=" + run
			}
			at := logTime(log, s.msg, key, s.also)
			if at.IsZero() || epoch == "" {
				b.Fatalf("stage %q of run %s (epoch %q) missing from the daemon log:\n%s", s.name, run, epoch, log)
			}
			stages[j] = append(stages[j], at.Sub(prev))
			prev = at
		}
		toClient = append(toClient, answers[i].Sub(prev))
		if at := logTime(log, `msg="epoch identified"`, "epoch="+epoch, ""); !at.IsZero() {
			identified = append(identified, at.Sub(starts[i]))
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	dm, pm := digestMedian(direct), digestMedian(through)
	b.ReportMetric(ms(dm), "direct-ms")
	b.ReportMetric(ms(pm), "portcullis-ms")
	b.ReportMetric(ms(pm-dm), "over-direct-ms")
	for i, s := range connectStages {
		b.ReportMetric(ms(digestMedian(stages[i])), s.name+"-ms")
	}
	b.ReportMetric(ms(digestMedian(toClient)), "answer-to-client-ms")
	if len(identified) > 0 {
		b.ReportMetric(ms(digestMedian(identified)), "identified-ms")
	}
}

// logTime returns the time of the first slog text line of log that holds
// msg and each of also (those not empty), zero when none does.
func logTime(log, msg string, also ...string) time.Time {
	for _, line := range strings.Split(log, "\n") {
		if !holds(line, msg, also) {
			continue
		}
		ts, _, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if !ok {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			return t
		}
	}
	return time.Time{}
}

// attrValues returns, for each line of log holding msg and each of also,
// the value of its attribute key, in order.
func attrValues(log, msg, key string, also ...string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if !holds(line, msg, also) {
			continue
		}
		_, rest, ok := strings.Cut(line, " "+key+"=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, " ")
		out = append(out, v)
	}
	return out
}

func holds(line, msg string, also []string) bool {
	if !strings.Contains(line, msg) {
		return false
	}
	for _, a := range also {
		if a != "" && !strings.Contains(line, a) {
			return false
		}
	}
	return true
}
