package catalog

import (
	"encoding/json"
	"strings"
)

// CompareTool returns the changes of one tool from before (nil: the tool
// did not exist) to after: [Compare] of two revisions holding only it.
func CompareTool(before *Tool, after Tool) []Change {
	var from Catalog
	if before != nil {
		from.Tools = []Tool{*before}
	}
	return Compare(from, Catalog{Tools: []Tool{after}}).Changes
}

// Widening returns the changes of severity [Authority] among changes: what
// a grant given for the older contract did not cover.
func Widening(changes []Change) []Change {
	var out []Change
	for _, c := range changes {
		if c.Severity == Authority {
			out = append(out, c)
		}
	}
	return out
}

// Unseen returns the changes among changes (of one tool, from the revision
// an agent formed its calls from to the current one) that could make a call
// with arguments args do what the call does not show, so that the call
// cannot be judged on the current contract alone:
//
//   - always, a change to the default of a top-level argument the call
//     omits (default added, changed or removed, or a new argument with a
//     default): the omitted argument now takes a value the call never
//     named (the seed's publish_preview, whose new "target" defaults);
//     likewise a default added, changed or removed, or a new argument,
//     inside an argument the call sets (its nested value may omit it);
//   - when validBefore (the call fits the older contract too, so it may
//     have been formed from it), a change to what the same call means: the
//     tool's description, an annotation that claims more power, the
//     tool's schema as a whole, or the description, type or schema of an
//     argument the call sets.
//
// A change to an argument the call neither sets nor relies on the default
// of, a new required argument (the call fits the current contract, so it
// sets it), a narrowing, and a cosmetic change cannot change what this
// call does.
func Unseen(changes []Change, args json.RawMessage, validBefore bool) []Change {
	var set map[string]json.RawMessage
	_ = json.Unmarshal(args, &set) // not an object: nothing set
	var out []Change
	for _, c := range changes {
		if c.Severity == Cosmetic {
			continue
		}
		name, rest, isArg := argumentPath(c.Path)
		_, sets := set[name]
		defaulting := c.Kind == KindDefaultAdded || c.Kind == KindDefaultChanged || c.Kind == KindDefaultRemoved
		var unseen bool
		switch {
		case isArg && !sets:
			unseen = (defaulting && rest == "/default") || (c.Kind == KindPropertyAdded && rest == "" && hasDefault(c.New))
		case isArg:
			nested := rest != "" && rest != "/default"
			unseen = (nested && (defaulting || c.Kind == KindPropertyAdded)) ||
				(validBefore && (c.Kind == KindDescriptionChanged || c.Kind == KindTypeChanged || c.Kind == KindSchemaChanged))
		default:
			unseen = validBefore && c.Severity == Authority && (c.Kind == KindDescriptionChanged || c.Kind == KindAnnotationChanged ||
				c.Kind == KindToolChanged || c.Kind == KindSchemaChanged || c.Kind == KindTypeChanged || c.Kind == KindConstChanged)
		}
		if unseen {
			out = append(out, c)
		}
	}
	return out
}

// argumentPath splits a change's JSON pointer under
// /inputSchema/properties/NAME into the argument's name and the rest of
// the pointer; isArg is false for any other pointer.
func argumentPath(path string) (name, rest string, isArg bool) {
	tail, ok := strings.CutPrefix(path, "/inputSchema/properties/")
	if !ok {
		return "", "", false
	}
	name, rest, _ = strings.Cut(tail, "/")
	if rest != "" {
		rest = "/" + rest
	}
	return strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~"), rest, true
}

// hasDefault reports whether a schema (a decoded JSON value) declares a
// default.
func hasDefault(schema any) bool {
	m, ok := schema.(map[string]any)
	if !ok {
		return false
	}
	_, ok = m["default"]
	return ok
}
