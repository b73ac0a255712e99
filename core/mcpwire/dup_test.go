package mcpwire

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// members returns n members "k0":0 … "k(n-1)":(n-1), comma-separated.
func members(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	return b.String()
}

// TestParseFindsDuplicateMembers: a member name given twice makes the
// message invalid, at the top level and in params, whether the object has a
// few members (compared in place) or many (past the first 16, in a map),
// and whether the name is spelled with an escape.
func TestParseFindsDuplicateMembers(t *testing.T) {
	tests := []struct {
		name, line, want string // want: the duplicate named in the reason; "" for a valid message
	}{
		{"params, few, none", `{"jsonrpc":"2.0","id":1,"method":"m","params":{` + members(5) + `}}`, ""},
		{"params, few", `{"jsonrpc":"2.0","id":1,"method":"m","params":{` + members(5) + `,"k2":9}}`, "params.k2"},
		{"params, many, none", `{"jsonrpc":"2.0","id":1,"method":"m","params":{` + members(40) + `}}`, ""},
		{"params, many, duplicate of an early one", `{"jsonrpc":"2.0","id":1,"method":"m","params":{` + members(40) + `,"k3":1}}`, "params.k3"},
		{"params, many, duplicate of a late one", `{"jsonrpc":"2.0","id":1,"method":"m","params":{` + members(40) + `,"k33":1}}`, "params.k33"},
		{"params, duplicate at the 17th", `{"jsonrpc":"2.0","id":1,"method":"m","params":{` + members(16) + `,"k0":1}}`, "params.k0"},
		{"top level, escaped name", `{"jsonrpc":"2.0","id":1,"method":"m","\u006dethod":"n"}`, "method"},
		{"top level, many", `{"jsonrpc":"2.0","id":1,"method":"m",` + members(30) + `,"k20":0}`, "k20"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.line))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Parse: %v, want a valid message", err)
				}
				return
			}
			var ie *InvalidError
			if !errors.As(err, &ie) || ie.Code != CodeInvalidRequest || ie.Reason != fmt.Sprintf("member %q occurs more than once", tt.want) {
				t.Fatalf("Parse: %v, want an invalid request naming %q", err, tt.want)
			}
		})
	}
}

// TestParseMethodSpellings: the method is the string's value however it
// is spelled (escapes decoded), and a method that is not a string is
// refused.
func TestParseMethodSpellings(t *testing.T) {
	for raw, want := range map[string]string{
		`"tools/call"`:          "tools/call",
		`"tools\/call"`:         "tools/call",
		`"\u0074ools/call"`:     "tools/call",
		`"notifications/\"x\""`: `notifications/"x"`,
		`"été"`:                 "été",
		`""`:                    "",
	} {
		m, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":` + raw + `}`))
		if err != nil || m.Method != want {
			t.Errorf("method %s: got %v, %v; want %q", raw, m, err, want)
		}
	}
	for _, raw := range []string{`1`, `{"a":1}`, `["tools/call"]`} {
		_, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":` + raw + `}`))
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Reason != "method must be a string" {
			t.Errorf("method %s: got %v, want an invalid request", raw, err)
		}
	}
}
