package gateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/audit"
)

func TestParseCall(t *testing.T) {
	digestOf := func(args string) string {
		d, _ := audit.ArgsSummary([]byte(args))
		return d
	}
	for _, tc := range []struct {
		params  string
		problem string
		want    toolCall // msg aside
	}{
		{params: `{"name":"t"}`, want: toolCall{name: "t", digest: digestOf(`{}`), keys: []string{}}},
		{params: `{"name":"t","arguments":{"b":1, "a":[2]},"_meta":{"progressToken":"p1","x":true}}`, want: toolCall{
			name: "t", args: []byte(`{"b":1, "a":[2]}`), digest: digestOf(`{"a":[2],"b":1}`), keys: []string{"a", "b"},
			token: []byte(`"p1"`), meta: []byte(`{"progressToken":"p1","x":true}`)}},
		{params: `{"name":"t","_meta":{}}`, want: toolCall{name: "t", digest: digestOf(`{}`), keys: []string{}, meta: []byte(`{}`)}},
		{params: ``, problem: "params is missing"},
		{params: `[1]`, problem: "params is not an object"},
		{params: `{"arguments":{}}`, problem: "params.name is missing"},
		{params: `{"name":7}`, problem: "params.name is not a string"},
		{params: `{"name":""}`, problem: "params.name is empty"},
	} {
		line := `{"jsonrpc":"2.0","id":1,"method":"tools/call"`
		if tc.params != "" {
			line += `,"params":` + tc.params
		}
		m := mustParse(t, line+`}`)
		c, problem := parseCall(m)
		if problem != tc.problem {
			t.Errorf("%s: problem %q, want %q", tc.params, problem, tc.problem)
			continue
		}
		if problem != "" {
			if c != nil {
				t.Errorf("%s: a call with a problem", tc.params)
			}
			continue
		}
		if c.msg != m {
			t.Errorf("%s: the call does not keep its message (raw bytes to forward)", tc.params)
		}
		got := *c
		got.msg = nil
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(toolCall{})); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", tc.params, diff)
		}
	}
}
