package catalog

import (
	"bytes"
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Validation errors.
var (
	// ErrUnknownTool reports a tools/call for a name the revision does not have.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrInvalidArguments is matched (errors.Is) by every [*ArgumentError].
	ErrInvalidArguments = errors.New("invalid arguments")
	// ErrInvalidSchema is matched by every [*SchemaError]: the tool's own
	// inputSchema cannot be compiled, so its arguments cannot be checked.
	ErrInvalidSchema = errors.New("tool inputSchema cannot be compiled")
)

// maxProblems bounds [ArgumentError].Problems.
const maxProblems = 20

// ArgumentError reports tools/call arguments that the current revision's
// inputSchema rejects. Problems holds up to 20 sentences, each naming the
// argument by JSON pointer, e.g. "at '/target': value must be one of 'preview',
// 'production'" (jsonschema/v6 wording).
type ArgumentError struct {
	Tool     string
	Revision uint64
	Problems []string
}

// Error names the tool and revision and joins the problems with "; ".
func (e *ArgumentError) Error() string {
	return fmt.Sprintf("invalid arguments for tool %q (catalog revision %d): %s", e.Tool, e.Revision, strings.Join(e.Problems, "; "))
}

// Is makes errors.Is(err, ErrInvalidArguments) true.
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArguments }

// SchemaError reports a tool whose inputSchema the validator cannot compile
// (not a valid schema for its draft, a $ref to another document, …). Err holds
// the compiler's detail.
type SchemaError struct {
	Tool     string
	Revision uint64
	Err      error
}

// Error names the tool and revision and gives the compiler's detail.
func (e *SchemaError) Error() string {
	return fmt.Sprintf("tool %q (catalog revision %d): %v: %v", e.Tool, e.Revision, ErrInvalidSchema, e.Err)
}

// Is makes errors.Is(err, ErrInvalidSchema) true.
func (e *SchemaError) Is(target error) bool { return target == ErrInvalidSchema }

// Unwrap returns the compiler's error.
func (e *SchemaError) Unwrap() error { return e.Err }

// DefaultCacheSize is how many compiled input schemas a [Validator] keeps.
const DefaultCacheSize = 1024

// Validator checks tools/call arguments against a catalog revision's
// inputSchema using github.com/santhosh-tekuri/jsonschema/v6 (drafts 4, 6, 7,
// 2019-09 and 2020-12, chosen by "$schema"; none means 2020-12, the MCP
// 2025-11-25 default). Compiled schemas are cached by tool digest, which
// covers the inputSchema, so a schema is compiled once per revision that
// changes it, across labels; the least recently used entry is dropped beyond
// the cache size.
//
// Schemas are compiled offline: a "$ref" to any document other than the schema
// itself and the standard meta-schemas fails with [ErrInvalidSchema] instead of
// reading a file or the network. "format" is asserted as the schema's draft
// says (draft-07 and older: yes; 2019-09 and later: only when the meta-schema
// demands it). A "pattern" that Go's RE2 syntax cannot compile (ECMA-262
// lookaround, backreferences) is not enforced — the server still checks it —
// and a warning is logged once per compiled schema. Safe for concurrent use.
type Validator struct {
	log  *slog.Logger
	size int

	mu    sync.Mutex
	cache map[string]*list.Element // guarded by mu; digest → element of lru
	lru   *list.List               // guarded by mu; *compiled, most recent first
}

type compiled struct {
	digest string
	schema *jsonschema.Schema
	err    error
}

// ValidatorOption configures [NewValidator].
type ValidatorOption func(*Validator)

// WithValidatorLogger sets the logger (default: discard).
func WithValidatorLogger(l *slog.Logger) ValidatorOption { return func(v *Validator) { v.log = l } }

// WithCacheSize sets how many compiled schemas are kept (default
// [DefaultCacheSize], at least 1).
func WithCacheSize(n int) ValidatorOption { return func(v *Validator) { v.size = max(n, 1) } }

// NewValidator returns an empty validator.
func NewValidator(opts ...ValidatorOption) *Validator {
	v := &Validator{
		log:   slog.New(slog.DiscardHandler),
		size:  DefaultCacheSize,
		cache: make(map[string]*list.Element),
		lru:   list.New(),
	}
	for _, o := range opts {
		o(v)
	}
	return v
}

// Validate checks args, the "arguments" of a tools/call (MCP "Tools" →
// "Calling Tools"), against the inputSchema of tool in revision c. Absent
// arguments (empty or JSON null) are checked as {}.
//
// Errors: ErrUnknownTool (wrapped, naming tool and revision); [*ArgumentError]
// when the arguments are not a JSON object or the schema rejects them;
// [*SchemaError] when the tool's schema cannot be compiled.
func (v *Validator) Validate(c Catalog, tool string, args json.RawMessage) error {
	t, ok := c.Lookup(tool)
	if !ok {
		return fmt.Errorf("%w: %q in catalog revision %d", ErrUnknownTool, tool, c.Revision)
	}
	sch, err := v.schemaFor(t)
	if err != nil {
		return &SchemaError{Tool: tool, Revision: c.Revision, Err: err}
	}
	bad := func(problems ...string) error {
		return &ArgumentError{Tool: tool, Revision: c.Revision, Problems: problems}
	}
	args = bytes.TrimSpace(args)
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return bad("arguments are not valid JSON: " + err.Error())
	}
	if _, ok := inst.(map[string]any); !ok {
		return bad("arguments must be a JSON object")
	}
	err = sch.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return bad(err.Error())
	}
	var problems []string
	collectLeaves(ve, &problems)
	if len(problems) == 0 {
		problems = []string{ve.Error()}
	}
	return bad(problems...)
}

// collectLeaves appends one sentence per innermost validation error.
func collectLeaves(e *jsonschema.ValidationError, out *[]string) {
	if len(*out) >= maxProblems {
		return
	}
	if len(e.Causes) == 0 {
		leaf := &jsonschema.ValidationError{InstanceLocation: e.InstanceLocation, ErrorKind: e.ErrorKind}
		*out = append(*out, leaf.Error())
		return
	}
	for _, c := range e.Causes {
		collectLeaves(c, out)
	}
}

func (v *Validator) schemaFor(t Tool) (*jsonschema.Schema, error) {
	key := t.Digest
	if key == "" {
		d, err := ToolDigest(t.Raw)
		if err != nil {
			return nil, err
		}
		key = d
	}
	v.mu.Lock()
	if el, ok := v.cache[key]; ok {
		v.lru.MoveToFront(el)
		c := el.Value.(*compiled)
		v.mu.Unlock()
		return c.schema, c.err
	}
	v.mu.Unlock()

	sch, err := v.compile(t)

	v.mu.Lock()
	defer v.mu.Unlock()
	if el, ok := v.cache[key]; ok { // compiled concurrently
		c := el.Value.(*compiled)
		return c.schema, c.err
	}
	v.cache[key] = v.lru.PushFront(&compiled{digest: key, schema: sch, err: err})
	for v.lru.Len() > v.size {
		old := v.lru.Remove(v.lru.Back()).(*compiled)
		delete(v.cache, old.digest)
	}
	return sch, err
}

// noLoader refuses every external document.
type noLoader struct{}

// Load implements jsonschema.URLLoader by refusing.
func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema %q is not loaded", url)
}

// lenientRegexp stands in for a pattern Go cannot compile: it matches all.
type lenientRegexp string

// MatchString matches every string.
func (r lenientRegexp) MatchString(string) bool { return true }

// String returns the pattern.
func (r lenientRegexp) String() string { return string(r) }

func (v *Validator) compile(t Tool) (*jsonschema.Schema, error) {
	var fields struct {
		InputSchema json.RawMessage `json:"inputSchema"`
	}
	if err := json.Unmarshal(t.Raw, &fields); err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(fields.InputSchema))
	if err != nil {
		return nil, fmt.Errorf("inputSchema: %w", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, ErrBadInputSchema
	}
	var unchecked []string
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	c.UseRegexpEngine(func(s string) (jsonschema.Regexp, error) {
		re, err := regexp.Compile(s)
		if err != nil {
			unchecked = append(unchecked, s)
			return lenientRegexp(s), nil
		}
		return re, nil
	})
	const loc = "urn:portcullis:inputSchema"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, err
	}
	if len(unchecked) > 0 {
		v.log.Warn("inputSchema patterns not enforced: not RE2 syntax", "tool", t.Name, "digest", t.Digest, "patterns", unchecked)
	}
	return sch, nil
}

// Defaults returns, for the approval card, the top-level arguments that args
// (a tools/call "arguments" object; empty or null means {}) omits and whose
// property schema in the tool's inputSchema declares a "default": name → that
// default (numbers as json.Number). Only direct "default" keywords of
// inputSchema.properties count ($ref is not followed). It returns nil when
// there are none, or when args or the schema is not a JSON object.
func Defaults(t Tool, args json.RawMessage) map[string]any {
	var fields struct {
		InputSchema struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"inputSchema"`
	}
	if json.Unmarshal(t.Raw, &fields) != nil {
		return nil
	}
	var given map[string]json.RawMessage
	args = bytes.TrimSpace(args)
	if len(args) > 0 && string(args) != "null" {
		if json.Unmarshal(args, &given) != nil || given == nil {
			return nil
		}
	}
	var out map[string]any
	for name, raw := range fields.InputSchema.Properties {
		if _, ok := given[name]; ok {
			continue
		}
		var prop map[string]json.RawMessage
		if json.Unmarshal(raw, &prop) != nil {
			continue
		}
		def, ok := prop["default"]
		if !ok {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(def))
		dec.UseNumber()
		var val any
		if dec.Decode(&val) != nil {
			continue
		}
		if out == nil {
			out = make(map[string]any)
		}
		out[name] = val
	}
	return out
}
