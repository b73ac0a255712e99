package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Severity ranks a [Change]; see the rule table in the package comment.
type Severity string

// Severities, from least to most severe. SeverityNone is the MaxSeverity of an
// empty diff.
const (
	SeverityNone Severity = ""
	Cosmetic     Severity = "cosmetic"
	Contract     Severity = "contract"
	Authority    Severity = "authority"
)

func (s Severity) rank() int {
	switch s {
	case Cosmetic:
		return 1
	case Contract:
		return 2
	case Authority:
		return 3
	}
	return 0
}

// Change kinds, the values of [Change].Kind. The package comment's rule table
// says when each is emitted and with which severity.
const (
	KindToolAdded                   = "tool_added"
	KindToolRemoved                 = "tool_removed"
	KindToolRenamed                 = "tool_renamed"
	KindToolChanged                 = "tool_changed" // fallback when a tool's bytes changed in a way no other kind describes
	KindTitleChanged                = "title_changed"
	KindIconsChanged                = "icons_changed"
	KindDescriptionChanged          = "description_changed"
	KindPropertyAdded               = "property_added"
	KindPropertyRemoved             = "property_removed"
	KindRequiredAdded               = "required_added"
	KindRequiredRemoved             = "required_removed"
	KindTypeNarrowed                = "type_narrowed"
	KindTypeWidened                 = "type_widened"
	KindTypeChanged                 = "type_changed"
	KindEnumValueAdded              = "enum_value_added"
	KindEnumValueRemoved            = "enum_value_removed"
	KindEnumAdded                   = "enum_added"
	KindEnumRemoved                 = "enum_removed"
	KindConstChanged                = "const_changed"
	KindDefaultAdded                = "default_added"
	KindDefaultChanged              = "default_changed"
	KindDefaultRemoved              = "default_removed"
	KindBoundChanged                = "bound_changed"
	KindAdditionalPropertiesChanged = "additional_properties_changed"
	KindOrderChanged                = "order_changed" // same set of enum values / required names / types, other order
	KindSchemaChanged               = "schema_changed"
	KindSchemaAnnotationChanged     = "schema_annotation_changed"
	KindOutputSchemaChanged         = "output_schema_changed"
	KindAnnotationChanged           = "annotation_changed"
	KindMetaChanged                 = "meta_changed"
	KindFieldChanged                = "field_changed"
	// Kinds of the contract beyond tools (Extras); their Tool is "".
	KindInstructionsChanged = "instructions_changed"
	KindItemAdded           = "item_added"   // a prompt, resource or resource template (Path names which)
	KindItemRemoved         = "item_removed" //
	KindItemChanged         = "item_changed" //
)

// Change is one classified difference between two catalog revisions.
//
// Tool is the tool's name in the newer revision (the older one for
// tool_removed). Path is an RFC 6901 JSON pointer inside the tool object, for
// example "/inputSchema/properties/target" ("" for the whole tool). Old and New
// are the JSON values before and after (nil when absent; for enum value changes,
// the list of values removed or added). Summary is one sentence for a person.
type Change struct {
	Tool     string   `json:"tool"`
	Kind     string   `json:"kind"`
	Path     string   `json:"path"`
	Old      any      `json:"old,omitempty"`
	New      any      `json:"new,omitempty"`
	Severity Severity `json:"severity"`
	Summary  string   `json:"summary"`
}

// Diff lists the changes from catalog revision From to revision To of one
// label, tools in the newer revision's order, removed tools last.
type Diff struct {
	From    uint64   `json:"from"`
	To      uint64   `json:"to"`
	Changes []Change `json:"changes"`
}

// MarshalJSON encodes the diff for `portcullis catalog diff` as
// {"from":…,"to":…,"maxSeverity":…,"changes":[…]} (changes never null).
func (d Diff) MarshalJSON() ([]byte, error) {
	cs := d.Changes
	if cs == nil {
		cs = []Change{}
	}
	return json.Marshal(struct {
		From        uint64   `json:"from"`
		To          uint64   `json:"to"`
		MaxSeverity Severity `json:"maxSeverity"`
		Changes     []Change `json:"changes"`
	}{d.From, d.To, d.MaxSeverity(), cs})
}

// MaxSeverity returns the most severe severity among the changes, or
// [SeverityNone] when there are none.
func (d Diff) MaxSeverity() Severity {
	m := SeverityNone
	for _, c := range d.Changes {
		if c.Severity.rank() > m.rank() {
			m = c.Severity
		}
	}
	return m
}

// Text renders the diff for the approval card: one line per change,
// "<severity> <summary>", most severe first (ties keep diff order), each
// ending in "\n". An empty diff renders as "no catalog changes\n".
func (d Diff) Text() string {
	if len(d.Changes) == 0 {
		return "no catalog changes\n"
	}
	cs := slices.Clone(d.Changes)
	slices.SortStableFunc(cs, func(a, b Change) int { return b.Severity.rank() - a.Severity.rank() })
	var sb strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&sb, "%-9s %s\n", c.Severity, c.Summary)
	}
	return sb.String()
}

// Compare returns every difference between catalog revisions from and to
// (from may be the zero Catalog: then every tool is added). Tools are matched
// by name; a removed and an added tool whose contracts are equal (everything
// but name, title, annotations.title and icons), matched one-to-one, are
// reported as one tool_renamed plus their cosmetic differences. Values are
// compared in canonical form ([Canonical]), so spelling differences that keep
// the digest (number formats, key order, defaulted annotations) are no change.
func Compare(from, to Catalog) Diff {
	d := Diff{From: from.Revision, To: to.Revision}
	old := decodeAll(from.Tools)
	cur := decodeAll(to.Tools)
	oldIdx := make(map[string]int, len(from.Tools))
	for i, t := range from.Tools {
		oldIdx[t.Name] = i
	}
	curIdx := make(map[string]int, len(to.Tools))
	for i, t := range to.Tools {
		curIdx[t.Name] = i
	}

	// Rename candidates: removed and added tools grouped by contract key.
	removedByKey := map[string][]int{}
	for i, t := range from.Tools {
		if _, ok := curIdx[t.Name]; !ok && old[i] != nil {
			k := contractKey(old[i])
			removedByKey[k] = append(removedByKey[k], i)
		}
	}
	addedByKey := map[string][]int{}
	for i, t := range to.Tools {
		if _, ok := oldIdx[t.Name]; !ok && cur[i] != nil {
			k := contractKey(cur[i])
			addedByKey[k] = append(addedByKey[k], i)
		}
	}
	renamedFrom := map[int]int{} // to index → from index
	renamedOld := map[int]bool{}
	for k, adds := range addedByKey {
		if rems := removedByKey[k]; len(adds) == 1 && len(rems) == 1 {
			renamedFrom[adds[0]] = rems[0]
			renamedOld[rems[0]] = true
		}
	}

	cd := &differ{}
	for i, t := range to.Tools {
		cd.tool = t.Name
		if j, ok := renamedFrom[i]; ok {
			oldName := from.Tools[j].Name
			cd.add(KindToolRenamed, "/name", oldName, t.Name, Authority,
				fmt.Sprintf("tool %q renamed to %q (same contract; the new name needs its own approval)", oldName, t.Name))
			cd.compareTool(old[j], cur[i], false)
			continue
		}
		j, ok := oldIdx[t.Name]
		if !ok {
			cd.add(KindToolAdded, "", nil, t.Name, Authority, addedSummary(t.Name, cur[i], t.Raw))
			continue
		}
		if sameTool(from.Tools[j], t, old[j], cur[i]) {
			continue
		}
		cd.compareTool(old[j], cur[i], true)
	}
	for j, t := range from.Tools {
		if _, ok := curIdx[t.Name]; ok || renamedOld[j] {
			continue
		}
		cd.tool = t.Name
		cd.add(KindToolRemoved, "", t.Name, nil, Contract, fmt.Sprintf("tool %q removed", t.Name))
	}
	compareExtras(cd, from.Extras, to.Extras)
	d.Changes = cd.out
	return d
}

// sameTool reports whether two tools have the same canonical form: by digest
// when both carry one, else by their decoded canonical forms (or raw bytes when
// a tool cannot be decoded).
func sameTool(a, b Tool, am, bm map[string]any) bool {
	if a.Digest != "" && b.Digest != "" {
		return a.Digest == b.Digest
	}
	if am != nil && bm != nil {
		return reflect.DeepEqual(am, bm)
	}
	return bytes.Equal(a.Raw, b.Raw)
}

// decodeAll decodes each tool's canonical form; an entry is nil when the raw
// bytes are not a valid tool object.
func decodeAll(tools []Tool) []map[string]any {
	out := make([]map[string]any, len(tools))
	for i, t := range tools {
		c, err := Canonical(t.Raw)
		if err != nil {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(c))
		dec.UseNumber()
		var m map[string]any
		if dec.Decode(&m) == nil {
			out[i] = m
		}
	}
	return out
}

// contractKey is the tool without the fields a rename may change.
func contractKey(m map[string]any) string {
	k := make(map[string]any, len(m))
	for f, v := range m {
		switch f {
		case "name", "title", "icons":
			continue
		case "annotations":
			if a, ok := v.(map[string]any); ok {
				b := make(map[string]any, len(a))
				for af, av := range a {
					if af != "title" {
						b[af] = av
					}
				}
				v = b
			}
		}
		k[f] = v
	}
	b, _ := json.Marshal(k)
	return string(b)
}

// addedSummary words a tool the revision added: its arguments and the
// annotation hints it claims, m being its canonical form and raw the tool
// as the server sent it.
func addedSummary(name string, m map[string]any, raw json.RawMessage) string {
	var sent struct {
		Annotations map[string]json.RawMessage `json:"annotations"`
	}
	_ = json.Unmarshal(raw, &sent) // raw was parsed already; a failure leaves every hint a default
	declared := sent.Annotations

	var parts []string
	if is, ok := m["inputSchema"].(map[string]any); ok {
		if props, ok := is["properties"].(map[string]any); ok && len(props) > 0 {
			req := requiredSet(is["required"])
			var args []string
			for _, p := range sortedKeys(props) {
				if req[p] {
					p += " (required)"
				}
				args = append(args, p)
			}
			parts = append(parts, "arguments: "+strings.Join(args, ", "))
		}
	}
	if a, ok := m["annotations"].(map[string]any); ok {
		// m has the spec's defaults filled in (Canonical); declared says
		// which hints the server itself sent, so that a default reads as
		// one and not as the server's claim.
		var claims, defaults []string
		add := func(key, word string) {
			if _, ok := declared[key]; ok {
				claims = append(claims, word)
			} else {
				defaults = append(defaults, word)
			}
		}
		if a["readOnlyHint"] == true {
			add("readOnlyHint", "read-only")
		} else {
			if a["destructiveHint"] == true {
				add("destructiveHint", "destructive")
			}
			if a["idempotentHint"] == true {
				add("idempotentHint", "idempotent")
			}
		}
		if a["openWorldHint"] == true {
			add("openWorldHint", "open world")
		}
		if len(claims) > 0 {
			parts = append(parts, "claims: "+strings.Join(claims, ", "))
		}
		if len(defaults) > 0 {
			if len(declared) == 0 {
				parts = append(parts, "declared no annotations")
			}
			parts = append(parts, "MCP defaults: may be "+strings.Join(defaults, ", "))
		}
	}
	s := fmt.Sprintf("new tool %q", name)
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, "; ") + ")"
	}
	return s
}

// differ accumulates changes for one tool at a time.
type differ struct {
	tool string
	out  []Change
}

func (d *differ) add(kind, path string, old, new any, sev Severity, summary string) {
	d.out = append(d.out, Change{Tool: d.tool, Kind: kind, Path: path, Old: old, New: new, Severity: sev, Summary: summary})
}

// compareTool compares two decoded tool objects of the same (or renamed) tool.
// mustDiffer says the digests differ and no change has been told yet, so
// finding nothing is reported as tool_changed.
func (d *differ) compareTool(old, cur map[string]any, mustDiffer bool) {
	before := len(d.out)
	if old != nil && cur != nil {
		for _, k := range unionKeys(old, cur) {
			ov, oOK := old[k]
			nv, nOK := cur[k]
			if oOK == nOK && reflect.DeepEqual(ov, nv) {
				continue
			}
			p := "/" + escapePtr(k)
			switch k {
			case "name":
				// a rename, already reported
			case "title":
				d.add(KindTitleChanged, p, ov, nv, Cosmetic, fmt.Sprintf("%s: title changed from %s to %s", d.tool, show(ov, oOK), show(nv, nOK)))
			case "description":
				d.description(p, "", ov, nv)
			case "inputSchema":
				d.schema(p, "", ov, nv, oOK, nOK)
			case "outputSchema":
				d.add(KindOutputSchemaChanged, p, ov, nv, Contract, d.tool+": "+outputSummary(ov, nv, oOK, nOK))
			case "annotations":
				d.annotations(ov, nv)
			case "icons":
				d.add(KindIconsChanged, p, ov, nv, Cosmetic, d.tool+": icons changed")
			case "_meta":
				d.add(KindMetaChanged, p, ov, nv, Contract, d.tool+": _meta changed")
			default:
				d.add(KindFieldChanged, p, ov, nv, Contract, fmt.Sprintf("%s: field %q changed from %s to %s", d.tool, k, show(ov, oOK), show(nv, nOK)))
			}
		}
	}
	if len(d.out) == before && mustDiffer {
		d.add(KindToolChanged, "", nil, nil, Authority, d.tool+": changed in a way the diff cannot classify")
	}
}

func outputSummary(ov, nv any, oOK, nOK bool) string {
	switch {
	case !oOK:
		return "output schema added"
	case !nOK:
		return "output schema removed"
	}
	om, _ := ov.(map[string]any)
	nm, _ := nv.(map[string]any)
	if om != nil && nm != nil {
		var keys []string
		for _, k := range unionKeys(om, nm) {
			if !reflect.DeepEqual(om[k], nm[k]) {
				keys = append(keys, k)
			}
		}
		return "output schema changed (" + strings.Join(keys, ", ") + ")"
	}
	return "output schema changed"
}

// hintPower says, per ToolAnnotations hint, which value claims more power.
var hintPower = map[string]struct {
	more       bool
	gain, shed string
}{
	"readOnlyHint":    {false, "no longer claims to be read-only", "now claims to be read-only"},
	"destructiveHint": {true, "now says it may perform destructive updates", "no longer says it may be destructive"},
	"idempotentHint":  {false, "no longer claims repeated calls are harmless", "now claims repeated calls have no additional effect"},
	"openWorldHint":   {true, "now says it reaches external systems", "now says it stays within a closed domain"},
}

func (d *differ) annotations(ov, nv any) {
	om, ok1 := ov.(map[string]any)
	nm, ok2 := nv.(map[string]any)
	if !ok1 || !ok2 {
		d.add(KindAnnotationChanged, "/annotations", ov, nv, Contract, fmt.Sprintf("%s: annotations changed from %s to %s", d.tool, show(ov, ov != nil), show(nv, nv != nil)))
		return
	}
	for _, k := range unionKeys(om, nm) {
		o, oOK := om[k]
		n, nOK := nm[k]
		if oOK == nOK && reflect.DeepEqual(o, n) {
			continue
		}
		p := "/annotations/" + escapePtr(k)
		if k == "title" {
			d.add(KindTitleChanged, p, o, n, Cosmetic, fmt.Sprintf("%s: annotations title changed from %s to %s", d.tool, show(o, oOK), show(n, nOK)))
			continue
		}
		hp, known := hintPower[k]
		ob, obOK := o.(bool)
		nb, nbOK := n.(bool)
		if known && obOK && nbOK {
			if nb == hp.more {
				d.add(KindAnnotationChanged, p, o, n, Authority, fmt.Sprintf("%s %s (%s %v → %v)", d.tool, hp.gain, k, ob, nb))
			} else {
				d.add(KindAnnotationChanged, p, o, n, Contract, fmt.Sprintf("%s %s (%s %v → %v; a hint, not verified)", d.tool, hp.shed, k, ob, nb))
			}
			continue
		}
		d.add(KindAnnotationChanged, p, o, n, Contract, fmt.Sprintf("%s: annotation %q changed from %s to %s", d.tool, k, show(o, oOK), show(n, nOK)))
	}
}

// description reports a description change at p; what names the schema
// whose description it is ("" for the tool itself).
func (d *differ) description(p, what string, ov, nv any) {
	ostr, ook := ov.(string)
	ns, nok := nv.(string)
	subject := d.tool + ": description"
	if what != "" {
		subject = fmt.Sprintf("%s: description of %s", d.tool, what)
	}
	if (ov != nil && !ook) || (nv != nil && !nok) {
		d.add(KindDescriptionChanged, p, ov, nv, Contract, fmt.Sprintf("%s changed from %s to %s", subject, show(ov, ov != nil), show(nv, nv != nil)))
		return
	}
	oldSeg, newSeg, wsOnly := textChange(ostr, ns)
	if wsOnly {
		d.add(KindDescriptionChanged, p, ov, nv, Cosmetic, subject+": whitespace changed only")
		return
	}
	if fixes, ok := spellingFixes(ostr, ns); ok {
		d.add(KindDescriptionChanged, p, ov, nv, Cosmetic, fmt.Sprintf("%s: spelling corrected (%s)", subject, strings.Join(fixes, ", ")))
		return
	}
	d.add(KindDescriptionChanged, p, ov, nv, Authority, fmt.Sprintf("%s changed: %q → %q", subject, oldSeg, newSeg))
}

// textChange returns the changed stretch of words of old and new with up to
// three words of context ("…" marks cut text), and whether only whitespace
// differs.
func textChange(old, cur string) (string, string, bool) {
	ow, nw := strings.Fields(old), strings.Fields(cur)
	if slices.Equal(ow, nw) {
		return "", "", true
	}
	p := 0
	for p < len(ow) && p < len(nw) && ow[p] == nw[p] {
		p++
	}
	s := 0
	for s < len(ow)-p && s < len(nw)-p && ow[len(ow)-1-s] == nw[len(nw)-1-s] {
		s++
	}
	const ctx = 3
	seg := func(w []string) string {
		lo, hi := max(0, p-ctx), min(len(w), len(w)-s+ctx)
		out := strings.Join(w[lo:hi], " ")
		if len(out) > 200 {
			out = truncate(out, 200)
		}
		if lo > 0 {
			out = "…" + out
		}
		if hi < len(w) {
			out += "…"
		}
		return out
	}
	return seg(ow), seg(nw), false
}

func unionKeys(a, b map[string]any) []string {
	ks := make([]string, 0, len(a)+len(b))
	for k := range a {
		ks = append(ks, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// escapePtr escapes one RFC 6901 reference token.
func escapePtr(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

// show renders a JSON value for a summary, "(none)" when absent.
func show(v any, present bool) string {
	if !present {
		return "(none)"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return truncate(string(b), 80)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && (s[cut]&0xC0) == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}

func argLabel(arg string) string {
	if arg == "" {
		return "the input"
	}
	return fmt.Sprintf("argument %q", arg)
}
