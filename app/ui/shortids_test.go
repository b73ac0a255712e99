package ui

import (
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/ids"
)

// TestEpochAbbreviatedAlike: the tray menu and the audit viewer show the
// same characters of an epoch and of a run (ids' Short), as the CLI does.
func TestEpochAbbreviatedAlike(t *testing.T) {
	const epoch, runID = "01JQ7R4S4S0QJ7GZP1S2X7K9QM", "01JQ7R4S4S0QJ7GZP1S2RUN042"
	want := ids.EpochID(epoch).Short()
	if want != "S2X7K9QM" {
		t.Fatalf("EpochID.Short() = %q", want)
	}
	if line := runLine(run(runID, "inv", gateway.StateReady, epoch, 3), false, false); !strings.Contains(line, "epoch "+want+" ") {
		t.Errorf("tray line %q does not show epoch %s", line, want)
	}
	call := audit.Call{AgentRun: runID, Epoch: epoch}
	texts := map[string]string{}
	for _, c := range callColumns {
		if c.title == "Epoch" || c.title == "Agent run" {
			texts[c.title] = c.text(nil, call)
		}
	}
	if texts["Epoch"] != want || texts["Agent run"] != "S2RUN042" {
		t.Errorf("audit viewer shows epoch %q and run %q, want %q and S2RUN042", texts["Epoch"], texts["Agent run"], want)
	}
	if len(sampleShort) != ids.ShortLen {
		t.Errorf("the audit viewer sizes its ID columns for %d characters, Short gives %d", len(sampleShort), ids.ShortLen)
	}
	for _, c := range sessionColumns {
		if c.title == "Agent run" {
			if got := c.text(nil, audit.Session{AgentRun: runID}); got != "S2RUN042" {
				t.Errorf("audit viewer's sessions show run %q, want S2RUN042", got)
			}
		}
	}
}
