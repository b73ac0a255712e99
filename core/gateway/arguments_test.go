package gateway

import (
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/ids"
)

// TestArgumentsHandedForForwardedCalls: Options.Arguments (the telemetry
// export of a server the person opted in) learns the argument values of
// each forwarded call under the call id of its tool_called intent, and
// nothing of a call refused before forwarding.
func TestArgumentsHandedForForwardedCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		got := map[ids.CallID]string{}
		r := startBubble(t, true, func(o *Options) {
			o.Policy = func(tool string) config.Policy {
				if tool == "t" {
					return config.PolicyAllow
				}
				return config.PolicyDeny
			}
			o.Arguments = func(call ids.CallID, args func() json.RawMessage) {
				mu.Lock()
				got[call] = string(args())
				mu.Unlock()
			}
		})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/call", map[string]any{"name": "t", "arguments": map[string]any{"sku": "A-1"}})
		if _, ref := refusal(t, r.agent.wait(1, 10*time.Second)); ref != nil {
			t.Fatalf("allowed call refused: %+v", ref)
		}
		r.agent.request(2, "tools/call", map[string]any{"name": "hidden", "arguments": map[string]any{"sku": "B-2"}})
		if _, ref := refusal(t, r.agent.wait(2, 10*time.Second)); ref == nil {
			t.Fatalf("a denied tool's call was not refused")
		}
		var calls []ids.CallID
		for _, e := range r.audit.entries() {
			if tc, ok := e.Fields.(audit.ToolCalled); ok && e.Type == audit.TypeToolCalled {
				calls = append(calls, tc.Call)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(calls) != 1 || len(got) != 1 || got[calls[0]] != `{"sku":"A-1"}` {
			t.Errorf("intents %v, arguments handed %v; want the one forwarded call's {\"sku\":\"A-1\"}", calls, got)
		}
	})
}
