package ids

import (
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// TestMintIncreasing: each kind is a strict ULID behind its prefix, with the
// time it was minted, and identifiers minted one after the other (of any
// kind) are strictly increasing, even within one millisecond.
func TestMintIncreasing(t *testing.T) {
	kinds := []struct {
		prefix string
		mint   func() string
	}{
		{"", func() string { return string(NewEpoch()) }},
		{"", func() string { return string(NewRun()) }},
		{"", func() string { return string(NewCall()) }},
		{"apr_", func() string { return string(NewRequest()) }},
		{"grt_", func() string { return string(NewGrant()) }},
	}
	start := time.Now()
	prev := ""
	for i := range 2000 {
		k := kinds[i%len(kinds)]
		got := k.mint()
		rest, ok := strings.CutPrefix(got, k.prefix)
		if !ok {
			t.Fatalf("%q lacks prefix %q", got, k.prefix)
		}
		id, err := ulid.ParseStrict(rest)
		if err != nil {
			t.Fatalf("%q: %v", got, err)
		}
		if rest <= prev {
			t.Fatalf("%q not after %q", rest, prev)
		}
		prev = rest
		if at := ulid.Time(id.Time()); at.Before(start.Truncate(time.Millisecond)) || at.After(time.Now()) {
			t.Fatalf("%q: time %v outside [%v, now]", got, at, start)
		}
	}
}
