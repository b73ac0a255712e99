package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gowebpki/jcs"
)

func raws(ss ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(ss))
	for i, s := range ss {
		out[i] = json.RawMessage(s)
	}
	return out
}

func TestParsePagination(t *testing.T) {
	pages := raws(
		`{"tools":[{"name":"a","inputSchema":{"type":"object"}},{"name":"b","inputSchema":{"type":"object"},"x-extra":1}],"nextCursor":"c1"}`,
		`{"tools":[],"nextCursor":"c2"}`,
		`{"tools":[{"name":"c","inputSchema":{"type":"object"}}]}`,
	)
	tools, err := Parse(pages)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
		if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(tl.Digest) {
			t.Errorf("%s: digest %q", tl.Name, tl.Digest)
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if got, want := string(tools[1].Raw), `{"name":"b","inputSchema":{"type":"object"},"x-extra":1}`; got != want {
		t.Errorf("raw = %s, want %s", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		pages []string
		want  error
		page  int
		index int
		tool  string
	}{
		{"page not object", []string{`[]`}, ErrMalformed, 0, -1, ""},
		{"no tools", []string{`{"nextCursor":"x"}`}, ErrMalformed, 0, -1, ""},
		{"tool not object", []string{`{"tools":[3]}`}, ErrMalformed, 0, 0, ""},
		{"missing name", []string{`{"tools":[{"inputSchema":{"type":"object"}}]}`}, ErrMissingName, 0, 0, ""},
		{"empty name", []string{`{"tools":[{"name":"","inputSchema":{}}]}`}, ErrMissingName, 0, 0, ""},
		{"name not string", []string{`{"tools":[{"name":5,"inputSchema":{}}]}`}, ErrMissingName, 0, 0, ""},
		{"no inputSchema", []string{`{"tools":[{"name":"a"}]}`}, ErrBadInputSchema, 0, 0, "a"},
		{"inputSchema array", []string{`{"tools":[{"name":"a","inputSchema":[]}]}`}, ErrBadInputSchema, 0, 0, "a"},
		{"inputSchema true", []string{`{"tools":[{"name":"a","inputSchema":true}]}`}, ErrBadInputSchema, 0, 0, "a"},
		{"duplicate across pages", []string{`{"tools":[{"name":"a","inputSchema":{}}]}`, `{"tools":[{"name":"b","inputSchema":{}},{"name":"a","inputSchema":{}}]}`}, ErrDuplicateTool, 1, 1, "a"},
		{"duplicate key in tool", []string{`{"tools":[{"name":"a","description":"x","description":"y","inputSchema":{}}]}`}, ErrMalformed, 0, 0, "a"},
		{"duplicate key nested", []string{`{"tools":[{"name":"a","inputSchema":{"type":"object","type":"string"}}]}`}, ErrMalformed, 0, 0, "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var pages []json.RawMessage
			for _, p := range tc.pages {
				pages = append(pages, json.RawMessage(p))
			}
			_, err := Parse(pages)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err %T is not *ParseError", err)
			}
			if pe.Page != tc.page || pe.Index != tc.index || pe.Tool != tc.tool {
				t.Errorf("at page %d index %d tool %q, want %d %d %q", pe.Page, pe.Index, pe.Tool, tc.page, tc.index, tc.tool)
			}
			if tc.tool != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.tool)) {
				t.Errorf("message %q does not name the tool", err)
			}
		})
	}
}

func mustDigest(t testing.TB, s string) string {
	t.Helper()
	d, err := ToolDigest(json.RawMessage(s))
	if err != nil {
		t.Fatalf("ToolDigest(%s): %v", s, err)
	}
	return d
}

func TestToolDigestEquivalence(t *testing.T) {
	base := `{"name":"t","inputSchema":{"type":"object"}}`
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{"whitespace and key order", base, "{ \"inputSchema\" : {\"type\":\"object\"},\n \"name\":\"t\" }", true},
		{"number spelling", `{"name":"t","inputSchema":{"maximum":100}}`, `{"name":"t","inputSchema":{"maximum":1.0e2}}`, true},
		{"string escapes", `{"name":"t","description":"é","inputSchema":{}}`, `{"name":"t","description":"\u00e9","inputSchema":{}}`, true},
		{"absent annotations = spec defaults", base, `{"name":"t","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":false,"destructiveHint":true,"idempotentHint":false,"openWorldHint":true}}`, true},
		{"null annotations = absent", base, `{"name":"t","inputSchema":{"type":"object"},"annotations":null}`, true},
		{"absent readOnlyHint = false", `{"name":"t","inputSchema":{},"annotations":{"title":"T"}}`, `{"name":"t","inputSchema":{},"annotations":{"title":"T","readOnlyHint":false}}`, true},
		{"readOnlyHint true differs", base, `{"name":"t","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`, false},
		{"destructiveHint false differs", base, `{"name":"t","inputSchema":{"type":"object"},"annotations":{"destructiveHint":false}}`, false},
		{"unknown top-level field counts", base, `{"name":"t","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}}`, false},
		{"_meta counts", base, `{"name":"t","inputSchema":{"type":"object"},"_meta":{"k":1}}`, false},
		{"icons count", base, `{"name":"t","inputSchema":{"type":"object"},"icons":[{"src":"data:,"}]}`, false},
		{"outputSchema counts", base, `{"name":"t","inputSchema":{"type":"object"},"outputSchema":{"type":"object"}}`, false},
		{"empty vs absent description differ", base, `{"name":"t","description":"","inputSchema":{"type":"object"}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := mustDigest(t, tc.a), mustDigest(t, tc.b)
			if (a == b) != tc.same {
				t.Errorf("digests equal = %v, want %v", a == b, tc.same)
			}
		})
	}
}

func TestToolDigestKnownValue(t *testing.T) {
	// The canonical form is part of the stored format: pin it.
	c, err := Canonical(json.RawMessage(`{"name":"t","inputSchema":{"type":"object","properties":{"b":{},"a":{}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"annotations":{"destructiveHint":true,"idempotentHint":false,"openWorldHint":true,"readOnlyHint":false},"inputSchema":{"properties":{"a":{},"b":{}},"type":"object"},"name":"t"}`
	if string(c) != want {
		t.Errorf("canonical =\n%s\nwant\n%s", c, want)
	}
}

func TestCanonicalIsRFC8785(t *testing.T) {
	// Keys from RFC 8785 §3.2.3's sorting example, at the top level and in
	// annotations, plus control characters in names, so the spliced
	// annotations must sort and escape exactly as the RFC says.
	keys := `"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7,"a\u0001\"\\b":8`
	for _, raw := range []string{
		`{"name":"t","inputSchema":{},` + keys + `}`,
		`{"name":"t","inputSchema":{},"annotations":{` + keys + `,"readOnlyHint":true}}`,
		`{"name":"t","inputSchema":{},"annotations":{"z":"<&>"},"~":"\u2028"}`,
	} {
		c, err := Canonical(json.RawMessage(raw))
		if err != nil {
			t.Fatalf("Canonical(%s): %v", raw, err)
		}
		again, err := jcs.Transform(c)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(c) {
			t.Errorf("Canonical(%s) =\n%s\nnot canonical; RFC 8785 form:\n%s", raw, c, again)
		}
	}
}

func TestToolDigestRejects(t *testing.T) {
	for _, s := range []string{`[]`, `"x"`, `{"a":1,"a":2}`, "{\"a\xff\":1,\"a\xfe\":2}", `{"a":1e999}`, `{`, "{\"a\":\"\xff\"} x"} {
		if _, err := ToolDigest(json.RawMessage(s)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ToolDigest(%q) err = %v, want ErrMalformed", s, err)
		}
	}
}

func TestListResultPreservesBytes(t *testing.T) {
	a := `{ "name" : "a", "inputSchema":{"type":"object"}, "x-vendor": {"keep": [1, 2.50, "\u00e9"]} }`
	b := `{"name":"b","inputSchema":{},"execution":{"taskSupport":"optional"}}`
	c := `{"name":"c","inputSchema":{}}`
	tools, err := Parse(raws(`{"tools":[` + a + `,` + b + `,` + c + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	cat := Catalog{Revision: 1, Tools: tools}
	tests := []struct {
		name   string
		filter func(string) bool
		want   string
	}{
		{"all", nil, `{"tools":[` + a + `,` + b + `,` + c + `]}`},
		{"deny b", func(n string) bool { return n != "b" }, `{"tools":[` + a + `,` + c + `]}`},
		{"deny all", func(string) bool { return false }, `{"tools":[]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := cat.ListResult(tc.filter)
			if string(got) != tc.want {
				t.Errorf("ListResult =\n%s\nwant\n%s", got, tc.want)
			}
			if !json.Valid(got) {
				t.Error("not valid JSON")
			}
		})
	}
}

func TestLookup(t *testing.T) {
	tools, err := Parse(raws(`{"tools":[{"name":"a","inputSchema":{}},{"name":"b","inputSchema":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c := Catalog{Tools: tools}
	if got, ok := c.Lookup("b"); !ok || got.Name != "b" {
		t.Errorf("Lookup(b) = %v, %v", got, ok)
	}
	if _, ok := c.Lookup("z"); ok {
		t.Error("Lookup(z) found a tool")
	}
}

func TestCatalogDigestOrderIndependent(t *testing.T) {
	tools, err := Parse(raws(`{"tools":[{"name":"a","inputSchema":{}},{"name":"b","inputSchema":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rev := []Tool{tools[1], tools[0]}
	if CatalogDigest(tools) != CatalogDigest(rev) {
		t.Error("catalog digest depends on order")
	}
	if CatalogDigest(tools) == CatalogDigest(tools[:1]) {
		t.Error("catalog digest ignores a tool")
	}
}

// benchTool is a tool of realistic size (a zod-generated schema of a few
// arguments with descriptions).
const benchTool = `{"name":"inventory_adjust","title":"Adjust inventory","description":"Adjust the stock level of an item in the inventory. Use a negative quantity to remove stock. Returns the new level.","inputSchema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"sku":{"type":"string","description":"Stock keeping unit","pattern":"^[A-Z]{3}-[0-9]{4}$"},"quantity":{"type":"integer","minimum":-1000,"maximum":1000,"description":"Units to add (negative to remove)"},"warehouse":{"type":"string","enum":["berlin","lisbon","osaka"],"default":"berlin"},"reason":{"type":"string","maxLength":200},"tags":{"type":"array","items":{"type":"string"},"maxItems":10}},"required":["sku","quantity"],"additionalProperties":false},"outputSchema":{"type":"object","properties":{"level":{"type":"integer"}},"required":["level"]},"annotations":{"title":"Adjust inventory","readOnlyHint":false,"destructiveHint":false,"idempotentHint":false}}`

func BenchmarkToolDigest(b *testing.B) {
	raw := json.RawMessage(benchTool)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ToolDigest(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCatalogJSON(t *testing.T) {
	c := mkCat(t, 4, tool("a", `{"type":"object"}`, `,"x-vendor":true`))
	c.Epoch = "01JQ7R4S4S0QJ7GZP1S2"
	c.FetchedAt = t0
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"label":"srv","revision":4,"digest":"` + c.Digest + `","tools":[{"name":"a","digest":"` + c.Tools[0].Digest +
		`","tool":{"name":"a","inputSchema":{"type":"object"},"x-vendor":true}}],"fetchedAt":"2026-03-01T12:00:00Z","epoch":"01JQ7R4S4S0QJ7GZP1S2"}`
	if string(b) != want {
		t.Errorf("JSON =\n%s\nwant\n%s", b, want)
	}
}
