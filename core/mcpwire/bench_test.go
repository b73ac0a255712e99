package mcpwire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// BenchmarkReadParseRewrite is the gateway's per-message work on the hot
// path: frame one line, classify it, and splice a new id into it.
func BenchmarkReadParseRewrite(b *testing.B) {
	line := `{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"echo","arguments":{"message":"ping"},"_meta":{"progressToken":"t-42"}}}` + "\n"
	in := []byte(strings.Repeat(line, 1024))
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		r := NewReader(bytes.NewReader(in), 0)
		for j := 0; j < 1024 && i < b.N; j, i = j+1, i+1 {
			l, err := r.ReadLine()
			if err != nil {
				b.Fatal(err)
			}
			m, err := Parse(l)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := SetMember(m.Raw, "id", NumberID(int64(i))); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkParseLargeResult parses a 5 MB tool result (validation and the
// member scan run over every byte once each).
func BenchmarkParseLargeResult(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 5<<20) + `"}]}}`)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for range b.N {
		m, err := Parse(line)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := SetMember(m.Raw, "id", []byte(`"agent-7"`)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadOversized is the cost of discarding a 32 MiB line (one byte
// over the limit) while finding the id it ends with.
func BenchmarkReadOversized(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"` + strings.Repeat("x", DefaultMaxMessage) + `"}]},"id":7}` + "\n")
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for range b.N {
		_, err := NewReader(bytes.NewReader(line), 0).ReadLine()
		var tl *TooLargeError
		if !errors.As(err, &tl) || string(tl.ID) != "7" {
			b.Fatal(err)
		}
	}
}
