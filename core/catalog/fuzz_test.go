package catalog

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

// FuzzToolDigest checks that ToolDigest never panics, that the canonical form
// is a fixed point, and that re-encoding the decoded tool keeps the digest.
func FuzzToolDigest(f *testing.F) {
	f.Add([]byte(benchTool))
	f.Add([]byte(`{"name":"t","inputSchema":{},"annotations":{"readOnlyHint":true}}`))
	f.Add([]byte(`{"name":"t","annotations":"weird","x":[1.5e3,-0,"\u2028"]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := ToolDigest(raw)
		if err != nil {
			return
		}
		c, err := Canonical(raw)
		if err != nil {
			t.Fatalf("ToolDigest ok but Canonical: %v", err)
		}
		if again, err := jcs.Transform(c); err != nil || !bytes.Equal(again, c) {
			t.Fatalf("Canonical output %s is not RFC 8785 canonical (%s, %v)", c, again, err)
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
		checkCompare(t, s1, s2, a1, a2)
	})
}

// checkCompare compares a tool with inputSchema s1 and annotations a1 against
// the same tool with s2 and a2 (inputs that do not parse are skipped).
func checkCompare(t *testing.T, s1, s2, a1, a2 string) {
	t.Helper()
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
		t.Fatalf("digests equal = %v but %d changes:\n%s\n%s\n%s", same, len(d.Changes), d.Text(), c1.Tools[0].Raw, c2.Tools[0].Raw)
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
			t.Fatalf("path %q of %s exists in neither tool:\n%s\n%s", c.Path, c.Kind, c1.Tools[0].Raw, c2.Tools[0].Raw)
		}
	}
	if _, err := json.Marshal(d); err != nil {
		t.Fatalf("diff does not encode: %v", err)
	}
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

// schemaGen builds random JSON Schemas from a small vocabulary so that two
// versions often differ in one keyword.
type schemaGen struct{ r *rand.Rand }

func (g schemaGen) pick(vs ...any) any { return vs[g.r.IntN(len(vs))] }

func (g schemaGen) value(key string, depth int) any {
	num := func() any { return json.Number(g.pick("0", "1", "2", "4", "-3", "10", "2.5").(string)) }
	switch key {
	case "type":
		return g.pick("string", "number", "integer", "object", "array", "boolean", []any{"string", "null"}, []any{"number", "integer"}, []any{"integer", "number"}, 7)
	case "enum":
		return g.pick([]any{"a"}, []any{"a", "b"}, []any{"b", "a"}, []any{json.Number("1"), "a"}, []any{}, "x")
	case "const", "default":
		return g.pick("a", "b", json.Number("1"), true, nil, map[string]any{"k": "v"})
	case "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "multipleOf", "minProperties", "maxProperties":
		return g.pick(num(), num(), "5")
	case "exclusiveMinimum", "exclusiveMaximum":
		return g.pick(true, false, num())
	case "uniqueItems", "deprecated":
		return g.pick(true, false)
	case "pattern":
		return g.pick("^a", "^b$", "(?=x)")
	case "additionalProperties":
		return g.pick(true, false, g.schema(depth+1), g.schema(depth+1))
	case "items":
		return g.pick(g.schema(depth+1), g.schema(depth+1), []any{g.schema(depth + 1)}, true)
	case "properties":
		props := map[string]any{}
		for _, n := range []string{"a", "b", "c/d"} {
			if g.r.IntN(2) == 0 {
				props[n] = g.schema(depth + 1)
			}
		}
		return g.pick(props, props, props, "bad")
	case "required":
		var req []any
		for _, n := range []string{"a", "b", "c/d", "z"} {
			if g.r.IntN(2) == 0 {
				req = append(req, n)
			}
		}
		g.r.Shuffle(len(req), func(i, j int) { req[i], req[j] = req[j], req[i] })
		return g.pick(req, req, []any{json.Number("1")})
	case "description", "title":
		return g.pick("Reads a file", "Reads  a file", "Deletes a file", json.Number("3"))
	case "anyOf":
		return []any{g.schema(depth + 1)}
	case "format":
		return g.pick("uri", "email")
	case "examples":
		return []any{g.pick("x", "y")}
	}
	return nil
}

var genKeys = []string{"type", "enum", "const", "default", "minimum", "maximum", "exclusiveMinimum",
	"exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems", "multipleOf", "uniqueItems",
	"pattern", "additionalProperties", "items", "properties", "required", "description", "title",
	"anyOf", "format", "examples", "deprecated", "minProperties", "maxProperties"}

func (g schemaGen) schema(depth int) any {
	if depth > 0 && g.r.IntN(8) == 0 {
		return g.pick(true, false)
	}
	s := map[string]any{}
	n := g.r.IntN(4)
	if depth > 2 {
		n = g.r.IntN(2)
	}
	for range n {
		k := genKeys[g.r.IntN(len(genKeys))]
		if depth > 2 && (k == "properties" || k == "items" || k == "additionalProperties" || k == "anyOf") {
			continue
		}
		s[k] = g.value(k, depth)
	}
	return s
}

// mutate returns a deep copy of s with one random edit somewhere.
func (g schemaGen) mutate(s any, depth int) any {
	m, ok := s.(map[string]any)
	if !ok {
		return g.schema(depth)
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	var nested []string
	for _, k := range []string{"properties", "items", "additionalProperties"} {
		if _, ok := out[k]; ok {
			nested = append(nested, k)
		}
	}
	if len(nested) > 0 && g.r.IntN(2) == 0 {
		k := nested[g.r.IntN(len(nested))]
		if props, ok := out[k].(map[string]any); ok && k == "properties" {
			cp := map[string]any{}
			for pk, pv := range props {
				cp[pk] = pv
			}
			for pk := range cp {
				cp[pk] = g.mutate(cp[pk], depth+1)
				break
			}
			out[k] = cp
		} else {
			out[k] = g.mutate(out[k], depth+1)
		}
		return out
	}
	k := genKeys[g.r.IntN(len(genKeys))]
	if _, ok := out[k]; ok && g.r.IntN(2) == 0 {
		delete(out, k)
	} else {
		out[k] = g.value(k, depth)
	}
	return out
}

// TestCompareRandomSchemas is a bounded property test of Compare over random
// schema edits and annotation flips: the same invariants as FuzzCompare.
func TestCompareRandomSchemas(t *testing.T) {
	g := schemaGen{rand.New(rand.NewPCG(1, 2))}
	anns := []string{`null`, `{}`, `{"readOnlyHint":true}`, `{"destructiveHint":false,"title":"x"}`, `{"openWorldHint":false,"x":1}`}
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		s1 := g.schema(0)
		s2 := g.mutate(s1, 0)
		if i%3 == 0 {
			s2 = g.mutate(s2, 0)
		}
		b1, _ := json.Marshal(s1)
		b2, _ := json.Marshal(s2)
		checkCompare(t, string(b1), string(b2), anns[i%len(anns)], anns[(i/5)%len(anns)])
		if t.Failed() {
			return
		}
	}
}
