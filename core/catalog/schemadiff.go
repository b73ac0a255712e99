package catalog

import (
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"slices"
	"strings"
)

// schema compares two JSON Schemas at pointer p. arg is the dotted argument
// name the schema describes ("" for the whole input, "a.b" nested, "a[]" for
// array items, "a.*" for additionalProperties).
func (d *differ) schema(p, arg string, ov, nv any, oOK, nOK bool) {
	om, ok1 := ov.(map[string]any)
	nm, ok2 := nv.(map[string]any)
	if !ok1 || !ok2 || !oOK || !nOK {
		ob, obOK := ov.(bool)
		nb, nbOK := nv.(bool)
		sev, how := Authority, fmt.Sprintf("changed from %s to %s", show(ov, oOK), show(nv, nOK))
		if obOK && nbOK && ob && !nb {
			sev, how = Contract, "now rejects every value (schema true → false)"
		} else if obOK && nbOK && !ob && nb {
			how = "now accepts any value (schema false → true)"
		}
		d.add(KindSchemaChanged, p, ov, nv, sev, fmt.Sprintf("%s: schema of %s %s", d.tool, argLabel(arg), how))
		return
	}
	for _, k := range unionKeys(om, nm) {
		o, oOK := om[k]
		n, nOK := nm[k]
		if oOK == nOK && reflect.DeepEqual(o, n) {
			continue
		}
		kp := p + "/" + escapePtr(k)
		before := len(d.out)
		if told := d.keyword(p, kp, arg, k, om, nm, o, n, oOK, nOK); !told && len(d.out) == before {
			d.add(KindSchemaChanged, kp, o, n, Cosmetic, fmt.Sprintf("%s: %q of %s spelled differently (same meaning)", d.tool, k, argLabel(arg)))
		}
	}
}

// keyword compares one keyword k of two schemas om and nm at pointer p. told
// is true when the difference is reported under another keyword.
func (d *differ) keyword(p, kp, arg, k string, om, nm map[string]any, o, n any, oOK, nOK bool) (told bool) {
	switch k {
	case "properties":
		d.properties(p, arg, om, nm)
	case "required":
		return d.required(kp, arg, om, nm)
	case "type":
		d.typ(kp, arg, o, n, oOK, nOK)
	case "enum":
		d.enum(kp, arg, o, n, oOK, nOK)
	case "const":
		switch {
		case !oOK:
			d.add(KindConstChanged, kp, nil, n, Contract, fmt.Sprintf("%s: %s is now fixed to %s", d.tool, argLabel(arg), show(n, true)))
		case !nOK:
			d.add(KindConstChanged, kp, o, nil, Authority, fmt.Sprintf("%s: %s is no longer fixed to %s", d.tool, argLabel(arg), show(o, true)))
		default:
			d.add(KindConstChanged, kp, o, n, Authority, fmt.Sprintf("%s: %s is now fixed to %s instead of %s", d.tool, argLabel(arg), show(n, true), show(o, true)))
		}
	case "default":
		switch {
		case !oOK:
			d.add(KindDefaultAdded, kp, nil, n, Authority, fmt.Sprintf("%s: %s now defaults to %s when omitted", d.tool, argLabel(arg), show(n, true)))
		case !nOK:
			d.add(KindDefaultRemoved, kp, o, nil, Contract, fmt.Sprintf("%s: %s no longer declares a default (was %s)", d.tool, argLabel(arg), show(o, true)))
		default:
			d.add(KindDefaultChanged, kp, o, n, Authority, fmt.Sprintf("%s: default of %s changed from %s to %s", d.tool, argLabel(arg), show(o, true), show(n, true)))
		}
	case "additionalProperties":
		d.additional(kp, arg, o, n, oOK, nOK)
	case "items":
		_, m1 := o.(map[string]any)
		_, m2 := n.(map[string]any)
		if m1 && m2 {
			d.schema(kp, arg+"[]", o, n, true, true)
		} else {
			d.add(KindSchemaChanged, kp, o, n, Authority, fmt.Sprintf("%s: items of %s changed from %s to %s", d.tool, argLabel(arg), show(o, oOK), show(n, nOK)))
		}
	case "description":
		d.description(kp, argLabel(arg), o, n)
	case "title":
		d.add(KindTitleChanged, kp, o, n, Cosmetic, fmt.Sprintf("%s: title of %s changed from %s to %s", d.tool, argLabel(arg), show(o, oOK), show(n, nOK)))
	case "examples", "$comment":
		d.add(KindSchemaAnnotationChanged, kp, o, n, Cosmetic, fmt.Sprintf("%s: %s of %s changed", d.tool, k, argLabel(arg)))
	case "deprecated", "readOnly", "writeOnly":
		d.add(KindSchemaAnnotationChanged, kp, o, n, Contract, fmt.Sprintf("%s: %s of %s changed from %s to %s", d.tool, k, argLabel(arg), show(o, oOK), show(n, nOK)))
	default:
		if b, ok := bounds[k]; ok {
			d.bound(kp, arg, k, b, o, n, oOK, nOK)
			return false
		}
		d.add(KindSchemaChanged, kp, o, n, Authority, fmt.Sprintf("%s: %q of %s changed from %s to %s (cannot tell whether it widens)", d.tool, k, argLabel(arg), show(o, oOK), show(n, nOK)))
	}
	return false
}

func childArg(arg, name string) string {
	if arg == "" {
		return name
	}
	return arg + "." + name
}

func (d *differ) properties(p, arg string, om, nm map[string]any) {
	op, ok1 := om["properties"].(map[string]any)
	np, ok2 := nm["properties"].(map[string]any)
	_, had := om["properties"]
	_, has := nm["properties"]
	if (had && !ok1) || (has && !ok2) {
		d.add(KindSchemaChanged, p+"/properties", om["properties"], nm["properties"], Authority,
			fmt.Sprintf("%s: properties of %s changed (not an object)", d.tool, argLabel(arg)))
		return
	}
	oreq, nreq := requiredSet(om["required"]), requiredSet(nm["required"])
	for _, name := range unionKeys(op, np) {
		o, oOK := op[name]
		n, nOK := np[name]
		pp := p + "/properties/" + escapePtr(name)
		child := childArg(arg, name)
		switch {
		case !oOK:
			kind := "optional"
			if nreq[name] {
				kind = "required"
			}
			d.add(KindPropertyAdded, pp, nil, n, Authority, fmt.Sprintf("%s: new %s %s%s", d.tool, kind, argLabel(child), describeSchema(n)))
		case !nOK:
			kind := "optional"
			if oreq[name] {
				kind = "required"
			}
			d.add(KindPropertyRemoved, pp, o, nil, Contract, fmt.Sprintf("%s: %s %s removed", d.tool, kind, argLabel(child)))
		case !reflect.DeepEqual(o, n):
			d.schema(pp, child, o, n, true, true)
		}
	}
}

// describeSchema gives " (type; one of …; default …)" for a new property.
func describeSchema(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	var parts []string
	if t, ok := m["type"]; ok {
		parts = append(parts, typeString(t))
	}
	if e, ok := m["enum"].([]any); ok {
		vals := make([]string, len(e))
		for i, x := range e {
			vals[i] = show(x, true)
		}
		parts = append(parts, "one of "+strings.Join(vals, ", "))
	}
	if c, ok := m["const"]; ok {
		parts = append(parts, "fixed to "+show(c, true))
	}
	if def, ok := m["default"]; ok {
		parts = append(parts, "default "+show(def, true))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func requiredSet(v any) map[string]bool {
	set := map[string]bool{}
	arr, _ := v.([]any)
	for _, x := range arr {
		if s, ok := x.(string); ok {
			set[s] = true
		}
	}
	return set
}

func isStringArray(v any, present bool) bool {
	if !present {
		return true
	}
	arr, ok := v.([]any)
	if !ok {
		return false
	}
	for _, x := range arr {
		if _, ok := x.(string); !ok {
			return false
		}
	}
	return true
}

// required reports changes of a "required" list; told is true when some
// names are told by property_added / property_removed instead.
func (d *differ) required(p, arg string, om, nm map[string]any) (told bool) {
	o, oOK := om["required"]
	n, nOK := nm["required"]
	if !isStringArray(o, oOK) || !isStringArray(n, nOK) {
		d.add(KindSchemaChanged, p, o, n, Authority, fmt.Sprintf("%s: required of %s changed from %s to %s", d.tool, argLabel(arg), show(o, oOK), show(n, nOK)))
		return false
	}
	op, _ := om["properties"].(map[string]any)
	np, _ := nm["properties"].(map[string]any)
	oreq, nreq := requiredSet(o), requiredSet(n)
	emitted := false
	for _, name := range sortedSet(nreq) {
		if oreq[name] {
			continue
		}
		emitted = true
		_, had := op[name]
		if _, has := np[name]; has && !had {
			told = true // told by property_added
			continue
		}
		d.add(KindRequiredAdded, p, nil, name, Contract, fmt.Sprintf("%s: %s is now required", d.tool, argLabel(childArg(arg, name))))
	}
	for _, name := range sortedSet(oreq) {
		if nreq[name] {
			continue
		}
		emitted = true
		_, has := np[name]
		if _, had := op[name]; had && !has {
			told = true // told by property_removed
			continue
		}
		d.add(KindRequiredRemoved, p, name, nil, Contract, fmt.Sprintf("%s: %s is no longer required", d.tool, argLabel(childArg(arg, name))))
	}
	if !emitted {
		d.add(KindOrderChanged, p, o, n, Cosmetic, fmt.Sprintf("%s: required list of %s reordered", d.tool, argLabel(arg)))
	}
	return told
}

func sortedSet(s map[string]bool) []string {
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// typeSet reads a "type" keyword; nil set means absent (any type), ok false
// means a value that is neither a string nor an array of strings.
func typeSet(v any, present bool) (set map[string]bool, ok bool) {
	if !present {
		return nil, true
	}
	set = map[string]bool{}
	switch t := v.(type) {
	case string:
		set[t] = true
	case []any:
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return nil, false
			}
			set[s] = true
		}
	default:
		return nil, false
	}
	return set, true
}

// covers reports whether every value of type set b is a value of type set a.
func covers(a, b map[string]bool) bool {
	for t := range b {
		if !a[t] && !(t == "integer" && a["number"]) {
			return false
		}
	}
	return true
}

// typeString names a "type" keyword's value for a summary. JSON Schema's
// seven type names are written bare; anything else the server wrote (an
// unknown name, a line break, a number) is shown as JSON, so that a server
// cannot put its own words or a second line into the person's summary.
func typeString(v any) string {
	switch t := v.(type) {
	case string:
		return typeName(t)
	case []any:
		parts := make([]string, len(t))
		for i, x := range t {
			if s, ok := x.(string); ok {
				parts[i] = typeName(s)
			} else {
				parts[i] = show(x, true)
			}
		}
		return strings.Join(parts, "|")
	}
	return show(v, true)
}

func typeName(s string) string {
	switch s {
	case "null", "boolean", "object", "array", "number", "string", "integer":
		return s
	}
	return show(s, true)
}

func (d *differ) typ(p, arg string, o, n any, oOK, nOK bool) {
	os, ok1 := typeSet(o, oOK)
	ns, ok2 := typeSet(n, nOK)
	from, to := "any", "any"
	if oOK {
		from = typeString(o)
	}
	if nOK {
		to = typeString(n)
	}
	subject := fmt.Sprintf("%s: type of %s", d.tool, argLabel(arg))
	switch {
	case !ok1 || !ok2:
		d.add(KindTypeChanged, p, o, n, Authority, fmt.Sprintf("%s changed from %s to %s", subject, show(o, oOK), show(n, nOK)))
	case os == nil:
		d.add(KindTypeNarrowed, p, nil, n, Contract, fmt.Sprintf("%s narrowed from any to %s", subject, to))
	case ns == nil:
		d.add(KindTypeWidened, p, o, nil, Authority, fmt.Sprintf("%s widened from %s to any", subject, from))
	default:
		narrower, wider := covers(os, ns), covers(ns, os)
		switch {
		case narrower && wider && reflect.DeepEqual(os, ns):
			d.add(KindOrderChanged, p, o, n, Cosmetic, fmt.Sprintf("%s respelled from %s to %s", subject, from, to))
		case narrower && wider:
			d.add(KindTypeChanged, p, o, n, Contract, fmt.Sprintf("%s respelled from %s to %s (same values)", subject, from, to))
		case narrower:
			d.add(KindTypeNarrowed, p, o, n, Contract, fmt.Sprintf("%s narrowed from %s to %s", subject, from, to))
		case wider:
			d.add(KindTypeWidened, p, o, n, Authority, fmt.Sprintf("%s widened from %s to %s", subject, from, to))
		default:
			d.add(KindTypeChanged, p, o, n, Authority, fmt.Sprintf("%s changed from %s to %s", subject, from, to))
		}
	}
}

func canonKey(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (d *differ) enum(p, arg string, o, n any, oOK, nOK bool) {
	oa, ok1 := o.([]any)
	na, ok2 := n.([]any)
	if (oOK && !ok1) || (nOK && !ok2) {
		d.add(KindSchemaChanged, p, o, n, Authority, fmt.Sprintf("%s: enum of %s changed from %s to %s", d.tool, argLabel(arg), show(o, oOK), show(n, nOK)))
		return
	}
	switch {
	case !oOK:
		d.add(KindEnumAdded, p, nil, n, Contract, fmt.Sprintf("%s: %s is now restricted to %s", d.tool, argLabel(arg), showList(na)))
		return
	case !nOK:
		d.add(KindEnumRemoved, p, o, nil, Authority, fmt.Sprintf("%s: %s is no longer restricted to %s", d.tool, argLabel(arg), showList(oa)))
		return
	}
	inOld := map[string]bool{}
	for _, v := range oa {
		inOld[canonKey(v)] = true
	}
	inNew := map[string]bool{}
	for _, v := range na {
		inNew[canonKey(v)] = true
	}
	var added, removed []any
	for _, v := range na {
		if k := canonKey(v); !inOld[k] {
			inOld[k] = true // report duplicates once
			added = append(added, v)
		}
	}
	for _, v := range oa {
		if k := canonKey(v); !inNew[k] {
			inNew[k] = true
			removed = append(removed, v)
		}
	}
	if len(added) > 0 {
		d.add(KindEnumValueAdded, p, nil, added, Authority, fmt.Sprintf("%s: %s now also accepts %s", d.tool, argLabel(arg), showList(added)))
	}
	if len(removed) > 0 {
		d.add(KindEnumValueRemoved, p, removed, nil, Contract, fmt.Sprintf("%s: %s no longer accepts %s", d.tool, argLabel(arg), showList(removed)))
	}
	if len(added) == 0 && len(removed) == 0 {
		d.add(KindOrderChanged, p, o, n, Cosmetic, fmt.Sprintf("%s: enum of %s reordered", d.tool, argLabel(arg)))
	}
}

func showList(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = show(v, true)
	}
	return truncate(strings.Join(parts, ", "), 200)
}

// boundKind says how a bound keyword tightens.
type boundKind int

const (
	lowerBound    boundKind = iota // larger value or added = tighter
	upperBound                     // smaller value or added = tighter
	multipleBound                  // added = tighter; a multiple of the old value = tighter
	flagBound                      // true = tighter (uniqueItems)
	patternBound                   // added = tighter; changed = not comparable
)

var bounds = map[string]boundKind{
	"minimum": lowerBound, "exclusiveMinimum": lowerBound, "minLength": lowerBound,
	"minItems": lowerBound, "minProperties": lowerBound,
	"maximum": upperBound, "exclusiveMaximum": upperBound, "maxLength": upperBound,
	"maxItems": upperBound, "maxProperties": upperBound,
	"multipleOf": multipleBound, "uniqueItems": flagBound, "pattern": patternBound,
}

// tightness: +1 tightened, -1 loosened, 0 not comparable.
func boundDirection(kind boundKind, o, n any, oOK, nOK bool) int {
	// Booleans: uniqueItems, and draft-04 exclusiveMinimum/exclusiveMaximum.
	// Absent counts as false.
	ob, obOK := o.(bool)
	nb, nbOK := n.(bool)
	if (obOK || !oOK) && (nbOK || !nOK) && (obOK || nbOK) {
		switch {
		case !ob && nb:
			return 1
		case ob && !nb:
			return -1
		}
		return 0 // absent vs explicit false
	}
	if kind == flagBound {
		return 0
	}
	switch {
	case !oOK:
		return 1
	case !nOK:
		return -1
	}
	if kind == patternBound {
		return 0
	}
	or, ok1 := ratOf(o)
	nr, ok2 := ratOf(n)
	if !ok1 || !ok2 {
		return 0
	}
	c := nr.Cmp(or)
	switch kind {
	case lowerBound:
		return c
	case upperBound:
		return -c
	case multipleBound:
		if or.Sign() != 0 {
			if q := new(big.Rat).Quo(nr, or); q.IsInt() {
				return 1
			}
		}
		if nr.Sign() != 0 {
			if q := new(big.Rat).Quo(or, nr); q.IsInt() {
				return -1
			}
		}
	}
	return 0
}

func ratOf(v any) (*big.Rat, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(string(n))
	return r, ok
}

func (d *differ) bound(p, arg, key string, kind boundKind, o, n any, oOK, nOK bool) {
	dir := boundDirection(kind, o, n, oOK, nOK)
	var how string
	switch {
	case !oOK:
		how = fmt.Sprintf("%s %s added", key, show(n, true))
	case !nOK:
		how = fmt.Sprintf("%s %s removed", key, show(o, true))
	default:
		how = fmt.Sprintf("%s changed from %s to %s", key, show(o, true), show(n, true))
	}
	sev := Authority
	switch {
	case dir == 1:
		sev, how = Contract, how+" (tightened)"
	case dir == -1:
		how += " (loosened)"
	case isFalseOrAbsent(o, oOK) && isFalseOrAbsent(n, nOK):
		sev, how = Cosmetic, fmt.Sprintf("%s spelled out as false (no effect)", key)
	default:
		how += " (cannot tell whether it widens)"
	}
	d.add(KindBoundChanged, p, o, n, sev, fmt.Sprintf("%s: %s: %s", d.tool, argLabel(arg), how))
}

func isFalseOrAbsent(v any, present bool) bool {
	b, ok := v.(bool)
	return !present || (ok && !b)
}

func (d *differ) additional(p, arg string, o, n any, oOK, nOK bool) {
	// Absent additionalProperties means true.
	norm := func(v any, ok bool) any {
		if !ok {
			return true
		}
		return v
	}
	ov, nv := norm(o, oOK), norm(n, nOK)
	ob, obOK := ov.(bool)
	nb, nbOK := nv.(bool)
	_, omOK := ov.(map[string]any)
	_, nmOK := nv.(map[string]any)
	subject := fmt.Sprintf("%s: %s", d.tool, argLabel(arg))
	switch {
	case obOK && nbOK && ob == nb:
		d.add(KindAdditionalPropertiesChanged, p, o, n, Cosmetic, fmt.Sprintf("%s: additionalProperties spelled differently (%s → %s, same meaning)", subject, showAdditional(o, oOK), showAdditional(n, nOK)))
	case nbOK && !nb:
		d.add(KindAdditionalPropertiesChanged, p, o, n, Contract, subject+" no longer accepts unlisted properties (additionalProperties → false)")
	case obOK && !ob:
		d.add(KindAdditionalPropertiesChanged, p, o, n, Authority, fmt.Sprintf("%s now accepts unlisted properties (additionalProperties false → %s)", subject, showAdditional(n, nOK)))
	case obOK && ob && nmOK:
		d.add(KindAdditionalPropertiesChanged, p, o, n, Contract, subject+": unlisted properties must now match a schema")
	case omOK && nmOK:
		d.schema(p, childArg(arg, "*"), o, n, true, true)
	case omOK && nbOK && nb:
		d.add(KindAdditionalPropertiesChanged, p, o, n, Authority, subject+" now accepts any unlisted property (additionalProperties schema → true)")
	default:
		d.add(KindAdditionalPropertiesChanged, p, o, n, Authority, fmt.Sprintf("%s: additionalProperties changed from %s to %s", subject, show(o, oOK), show(n, nOK)))
	}
}

func showAdditional(v any, present bool) string {
	if !present {
		return "absent, meaning true"
	}
	return show(v, true)
}
