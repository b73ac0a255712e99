package catalog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestParseInvalidUnicode: a tools/list whose strings are not valid Unicode
// (invalid UTF-8 bytes, lone surrogate escapes) is a catalog all the same,
// with each such byte or escape read as U+FFFD, as encoding/json reads it:
// the digest is that of the repaired tool, and the agent gets the repaired
// bytes, so what it reads is what the digest covers.
func TestParseInvalidUnicode(t *testing.T) {
	bad := "{\"name\":\"lookup\",\"description\":\"Finds \xff\xfe items \\ud800.\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"q\":{\"description\":\"\xc3\"}}}}"
	fixed := "{\"name\":\"lookup\",\"description\":\"Finds \uFFFD\uFFFD items \\ufffd.\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"q\":{\"description\":\"\uFFFD\"}}}}"
	tools, err := Parse(raws(`{"tools":[` + bad + `,{"name":"ok","inputSchema":{}}]}`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	got := tools[0]
	if got.Name != "lookup" || string(got.Raw) != fixed || got.Replaced != 4 || tools[1].Replaced != 0 {
		t.Fatalf("tool %q, Replaced %d, Raw %q; want Raw %q with 4 replacements", got.Name, got.Replaced, got.Raw, fixed)
	}
	// The same tool written with U+FFFD as text has the same digest.
	if want := mustDigest(t, strings.ReplaceAll(fixed, `\ufffd`, "\uFFFD")); got.Digest != want {
		t.Errorf("digest %s, want %s (the tool with U+FFFD written out)", got.Digest, want)
	}
	if d, err := ToolDigest([]byte(bad)); err != nil || d != got.Digest {
		t.Errorf("ToolDigest of the raw tool = %s, %v; want %s", d, err, got.Digest)
	}
	list := Catalog{Tools: tools}.ListResult(nil)
	if !utf8.Valid(list) || !bytes.Contains(list, []byte(fixed)) {
		t.Errorf("tools/list for the agent is not the repaired text: %q", list)
	}
	// A name with an invalid byte reads as U+FFFD too.
	tools, err = Parse(raws("{\"tools\":[{\"name\":\"a\xffb\",\"inputSchema\":{}}]}"))
	if err != nil || tools[0].Name != "a\uFFFDb" {
		t.Fatalf("Parse: %v, name %q", err, tools[0].Name)
	}
	// Two names that differ only in invalid bytes are one name.
	_, err = Parse(raws("{\"tools\":[{\"name\":\"a\xff\",\"inputSchema\":{}},{\"name\":\"a\xfe\",\"inputSchema\":{}}]}"))
	if err == nil || !strings.Contains(err.Error(), ErrDuplicateTool.Error()) {
		t.Errorf("two names differing in invalid bytes: %v, want ErrDuplicateTool", err)
	}
}

// TestStoreInvalidUnicode: the store records such a catalog, says so in its
// log, and reads it back after a restart (the stored bytes are the repaired
// ones, whose digest matches).
func TestStoreInvalidUnicode(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	s, err := OpenStore(dir, WithStoreLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	tools := parseTools(t, "{\"name\":\"t\",\"description\":\"bad \xff\",\"inputSchema\":{}}", `{"name":"u","inputSchema":{}}`)
	cur, changed, err := s.Update("srv", "E1", tools)
	if err != nil || !changed || cur.Revision != 1 {
		t.Fatalf("Update: %v, changed %v, revision %d", err, changed, cur.Revision)
	}
	if out := log.String(); !strings.Contains(out, "not valid Unicode") || !strings.Contains(out, "tools=[t]") || !strings.Contains(out, "replaced=1") {
		t.Errorf("the store's log does not tell of the replacement:\n%s", out)
	}
	s2, err := OpenStore(dir)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	again, ok := s2.Current("srv")
	if !ok || again.Digest != cur.Digest || string(again.Tools[0].Raw) != "{\"name\":\"t\",\"description\":\"bad \uFFFD\",\"inputSchema\":{}}" {
		t.Fatalf("after reopening: %v %+v", ok, again)
	}
	// The server now sends another invalid byte in the same place: the text
	// is the same, so is the revision.
	if _, changed, err := s2.Update("srv", "E2", parseTools(t, "{\"name\":\"t\",\"description\":\"bad \xfe\",\"inputSchema\":{}}", `{"name":"u","inputSchema":{}}`)); err != nil || changed {
		t.Errorf("same text with another invalid byte: changed %v, %v", changed, err)
	}
}
