package audit

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/portcullis/portcullis/core/ids"
)

// genericCanonical is the path the encoder replaces: json.Marshal, then
// RFC 8785 canonicalisation of the result.
func genericCanonical(t testing.TB, v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		t.Fatal(err)
	}
	return canon
}

// randText returns strings that exercise the escapes: controls, quotes,
// backslashes, HTML characters, U+2028, non-BMP characters, DEL and bytes
// that are not UTF-8.
func randText(r *rand.Rand) string {
	pieces := []string{"", "a", "echo", "01JQ7R4S4S0QJ7GZP1S2", "sha256:ab", `"`, `\`, "\n", "\t", "\x00", "\x1f", "\x7f",
		"<", ">", "&", "\u2028", "\u2029", "é", "日本", "😀", "\xff", "\xc3", "\xed\xa0\x80", "\ufffd", "/", " "}
	n := r.IntN(6)
	var b []byte
	for range n {
		b = append(b, pieces[r.IntN(len(pieces))]...)
	}
	return string(b)
}

func randStrings(r *rand.Rand) []string {
	switch r.IntN(3) {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	out := make([]string, 1+r.IntN(4))
	for i := range out {
		out[i] = randText(r)
	}
	return out
}

func randEvent(r *rand.Rand) any {
	if r.IntN(2) == 0 {
		return ToolCalled{Call: ids.CallID(randText(r)), AgentRun: ids.RunID(randText(r)), ServerLabel: randText(r), Epoch: ids.EpochID(randText(r)),
			CatalogRevision: []uint64{0, 1, 12, 1 << 40, maxExact}[r.IntN(5)], Tool: randText(r), ArgsDigest: randText(r),
			ArgKeys: randStrings(r), Decision: randText(r), Grant: ids.GrantID(randText(r)), CredentialScope: randStrings(r)}
	}
	return ToolCompleted{Call: ids.CallID(randText(r)), AgentRun: ids.RunID(randText(r)), ServerLabel: randText(r), Epoch: ids.EpochID(randText(r)), Tool: randText(r),
		Outcome: randText(r), DurationMS: []float64{0, 0.123, 1.5, 1234.567, 1e21, 1e-7, 5e-324, float64(r.IntN(1e6)) / 1000}[r.IntN(8)],
		Error: randText(r), LateAnswer: r.IntN(2) == 0}
}

// TestCanonicalEncoderMatchesGeneric: over 20,000 random events the
// encoder's output is byte-identical to json.Marshal + jcs.Transform.
func TestCanonicalEncoderMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		v := randEvent(r)
		got, ok := canonicalFast(v)
		if !ok {
			t.Fatalf("event %d: the encoder declined %+v", i, v)
		}
		if want := genericCanonical(t, v); !bytes.Equal(got, want) {
			t.Fatalf("event %d %+v:\n got %s\nwant %s", i, v, got, want)
		}
	}
}

// TestCanonicalEncoderDeclines: numbers that are not exact (a revision above
// 2^53, NaN) go to the generic path, which rounds or refuses them.
func TestCanonicalEncoderDeclines(t *testing.T) {
	if _, ok := canonicalFast(ToolCalled{CatalogRevision: maxExact + 1}); ok {
		t.Error("the encoder took a revision above 2^53")
	}
	if _, ok := canonicalFast(ToolCompleted{DurationMS: math.NaN()}); ok {
		t.Error("the encoder took NaN")
	}
	if _, ok := canonicalFast(map[string]any{"a": 1}); ok {
		t.Error("the encoder took a map")
	}
}

func FuzzCanonicalEncoder(f *testing.F) {
	f.Add("echo", "sha256:ab", "\u2028<\x00\xff", uint64(3), 1.25, true)
	f.Fuzz(func(t *testing.T, a, b, c string, rev uint64, d float64, late bool) {
		for _, v := range []any{
			ToolCalled{Call: ids.CallID(a), AgentRun: ids.RunID(b), ServerLabel: c, Epoch: ids.EpochID(a + c), CatalogRevision: rev, Tool: b, ArgsDigest: c, ArgKeys: []string{a, b}, Decision: c, Grant: ids.GrantID(a), CredentialScope: []string{c}},
			ToolCompleted{Call: ids.CallID(a), AgentRun: ids.RunID(b), ServerLabel: c, Epoch: ids.EpochID(b), Tool: a, Outcome: c, DurationMS: d, Error: b, LateAnswer: late},
		} {
			got, ok := canonicalFast(v)
			raw, err := json.Marshal(v)
			if err != nil {
				if ok {
					t.Fatalf("the encoder took %+v, which json.Marshal refuses (%v)", v, err)
				}
				continue
			}
			want, err := jcs.Transform(raw)
			if !ok {
				continue // declined: the generic path decides
			}
			if err != nil {
				t.Fatalf("the encoder took %+v, which jcs refuses (%v)", v, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%+v:\n got %s\nwant %s", v, got, want)
			}
		}
	})
}

func BenchmarkCanonicalToolCalled(b *testing.B) {
	v := ToolCalled{Call: "01JQ7R4S4S0QJ7GZP1S2ABCDEF", AgentRun: "01JQ7R4S4S0QJ7GZP1S2ABCDEG", ServerLabel: "echo", Epoch: "01JQ7R4S4S0QJ7GZP1S2ABCDEH",
		CatalogRevision: 3, Tool: "echo", ArgsDigest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ArgKeys: []string{"message"}, Decision: "allow"}
	b.Run("encoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			canonicalFields(v)
		}
	})
	b.Run("generic", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			raw, _ := json.Marshal(v)
			jcs.Transform(raw)
		}
	})
}
