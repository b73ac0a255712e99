package catalog

import (
	"fmt"
	"os"
	"time"
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// FuzzToolDigest checks that ToolDigest never panics, that the canonical form
// is a fixed point, and that re-encoding the decoded tool keeps the digest.
func FuzzToolDigest(f *testing.F) {
	f.Add([]byte(benchTool))
	f.Add([]byte(`{"name":"t","inputSchema":{},"annotations":{"readOnlyHint":true}}`))
	f.Add([]byte(`{"name":"t","annotations":"weird","x":[1.5e3,-0,"\u2028"]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		tm := time.AfterFunc(2*time.Second, func() { os.WriteFile("/tmp/hang.bin", raw, 0o600); panic(fmt.Sprintf("HANG %q", raw)) })
		defer tm.Stop()
		d, err := ToolDigest(raw)
		if err != nil {
			return
		}
		c, err := Canonical(raw)
		if err != nil {
			t.Fatalf("ToolDigest ok but Canonical: %v", err)
		}
		if d2, err := ToolDigest(c); err != nil || d2 != d {
			t.Fatalf("canonical form digests to %s, %v; want %s", d2, err, d)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("digested bytes do not decode: %v", err)
		}
		re, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if d3, err := ToolDigest(re); err != nil || d3 != d {
			t.Fatalf("re-encoded %s digests to %s, %v; want %s", re, d3, err, d)
		}
	})
}

// FuzzCompare checks, for two versions of a tool, that Compare never panics,
// finds no change between equal digests and at least one classified change
// (never the tool_changed fallback) between different ones, and that every
// change is well formed: known severity, one-line summary, a path that exists
// in the old or the new canonical tool.
func FuzzCompare(f *testing.F) {
	f.Add(`{"type":"object","properties":{"n":{"type":"number","maximum":5}}}`, `{"type":"object","properties":{"n":{"type":"integer","maximum":50}}}`, `{}`, `{"readOnlyHint":true}`)
	f.Add(`{"type":"object","properties":{"t":{"enum":["a"]}},"required":["t"]}`, `{"type":"object","properties":{"t":{"enum":["a","b"],"default":"a"}}}`, `{"title":"x"}`, `null`)
	f.Add(`{"additionalProperties":false,"items":{"minItems":1}}`, `{"additionalProperties":{"type":"string"},"items":[{}]}`, `{}`, `{}`)
	f.Fuzz(func(t *testing.T, s1, s2, a1, a2 string) {
		mk := func(schema, ann string) (Catalog, bool) {
			page := `{"tools":[{"name":"t","inputSchema":` + schema + `,"annotations":` + ann + `}]}`
			ts, err := Parse(raws(page))
			if err != nil {
				return Catalog{}, false
			}
			return Catalog{Revision: 1, Tools: ts}, true
		}
		c1, ok1 := mk(s1, a1)
		c2, ok2 := mk(s2, a2)
		if !ok1 || !ok2 {
			return
		}
		if d := Compare(c1, c1); len(d.Changes) != 0 {
			t.Fatalf("Compare(x, x) = %s", d.Text())
		}
		d := Compare(c1, c2)
		same := c1.Tools[0].Digest == c2.Tools[0].Digest
		if same != (len(d.Changes) == 0) {
			t.Fatalf("digests equal = %v but %d changes:\n%s", same, len(d.Changes), d.Text())
		}
		m1, m2 := decodeAll(c1.Tools)[0], decodeAll(c2.Tools)[0]
		for _, c := range d.Changes {
			if c.Kind == KindToolChanged {
				t.Fatalf("unclassified change between\n%s\n%s", c1.Tools[0].Raw, c2.Tools[0].Raw)
			}
			if c.Severity.rank() == 0 || c.Summary == "" || strings.ContainsAny(c.Summary, "\n\r") {
				t.Fatalf("bad change %+v", c)
			}
			if c.Path != "" && !pointerExists(m1, c.Path) && !pointerExists(m2, c.Path) {
				t.Fatalf("path %q of %s exists in neither tool", c.Path, c.Kind)
			}
		}
		if _, err := json.Marshal(d); err != nil {
			t.Fatalf("diff does not encode: %v", err)
		}
	})
}

// pointerExists resolves an RFC 6901 pointer in a decoded JSON value.
func pointerExists(v any, ptr string) bool {
	if ptr == "" {
		return true
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return false
			}
			v = x[i]
		default:
			return false
		}
	}
	return true
}
