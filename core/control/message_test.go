package control

import "testing"

// TestMessageCarriesWhatTheModelNeeds: error.message is all Claude Code
// passes to the model, so it holds the problems, the current shape of the
// arguments and the next step, in that order; data keeps the structure.
func TestMessageCarriesWhatTheModelNeeds(t *testing.T) {
	r := &Refusal{
		Error:    InvalidArguments,
		Reason:   `the arguments do not fit the inputSchema of "publish" in catalog revision 3`,
		Problems: []string{"at '': missing property 'reason'", "at '/target': value must be one of 'preview', 'production'"},
		Arguments: &ArgumentShape{Tool: "publish", Required: []string{"branch", "reason"}, Properties: []PropertyShape{
			{Name: "branch", Type: "string", Required: true},
			{Name: "reason", Type: "string", Required: true},
			{Name: "target", Type: "string", Enum: []string{`"preview"`, `"production"`}, Default: `"preview"`},
			{Name: "mode", Enum: []string{`"fast"`}},
		}, Omitted: 2},
		Retry: "fix the arguments to fit the current arguments given here, then call again",
	}
	want := `invalid_arguments: the arguments do not fit the inputSchema of "publish" in catalog revision 3 ` +
		`(at '': missing property 'reason'; at '/target': value must be one of 'preview', 'production'); ` +
		`current arguments of "publish": branch (string, required), reason (string, required), ` +
		`target (string, one of "preview"|"production", default "preview"), mode (must be "fast"), and 2 other optional properties; ` +
		`fix the arguments to fit the current arguments given here, then call again`
	if got := r.Message(); got != want {
		t.Errorf("Message()\n got %s\nwant %s", got, want)
	}
	none := &ArgumentShape{Tool: "ping"}
	if got := none.String(); got != `current arguments of "ping": none required` {
		t.Errorf("empty shape: %q", got)
	}
}
