package catalog

import (
	"encoding/json"
	"slices"
	"testing"
)

// oneTool parses one tool object.
func oneTool(t *testing.T, raw string) Tool {
	t.Helper()
	ts, err := Parse(raws(`{"tools":[` + raw + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	return ts[0]
}

// TestUnseen: which changes of a tool could make a call do what it does not
// show, for a call formed from the older contract or not. The seed's
// publish_preview: revision A takes branch; B adds target, enum
// preview|production, default preview.
func TestUnseen(t *testing.T) {
	const (
		pubA      = `{"name":"publish_preview","inputSchema":{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"}}}}`
		pubB      = `{"name":"publish_preview","inputSchema":{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"},"target":{"type":"string","enum":["preview","production"],"default":"preview"}}}}`
		pubReq    = `{"name":"publish_preview","inputSchema":{"type":"object","required":["branch","target"],"properties":{"branch":{"type":"string"},"target":{"type":"string"}}}}`
		pubOpt    = `{"name":"publish_preview","inputSchema":{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"},"note":{"type":"string"}}}}`
		pubDesc   = `{"name":"publish_preview","description":"Publishes a branch to production.","inputSchema":{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"}}}}`
		pubDescA  = `{"name":"publish_preview","description":"Publishes a branch to preview.","inputSchema":{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"}}}}`
		pubArgDoc = `{"name":"publish_preview","inputSchema":{"type":"object","required":["branch"],"properties":{"branch":{"type":"string","description":"the branch to delete"}}}}`
		pubDestr  = `{"name":"publish_preview","annotations":{"destructiveHint":true},"inputSchema":{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"}}}}`
		pubSafe   = `{"name":"publish_preview","annotations":{"destructiveHint":false},"inputSchema":{"type":"object","required":["branch"],"properties":{"branch":{"type":"string"}}}}`
		optsA     = `{"name":"t","inputSchema":{"type":"object","properties":{"opts":{"type":"object","properties":{"dry":{"type":"boolean"}}}}}}`
		optsB     = `{"name":"t","inputSchema":{"type":"object","properties":{"opts":{"type":"object","properties":{"dry":{"type":"boolean","default":false}}}}}}`
	)
	tests := []struct {
		name, before, after, args string
		fromOld                   bool
		want                      []string // kinds of the unseen changes
	}{
		{"omitted argument with a new default", pubA, pubB, `{"branch":"main"}`, true, []string{KindPropertyAdded}},
		{"omitted argument with a new default, call formed from the new contract", pubA, pubB, `{"branch":"main"}`, false, []string{KindPropertyAdded}},
		{"new defaulted argument set explicitly", pubA, pubB, `{"branch":"main","target":"preview"}`, false, nil},
		{"new required argument set", pubA, pubReq, `{"branch":"main","target":"x"}`, false, nil},
		{"new optional argument without default, omitted", pubA, pubOpt, `{"branch":"main"}`, true, nil},
		{"tool description reworded, call valid under both", pubDescA, pubDesc, `{"branch":"main"}`, true, []string{KindDescriptionChanged}},
		{"tool description reworded, call formed from the new contract", pubDescA, pubDesc, `{"branch":"main"}`, false, nil},
		{"description of a set argument reworded", pubA, pubArgDoc, `{"branch":"main"}`, true, []string{KindDescriptionChanged}},
		{"destructiveHint now claimed, call valid under both", pubSafe, pubDestr, `{"branch":"main"}`, true, []string{KindAnnotationChanged}},
		{"destructiveHint dropped (looks safer)", pubDestr, pubSafe, `{"branch":"main"}`, true, nil},
		{"nested default inside a set argument", optsA, optsB, `{"opts":{}}`, false, []string{KindDefaultAdded}},
		{"nested default inside an omitted argument", optsA, optsB, `{}`, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := oneTool(t, tc.before)
			changes := CompareTool(&before, oneTool(t, tc.after))
			var got []string
			for _, c := range Unseen(changes, json.RawMessage(tc.args), tc.fromOld) {
				got = append(got, c.Kind)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Unseen = %v, want %v (changes %+v)", got, tc.want, changes)
			}
		})
	}
}

// TestWidening: the authority changes of a granted tool rewritten in place
// are what a grant does not cover; a spelling fix is none.
func TestWidening(t *testing.T) {
	const base = `{"name":"w","description":"Writes a note to the ledger.","annotations":{"destructiveHint":false,"openWorldHint":false},"inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}`
	tests := []struct {
		name, after string
		widens      bool
	}{
		{"a description typo", `{"name":"w","description":"Writes a note to the ledgr.","annotations":{"destructiveHint":false,"openWorldHint":false},"inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}`, false},
		{"a destructive argument with a default", `{"name":"w","description":"Writes a note to the ledger.","annotations":{"destructiveHint":false,"openWorldHint":false},"inputSchema":{"type":"object","properties":{"text":{"type":"string"},"truncate":{"type":"boolean","default":true}}}}`, true},
		{"destructiveHint flipped", `{"name":"w","description":"Writes a note to the ledger.","annotations":{"destructiveHint":true,"openWorldHint":false},"inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}`, true},
		{"openWorldHint flipped", `{"name":"w","description":"Writes a note to the ledger.","annotations":{"destructiveHint":false,"openWorldHint":true},"inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}`, true},
		{"effects described anew", `{"name":"w","description":"Writes a note to the ledger and mails it out.","annotations":{"destructiveHint":false,"openWorldHint":false},"inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}`, true},
		{"an argument removed", `{"name":"w","description":"Writes a note to the ledger.","annotations":{"destructiveHint":false,"openWorldHint":false},"inputSchema":{"type":"object","properties":{}}}`, false},
	}
	before := oneTool(t, base)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			changes := CompareTool(&before, oneTool(t, tc.after))
			if len(changes) == 0 {
				t.Fatal("no change")
			}
			if got := len(Widening(changes)) > 0; got != tc.widens {
				t.Errorf("widens = %v, want %v: %+v", got, tc.widens, changes)
			}
		})
	}
}

func TestTypoEdit(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"recieve", "receive", true},       // two letters swapped
		{"ledgr", "ledger", true},          // a letter left out, next to r
		{"ledger", "ledgr", true},          // the other way round
		{"publishs", "publishes", true},    // e, next to s
		{"ledgger", "ledger", true},        // a doubled letter
		{"wrotes", "writes", true},         // o for i, neighbours
		{"files.", "files", true},          // punctuation
		{"preview", "preveiw", true},       // swapped
		{"production", "prodiction", true}, // u and i are neighbours
		{"remote", "remove", false},        // t and v are far apart: another word
		{"send", "spend", false},           // p beside neither s nor e
		{"moves", "removes", false},        // two letters
		{"create", "delete", false},        // many
		{"same", "same", false},            // no change
		{"lock", "look", false},            // c and o are far apart
	} {
		if got := typoEdit([]rune(tc.a), []rune(tc.b)); got != tc.want {
			t.Errorf("typoEdit(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
