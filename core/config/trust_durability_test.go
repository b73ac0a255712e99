package config

import (
	"errors"
	"strings"
	"testing"
)

// TestSplitTrustAuditDurability: lowering settings.auditDurability from
// strict by editing the file is held; raising it applies at once.
func TestSplitTrustAuditDurability(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		held     string // "" = applies at once
	}{
		{DurabilityStrict, DurabilityAuthority, "settings: auditDurability strict → authority"},
		{DurabilityStrict, "", "settings: auditDurability strict → authority"},
		{DurabilityAuthority, DurabilityStrict, ""},
		{"", DurabilityStrict, ""},
		{"", DurabilityAuthority, ""},
	} {
		applied := &Config{Settings: Settings{AuditDurability: tc.from}}
		edited := &Config{Settings: Settings{AuditDurability: tc.to}}
		in, held := SplitTrust(applied, edited)
		if tc.held == "" {
			if len(held) != 0 || in.Settings.AuditDurability != tc.to {
				t.Errorf("%q → %q: held %+v, in force %q; want it applied", tc.from, tc.to, held, in.Settings.AuditDurability)
			}
			continue
		}
		if len(held) != 1 || held[0].Kind != WidenAuditDurability || held[0].Text != tc.held {
			t.Errorf("%q → %q: held %+v, want %q", tc.from, tc.to, held, tc.held)
		}
		if in.Settings.AuditDurability != tc.from {
			t.Errorf("%q → %q: in force %q, want %q kept", tc.from, tc.to, in.Settings.AuditDurability, tc.from)
		}
	}
}

// TestAuditDurabilityValues: strict, authority and absent parse; anything
// else is refused naming the setting and the values accepted.
func TestAuditDurabilityValues(t *testing.T) {
	for _, v := range []string{"strict", "authority"} {
		c, err := Parse([]byte(`{"settings":{"auditDurability":"`+v+`"}}`), "config.json")
		if err != nil || c.Settings.AuditDurability != v {
			t.Errorf("auditDurability %q: %+v, %v", v, c, err)
		}
	}
	_, err := Parse([]byte(`{"settings":{"auditDurability":"fast"}}`), "config.json")
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Path != "settings.auditDurability" ||
		!strings.Contains(ve.Problems[0].Reason, `must be "strict" or "authority"`) {
		t.Fatalf("auditDurability fast: %v", err)
	}
}
