package catalog

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestValidateDrafts(t *testing.T) {
	cat := mkCat(t, 7,
		// draft-04: boolean exclusiveMaximum, "dependencies".
		tool("d4", `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"n":{"type":"integer","maximum":10,"exclusiveMaximum":true},"a":{},"b":{}},"dependencies":{"a":["b"]},"required":["n"],"additionalProperties":false}`, ""),
		// draft-07 as zod-to-json-schema emits it: format is asserted, if/then.
		tool("d7", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"email":{"type":"string","format":"email"},"kind":{"enum":["user","bot"]},"token":{"type":"string"}},"if":{"properties":{"kind":{"const":"bot"}}},"then":{"required":["token"]},"additionalProperties":false}`, ""),
		// 2020-12: $defs/$ref, prefixItems, dependentRequired.
		tool("d2020", `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"env":{"enum":["preview","production"]}},"properties":{"target":{"$ref":"#/$defs/env"},"pair":{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false},"x":{},"y":{}},"dependentRequired":{"x":["y"]}}`, ""),
		// no $schema: read as 2020-12 (MCP 2025-11-25).
		tool("plain", `{"type":"object","properties":{"pair":{"type":"array","prefixItems":[{"type":"string"}],"items":false}}}`, ""),
	)
	v := NewValidator()
	tests := []struct {
		tool, args string
		problems   []string // substrings, one per expected problem; nil = valid
	}{
		{"d4", `{"n":9}`, nil},
		{"d4", `{"n":10}`, []string{"at '/n'"}},
		{"d4", `{"n":1,"a":1}`, []string{"b"}},
		{"d4", `{"n":1,"zzz":1}`, []string{"zzz"}},
		{"d4", `{}`, []string{"missing property 'n'"}},
		{"d7", `{"email":"dev@example.com","kind":"user"}`, nil},
		{"d7", `{"email":"not an address"}`, []string{"at '/email'"}},
		{"d7", `{"kind":"bot"}`, []string{"token"}},
		{"d2020", `{"target":"preview","pair":["a",1]}`, nil},
		{"d2020", `{"target":"staging"}`, []string{"at '/target'"}},
		{"d2020", `{"pair":["a",1,2]}`, []string{"at '/pair/2'"}},
		{"d2020", `{"x":1}`, []string{"y"}},
		{"plain", `{"pair":["a"]}`, nil},
		{"plain", `{"pair":[1]}`, []string{"at '/pair/0'"}},
		{"plain", `{"pair":["a","b"]}`, []string{"at '/pair/1'"}},
		{"plain", ``, nil},
		{"plain", `null`, nil},
		{"plain", `[]`, []string{"must be a JSON object"}},
		{"plain", `{"pair":`, []string{"not valid JSON"}},
	}
	for _, tc := range tests {
		err := v.Validate(cat, tc.tool, json.RawMessage(tc.args))
		if tc.problems == nil {
			if err != nil {
				t.Errorf("%s %s: %v", tc.tool, tc.args, err)
			}
			continue
		}
		var ae *ArgumentError
		if !errors.As(err, &ae) || !errors.Is(err, ErrInvalidArguments) {
			t.Errorf("%s %s: err = %v, want *ArgumentError", tc.tool, tc.args, err)
			continue
		}
		if ae.Tool != tc.tool || ae.Revision != 7 {
			t.Errorf("%s %s: error names %q revision %d", tc.tool, tc.args, ae.Tool, ae.Revision)
		}
		all := strings.Join(ae.Problems, "\n")
		for _, want := range tc.problems {
			if !strings.Contains(all, want) {
				t.Errorf("%s %s: problems %q do not mention %q", tc.tool, tc.args, ae.Problems, want)
			}
		}
	}
}

func TestValidateErrors(t *testing.T) {
	dir := t.TempDir()
	// A readable local schema: the validator must still not load it.
	if err := os.WriteFile(filepath.Join(dir, "x.json"), []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cat := mkCat(t, 3,
		tool("remote", `{"type":"object","properties":{"a":{"$ref":"https://example.com/schema.json"}}}`, ""),
		tool("file", `{"type":"object","properties":{"a":{"$ref":"file://`+dir+`/x.json"}}}`, ""),
		tool("bad2020", `{"type":"object","properties":{"n":{"maximum":10,"exclusiveMaximum":true}}}`, ""),
		tool("lookahead", `{"type":"object","properties":{"email":{"type":"string","pattern":"^(?!\\.)[a-z.]+$","maxLength":5}}}`, ""),
	)
	v := NewValidator()
	if err := v.Validate(cat, "nope", nil); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("unknown tool err = %v", err)
	}
	for _, name := range []string{"remote", "file", "bad2020"} {
		err := v.Validate(cat, name, json.RawMessage(`{}`))
		var se *SchemaError
		if !errors.As(err, &se) || !errors.Is(err, ErrInvalidSchema) || se.Tool != name || se.Revision != 3 {
			t.Errorf("%s: err = %v, want *SchemaError", name, err)
		}
	}
	// A pattern outside RE2 is not enforced; the other keywords still are.
	if err := v.Validate(cat, "lookahead", json.RawMessage(`{"email":".ab"}`)); err != nil {
		t.Errorf("lookahead pattern enforced: %v", err)
	}
	if err := v.Validate(cat, "lookahead", json.RawMessage(`{"email":"toolong"}`)); !errors.Is(err, ErrInvalidArguments) {
		t.Errorf("maxLength not enforced next to a lookahead pattern: %v", err)
	}
}

func TestValidatorCache(t *testing.T) {
	a := tool("a", `{"type":"object","properties":{"n":{"type":"integer"}}}`, "")
	r1 := mkCat(t, 1, a)
	r2 := mkCat(t, 2, a, tool("b", `{"type":"object","properties":{"n":{"type":"string"}}}`, ""))
	r3 := mkCat(t, 3, tool("a", `{"type":"object","properties":{"n":{"type":"string"}}}`, ""))
	v := NewValidator(WithCacheSize(2))
	steps := []struct {
		cat     Catalog
		tool    string
		args    string
		ok      bool
		entries int
	}{
		{r1, "a", `{"n":1}`, true, 1},
		{r2, "a", `{"n":1}`, true, 1}, // same tool digest: same compiled schema
		{r2, "b", `{"n":"x"}`, true, 2},
		{r3, "a", `{"n":1}`, false, 2}, // new revision's schema applies; oldest entry dropped
		{r3, "a", `{"n":"x"}`, true, 2},
		{r1, "a", `{"n":1}`, true, 2},
	}
	for i, st := range steps {
		err := v.Validate(st.cat, st.tool, json.RawMessage(st.args))
		if (err == nil) != st.ok {
			t.Errorf("step %d: err = %v, want ok=%v", i, err, st.ok)
		}
		v.mu.Lock()
		n := v.lru.Len()
		v.mu.Unlock()
		if n != st.entries {
			t.Errorf("step %d: %d cached schemas, want %d", i, n, st.entries)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	cat := mkCat(b, 1, benchTool)
	v := NewValidator()
	args := json.RawMessage(`{"sku":"ABC-1234","quantity":-3,"warehouse":"osaka","tags":["a","b"]}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Validate(cat, "inventory_adjust", args); err != nil {
			b.Fatal(err)
		}
	}
}

func TestValidateConcurrent(t *testing.T) {
	cat := mkCat(t, 1, benchTool, tool("b", `{"type":"object","properties":{"n":{"maximum":3}}}`, ""))
	v := NewValidator(WithCacheSize(1))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				name, args, ok := "b", `{"n":2}`, true
				if (i+j)%2 == 0 {
					name, args, ok = "inventory_adjust", `{"sku":"bad","quantity":1}`, false
				}
				if err := v.Validate(cat, name, json.RawMessage(args)); (err == nil) != ok {
					t.Errorf("%s %s: %v", name, args, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
