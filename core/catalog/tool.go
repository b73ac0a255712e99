package catalog

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"github.com/portcullis/portcullis/core/mcpwire"
)

// Sentinel errors of [Parse] and [ToolDigest]; a [*ParseError] wraps one of them.
var (
	// ErrMalformed reports a tools/list page or tool object that is not the JSON
	// the spec describes (not an object, no "tools" array, duplicate keys,
	// numbers out of range).
	ErrMalformed = errors.New("malformed tools/list result")
	// ErrMissingName reports a tool without a non-empty string "name".
	ErrMissingName = errors.New("tool has no name")
	// ErrDuplicateTool reports two tools with the same name across all pages.
	ErrDuplicateTool = errors.New("duplicate tool name")
	// ErrBadInputSchema reports a tool whose "inputSchema" is absent or not a
	// JSON object (the spec requires an object schema).
	ErrBadInputSchema = errors.New("inputSchema is not a JSON object")
)

// Tool is one tool of a catalog revision.
//
// Raw is the tool object exactly as the server sent it (bytes kept verbatim, so
// unknown fields reach the agent unchanged), except that strings which are not
// valid Unicode are made so, as encoding/json decodes them: each invalid UTF-8
// byte and each lone surrogate escape becomes U+FFFD, and Replaced counts them
// (see [mcpwire.ReplaceInvalidUnicode]). The agent thus gets the very text the
// digest covers. Name is its "name"; Digest is [ToolDigest] of Raw, "sha256:"
// followed by 64 lowercase hex digits. Treat Raw as read-only: catalogs share
// it. Replaced is not stored: it describes the fetch that made the Tool.
type Tool struct {
	Name     string
	Raw      json.RawMessage
	Digest   string
	Replaced int
}

// MarshalJSON encodes the tool for `portcullis catalog show` as
// {"name":…,"digest":…,"tool":<the raw tool object>}.
func (t Tool) MarshalJSON() ([]byte, error) {
	raw := t.Raw
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	return json.Marshal(struct {
		Name   string          `json:"name"`
		Digest string          `json:"digest"`
		Tool   json.RawMessage `json:"tool"`
	}{t.Name, t.Digest, raw})
}

// ParseError tells which page and tool of a tools/list answer [Parse] refused.
// Page and Index count from 0; Index is -1 when the page itself is at fault and
// Tool is empty when the tool has no usable name. Err is one of the package's
// sentinels, possibly wrapping a detail.
type ParseError struct {
	Page  int
	Index int
	Tool  string
	Err   error
}

// Error names the page, tool index and tool name, then the cause.
func (e *ParseError) Error() string {
	switch {
	case e.Index < 0:
		return fmt.Sprintf("tools/list page %d: %v", e.Page, e.Err)
	case e.Tool == "":
		return fmt.Sprintf("tools/list page %d, tool %d: %v", e.Page, e.Index, e.Err)
	default:
		return fmt.Sprintf("tools/list page %d, tool %d (%q): %v", e.Page, e.Index, e.Tool, e.Err)
	}
}

// Unwrap returns the sentinel (possibly wrapped) that says what was wrong.
func (e *ParseError) Unwrap() error { return e.Err }

// Parse reads the result objects of every tools/list page (MCP "Tools" →
// "Listing Tools": {"tools":[Tool…],"nextCursor"?:…}), in the order they were
// fetched, and returns the tools in server order with their digests.
//
// Errors are [*ParseError] wrapping [ErrMalformed] (page not an object, "tools"
// missing or not an array, tool not an object, invalid JSON in a tool),
// [ErrMissingName], [ErrDuplicateTool] (same name on any two pages) or
// [ErrBadInputSchema]. One bad tool fails the whole list: a partial catalog
// would silently hide tools.
func Parse(pages []json.RawMessage) ([]Tool, error) {
	var tools []Tool
	seen := make(map[string]struct{})
	for p, page := range pages {
		var res struct {
			Tools *[]json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(page, &res); err != nil {
			return nil, &ParseError{Page: p, Index: -1, Err: fmt.Errorf("%w: %v", ErrMalformed, err)}
		}
		if res.Tools == nil {
			return nil, &ParseError{Page: p, Index: -1, Err: fmt.Errorf("%w: no \"tools\" array", ErrMalformed)}
		}
		for i, raw := range *res.Tools {
			t, err := parseTool(raw)
			if err != nil {
				return nil, &ParseError{Page: p, Index: i, Tool: t.Name, Err: err}
			}
			if _, dup := seen[t.Name]; dup {
				return nil, &ParseError{Page: p, Index: i, Tool: t.Name, Err: ErrDuplicateTool}
			}
			seen[t.Name] = struct{}{}
			tools = append(tools, t)
		}
	}
	return tools, nil
}

// parseTool checks one tool object and digests it. The returned Tool carries
// the name even on error, when one could be read.
func parseTool(raw json.RawMessage) (Tool, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return Tool{}, fmt.Errorf("%w: tool is not a JSON object", ErrMalformed)
	}
	var name string
	if n, ok := fields["name"]; !ok || json.Unmarshal(n, &name) != nil || name == "" {
		return Tool{}, ErrMissingName
	}
	t := Tool{Name: name}
	is := bytes.TrimSpace(fields["inputSchema"])
	if len(is) == 0 || is[0] != '{' {
		return t, ErrBadInputSchema
	}
	fixed, n := mcpwire.ReplaceInvalidUnicode(raw)
	d, err := ToolDigest(fixed)
	if err != nil {
		return t, err
	}
	t.Raw = append(json.RawMessage(nil), fixed...)
	t.Digest = d
	t.Replaced = n
	return t, nil
}

// ToolDigest returns "sha256:<hex>" over the canonical form of one tool object
// (see [Canonical]). Errors wrap [ErrMalformed].
func ToolDigest(raw json.RawMessage) (string, error) {
	c, err := Canonical(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// annotationDefaults are the ToolAnnotations defaults of the MCP schema
// (2025-06-18 and 2025-11-25), in canonical key order.
var annotationDefaults = [...]struct {
	key string
	val json.RawMessage
}{
	{"destructiveHint", json.RawMessage("true")},
	{"idempotentHint", json.RawMessage("false")},
	{"openWorldHint", json.RawMessage("true")},
	{"readOnlyHint", json.RawMessage("false")},
}

// defaultAnnotations is the canonical ToolAnnotations object of a tool that
// sends none.
const defaultAnnotations = `{"destructiveHint":true,"idempotentHint":false,"openWorldHint":true,"readOnlyHint":false}`

// Canonical returns the RFC 8785 canonical JSON of one tool object with the
// spec's annotation defaults filled in: an absent or null "annotations" becomes
// an object holding the four defaults, and an annotations object gets each
// missing hint (readOnlyHint false, destructiveHint true, idempotentHint false,
// openWorldHint true). Present values, even non-boolean ones, are kept. Every
// other field, known or not, is kept as canonical JSON. Strings that are not
// valid Unicode read as encoding/json reads them: each invalid UTF-8 byte and
// each lone surrogate escape is U+FFFD (RFC 8785 needs valid Unicode; RFC 8259
// section 8.2 leaves such strings to the receiver, and Go's decoder, like most,
// replaces). Errors wrap [ErrMalformed]: not JSON, not a JSON object, duplicate
// keys (also two names that differ only in invalid bytes), numbers out of
// range, nesting too deep.
func Canonical(raw json.RawMessage) ([]byte, error) {
	if !json.Valid(raw) {
		return nil, fmt.Errorf("%w: not valid JSON", ErrMalformed)
	}
	raw, _ = mcpwire.ReplaceInvalidUnicode(raw)
	c, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(c) == 0 || c[0] != '{' {
		return nil, fmt.Errorf("%w: tool is not a JSON object", ErrMalformed)
	}
	// Members of a canonical object are canonical: splice the filled-in
	// annotations into the top level without canonicalizing twice.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(c, &fields); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	ann, ok := fields["annotations"]
	switch {
	case !ok || string(ann) == "null":
		fields["annotations"] = json.RawMessage(defaultAnnotations)
	case ann[0] == '{':
		var hints map[string]json.RawMessage
		if err := json.Unmarshal(ann, &hints); err != nil {
			return nil, fmt.Errorf("%w: annotations: %v", ErrMalformed, err)
		}
		missing := false
		for _, d := range annotationDefaults {
			if _, ok := hints[d.key]; !ok {
				hints[d.key] = d.val
				missing = true
			}
		}
		if !missing {
			return c, nil
		}
		fields["annotations"] = appendCanonicalObject(make([]byte, 0, len(ann)+len(defaultAnnotations)), hints)
	default:
		return c, nil // not an object: nothing to fill in, kept as sent
	}
	return appendCanonicalObject(make([]byte, 0, len(c)+len(defaultAnnotations)+16), fields), nil
}

// appendCanonicalObject writes an object whose member values are already RFC
// 8785 canonical: names escaped as RFC 8785 §3.2.2.2 says and sorted by UTF-16
// code units (§3.2.3).
func appendCanonicalObject(b []byte, members map[string]json.RawMessage) []byte {
	names := make([]string, 0, len(members))
	for n := range members {
		names = append(names, n)
	}
	slices.SortFunc(names, compareUTF16)
	b = append(b, '{')
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendCanonicalString(b, n)
		b = append(b, ':')
		b = append(b, members[n]...)
	}
	return append(b, '}')
}

// appendCanonicalString writes s as an RFC 8785 string: '"' and '\\' escaped,
// U+0000..U+001F as \b \t \n \f \r or \u00xx (lowercase hex), the rest as UTF-8.
func appendCanonicalString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// compareUTF16 orders strings by their UTF-16 code units (RFC 8785 §3.2.3).
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return cmp.Compare(utf16Key(ra), utf16Key(rb))
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// utf16Key maps a rune to a value ordered like its first UTF-16 code unit,
// then the second: runes above U+FFFF start with a surrogate (0xD800..0xDBFF),
// which sorts below U+E000..U+FFFF.
func utf16Key(r rune) uint32 {
	if r < 0x10000 {
		return uint32(r) << 16
	}
	hi, lo := utf16.EncodeRune(r)
	return uint32(hi)<<16 | uint32(lo)
}
