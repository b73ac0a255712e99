//go:build unix

package supervisor

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestRedact(t *testing.T) {
	r := NewRedactor([]Secret{{"short", "abc"}, {"tok", "s3cr3t-value-0123"}, {"outer", "XXs3cr3t-value-0123XX"}, {"empty", ""}})
	tests := []struct{ in, want string }{
		{"token=s3cr3t-value-0123 ok", "token=…(tok) ok"},
		{"s3cr3t-value-0123s3cr3t-value-0123", "…(tok)…(tok)"},
		{"XXs3cr3t-value-0123XX", "…(outer)"},                       // the longer secret wins
		{"abcabc", "…(short)…(short)"},                              // short secrets too
		{"cut at the limit: s3cr3t-va", "cut at the limit: …(tok)"}, // the start of a secret, cut
		{"cut and marked: s3cr3t-value-01…", "cut and marked: …(tok)…"},
		{"ends in s3c", "ends in s3c"}, // under 4 bytes of a longer secret: left
		{"nothing here", "nothing here"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := r.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	var none *Redactor
	if NewRedactor([]Secret{{"empty", ""}}) != nil || none.Redact("abc") != "abc" {
		t.Error("a Redactor without secrets changes text")
	}
}

// TestOutputLogBounds: a flood gets its burst, then the rate, never more
// than the cap per epoch; drops are counted and reported with the next
// line let through.
func TestOutputLogBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	o := newOutputLog(func() time.Time { return now })
	let := 0
	for range 10 * outputBurst {
		if ok, _ := o.admit(); ok {
			let++
		}
	}
	if let != outputBurst {
		t.Fatalf("a flood at one instant let %d lines through, want the burst %d", let, outputBurst)
	}
	now = now.Add(time.Second)
	ok, dropped := o.admit()
	if !ok || dropped != 9*outputBurst {
		t.Fatalf("a second later: admitted %v with %d dropped reported, want true and %d", ok, dropped, 9*outputBurst)
	}
	// Over an hour at the full rate, the epoch's cap holds.
	for range 3600 * outputRate {
		now = now.Add(time.Second / outputRate)
		if ok, _ := o.admit(); ok {
			let++
		}
	}
	if let+1 != outputMax {
		t.Errorf("lines let through over the epoch: %d, want the cap %d", let+1, outputMax)
	}
	total, unreported := o.end()
	if total != 9*outputBurst+3600*outputRate-(outputMax-outputBurst-1) || unreported == 0 {
		t.Errorf("end: %d dropped over the epoch, %d unreported", total, unreported)
	}
}

// TestRedactJSON: a secret in a tool's description, in a member name, in
// an escaped form, or as a number is replaced inside the JSON, which stays
// valid and otherwise byte for byte the same.
func TestRedactJSON(t *testing.T) {
	r := NewRedactor([]Secret{{"tok", "s3cr3t/value<0123>"}, {"pin", "482913"}})
	tests := []struct{ in, want string }{
		{`{"name":"t","description":"token s3cr3t/value<0123> here"}`, `{"name":"t","description":"token …(tok) here"}`},
		{`{"d":"s3cr3t\/value\u003c0123\u003e"}`, `{"d":"…(tok)"}`}, // escaped as the server chose
		{`{"s3cr3t/value<0123>":1}`, `{"…(tok)":1}`},
		{`{"default":482913, "n": 17}`, `{"default":"…(pin)", "n": 17}`},
		{`{ "kept" : [1, 2.5e3, "spacing \"kept\""] }`, `{ "kept" : [1, 2.5e3, "spacing \"kept\""] }`},
		{`not json s3cr3t/value<0123>`, `not json …(tok)`},
	}
	for _, tc := range tests {
		got := r.JSON([]byte(tc.in))
		if string(got) != tc.want {
			t.Errorf("JSON(%s) = %s, want %s", tc.in, got, tc.want)
		}
		if json.Valid([]byte(tc.in)) && !json.Valid(got) {
			t.Errorf("JSON(%s) = %s is no longer JSON", tc.in, got)
		}
	}
	in := []byte(`{"a":"b"}`)
	if got := r.JSON(in); &got[0] != &in[0] {
		t.Error("JSON copied text that holds no secret")
	}
	var none *Redactor
	if got := none.JSON(in); string(got) != string(in) {
		t.Errorf("a nil Redactor changed %s to %s", in, got)
	}
}

// BenchmarkRedactJSON: the cost of redacting one tools/list page of 40
// tools (about 20 KB) that holds no secret, as every page of a server with
// credentials is redacted before the catalog reads it.
func BenchmarkRedactJSON(b *testing.B) {
	r := NewRedactor([]Secret{{"tok", "PCSECRET-7f3a9c-0123456789abcdef01234567"}})
	var tools []map[string]any
	for i := range 40 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("tool_%d", i), "description": strings.Repeat("Reads a file and returns it. ", 12),
			"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string", "default": "/tmp"}, "n": map[string]any{"type": "integer", "default": 10}}}})
	}
	page, _ := json.Marshal(map[string]any{"tools": tools})
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		r.JSON(page)
	}
}
