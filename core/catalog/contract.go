package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"

	"github.com/portcullis/portcullis/core/mcpwire"
)

// Extras is the rest of a server's contract that a catalog revision pins
// beside tools/list: the "instructions" of its initialize (or
// server/discover) result, which the agent passes to the model, and the
// items of prompts/list, resources/list and resources/templates/list. Each
// item is a [Tool] whose Name is its key (a prompt's "name", a resource's
// "uri", a template's "uriTemplate") and whose Digest is [ItemDigest] of its
// Raw bytes, in server order. A server that offers none of them has empty
// Extras, and its revisions digest as they did before Extras existed.
type Extras struct {
	Instructions string `json:"instructions,omitempty"`
	Prompts      []Tool `json:"prompts,omitempty"`
	Resources    []Tool `json:"resources,omitempty"`
	Templates    []Tool `json:"resourceTemplates,omitempty"`
}

// IsZero reports whether x pins nothing.
func (x Extras) IsZero() bool {
	return x.Instructions == "" && len(x.Prompts) == 0 && len(x.Resources) == 0 && len(x.Templates) == 0
}

// Lists of Extras, by the method that fetches them: the member of the
// result holding the items, and the member of each item that keys it.
var extraLists = []struct {
	Method, Member, Key, What string
	get                       func(*Extras) *[]Tool
}{
	{"prompts/list", "prompts", "name", "prompt", func(x *Extras) *[]Tool { return &x.Prompts }},
	{"resources/list", "resources", "uri", "resource", func(x *Extras) *[]Tool { return &x.Resources }},
	{"resources/templates/list", "resourceTemplates", "uriTemplate", "resource template", func(x *Extras) *[]Tool { return &x.Templates }},
}

// ExtraMethods lists the list methods whose items Extras pins, in order.
func ExtraMethods() []string {
	out := make([]string, len(extraLists))
	for i, l := range extraLists {
		out[i] = l.Method
	}
	return out
}

// ParseList reads the pages of one list method of [ExtraMethods] into items
// (keyed as Extras says). Errors wrap [ErrMalformed] (a page or item that is
// not an object, an item without its key) or [ErrDuplicateTool] (two items
// with one key).
func ParseList(method string, pages []json.RawMessage) ([]Tool, error) {
	var l = -1
	for i, x := range extraLists {
		if x.Method == method {
			l = i
		}
	}
	if l < 0 {
		return nil, fmt.Errorf("%w: %s is not a list a catalog pins", ErrMalformed, method)
	}
	spec := extraLists[l]
	var out []Tool
	seen := map[string]bool{}
	for p, page := range pages {
		var res map[string]json.RawMessage
		if err := json.Unmarshal(page, &res); err != nil {
			return nil, fmt.Errorf("%w: %s page %d: %v", ErrMalformed, method, p, err)
		}
		var items []json.RawMessage
		if raw, ok := res[spec.Member]; ok {
			if err := json.Unmarshal(raw, &items); err != nil {
				return nil, fmt.Errorf("%w: %s page %d: %q is not an array", ErrMalformed, method, p, spec.Member)
			}
		}
		for i, raw := range items {
			var fields map[string]json.RawMessage
			var key string
			if json.Unmarshal(raw, &fields) != nil || fields == nil || json.Unmarshal(fields[spec.Key], &key) != nil || key == "" {
				return nil, fmt.Errorf("%w: %s page %d item %d has no %q", ErrMalformed, method, p, i, spec.Key)
			}
			if seen[key] {
				return nil, fmt.Errorf("%w: %s %q twice", ErrDuplicateTool, spec.What, key)
			}
			seen[key] = true
			fixed, _ := mcpwire.ReplaceInvalidUnicode(raw)
			d, err := ItemDigest(fixed)
			if err != nil {
				return nil, err
			}
			out = append(out, Tool{Name: key, Raw: append(json.RawMessage(nil), fixed...), Digest: d})
		}
	}
	return out, nil
}

// ItemDigest is "sha256:<hex>" over the RFC 8785 canonical form of one
// prompt, resource or resource template object. Errors wrap ErrMalformed.
func ItemDigest(raw json.RawMessage) (string, error) {
	fixed, _ := mcpwire.ReplaceInvalidUnicode(raw)
	c, err := jcs.Transform(fixed)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// ContractDigest is the digest of a revision: [CatalogDigest] of the tools
// when x is zero, otherwise "sha256:<hex>" over that digest and, each on
// its own line, the SHA-256 of the instructions and the CatalogDigest of
// the prompts, resources and resource templates.
func ContractDigest(tools []Tool, x Extras) string {
	base := CatalogDigest(tools)
	if x.IsZero() {
		return base
	}
	instr := sha256.Sum256([]byte(x.Instructions))
	h := sha256.New()
	fmt.Fprintf(h, "tools %s\ninstructions sha256:%s\n", base, hex.EncodeToString(instr[:]))
	for _, l := range extraLists {
		fmt.Fprintf(h, "%s %s\n", l.Member, CatalogDigest(*l.get(&x)))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// compareExtras adds to d the differences of the contract beyond tools:
// instructions changed (authority: text the model follows), prompts,
// resources and resource templates added (authority: new text or data the
// model is offered), removed (contract) or changed (authority for prompts,
// whose text the model follows; contract otherwise).
func compareExtras(d *differ, from, to Extras) {
	if from.Instructions != to.Instructions {
		d.tool = ""
		old, cur, _ := textChange(from.Instructions, to.Instructions)
		summary := fmt.Sprintf("the server's instructions to the model changed: %q → %q", old, cur)
		switch {
		case from.Instructions == "":
			summary = fmt.Sprintf("the server now gives the model instructions: %q", truncate(to.Instructions, 200))
		case to.Instructions == "":
			summary = "the server no longer gives the model instructions"
		}
		d.add(KindInstructionsChanged, "/instructions", nilIfEmpty(from.Instructions), nilIfEmpty(to.Instructions), Authority, summary)
	}
	for _, l := range extraLists {
		a, b := *l.get(&from), *l.get(&to)
		old := map[string]Tool{}
		for _, t := range a {
			old[t.Name] = t
		}
		now := map[string]bool{}
		for _, t := range b {
			now[t.Name] = true
			d.tool = ""
			p, had := old[t.Name]
			switch {
			case !had:
				d.add(KindItemAdded, "/"+l.Member+"/"+escapePtr(t.Name), nil, json.RawMessage(t.Raw), Authority,
					fmt.Sprintf("%s %q added", l.What, t.Name))
			case p.Digest != t.Digest:
				sev := Contract
				if l.Member == "prompts" {
					sev = Authority
				}
				d.add(KindItemChanged, "/"+l.Member+"/"+escapePtr(t.Name), json.RawMessage(p.Raw), json.RawMessage(t.Raw), sev,
					fmt.Sprintf("%s %q changed", l.What, t.Name))
			}
		}
		for _, t := range a {
			if !now[t.Name] {
				d.tool = ""
				d.add(KindItemRemoved, "/"+l.Member+"/"+escapePtr(t.Name), json.RawMessage(t.Raw), nil, Contract,
					fmt.Sprintf("%s %q removed", l.What, t.Name))
			}
		}
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
