package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzParse checks that Parse never panics, that its errors are typed and located
// inside the input, that it agrees with encoding/json about well-formedness, and
// that whatever it accepts is valid and survives Marshal → Parse unchanged. Seeds are
// in testdata/fuzz/FuzzParse and below.
func FuzzParse(f *testing.F) {
	design, err := os.ReadFile("testdata/design-example.json")
	if err != nil {
		f.Fatal(err)
	}
	full, err := Marshal(fullConfig())
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][]byte{design, full, []byte(`{}`), []byte("\ufeff{\"mcpServers\":{}}"), []byte(`{"mcpServers":{"a":{"command":"x","comand":1}}}`)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.json")
		body := bytes.TrimPrefix(data, utf8BOM)
		lines := bytes.Count(body, []byte{'\n'}) + 1
		var se *SyntaxError
		var ve *ValidationError
		switch {
		case err == nil:
		case errors.As(err, &se):
			if json.Valid(body) && utf8.Valid(body) {
				t.Fatalf("SyntaxError for input encoding/json accepts: %v", err)
			}
			if se.Line < 1 || se.Line > lines || se.Column < 1 {
				t.Fatalf("SyntaxError position %d:%d outside a %d-line input", se.Line, se.Column, lines)
			}
			return
		case errors.As(err, &ve):
			if !json.Valid(body) {
				t.Fatalf("ValidationError for input encoding/json rejects: %v", err)
			}
			if len(ve.Problems) == 0 {
				t.Fatal("ValidationError without problems")
			}
			for _, p := range ve.Problems {
				if p.Line < 1 || p.Line > lines || p.Column < 1 || p.Reason == "" {
					t.Fatalf("problem %+v outside a %d-line input or without a reason", p, lines)
				}
			}
			return
		default:
			t.Fatalf("error of type %T: %v", err, err)
		}
		if !json.Valid(body) {
			t.Fatalf("Parse accepted input encoding/json rejects")
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse returned a config that does not validate: %v", err)
		}
		out, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(out, "marshaled.json")
		if err != nil {
			t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
		}
		if diff := cmp.Diff(c, back, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-parsed +reparsed):\n%s", diff)
		}
	})
}
