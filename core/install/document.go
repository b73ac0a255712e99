package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tailscale/hujson"
)

// document is a parsed agent file. Edits are byte splices into data at offsets
// that hujson records, so everything outside the edited entries (other keys, their
// order, whitespace, comments) stays byte for byte as it was.
type document struct {
	target Target
	data   []byte       // the file as read
	root   hujson.Value // parsed from data (JSON formats)
	// servers and tomlEntries are a TOML file's servers, parsed, and their
	// blocks (see codex.go).
	servers     map[string]map[string]any
	tomlEntries []entry
}

// entry is one server entry found in an agent file.
type entry struct {
	path       []string // member names from the root object to the entry
	name       string   // the entry's own name (the last element of path)
	projectDir string   // project the entry belongs to, or ""
	start, end int      // the entry value's byte offsets in document.data
}

// where returns the entry's place in its file for people:
// `mcpServers.github` or `projects["/src/app"].mcpServers.github`.
func (e entry) where() string {
	var b strings.Builder
	for i, p := range e.path {
		if bareRE(p) {
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(p)
		} else {
			b.WriteString("[" + strconv.Quote(p) + "]")
		}
	}
	return b.String()
}

func bareRE(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// parseDocument parses data as t's format. A file that is not well-formed, or whose
// top-level value is not an object, gives a *SyntaxError.
func parseDocument(t Target, data []byte) (*document, error) {
	serr := func(off int, reason string) error {
		line, col := lineCol(data, off)
		return &SyntaxError{File: t.Path, Line: line, Column: col, Reason: reason}
	}
	if t.Format == TOML {
		return parseTOMLDocument(t, data)
	}
	if t.Format == JSON {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				off := int(se.Offset) - 1
				if strings.Contains(se.Error(), "unexpected end") {
					off = len(data)
				}
				return nil, serr(max(off, 0), se.Error())
			}
			return nil, serr(0, err.Error())
		}
	}
	root, err := hujson.Parse(bytes.Clone(data))
	if err != nil {
		var line, col int
		if _, serr := fmt.Sscanf(err.Error(), "hujson: line %d, column %d:", &line, &col); serr != nil {
			line, col = 1, 1
		}
		reason := err.Error()
		if inner := errors.Unwrap(err); inner != nil {
			reason = inner.Error()
		}
		return nil, &SyntaxError{File: t.Path, Line: line, Column: col, Reason: reason}
	}
	if _, ok := root.Value.(*hujson.Object); !ok {
		return nil, serr(root.StartOffset, "the top-level value is not an object")
	}
	return &document{target: t, data: data, root: root}, nil
}

// lineCol converts a byte offset into a line and a column, both from 1; the column
// counts characters.
func lineCol(data []byte, off int) (line, col int) {
	off = min(off, len(data))
	line = 1 + bytes.Count(data[:off], []byte("\n"))
	start := bytes.LastIndexByte(data[:off], '\n') + 1
	return line, 1 + utf8.RuneCount(data[start:off])
}

// member returns the value of the last member of obj named name (JSON.parse keeps
// the last of duplicate names), or nil.
func member(obj *hujson.Object, name string) *hujson.Value {
	for i := len(obj.Members) - 1; i >= 0; i-- {
		if memberName(obj.Members[i]) == name {
			return &obj.Members[i].Value
		}
	}
	return nil
}

func memberName(m hujson.ObjectMember) string {
	if lit, ok := m.Name.Value.(hujson.Literal); ok {
		return lit.String()
	}
	return ""
}

// entries lists the server entries of the document in file order: the members of
// the top-level server map and, for Claude Code's user file, of every project's.
func (d *document) entries() []entry {
	if d.target.Format == TOML {
		return slices.Clone(d.tomlEntries)
	}
	var out []entry
	add := func(obj *hujson.Object, prefix []string, projectDir string) {
		servers := member(obj, d.target.Key)
		if servers == nil {
			return
		}
		sobj, ok := servers.Value.(*hujson.Object)
		if !ok {
			return
		}
		seen := map[string]bool{}
		for i := len(sobj.Members) - 1; i >= 0; i-- { // last duplicate wins
			m := &sobj.Members[i]
			name := memberName(*m)
			if seen[name] {
				continue
			}
			seen[name] = true
			out = append(out, entry{
				path:       append(slices.Clone(prefix), d.target.Key, name),
				name:       name,
				projectDir: projectDir,
				start:      m.Value.StartOffset,
				end:        m.Value.EndOffset,
			})
		}
	}
	root := d.root.Value.(*hujson.Object)
	add(root, nil, d.target.ProjectDir)
	if d.target.Projects {
		if p := member(root, "projects"); p != nil {
			if pobj, ok := p.Value.(*hujson.Object); ok {
				for _, m := range pobj.Members {
					if obj, ok := m.Value.Value.(*hujson.Object); ok {
						add(obj, []string{"projects", memberName(m)}, memberName(m))
					}
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return a.start - b.start })
	return out
}

// find returns the entry at path, or false.
func (d *document) find(path []string) (entry, bool) {
	for _, e := range d.entries() {
		if slices.Equal(e.path, path) {
			return e, true
		}
	}
	return entry{}, false
}

// fields decodes the entry's members (comments removed). It fails for an entry
// that is not an object.
func (d *document) fields(e entry) (map[string]json.RawMessage, error) {
	if d.target.Format == TOML {
		return d.tomlFields(e)
	}
	v, err := hujson.Parse(bytes.Clone(d.data[e.start:e.end]))
	if err != nil {
		return nil, err
	}
	v.Standardize() // comments and trailing commas out
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v.Pack(), &m); err != nil || m == nil {
		return nil, errors.New("the entry is not a JSON object")
	}
	return m, nil
}

// edit replaces data[start:end] with text.
type edit struct {
	start, end int
	text       []byte
}

// apply returns data with the edits made; edits must not overlap.
func apply(data []byte, edits []edit) []byte {
	slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
	var out []byte
	pos := 0
	for _, e := range edits {
		out = append(out, data[pos:e.start]...)
		out = append(out, e.text...)
		pos = e.end
	}
	return append(out, data[pos:]...)
}

// launchKeys are the keys of an agent entry that say how to launch the server
// process. Install moves them into Portcullis's configuration; every other key
// ("type", "disabled", "autoApprove", "timeout"…) tells the agent something and
// stays in the agent's entry.
var launchKeys = []string{"command", "args", "env", "envFile", "cwd"}

// rewriteEntry returns the text of an entry (given as its own text) that launches
// `exe connect label` instead: "command" and "args" replaced in place, "env",
// "envFile" and "cwd" removed, other members and comments kept. When env is not
// empty, a new "env" member with it follows "args" (PORTCULLIS_HOME, so that the
// shim finds the same data directory).
func rewriteEntry(text []byte, exe, label string, env map[string]string) ([]byte, error) {
	v, err := hujson.Parse(bytes.Clone(text))
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"env", "envFile", "cwd"} {
		for { // remove duplicates too
			obj := v.Value.(*hujson.Object)
			if member(obj, k) == nil {
				break
			}
			if err := patchRemove(&v, "/"+pointerEscape(k)); err != nil {
				return nil, fmt.Errorf("removing %q: %w", k, err)
			}
		}
	}
	obj, ok := v.Value.(*hujson.Object)
	if !ok {
		return nil, errors.New("the entry is not a JSON object")
	}
	cmd := -1
	for i, m := range obj.Members {
		switch memberName(m) {
		case "command":
			obj.Members[i].Value.Value = hujson.String(exe)
			cmd = i
		}
	}
	if cmd < 0 {
		return nil, errors.New(`the entry has no "command"`)
	}
	sep := ", "
	if !bytes.ContainsAny(text, " \t\n") { // a compact file stays compact
		sep = ","
	}
	args, err := hujson.Parse([]byte(`["connect"` + sep + string(hujson.String(label)) + `]`))
	if err != nil {
		return nil, err
	}
	found := -1
	for i, m := range obj.Members {
		if memberName(m) == "args" {
			obj.Members[i].Value.Value = args.Clone().Value
			found = i
		}
	}
	c := obj.Members[cmd]
	if found < 0 {
		m := hujson.ObjectMember{
			Name:  hujson.Value{BeforeExtra: lineBreakOf(c.Name.BeforeExtra), Value: hujson.String("args")},
			Value: hujson.Value{BeforeExtra: lineBreakOf(c.Value.BeforeExtra), Value: args.Value},
		}
		obj.Members = slices.Insert(obj.Members, cmd+1, m)
		found = cmd + 1
	}
	if len(env) > 0 {
		var b bytes.Buffer
		b.WriteByte('{')
		for i, k := range slices.Sorted(maps.Keys(env)) {
			if i > 0 {
				b.WriteString(sep)
			}
			b.Write(hujson.String(k))
			b.WriteString(strings.Replace(sep, ",", ":", 1))
			b.Write(hujson.String(env[k]))
		}
		b.WriteByte('}')
		val, err := hujson.Parse(b.Bytes())
		if err != nil {
			return nil, err
		}
		prev := obj.Members[found] // "args": the new member goes on its own line, or after it on the same one
		m := hujson.ObjectMember{
			Name:  hujson.Value{BeforeExtra: lineBreakOf(prev.Name.BeforeExtra), Value: hujson.String("env")},
			Value: hujson.Value{BeforeExtra: lineBreakOf(prev.Value.BeforeExtra), Value: val.Value},
		}
		obj.Members = slices.Insert(obj.Members, found+1, m)
	}
	return v.Pack(), nil
}

// lineBreakOf returns the whitespace that starts a member's line, taken from the
// extra before an existing member: a newline and that line's indentation, or the
// spaces of a one-line object; comments are left out.
func lineBreakOf(extra hujson.Extra) hujson.Extra {
	if i := bytes.LastIndexByte(extra, '\n'); i >= 0 {
		tail := extra[i+1:]
		if len(bytes.TrimLeft(tail, " \t")) == 0 {
			return append(hujson.Extra("\n"), tail...)
		}
		return hujson.Extra("\n")
	}
	if len(bytes.TrimLeft(extra, " \t")) == 0 {
		return bytes.Clone(extra)
	}
	return hujson.Extra(" ")
}

// patchRemove removes the member at pointer (RFC 6902 "remove"), keeping the
// comments around the other members.
func patchRemove(v *hujson.Value, pointer string) error {
	patch, err := json.Marshal([]map[string]string{{"op": "remove", "path": pointer}})
	if err != nil {
		return err
	}
	return v.Patch(patch)
}

// pointerEscape escapes one JSON Pointer reference token (RFC 6901 §4).
func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// stripSecrets returns the entry's text with the value of each env member named in
// names replaced by the empty string literal "", and the offset of each such
// literal in the returned text, keyed by name. It also reports, per name, whether
// the original literal was exactly hujson.String(value) — that is, whether putting
// the secret back reproduces the file byte for byte.
func stripSecrets(text []byte, names map[string]string) (string, map[string]int, map[string]bool, error) {
	v, err := hujson.Parse(bytes.Clone(text))
	if err != nil {
		return "", nil, nil, err
	}
	obj, ok := v.Value.(*hujson.Object)
	if !ok {
		return "", nil, nil, errors.New("the entry is not a JSON object")
	}
	env := member(obj, "env")
	if env == nil {
		return string(text), map[string]int{}, map[string]bool{}, nil
	}
	eobj, ok := env.Value.(*hujson.Object)
	if !ok {
		return "", nil, nil, errors.New(`"env" is not an object`)
	}
	type span struct {
		name       string
		start, end int
	}
	var spans []span
	exact := map[string]bool{}
	for _, m := range eobj.Members {
		name := memberName(m)
		val, ok := names[name]
		if !ok {
			continue
		}
		spans = append(spans, span{name, m.Value.StartOffset, m.Value.EndOffset})
		exact[name] = bytes.Equal(text[m.Value.StartOffset:m.Value.EndOffset], hujson.String(val))
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	var out []byte
	offsets := map[string]int{}
	pos := 0
	for _, s := range spans {
		out = append(out, text[pos:s.start]...)
		offsets[s.name] = len(out) // the last duplicate wins, as in JSON.parse
		out = append(out, `""`...)
		pos = s.end
	}
	out = append(out, text[pos:]...)
	return string(out), offsets, exact, nil
}

// restoreEntry rebuilds an entry's original text from its template (see
// stripSecrets): the secrets in values are put back at their offsets, and the env
// members of the others are removed. An "env" left with no member by that is
// removed too: the entry then reads as if it never had one, rather than with an
// "env": {} that the original did not have.
func restoreEntry(template string, offsets map[string]int, values map[string][]byte) ([]byte, error) {
	type put struct {
		off int
		lit []byte
	}
	var puts []put
	var drop []string
	for name, off := range offsets {
		if v, ok := values[name]; ok {
			puts = append(puts, put{off, hujson.String(string(v))})
		} else {
			drop = append(drop, name)
		}
	}
	slices.SortFunc(puts, func(a, b put) int { return b.off - a.off })
	out := []byte(template)
	for _, p := range puts {
		if p.off < 0 || p.off+2 > len(out) || string(out[p.off:p.off+2]) != `""` {
			return nil, fmt.Errorf("the install record is damaged: no placeholder at offset %d", p.off)
		}
		out = slices.Concat(out[:p.off], p.lit, out[p.off+2:])
	}
	if len(drop) == 0 {
		return out, nil
	}
	v, err := hujson.Parse(out)
	if err != nil {
		return nil, fmt.Errorf("the install record is damaged: %w", err)
	}
	slices.Sort(drop)
	for _, name := range drop {
		if err := patchRemove(&v, "/env/"+pointerEscape(name)); err != nil {
			return nil, fmt.Errorf("leaving %s out: %w", name, err)
		}
	}
	if obj, ok := v.Value.(*hujson.Object); ok {
		dropEmptyEnv(obj)
	}
	return v.Pack(), nil
}

// dropEmptyEnv removes obj's "env" member when it is an empty object. A comment
// written before the member (JSON with comments) stays where it was, before the
// next member or the closing brace; so does a trailing comma. An "env" with a
// comment elsewhere in it, or present more than once, is kept.
func dropEmptyEnv(obj *hujson.Object) {
	i := -1
	for j, m := range obj.Members {
		if memberName(m) == "env" {
			if i >= 0 {
				return
			}
			i = j
		}
	}
	if i < 0 {
		return
	}
	m := obj.Members[i]
	env, ok := m.Value.Value.(*hujson.Object)
	if !ok || len(env.Members) != 0 {
		return
	}
	for _, x := range []hujson.Extra{m.Name.AfterExtra, m.Value.BeforeExtra, env.AfterExtra, m.Value.AfterExtra} {
		if hasComment(x) {
			return
		}
	}
	var comment hujson.Extra
	if hasComment(m.Name.BeforeExtra) {
		comment = bytes.TrimRight(m.Name.BeforeExtra, " \t\r\n")
	}
	last := i == len(obj.Members)-1
	trailingComma := last && m.Value.AfterExtra != nil
	obj.Members = slices.Delete(obj.Members, i, i+1)
	switch {
	case !last:
		next := &obj.Members[i].Name
		next.BeforeExtra = slices.Concat(comment, next.BeforeExtra)
	case i > 0:
		prev := &obj.Members[i-1].Value
		switch {
		case trailingComma && prev.AfterExtra == nil:
			prev.AfterExtra = hujson.Extra{}
		case !trailingComma && prev.AfterExtra != nil:
			obj.AfterExtra = slices.Concat(prev.AfterExtra, obj.AfterExtra)
			prev.AfterExtra = nil
		}
		obj.AfterExtra = slices.Concat(comment, obj.AfterExtra)
	default:
		obj.AfterExtra = slices.Concat(comment, obj.AfterExtra)
	}
}

// hasComment reports whether extra holds a comment.
func hasComment(extra hujson.Extra) bool {
	return len(bytes.Trim(extra, " \t\r\n")) > 0
}

// rewrite is rewriteEntry in the document's format.
func (d *document) rewrite(e entry, exe, label string, env map[string]string) ([]byte, error) {
	if d.target.Format == TOML {
		return rewriteTOMLEntry(e.name, d.data[e.start:e.end], exe, label, env)
	}
	return rewriteEntry(d.data[e.start:e.end], exe, label, env)
}

// strip is stripSecrets in the document's format.
func (d *document) strip(e entry, names map[string]string) (string, map[string]int, map[string]bool, error) {
	if d.target.Format == TOML {
		return stripTOMLSecrets(d.data[e.start:e.end], names)
	}
	return stripSecrets(d.data[e.start:e.end], names)
}

// restore is restoreEntry in the document's format.
func (d *document) restore(template string, offsets map[string]int, values map[string][]byte) ([]byte, error) {
	if d.target.Format == TOML {
		return restoreTOMLEntry(template, offsets, values)
	}
	return restoreEntry(template, offsets, values)
}

// check checks that newData, the document's data with edits made, still
// parses in its format (and, for TOML, says what the edits meant).
func (d *document) check(newData []byte, edits []edit) error {
	if d.target.Format == TOML {
		return checkTOMLEdits(d, newData, edits)
	}
	return checkSyntax(d.target, newData)
}
