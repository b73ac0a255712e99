package catalog

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/portcullis/portcullis/core/ids"
)

// Catalog is one catalog revision of a server label: the tools a tools/list
// fetch returned, in server order.
//
// Revision counts from 1 per label and only grows (0 means "no revision").
// Digest is [ContractDigest] of the tools and Extras ([CatalogDigest] of
// the tools when Extras is empty). FetchedAt and Epoch are the time and
// execution epoch (a ULID minted by the supervisor) of the latest fetch that
// returned this revision. Catalogs handed out by [Store] share their tools'
// bytes: treat them as read-only.
type Catalog struct {
	Label     string      `json:"label"`
	Revision  uint64      `json:"revision"`
	Digest    string      `json:"digest"`
	Tools     []Tool      `json:"tools"`
	FetchedAt time.Time   `json:"fetchedAt"`
	Epoch     ids.EpochID `json:"epoch"`
	// Extras is the contract beyond tools/list that the revision pins
	// (instructions, prompts, resources, resource templates); Digest
	// covers it ([ContractDigest]).
	Extras
}

// CatalogDigest returns "sha256:<hex>" over the tools' digests sorted
// bytewise, each followed by "\n". The tools' order does not matter.
func CatalogDigest(tools []Tool) string {
	ds := make([]string, len(tools))
	for i, t := range tools {
		ds[i] = t.Digest
	}
	slices.Sort(ds)
	h := sha256.New()
	for _, d := range ds {
		h.Write([]byte(d))
		h.Write([]byte{'\n'})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Lookup returns the tool called name in this revision.
func (c Catalog) Lookup(name string) (Tool, bool) {
	for _, t := range c.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Names returns the tool names of this revision in server order.
func (c Catalog) Names() []string {
	ns := make([]string, len(c.Tools))
	for i, t := range c.Tools {
		ns[i] = t.Name
	}
	return ns
}

// ListResult returns the result object of a tools/list answer for the agent:
// {"tools":[…]} holding each tool's Raw bytes verbatim, in server order, without
// "nextCursor" (the whole revision fits one page). filter, when not nil, keeps
// only the tools for which it returns true (policy "deny" hides tools).
func (c Catalog) ListResult(filter func(name string) bool) json.RawMessage {
	n := len(`{"tools":[]}`)
	for _, t := range c.Tools {
		n += len(t.Raw) + 1
	}
	var b bytes.Buffer
	b.Grow(n)
	b.WriteString(`{"tools":[`)
	first := true
	for _, t := range c.Tools {
		if filter != nil && !filter(t.Name) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.Write(t.Raw)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}
