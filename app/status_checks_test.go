package app

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
)

// TestStatusShowsHealthChecksApart: `portcullis status` lists health
// checks as a count and the last time per server, not as ended runs.
func TestStatusShowsHealthChecksApart(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 11, 12, 0, time.Local)
	rep := daemon.StatusReport{ConfigFile: "/c/config.json",
		Servers: []daemon.ServerInfo{{Label: "inv", Command: "node"}},
		Ended:   []gateway.Status{{Run: "RUN-CALLED", Label: "inv", State: gateway.StateEnded}},
		Checks: []daemon.CheckSummary{
			{Label: "inv", Count: 19, Last: gateway.Status{Run: "RUN-CHECK", Label: "inv", State: gateway.StateEnded, EndedAt: &at, Agent: gateway.Agent{Exe: "/usr/bin/claude"}}},
			{Label: "fs", Count: 1},
		}}
	var b bytes.Buffer
	writeStatus(&b, rep)
	out := b.String()
	for _, want := range []string{
		"Recently ended:",
		"RUN-CALLED",
		"Health checks (runs that only connected and listed):\n  inv  19 checks, last at 10:11:12 by /usr/bin/claude\n  fs  1 check\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "RUN-CHECK") {
		t.Errorf("status lists the health check's run as a run:\n%s", out)
	}
}
