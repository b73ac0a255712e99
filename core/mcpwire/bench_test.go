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

// BenchmarkTolerantReadParseRewrite is BenchmarkReadParseRewrite with the
// tolerant reader meant for a server's output (NewTolerantReader), on the
// same line.
func BenchmarkTolerantReadParseRewrite(b *testing.B) {
	line := `{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"echo","arguments":{"message":"ping"},"_meta":{"progressToken":"t-42"}}}` + "\n"
	in := []byte(strings.Repeat(line, 1024))
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		r := NewTolerantReader(bytes.NewReader(in), 0, nil)
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

// BenchmarkReadLargeResult reads a 5 MB tool result through each reader
// and parses it: the cost of the tolerant reader's scan of the line.
func BenchmarkReadLargeResult(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 5<<20) + `"}]}}` + "\n")
	for _, tc := range []struct {
		name string
		open func([]byte) *Reader
	}{
		{"strict", func(in []byte) *Reader { return NewReader(bytes.NewReader(in), 0) }},
		{"tolerant", func(in []byte) *Reader { return NewTolerantReader(bytes.NewReader(in), 0, nil) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for range b.N {
				l, err := tc.open(line).ReadLine()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Parse(l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseLargeUnicode parses a 5 MB result of non-ASCII text with an
// escape every 8 bytes: the worst case for checking that strings are valid
// Unicode (utf8.Valid decodes every rune; the search for \u escapes meets a
// backslash every 8 bytes).
func BenchmarkParseLargeUnicode(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + strings.Repeat("é漢字😀\\n\\\"", 5<<20/16) + `"}]}}`)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for range b.N {
		if _, err := Parse(line); err != nil {
			b.Fatal(err)
		}
	}
}
