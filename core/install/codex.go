package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// Codex's ~/.codex/config.toml is TOML. No TOML library keeps comments when it
// re-encodes a file, so the file is only read with one (to find the servers and
// their values, and to check every edit), and written by splicing text: a
// server's block — its `[mcp_servers.NAME]` header, the lines under it and its
// `[mcp_servers.NAME.…]` sub-tables — is the entry, and only its command, args,
// env and cwd statements are replaced. A server written in any other layout
// (dotted keys, an inline table) is refused, the file untouched.

// tomlStmt is one `key = value` statement, or one table header, of a TOML text.
type tomlStmt struct {
	header           bool     // a [table] or [[array]] header
	key              []string // the header's or the statement's key path
	start, end       int      // the line(s) it spans, end after the newline
	valStart, valEnd int      // the value's bytes (statements)
}

// scanTOML splits text into headers and statements. It understands enough TOML
// (strings of the four kinds, nested arrays and inline tables, comments) to
// know where each statement ends; the parser checks the rest.
func scanTOML(text []byte) ([]tomlStmt, error) {
	var out []tomlStmt
	i := 0
	for i < len(text) {
		lineStart := i
		for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
			i++
		}
		if i >= len(text) {
			break
		}
		switch c := text[i]; {
		case c == '\n' || c == '\r':
			i = skipLine(text, i)
			continue
		case c == '#':
			i = skipLine(text, i)
			continue
		case c == '[':
			j := i + 1
			arr := j < len(text) && text[j] == '['
			if arr {
				j++
			}
			key, k, err := scanKey(text, j)
			if err != nil {
				return nil, err
			}
			k = skipSpace(text, k)
			if k >= len(text) || text[k] != ']' || (arr && (k+1 >= len(text) || text[k+1] != ']')) {
				return nil, fmt.Errorf("offset %d: a table header without its closing bracket", i)
			}
			if arr {
				k++
			}
			end := lineEnd(text, k+1)
			out = append(out, tomlStmt{header: true, key: key, start: lineStart, end: end})
			i = end
		default:
			key, k, err := scanKey(text, i)
			if err != nil {
				return nil, err
			}
			k = skipSpace(text, k)
			if k >= len(text) || text[k] != '=' {
				return nil, fmt.Errorf("offset %d: want key = value", i)
			}
			vs := skipSpace(text, k+1)
			ve, err := scanValue(text, vs)
			if err != nil {
				return nil, err
			}
			end := lineEnd(text, ve)
			out = append(out, tomlStmt{key: key, start: lineStart, end: end, valStart: vs, valEnd: ve})
			i = end
		}
	}
	return out, nil
}

func skipSpace(text []byte, i int) int {
	for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
		i++
	}
	return i
}

func skipLine(text []byte, i int) int {
	if j := bytes.IndexByte(text[i:], '\n'); j >= 0 {
		return i + j + 1
	}
	return len(text)
}

// lineEnd returns the offset after the newline that ends the line at i, which
// may hold only blanks and a comment.
func lineEnd(text []byte, i int) int {
	return skipLine(text, i)
}

// scanKey reads a dotted key (bare, "basic" or 'literal' parts).
func scanKey(text []byte, i int) ([]string, int, error) {
	var key []string
	for {
		i = skipSpace(text, i)
		if i >= len(text) {
			return nil, i, errors.New("a key ends the file")
		}
		switch text[i] {
		case '"', '\'':
			end, err := scanString(text, i)
			if err != nil {
				return nil, i, err
			}
			var s string
			if _, err := toml.Decode("k = "+string(text[i:end]), &struct {
				K *string `toml:"k"`
			}{&s}); err != nil {
				return nil, i, fmt.Errorf("offset %d: %v", i, err)
			}
			key = append(key, s)
			i = end
		default:
			j := i
			for j < len(text) && (text[j] == '_' || text[j] == '-' || text[j] >= '0' && text[j] <= '9' || text[j] >= 'a' && text[j] <= 'z' || text[j] >= 'A' && text[j] <= 'Z') {
				j++
			}
			if j == i {
				return nil, i, fmt.Errorf("offset %d: want a key", i)
			}
			key = append(key, string(text[i:j]))
			i = j
		}
		j := skipSpace(text, i)
		if j < len(text) && text[j] == '.' {
			i = j + 1
			continue
		}
		return key, i, nil
	}
}

// scanString returns the offset after the string that starts at i.
func scanString(text []byte, i int) (int, error) {
	q := text[i]
	if bytes.HasPrefix(text[i:], []byte{q, q, q}) {
		j := i + 3
		for {
			k := bytes.Index(text[j:], []byte{q, q, q})
			if k < 0 {
				return 0, fmt.Errorf("offset %d: an unterminated string", i)
			}
			k += j
			if q == '"' && escaped(text, k) {
				j = k + 1
				continue
			}
			end := k + 3
			for end < len(text) && text[end] == q && end < k+5 { // up to two quotes end the content
				end++
			}
			return end, nil
		}
	}
	for j := i + 1; j < len(text); j++ {
		switch text[j] {
		case '\\':
			if q == '"' {
				j++
			}
		case q:
			return j + 1, nil
		case '\n':
			return 0, fmt.Errorf("offset %d: an unterminated string", i)
		}
	}
	return 0, fmt.Errorf("offset %d: an unterminated string", i)
}

// escaped reports whether text[k] is preceded by an odd number of backslashes.
func escaped(text []byte, k int) bool {
	n := 0
	for k > 0 && text[k-1] == '\\' {
		n++
		k--
	}
	return n%2 == 1
}

// scanValue returns the offset after the value that starts at i.
func scanValue(text []byte, i int) (int, error) {
	if i >= len(text) {
		return 0, errors.New("a value ends the file")
	}
	switch text[i] {
	case '"', '\'':
		return scanString(text, i)
	case '[', '{':
		depth := 0
		for j := i; j < len(text); j++ {
			switch text[j] {
			case '"', '\'':
				end, err := scanString(text, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '#':
				j = skipLine(text, j) - 1
			case '[', '{':
				depth++
			case ']', '}':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("offset %d: an unterminated array or table", i)
	}
	j := i
	for j < len(text) && !strings.ContainsRune(" \t\r\n,]}#", rune(text[j])) {
		j++
	}
	return j, nil
}

// tomlBlocks finds the `[mcp_servers.NAME]` blocks of text: name → [start, end).
func tomlBlocks(stmts []tomlStmt, size int) (names []string, spans [][2]int, err error) {
	cur := -1
	closeCur := func(at int) {
		if cur >= 0 {
			spans[cur][1] = at
			cur = -1
		}
	}
	for _, s := range stmts {
		if !s.header {
			if cur < 0 && len(s.key) > 0 && s.key[0] == "mcp_servers" {
				return nil, nil, fmt.Errorf("mcp_servers is set with the dotted key %s", strings.Join(s.key, "."))
			}
			continue
		}
		if cur >= 0 && len(s.key) > 2 && s.key[0] == "mcp_servers" && s.key[1] == names[cur] {
			continue // a sub-table of the current server
		}
		closeCur(s.start)
		switch {
		case len(s.key) == 2 && s.key[0] == "mcp_servers":
			if slices.Contains(names, s.key[1]) {
				return nil, nil, fmt.Errorf("the server %s is defined in more than one place", s.key[1])
			}
			names = append(names, s.key[1])
			spans = append(spans, [2]int{s.start, size})
			cur = len(names) - 1
		case len(s.key) > 2 && s.key[0] == "mcp_servers" && slices.Contains(names, s.key[1]):
			return nil, nil, fmt.Errorf("the table [%s] is apart from the rest of the server %s", strings.Join(s.key, "."), s.key[1])
		case len(s.key) >= 1 && s.key[0] == "mcp_servers":
			// [mcp_servers] itself: its statements would be dotted or inline
			// servers, refused below when the parsed servers differ.
		}
	}
	closeCur(size)
	return names, spans, nil
}

// parseTOMLDocument parses a Codex config.toml.
func parseTOMLDocument(t Target, data []byte) (*document, error) {
	var root map[string]any
	md, err := toml.Decode(string(data), &root)
	if err != nil {
		line, col := 1, 1
		var pe toml.ParseError
		if errors.As(err, &pe) {
			line, col = pe.Position.Line, pe.Position.Col
			err = errors.New(pe.Message)
		}
		return nil, &SyntaxError{File: t.Path, Line: line, Column: col, Reason: err.Error(), Format: TOML}
	}
	_ = md
	refuse := func(why string) error {
		return fmt.Errorf("%s: %s, a layout Portcullis does not edit; write each server as its own [mcp_servers.NAME] table (with an optional [mcp_servers.NAME.env] sub-table) and run this again; the file was not changed", t.Path, why)
	}
	servers := map[string]any{}
	if raw, ok := root["mcp_servers"]; ok {
		if servers, ok = raw.(map[string]any); !ok {
			return nil, refuse("mcp_servers is not a table")
		}
	}
	stmts, err := scanTOML(data)
	if err != nil {
		return nil, refuse(err.Error())
	}
	names, spans, err := tomlBlocks(stmts, len(data))
	if err != nil {
		return nil, refuse(err.Error())
	}
	if !slices.Equal(slices.Sorted(slices.Values(names)), slices.Sorted(maps.Keys(servers))) {
		return nil, refuse("some servers under mcp_servers are not [mcp_servers.NAME] tables")
	}
	d := &document{target: t, data: data, servers: map[string]map[string]any{}}
	for i, n := range names {
		s, ok := servers[n].(map[string]any)
		if !ok {
			return nil, refuse(fmt.Sprintf("mcp_servers.%s is not a table", n))
		}
		d.servers[n] = s
		d.tomlEntries = append(d.tomlEntries, entry{path: []string{"mcp_servers", n}, name: n, start: spans[i][0], end: spans[i][1]})
	}
	return d, nil
}

// tomlFields is fields for a TOML entry: its values as JSON.
func (d *document) tomlFields(e entry) (map[string]json.RawMessage, error) {
	s, ok := d.servers[e.name]
	if !ok {
		return nil, errors.New("no such server")
	}
	out := map[string]json.RawMessage{}
	for k, v := range s {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", k, err)
		}
		out[k] = b
	}
	return out, nil
}

// tomlString encodes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlKey writes a key part bare when it can be, quoted otherwise.
func tomlKey(k string) string {
	if bareRE(k) {
		return k
	}
	return tomlString(k)
}

// parseBlock parses one server block on its own and returns the server's table.
func parseBlock(name string, text []byte) (map[string]any, error) {
	var root map[string]any
	if _, err := toml.Decode(string(text), &root); err != nil {
		return nil, err
	}
	servers, _ := root["mcp_servers"].(map[string]any)
	s, ok := servers[name].(map[string]any)
	if !ok || len(root) != 1 || len(servers) != 1 {
		return nil, errors.New("the block does not hold exactly that server")
	}
	return s, nil
}

// isLaunchStmt reports whether a statement of a server's main table sets one of
// the keys install moves.
func isLaunchStmt(s tomlStmt) bool {
	return !s.header && len(s.key) > 0 && slices.Contains([]string{"command", "args", "env", "cwd"}, s.key[0])
}

// rewriteTOMLEntry is rewriteEntry for a Codex server block: its command, args,
// env and cwd statements and its env sub-table are removed, and command, args
// and (when env is not empty) an inline env take the place of the first. The
// result is parsed and checked to be the old server with just those changes.
func rewriteTOMLEntry(name string, text []byte, exe, label string, env map[string]string) ([]byte, error) {
	stmts, err := scanTOML(text)
	if err != nil {
		return nil, err
	}
	old, err := parseBlock(name, text)
	if err != nil {
		return nil, err
	}
	var out []byte
	pos, inserted, inEnv, indent := 0, false, false, ""
	lines := func() []byte {
		var b strings.Builder
		fmt.Fprintf(&b, "%scommand = %s\n%sargs = [\"connect\", %s]\n", indent, tomlString(exe), indent, tomlString(label))
		if len(env) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(env)) {
				parts = append(parts, tomlKey(k)+" = "+tomlString(env[k]))
			}
			fmt.Fprintf(&b, "%senv = { %s }\n", indent, strings.Join(parts, ", "))
		}
		return []byte(b.String())
	}
	sub := false  // past the main table, in a sub-table
	lastEnv := -1 // end of the env sub-table's last statement
	for i, s := range stmts {
		if i == 0 {
			continue // the server's own header
		}
		if s.header {
			sub = true
			if inEnv { // the env sub-table, comments and all, ends here
				pos = s.start
			}
			inEnv = len(s.key) >= 3 && s.key[2] == "env"
			if inEnv {
				out = append(out, text[pos:s.start]...)
				pos = -1
			}
			continue
		}
		if inEnv {
			lastEnv = s.end
			continue
		}
		if sub || !isLaunchStmt(s) {
			continue
		}
		out = append(out, text[pos:s.start]...)
		if !inserted {
			indent = string(text[s.start:skipSpace(text, s.start)])
			out = append(out, lines()...)
			inserted = true
		}
		pos = s.end
	}
	if inEnv { // the env sub-table ends the block: keep its blank lines only
		out = append(out, blankLines(text[max(lastEnv, 0):])...)
	} else {
		out = append(out, text[pos:]...)
	}
	if !inserted {
		return nil, errors.New(`the server has no "command"`)
	}
	got, err := parseBlock(name, out)
	if err != nil {
		return nil, fmt.Errorf("the rewritten table would not parse: %v", err)
	}
	want := maps.Clone(old)
	for _, k := range []string{"command", "args", "env", "cwd"} {
		delete(want, k)
	}
	want["command"], want["args"] = exe, []any{"connect", label}
	if len(env) > 0 {
		e := map[string]any{}
		for k, v := range env {
			e[k] = v
		}
		want["env"] = e
	}
	if !reflect.DeepEqual(got, want) {
		return nil, errors.New("the rewritten table would not say what Portcullis meant (a layout it cannot edit safely)")
	}
	return out, nil
}

// blankLines returns the empty lines of text.
func blankLines(text []byte) []byte {
	var out []byte
	for _, l := range bytes.SplitAfter(text, []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			out = append(out, l...)
		}
	}
	return out
}

// envValueSpans returns, for a server block, the byte spans of the values of its
// env variables: members of an inline `env = { … }`, `env.NAME = …` statements,
// and statements of an [mcp_servers.NAME.env] sub-table. For each it also gives
// the span to delete to remove the variable.
type envSpan struct {
	name             string
	valStart, valEnd int
	delStart, delEnd int
}

func envSpans(text []byte) ([]envSpan, error) {
	stmts, err := scanTOML(text)
	if err != nil {
		return nil, err
	}
	var out []envSpan
	sub, inEnv := false, false
	for i, s := range stmts {
		if i == 0 {
			continue
		}
		if s.header {
			sub, inEnv = true, len(s.key) == 3 && s.key[2] == "env"
			continue
		}
		switch {
		case inEnv && len(s.key) == 1:
			out = append(out, envSpan{s.key[0], s.valStart, s.valEnd, s.start, s.end})
		case !sub && len(s.key) == 2 && s.key[0] == "env":
			out = append(out, envSpan{s.key[1], s.valStart, s.valEnd, s.start, s.end})
		case !sub && len(s.key) == 1 && s.key[0] == "env" && text[s.valStart] == '{':
			members, err := inlineMembers(text, s.valStart, s.valEnd)
			if err != nil {
				return nil, err
			}
			out = append(out, members...)
		}
	}
	return out, nil
}

// inlineMembers lists the members of the inline table text[start:end]. The
// span to delete for a member runs through the comma after it, or, for the
// last member, from the end of the value before it.
func inlineMembers(text []byte, start, end int) ([]envSpan, error) {
	var out []envSpan
	prevEnd := -1 // end of the previous member's value
	i := start + 1
	for {
		i = skipSpace(text, i)
		if i >= end-1 {
			return out, nil
		}
		key, k, err := scanKey(text, i)
		if err != nil {
			return nil, err
		}
		k = skipSpace(text, k)
		if k >= end || text[k] != '=' {
			return nil, fmt.Errorf("offset %d: want key = value", k)
		}
		vs := skipSpace(text, k+1)
		ve, err := scanValue(text, vs)
		if err != nil {
			return nil, err
		}
		next := skipSpace(text, ve)
		s := envSpan{name: strings.Join(key, "."), valStart: vs, valEnd: ve, delStart: i, delEnd: ve}
		if next < end && text[next] == ',' {
			next = skipSpace(text, next+1)
			s.delEnd = next
		} else if prevEnd >= 0 {
			s.delStart = prevEnd
		}
		if len(key) == 1 {
			out = append(out, s)
		}
		prevEnd = ve
		i = next
	}
}

// stripTOMLSecrets is stripSecrets for a TOML server block.
func stripTOMLSecrets(text []byte, names map[string]string) (string, map[string]int, map[string]bool, error) {
	spans, err := envSpans(text)
	if err != nil {
		return "", nil, nil, err
	}
	var out []byte
	offsets, exact := map[string]int{}, map[string]bool{}
	pos := 0
	for _, s := range spans {
		val, ok := names[s.name]
		if !ok {
			continue
		}
		out = append(out, text[pos:s.valStart]...)
		offsets[s.name] = len(out)
		out = append(out, `""`...)
		pos = s.valEnd
		exact[s.name] = string(text[s.valStart:s.valEnd]) == tomlString(val)
	}
	out = append(out, text[pos:]...)
	return string(out), offsets, exact, nil
}

// restoreTOMLEntry is restoreEntry for a TOML server block: secrets put back at
// their offsets, the variables of the others removed.
func restoreTOMLEntry(template string, offsets map[string]int, values map[string][]byte) ([]byte, error) {
	type put struct {
		off int
		lit string
	}
	var puts []put
	drop := map[string]bool{}
	for name, off := range offsets {
		if v, ok := values[name]; ok {
			puts = append(puts, put{off, tomlString(string(v))})
		} else {
			drop[name] = true
		}
	}
	slices.SortFunc(puts, func(a, b put) int { return b.off - a.off })
	out := []byte(template)
	for _, p := range puts {
		if p.off < 0 || p.off+2 > len(out) || string(out[p.off:p.off+2]) != `""` {
			return nil, fmt.Errorf("the install record is damaged: no placeholder at offset %d", p.off)
		}
		out = slices.Concat(out[:p.off], []byte(p.lit), out[p.off+2:])
	}
	if len(drop) == 0 {
		return out, nil
	}
	for _, name := range slices.Sorted(maps.Keys(drop)) { // one at a time: spans move
		spans, err := envSpans(out)
		if err != nil {
			return nil, fmt.Errorf("the install record is damaged: %w", err)
		}
		for _, s := range spans {
			if s.name == name {
				out = slices.Concat(out[:s.delStart], out[s.delEnd:])
				break
			}
		}
	}
	return out, nil
}

// checkTOMLEdits checks that newData, the file after edits, parses and says
// what was meant: every key outside mcp_servers and every server not edited as
// before, each edited server as its new block says on its own.
func checkTOMLEdits(d *document, newData []byte, edits []edit) error {
	var before, after map[string]any
	if _, err := toml.Decode(string(d.data), &before); err != nil {
		return err
	}
	if _, err := toml.Decode(string(newData), &after); err != nil {
		return err
	}
	want := maps.Clone(before)
	servers, _ := before["mcp_servers"].(map[string]any)
	servers = maps.Clone(servers)
	for _, ed := range edits {
		var name string
		for _, e := range d.tomlEntries {
			if e.start == ed.start && e.end == ed.end {
				name = e.name
			}
		}
		if name == "" {
			return errors.New("an edit outside a server table")
		}
		s, err := parseBlock(name, ed.text)
		if err != nil {
			return fmt.Errorf("mcp_servers.%s: %v", name, err)
		}
		servers[name] = s
	}
	if servers != nil {
		want["mcp_servers"] = servers
	}
	if !reflect.DeepEqual(after, want) {
		return errors.New("the edited file does not say what Portcullis meant")
	}
	return nil
}
