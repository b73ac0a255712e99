package daemon

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/config"
)

// TestConfigChanges: what the config_changed audit event says of a change.
func TestConfigChanges(t *testing.T) {
	old := &config.Config{
		Servers: map[string]config.Server{
			"pub":  {Command: "/bin/pub", Tools: map[string]config.ToolPolicy{"publish": {Policy: config.PolicyApprove}, "status": {Policy: config.PolicyAllow}}},
			"gone": {Command: "/bin/gone"},
			"inv":  {Command: "/bin/inv", Credentials: []string{"tok"}, Env: map[string]string{"LOG": "1", "KEY": "sk-OLDSECRET"}},
		},
		Credentials: map[string]config.Credential{"tok": {Inject: config.InjectEnv, EnvVar: "TOKEN"}},
	}
	cur := &config.Config{
		Servers: map[string]config.Server{
			"pub": {Command: "/bin/pub", Tools: map[string]config.ToolPolicy{"publish": {Policy: config.PolicyAllow}, "delete": {Policy: config.PolicyDeny}}},
			"inv": {Command: "/bin/inv", Args: []string{"--token=sk-ARGSECRET"}, Env: map[string]string{"LOG": "1", "KEY": "sk-NEWSECRET"}, Cwd: "/srv", Restart: config.RestartManual},
			"new": {Command: "/bin/new", Args: []string{"sk-NEWARG"}, Tools: map[string]config.ToolPolicy{"x": {Policy: config.PolicyAllow}}},
		},
		Credentials: map[string]config.Credential{"tok": {Inject: config.InjectEnv, EnvVar: "TOKEN", AskEveryUse: true}},
		Settings:    config.Settings{ApprovalTimeout: config.Duration(90e9), AuditSigning: new(false)},
	}
	want := []string{
		"gone: server removed",
		"inv: arguments changed",
		"inv: environment changed (KEY)",
		"inv: working directory (none) → /srv",
		"inv: restart on-change → manual",
		"inv: credentials [tok] → []",
		"new: server added (/bin/new)",
		"new: tool x allow",
		"pub: tool delete approve → deny",
		"pub: tool publish approve → allow",
		"pub: tool status allow → approve",
		"credential tok: env $TOKEN → env $TOKEN, asked on every use",
		"settings: approval timeout 2m0s, hold timeout 30s, max message 33554432 bytes → approval timeout 1m30s, hold timeout 30s, max message 33554432 bytes",
		"settings: auditSigning true → false",
	}
	if diff := cmp.Diff(want, configChanges(old, cur)); diff != "" {
		t.Errorf("configChanges (-want +got):\n%s", diff)
	}
	for _, c := range configChanges(old, cur) {
		if strings.Contains(c, "sk-") {
			t.Errorf("a change quotes a value that may be a secret: %q", c)
		}
	}
	if got := configChanges(cur, cur); len(got) != 0 {
		t.Errorf("configChanges of an unchanged configuration: %q", got)
	}
}
