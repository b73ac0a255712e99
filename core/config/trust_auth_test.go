package config

import "testing"

// TestSplitTrustApprovalAuthentication: lowering
// settings.approvalAuthentication from the configuration file is held,
// raising it applies at once.
func TestSplitTrustApprovalAuthentication(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		held     string // "" = applies at once
	}{
		{AuthAlways, AuthOff, "settings: approvalAuthentication always → off"},
		{AuthAlways, AuthCredentials, "settings: approvalAuthentication always → credentials"},
		{AuthAlways, "", "settings: approvalAuthentication always → (absent: cli)"},
		{AuthAlways, AuthCLI, "settings: approvalAuthentication always → cli"},
		{"", AuthOff, "settings: approvalAuthentication (absent: cli) → off"},
		// The default asks for every decision made with the command: an
		// explicit credentials asks for fewer.
		{"", AuthCredentials, "settings: approvalAuthentication (absent: cli) → credentials"},
		{AuthCLI, AuthCredentials, "settings: approvalAuthentication cli → credentials"},
		{AuthCredentials, AuthOff, "settings: approvalAuthentication credentials → off"},
		{AuthOff, AuthAlways, ""},
		{"", AuthAlways, ""},
		{AuthCredentials, "", ""},
		{AuthCredentials, AuthCLI, ""},
		{AuthCLI, "", ""},
		{"", AuthCLI, ""},
		{AuthOff, "", ""},
	} {
		applied := &Config{Settings: Settings{ApprovalAuthentication: tc.from}}
		edited := &Config{Settings: Settings{ApprovalAuthentication: tc.to}}
		in, held := SplitTrust(applied, edited)
		if tc.held == "" {
			if len(held) != 0 || in.Settings.ApprovalAuthentication != tc.to {
				t.Errorf("%q → %q: held %+v, in force %q; want it applied", tc.from, tc.to, held, in.Settings.ApprovalAuthentication)
			}
			continue
		}
		if len(held) != 1 || held[0].Kind != WidenApprovalAuthentication || held[0].Text != tc.held {
			t.Errorf("%q → %q: held %+v, want %q", tc.from, tc.to, held, tc.held)
		}
		if in.Settings.ApprovalAuthentication != tc.from {
			t.Errorf("%q → %q: in force %q, want %q kept", tc.from, tc.to, in.Settings.ApprovalAuthentication, tc.from)
		}
	}
}
