//go:build unix

package supervisor

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRing(t *testing.T) {
	tests := []struct {
		name   string
		limit  int
		writes []string
		n      int
		want   []string
	}{
		{"lines split across writes", 100, []string{"ab", "c\nde", "f\n"}, 0, []string{"abc", "def"}},
		{"partial line last", 100, []string{"one\ntw"}, 0, []string{"one", "tw"}},
		{"CRLF trimmed", 100, []string{"a\r\nb\r\n"}, 0, []string{"a", "b"}},
		{"n limits newest", 100, []string{"1\n2\n3\n4\n"}, 2, []string{"3", "4"}},
		{"n counts the partial", 100, []string{"1\n2\n3"}, 2, []string{"2", "3"}},
		{"oldest dropped at the limit", 6, []string{"aa\nbb\ncc\n"}, 0, []string{"bb", "cc"}},
		{"blank lines cost a byte", 3, []string{"\n\n\n\n\n"}, 0, []string{"", "", ""}},
		{"long line cut to limit-1", 5, []string{"abcdefgh\nxy\n"}, 0, []string{"xy"}},
		{"long line alone", 5, []string{"ab\nabcdefgh\n"}, 0, []string{"abcd"}},
		{"partial evicts old lines", 6, []string{"aa\nbb\nccc"}, 0, []string{"bb", "ccc"}},
		{"invalid UTF-8 replaced", 100, []string{"a\xffb\n"}, 0, []string{"a\uFFFDb"}},
		{"empty", 100, nil, 0, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(tt.limit)
			for _, w := range tt.writes {
				r.write([]byte(w))
			}
			if diff := cmp.Diff(tt.want, r.tail(tt.n)); diff != "" {
				t.Errorf("tail (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRingStaysBounded(t *testing.T) {
	r := newRing(1000)
	for i := range 100_000 {
		r.write([]byte(strings.Repeat("y", i%50) + "\n"))
	}
	size := 0
	for _, l := range r.tail(0) {
		size += len(l) + 1
	}
	if size > 1000 {
		t.Errorf("kept %d bytes, limit 1000", size)
	}
	if len(r.lines) > 2*1000+64 {
		t.Errorf("backing slice holds %d lines", len(r.lines))
	}
}
