package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/mcpwire"
)

// Notifications of the lists a catalog revision pins beside tools/list.
const (
	methodPromptsChanged   = "notifications/prompts/list_changed"
	methodResourcesChanged = "notifications/resources/list_changed"
)

// listCapability is the server capability that offers each list of
// catalog.ExtraMethods.
var listCapability = map[string]string{
	"prompts/list":             "prompts",
	"resources/list":           "resources",
	"resources/templates/list": "resources",
}

// fetchExtras reads the contract of e beyond tools/list (docs/DESIGN.md,
// "The refresh contract"): the instructions of its handshake result
// (initialize, or server/discover in the 2026-07-28 era) and every page of
// prompts/list, resources/list and resources/templates/list that its
// capabilities offer. A list the server does not implement (-32601) is
// empty; one that fails otherwise keeps the items of prev, the revision in
// force, so that a passing failure does not read as a change.
func (s *Session) fetchExtras(e *epoch, prev catalog.Catalog) catalog.Extras {
	s.mu.Lock()
	hs := redactJSON(e, e.initResult) // its instructions are stored
	s.mu.Unlock()
	var x catalog.Extras
	if raw := mcpwire.GetPath(hs, "instructions"); raw != nil {
		_ = json.Unmarshal(raw, &x.Instructions)
	}
	caps := mcpwire.GetPath(hs, "capabilities")
	for _, method := range catalog.ExtraMethods() {
		items, err := s.fetchList(e, method, caps)
		if err != nil {
			s.warn(fmt.Sprintf("could not fetch %s of epoch %s (%v); its items are kept as in catalog revision %d", method, e.ID, err, prev.Revision))
			items = prevItems(prev.Extras, method)
		}
		switch method {
		case "prompts/list":
			x.Prompts = items
		case "resources/list":
			x.Resources = items
		case "resources/templates/list":
			x.Templates = items
		}
	}
	return x
}

func prevItems(x catalog.Extras, method string) []catalog.Tool {
	switch method {
	case "prompts/list":
		return x.Prompts
	case "resources/list":
		return x.Resources
	}
	return x.Templates
}

// fetchList reads every page of one list of e, or nothing when e's
// capabilities (caps) do not offer it or e does not implement it.
func (s *Session) fetchList(e *epoch, method string, caps json.RawMessage) ([]catalog.Tool, error) {
	if c := mcpwire.GetPath(caps, listCapability[method]); c == nil || bytes.Equal(c, []byte("null")) {
		return nil, nil
	}
	var pages []json.RawMessage
	cursor := json.RawMessage(nil)
	seen := map[string]bool{}
	for range maxListPages {
		params := map[string]any{}
		if cursor != nil {
			params["cursor"] = cursor
		}
		res, err := s.call(e, method, s.requestParams(params), s.opts.StartupTimeout)
		var rpc *RPCError
		if errors.As(err, &rpc) && rpc.Code == mcpwire.CodeMethodNotFound {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		pages = append(pages, redactJSON(e, res)) // stored: without the credentials' values
		next := mcpwire.GetPath(res, "nextCursor")
		if next == nil || bytes.Equal(next, []byte("null")) {
			return catalog.ParseList(method, pages)
		}
		if seen[string(next)] {
			return nil, fmt.Errorf("%s: cursor %s repeats", method, next)
		}
		seen[string(next)] = true
		cursor = bytes.Clone(next)
	}
	return nil, fmt.Errorf("%s: more than %d pages", method, maxListPages)
}

// boundTTL gives a 2026-07-28 list result passed to the agent (out, a
// whole response) a ttlMs that cannot outlive the epoch: when the agent
// has no subscriptions/listen stream that announces changes of this list
// (and with them every epoch change), the result may not be cached at all
// (ttlMs 0). With one, the gateway's list_changed at every epoch change
// ends the cache. Other eras and results without ttlMs are returned as
// they are.
func (s *Session) boundTTL(method string, out []byte) []byte {
	ttl := mcpwire.GetPath(out, "result", "ttlMs")
	if ttl == nil || bytes.Equal(ttl, []byte("0")) {
		return out
	}
	s.mu.Lock()
	modern := s.hs.era == eraModern
	subscribed := s.hs.listSubscribed(method)
	s.mu.Unlock()
	if !modern || subscribed {
		return out
	}
	adj, err := mcpwire.SetPath(out, []string{"result", "ttlMs"}, []byte("0"))
	if err != nil {
		return out
	}
	return adj
}
