package catalog

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode"
)

// Bounds of a spelling fix (spellingFixes).
const (
	maxSpellingFixes   = 2 // words changed
	minSpellingLetters = 4 // letters of the shorter word, unless only the case differs
)

// spellingFixes reports whether cur is old with a few words' spelling
// corrected, and lists them ("recieve" → "receive"): the same words but at
// most maxSpellingFixes, each pair differing only in letter case, or by one
// slip of the fingers (typoEdit) between words of at least
// minSpellingLetters letters, neither holding a digit. Anything else (a
// word added or removed, a short word changed — "not" → "now" —, a
// number, a letter no slip explains — "remote" → "remove", "send" →
// "spend") is a change of wording: the effects the text describes may
// have changed.
func spellingFixes(old, cur string) ([]string, bool) {
	ow, nw := strings.Fields(old), strings.Fields(cur)
	if len(ow) != len(nw) {
		return nil, false
	}
	var fixes []string
	for i := range ow {
		a, b := ow[i], nw[i]
		if a == b {
			continue
		}
		if len(fixes) == maxSpellingFixes || strings.ContainsAny(a+b, "0123456789") {
			return nil, false
		}
		ar, br := []rune(strings.ToLower(a)), []rune(strings.ToLower(b))
		if !strings.EqualFold(a, b) && (min(len(ar), len(br)) < minSpellingLetters || !typoEdit(ar, br)) {
			return nil, false
		}
		fixes = append(fixes, fmt.Sprintf("%q → %q", truncate(a, 40), truncate(b, 40)))
	}
	return fixes, len(fixes) > 0
}

// typoEdit reports whether a and b (lower case) differ by one slip of the
// fingers on a QWERTY keyboard: two adjacent letters swapped; one letter
// struck for a neighbouring key; or one character added (or left out) that
// is punctuation, a doubled letter, or a key next to a letter beside it.
func typoEdit(a, b []rune) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	i := 0
	for i < len(a) && a[i] == b[i] {
		i++
	}
	switch len(b) - len(a) {
	case 0:
		if i == len(a) {
			return false // equal
		}
		if slices.Equal(a[i+1:], b[i+1:]) {
			return nearKeys(a[i], b[i]) || !unicode.IsLetter(a[i]) || !unicode.IsLetter(b[i])
		}
		return i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] && slices.Equal(a[i+2:], b[i+2:])
	case 1:
		if !slices.Equal(a[i:], b[i+1:]) {
			return false
		}
		x := b[i] // the character b has and a lacks
		if !unicode.IsLetter(x) {
			return true
		}
		for _, j := range []int{i - 1, i + 1} {
			if j >= 0 && j < len(b) && (b[j] == x || nearKeys(b[j], x)) {
				return true
			}
		}
	}
	return false
}

// qwertyRows are the letter rows of a QWERTY keyboard, each offset (in key
// widths) from the top one as keyboards stagger them.
var qwertyRows = []struct {
	keys   string
	offset float64
}{{"qwertyuiop", 0}, {"asdfghjkl", 0.25}, {"zxcvbnm", 0.75}}

// nearKeys reports whether letters a and b are neighbouring keys of a
// QWERTY keyboard. Another layout's slips read as changes of wording:
// the person is asked once more, never less.
func nearKeys(a, b rune) bool {
	pos := func(r rune) (int, float64, bool) {
		for row, k := range qwertyRows {
			if i := strings.IndexRune(k.keys, r); i >= 0 {
				return row, float64(i) + k.offset, true
			}
		}
		return 0, 0, false
	}
	ra, xa, okA := pos(a)
	rb, xb, okB := pos(b)
	if !okA || !okB || a == b {
		return false
	}
	dx := math.Abs(xa - xb)
	switch ra - rb {
	case 0:
		return dx == 1
	case 1, -1:
		return dx < 1
	}
	return false
}
