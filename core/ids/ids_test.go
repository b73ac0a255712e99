package ids

import (
	"encoding/json"
	"testing"
)

func TestShort(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"epoch", EpochID("01JQ7R4S4S0QJ7GZP1S2ABCDEF").Short(), "S2ABCDEF"},
		{"run", RunID("01JQ7R4S4S0QJ7GZP1S2XYZ123").Short(), "S2XYZ123"},
		{"call", CallID("01JQ7R4S4S0QJ7GZP1S2CALL01").Short(), "S2CALL01"},
		{"request", RequestID("apr_01JQ7R4S4S0QJ7GZP1S27Q2M9XKD").Short(), "apr_7Q2M9XKD"},
		{"grant", GrantID("grt_01JQ7R4S4S0QJ7GZP1S27Q2M9XKD").Short(), "grt_7Q2M9XKD"},
		{"short epoch kept whole", EpochID("E1").Short(), "E1"},
		{"eight characters kept whole", RunID("ABCDEFGH").Short(), "ABCDEFGH"},
		{"short request kept whole", RequestID("apr_X").Short(), "apr_X"},
		{"empty", EpochID("").Short(), ""},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: Short() = %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

// TestJSONUnchanged: typed identifiers encode as the strings they were.
func TestJSONUnchanged(t *testing.T) {
	v := struct {
		Epoch   EpochID   `json:"epoch"`
		Run     RunID     `json:"run"`
		Request RequestID `json:"request,omitempty"`
	}{Epoch: "01E", Run: "01R"}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"epoch":"01E","run":"01R"}`; string(b) != want {
		t.Errorf("encoded %s, want %s", b, want)
	}
}

// TestJSONMapKeysUnchanged: a map keyed by a typed identifier (the grants
// in force per run of a decision's reply) encodes as one keyed by strings.
func TestJSONMapKeysUnchanged(t *testing.T) {
	typed, err := json.Marshal(map[RunID][]string{"01R": {"read"}, "01S": nil})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := json.Marshal(map[string][]string{"01R": {"read"}, "01S": nil})
	if err != nil {
		t.Fatal(err)
	}
	if string(typed) != string(plain) {
		t.Errorf("encoded %s, want %s", typed, plain)
	}
}
