package gateway

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestHealthCheckStatus: an ended run that only shook hands and listed
// within HealthCheckWindow is a health check; one that called a tool, or
// that stayed longer, is not.
func TestHealthCheckStatus(t *testing.T) {
	cases := []struct {
		name  string
		after func(b *rig)
		check bool
	}{
		{"lists only", func(b *rig) {
			b.agent.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			b.agent.send(`{"jsonrpc":"2.0","id":2,"method":"prompts/list"}`)
			b.agent.answer("1")
		}, true},
		{"calls a tool", func(b *rig) {
			b.agent.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}`)
			synctest.Wait()
		}, false},
		{"stays longer", func(b *rig) {
			b.agent.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			b.agent.answer("1")
			time.Sleep(HealthCheckWindow + time.Second) // the bubble's clock
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBubble(t, nil)
				b.handshake()
				tc.after(b)
				if st := b.sess.Status(); st.Check || st.EndedAt != nil {
					t.Errorf("live run: check %v, endedAt %v", st.Check, st.EndedAt)
				}
				b.end()
				st := b.sess.Status()
				if st.EndedAt == nil || st.Check != tc.check {
					t.Errorf("ended run: check %v (want %v), endedAt %v", st.Check, tc.check, st.EndedAt)
				}
			})
		})
	}
}
