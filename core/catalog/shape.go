package catalog

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
)

// Shape is the current shape of a tool's arguments as a refusal tells it to
// the model: the required names of inputSchema, and the type, enum and
// default of some of its properties (see [ArgumentShape]).
type Shape struct {
	Tool       string
	Required   []string
	Properties []PropertyShape
	// Omitted counts the properties of the schema left out.
	Omitted int
}

// PropertyShape is one property of a [Shape]. Type is the schema's "type"
// ("a|b" for a list), Enum the JSON of each allowed value (from "enum", or
// "const" as a single value), Default the JSON of "default"; each is empty
// when the schema does not say.
type PropertyShape struct {
	Name     string
	Type     string
	Enum     []string
	Default  string
	Required bool
}

// maxShapeProperties bounds the properties of a Shape: a refusal's message
// must stay short enough to read.
const maxShapeProperties = 12

// ArgumentShape returns the shape of tool t's arguments: every required
// name, and the properties named in names, in the schema's required order
// and then by name (every property, up to a bound, when names is empty).
// Only direct members of inputSchema.properties count ($ref is not
// followed). A schema that is not an object gives an empty Shape.
func ArgumentShape(t Tool, names []string) Shape {
	sh := Shape{Tool: t.Name}
	var fields struct {
		InputSchema struct {
			Required   []string                   `json:"required"`
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"inputSchema"`
	}
	if json.Unmarshal(t.Raw, &fields) != nil {
		return sh
	}
	props := fields.InputSchema.Properties
	sh.Required = fields.InputSchema.Required
	want := map[string]bool{}
	if len(names) == 0 {
		for n := range props {
			want[n] = true
		}
	}
	for _, n := range names {
		want[n] = true
	}
	for _, n := range sh.Required {
		want[n] = true
	}
	order := make([]string, 0, len(want))
	for _, n := range sh.Required {
		if want[n] && !slices.Contains(order, n) {
			order = append(order, n)
		}
	}
	rest := make([]string, 0, len(want))
	for n := range want {
		if !slices.Contains(order, n) {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	order = append(order, rest...)
	for _, n := range order {
		raw, ok := props[n]
		if !ok {
			continue // required but not described, or unknown to the schema
		}
		if len(sh.Properties) == maxShapeProperties {
			sh.Omitted++
			continue
		}
		p := PropertyShape{Name: n, Required: slices.Contains(sh.Required, n)}
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil {
			var v any
			if json.Unmarshal(m["type"], &v) == nil && v != nil {
				p.Type = typeString(v)
			}
			var enum []json.RawMessage
			if json.Unmarshal(m["enum"], &enum) == nil {
				for _, e := range enum {
					p.Enum = append(p.Enum, compactJSON(e))
				}
			}
			if c, ok := m["const"]; ok {
				p.Enum = []string{compactJSON(c)}
			}
			if d, ok := m["default"]; ok {
				p.Default = compactJSON(d)
			}
		}
		sh.Properties = append(sh.Properties, p)
	}
	if len(names) == 0 {
		sh.Omitted = max(sh.Omitted, len(props)-len(sh.Properties))
	}
	return sh
}

// compactJSON is raw without insignificant white space, truncated for a
// message.
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return truncate(string(raw), 80)
	}
	return truncate(b.String(), 80)
}

// problemProperty finds the top-level argument a validation problem is
// about: "at '/n': …" names n, "at ”: missing property 'reason'" (or
// "missing properties 'a', 'b'") names reason (a and b).
var (
	problemAt      = regexp.MustCompile(`^at '/([^/']+)`)
	problemMissing = regexp.MustCompile(`missing propert(?:y|ies) (.+)$`)
	quoted         = regexp.MustCompile(`'([^']*)'`)
)

// ProblemProperties lists, sorted and once each, the top-level argument
// names that problems (an [ArgumentError]'s) are about.
func ProblemProperties(problems []string) []string {
	var out []string
	for _, p := range problems {
		if m := problemAt.FindStringSubmatch(p); m != nil {
			out = append(out, strings.ReplaceAll(strings.ReplaceAll(m[1], "~1", "/"), "~0", "~"))
			continue
		}
		if m := problemMissing.FindStringSubmatch(p); m != nil {
			for _, q := range quoted.FindAllStringSubmatch(m[1], -1) {
				out = append(out, q[1])
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ChangedProperties lists, sorted and once each, the top-level argument
// names whose schema the changes touch (their Path is under
// /inputSchema/properties/NAME, or /inputSchema/required).
func ChangedProperties(changes []Change) []string {
	const prefix = "/inputSchema/properties/"
	var out []string
	for _, c := range changes {
		if rest, ok := strings.CutPrefix(c.Path, prefix); ok {
			name, _, _ := strings.Cut(rest, "/")
			out = append(out, strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~"))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
