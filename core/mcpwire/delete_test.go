package mcpwire

import (
	"strings"
	"testing"
)

func TestDeleteMembers(t *testing.T) {
	drop := func(k string) bool { return strings.HasPrefix(k, "x/") }
	tests := []struct {
		in, want string
		names    []string
	}{
		{`{}`, `{}`, nil},
		{`{"a":1}`, `{"a":1}`, nil},
		{`{"x/a":1}`, `{}`, []string{"x/a"}},
		{`{ "x/a" : 1 , "b" : [1, 2] }`, `{"b" : [1, 2]}`, []string{"x/a"}},
		{`{"a":{"x/n":1},"x/b":"}","c":"x/d"}`, `{"a":{"x/n":1},"c":"x/d"}`, []string{"x/b"}},
		{`{"x/a":1,"x\/a":2,"\u0078/b":3,"k":true,"x/a":4}`, `{"k":true}`, []string{"x/a", "x/a", "x/b", "x/a"}},
	}
	for _, tc := range tests {
		got, names, err := DeleteMembers([]byte(tc.in), drop)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if string(got) != tc.want || strings.Join(names, ",") != strings.Join(tc.names, ",") {
			t.Errorf("DeleteMembers(%s) = %s, %v; want %s, %v", tc.in, got, names, tc.want, tc.names)
		}
	}
	for _, bad := range []string{`[]`, `"x"`, `{"a":1`} {
		if _, _, err := DeleteMembers([]byte(bad), drop); err == nil {
			t.Errorf("DeleteMembers(%s): no error", bad)
		}
	}
}
