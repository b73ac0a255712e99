package config

import (
	"bytes"
	"cmp"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxFileSize is the largest configuration file Load reads, in bytes.
const MaxFileSize = 4 << 20

// utf8BOM is the byte order mark some Windows editors put at the start of a file.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// SyntaxError is returned when the file is not well-formed JSON (RFC 8259): a
// misplaced character, an unclosed object or string, invalid UTF-8, data after the
// top-level value, or an empty file. It matches [ErrInvalid].
type SyntaxError struct {
	// File is the name given to Parse or Load.
	File string
	// Line and Column locate the error, both from 1; Column counts Unicode
	// characters, as editors do, and a leading byte order mark is not counted.
	Line, Column int
	// Reason describes the error.
	Reason string
}

// Error returns "FILE:LINE:COL: REASON".
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Reason)
}

// Is reports whether target is [ErrInvalid].
func (e *SyntaxError) Is(target error) bool { return target == ErrInvalid }

// Load reads and parses the configuration file at path (see [Parse]).
//
// A missing file is not fatal: Load then returns an empty, valid Config (no servers)
// together with an error wrapping fs.ErrNotExist, so that a daemon can start with
// `if errors.Is(err, fs.ErrNotExist)` and use the Config. On any other error the
// Config is nil. Files larger than [MaxFileSize] are refused.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &Config{Servers: map[string]Server{}}, fmt.Errorf("loading configuration: %w", err)
		}
		return nil, fmt.Errorf("loading configuration: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("loading configuration: reading %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("loading configuration: %s is larger than %d bytes", path, MaxFileSize)
	}
	return Parse(data, path)
}

// Parse decodes and validates a configuration file's contents; name is used in
// error messages (usually the file's path).
//
// It returns a *SyntaxError if data is not a single well-formed JSON value in UTF-8,
// or if it is empty or only whitespace. A leading UTF-8 byte order mark is skipped
// (editors on Windows add one; RFC 8259 §8.1 lets parsers ignore it), and positions
// are counted after it. It returns a *ValidationError listing every problem, each
// with its line and column, if the JSON has unknown keys (case-sensitive), duplicate
// keys, null values or values of the wrong type, or breaks a rule of
// [Config.Validate]. The returned Config's Servers map is never nil.
func Parse(data []byte, name string) (*Config, error) {
	data = bytes.TrimPrefix(data, utf8BOM)
	if !utf8.Valid(data) {
		off := 0
		for off < len(data) {
			r, size := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return nil, newSyntaxError(name, data, int64(off), "the file is not valid UTF-8 text")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &SyntaxError{File: name, Line: 1, Column: 1,
			Reason: `the file is empty; a configuration without servers is {"mcpServers": {}}`}
	}

	w := &walker{data: data, dec: json.NewDecoder(bytes.NewReader(data)), pos: make(map[string]int64)}
	w.dec.UseNumber() // numbers stay text: 1e999 is a type problem, not an overflow
	w.pos[""] = 0
	if err := w.value(reflect.TypeFor[Config](), ""); err != nil {
		return nil, w.syntaxError(name, err)
	}
	if rest := w.skipSpace(w.dec.InputOffset()); rest < int64(len(data)) {
		return nil, newSyntaxError(name, data, rest, "unexpected data after the top-level object")
	}
	if len(w.problems) > 0 {
		slices.SortStableFunc(w.problems, func(a, b located) int { return cmp.Compare(a.off, b.off) })
		ve := &ValidationError{File: name}
		for _, p := range w.problems {
			p.Line, p.Column = lineCol(data, p.off)
			ve.Problems = append(ve.Problems, p.Problem)
		}
		return nil, ve
	}

	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		// The walker accepted exactly what encoding/json accepts, so this is a bug.
		return nil, fmt.Errorf("%s: decoding configuration: %w", name, err)
	}
	if c.Servers == nil {
		c.Servers = map[string]Server{}
	}
	if err := c.Validate(); err != nil {
		var ve *ValidationError
		if !errors.As(err, &ve) {
			return nil, err
		}
		ve.File = name
		offs := make([]int64, len(ve.Problems))
		for i := range ve.Problems {
			offs[i] = w.lookup(ve.Problems[i].Path)
			ve.Problems[i].Line, ve.Problems[i].Column = lineCol(data, offs[i])
		}
		slices.SortStableFunc(ve.Problems, func(a, b Problem) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
		})
		return nil, ve
	}
	return &c, nil
}

func newSyntaxError(name string, data []byte, off int64, reason string) *SyntaxError {
	line, col := lineCol(data, off)
	return &SyntaxError{File: name, Line: line, Column: col, Reason: reason}
}

// lineCol converts a byte offset into a 1-based line and a 1-based column counted in
// Unicode characters.
func lineCol(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return bytes.Count(before, []byte{'\n'}) + 1, utf8.RuneCount(before[lineStart:]) + 1
}

// located is a Problem with the byte offset it was found at.
type located struct {
	Problem
	off int64
}

// walkFailure is a syntax error found by the walker, with its byte offset.
type walkFailure struct {
	off    int64
	reason string
}

func (f *walkFailure) Error() string { return f.reason }

// walker reads the JSON token by token, guided by the Go types of Config, to find
// what encoding/json does not report with a position: unknown, duplicate and
// case-mismatched keys, nulls and mistyped values. It records the offset of every
// key so that Validate's problems can be located too.
type walker struct {
	data     []byte
	dec      *json.Decoder
	pos      map[string]int64 // display path → offset of its key, or of the value for array elements
	open     []int64          // offsets of the objects and arrays not yet closed
	problems []located
}

func (w *walker) problem(off int64, path, format string, args ...any) {
	w.problems = append(w.problems, located{Problem{Path: path, Reason: fmt.Sprintf(format, args...)}, off})
}

// skipSpace returns the offset of the first byte at or after off that is not JSON
// whitespace.
func (w *walker) skipSpace(off int64) int64 {
	for off < int64(len(w.data)) && strings.IndexByte(" \t\r\n", w.data[off]) >= 0 {
		off++
	}
	return off
}

// token returns the next token and the offset where it starts.
func (w *walker) token() (json.Token, int64, error) {
	// The decoder consumes ':' and ',' as part of the following token.
	start := w.dec.InputOffset()
	for start < int64(len(w.data)) && strings.IndexByte(" \t\r\n:,", w.data[start]) >= 0 {
		start++
	}
	tok, err := w.dec.Token()
	if err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			return nil, start, w.syntaxFailure(se)
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			return nil, start, w.eofFailure(start)
		default:
			return nil, start, &walkFailure{off: start, reason: err.Error()}
		}
	}
	switch tok {
	case json.Delim('{'), json.Delim('['):
		w.open = append(w.open, start)
	case json.Delim('}'), json.Delim(']'):
		w.open = w.open[:len(w.open)-1]
	}
	return tok, start, nil
}

// syntaxFailure locates a syntax error reported by the decoder. The offset in a
// json.SyntaxError from Decoder.Token is not reliable for errors inside a string,
// number or literal, so the whole document is checked again with json.Unmarshal,
// whose SyntaxError.Offset counts the bytes read up to and including the offending
// one. Both stop at the first error, so they report the same one.
func (w *walker) syntaxFailure(se *json.SyntaxError) *walkFailure {
	var v any
	var full *json.SyntaxError
	if err := json.Unmarshal(w.data, &v); errors.As(err, &full) && full.Offset > 0 {
		return &walkFailure{off: full.Offset - 1, reason: full.Error()}
	}
	return &walkFailure{off: se.Offset, reason: se.Error()}
}

func (w *walker) eofFailure(start int64) *walkFailure {
	end := int64(len(w.data))
	if start < end && w.data[start] == '"' {
		l, c := lineCol(w.data, start)
		return &walkFailure{off: end, reason: fmt.Sprintf("unexpected end of file: the string that starts at line %d, column %d is not closed", l, c)}
	}
	if n := len(w.open); n > 0 {
		off := w.open[n-1]
		what := "object"
		if w.data[off] == '[' {
			what = "array"
		}
		l, c := lineCol(w.data, off)
		return &walkFailure{off: end, reason: fmt.Sprintf("unexpected end of file: the %s that starts at line %d, column %d is not closed", what, l, c)}
	}
	return &walkFailure{off: end, reason: "unexpected end of file"}
}

func (w *walker) syntaxError(name string, err error) error {
	var f *walkFailure
	if errors.As(err, &f) {
		return newSyntaxError(name, w.data, f.off, f.reason)
	}
	return fmt.Errorf("%s: %w", name, err)
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// value reads one value that should decode into t, at the display path. A
// pointer type (an optional setting whose absence means its default) takes
// the value of the type it points to; null is refused all the same.
func (w *walker) value(t reflect.Type, path string) error {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, start, err := w.token()
	if err != nil {
		return err
	}
	if _, ok := w.pos[path]; !ok {
		w.pos[path] = start
	}
	mismatch := func() error {
		if tok == nil {
			w.problem(start, path, "null is not allowed: want %s, or leave the key out", describeType(t))
		} else {
			w.problem(start, path, "want %s, not %s", describeType(t), describeToken(tok))
		}
		return w.skipRest(tok)
	}
	switch {
	case reflect.PointerTo(t).Implements(textUnmarshaler):
		s, ok := tok.(string)
		if !ok {
			return mismatch()
		}
		if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			w.problem(start, path, "%v", err)
		}
		return nil
	case t.Kind() == reflect.String:
		if _, ok := tok.(string); !ok {
			return mismatch()
		}
		return nil
	case t.Kind() == reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return mismatch()
		}
		return nil
	case t.Kind() == reflect.Int:
		if !isWholeNumber(tok) {
			return mismatch()
		}
		return nil
	case t.Kind() == reflect.Slice:
		if tok != json.Delim('[') {
			return mismatch()
		}
		for i := 0; w.dec.More(); i++ {
			if err := w.value(t.Elem(), indexPath(path, i)); err != nil {
				return err
			}
		}
		_, _, err := w.token() // ']'
		return err
	case t.Kind() == reflect.Map, t.Kind() == reflect.Struct:
		if tok != json.Delim('{') {
			return mismatch()
		}
		return w.members(t, path)
	}
	return fmt.Errorf("config: no JSON rule for Go type %v", t) // unreachable for Config's types
}

// members reads the members of an object after its '{', up to and including '}'.
func (w *walker) members(t reflect.Type, path string) error {
	var fields map[string]reflect.Type
	if t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	seen := make(map[string]int64)
	for w.dec.More() {
		tok, keyOff, err := w.token()
		if err != nil {
			return err
		}
		key := tok.(string) // the decoder reports a syntax error for any other key
		child := joinPath(path, key)
		if first, dup := seen[key]; dup {
			l, c := lineCol(w.data, first)
			w.problem(keyOff, child, "duplicate key %q; it first appears at line %d, column %d", key, l, c)
			if err := w.skipValue(); err != nil {
				return err
			}
			continue
		}
		seen[key] = keyOff
		elem := t
		if fields != nil {
			var ok bool
			if elem, ok = fields[key]; !ok {
				w.problem(keyOff, child, "%s", unknownKey(key, fields))
				if err := w.skipValue(); err != nil {
					return err
				}
				continue
			}
		} else {
			elem = t.Elem()
		}
		w.pos[child] = keyOff
		if err := w.value(elem, child); err != nil {
			return err
		}
	}
	_, _, err := w.token() // '}'
	return err
}

func (w *walker) skipValue() error {
	tok, _, err := w.token()
	if err != nil {
		return err
	}
	return w.skipRest(tok)
}

// skipRest skips the rest of a value whose first token was tok.
func (w *walker) skipRest(tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := 1; depth > 0; {
		tok, _, err := w.token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// lookup returns the offset recorded for path or, failing that, for its nearest
// recorded ancestor (a missing key is reported at the object that lacks it).
func (w *walker) lookup(path string) int64 {
	for {
		if off, ok := w.pos[path]; ok {
			return off
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
}

// jsonFields maps the JSON names of t's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := make(map[string]reflect.Type, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

func unknownKey(key string, fields map[string]reflect.Type) string {
	known := sortedKeys(fields)
	// Suggest a key within one edit per three characters, at most two.
	best, bestDist := "", min(len(key)/3, 2)+1
	for _, k := range known {
		if strings.EqualFold(k, key) {
			best = k
			break
		}
		if d := editDistance(k, key); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key %q (did you mean %q?)", key, best)
	}
	return fmt.Sprintf("unknown key %q; known keys here: %s", key, strings.Join(known, ", "))
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func describeType(t reflect.Type) string {
	switch {
	case reflect.PointerTo(t).Implements(textUnmarshaler):
		return `a duration string such as "30s"`
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.Int:
		return "a whole number"
	case t.Kind() == reflect.Slice:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(describeType(t.Elem()), "a "), "an ") + "s"
	default:
		return "an object"
	}
}

func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return fmt.Sprintf("the string %q", v)
	case json.Number:
		return "the number " + v.String()
	case bool:
		return fmt.Sprintf("%t", v)
	default:
		return "null"
	}
}

// isWholeNumber reports whether a JSON token is an integer that fits an int.
func isWholeNumber(tok json.Token) bool {
	switch n := tok.(type) {
	case json.Number:
		_, err := strconv.ParseInt(string(n), 10, 0)
		return err == nil
	case float64:
		return n == float64(int64(n)) && n >= -(1<<53) && n <= 1<<53
	}
	return false
}
