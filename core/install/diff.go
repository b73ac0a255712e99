package install

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// unifiedDiff returns the differences between a and b as a unified diff (the
// format of `diff -u`, POSIX.1-2017 "diff" with -u) with three lines of context,
// headed by "--- nameA" and "+++ nameB"; it returns "" when a equals b. A missing
// final newline is marked with "\ No newline at end of file".
func unifiedDiff(nameA, nameB, a, b string) string {
	if a == b {
		return ""
	}
	return formatUnified(nameA, nameB, diffLines(splitLines(a), splitLines(b)))
}

// editDiff is unifiedDiff(nameA, nameB, old, apply(old, edits)) computed edit by
// edit: only the lines an edit touches are compared, so the cost follows the
// size of the edits, not of the file (Claude Code's ~/.claude.json can hold
// megabytes of history around a few server entries).
func editDiff(nameA, nameB string, old []byte, edits []edit) string {
	if len(edits) == 0 {
		return ""
	}
	edits = slices.Clone(edits)
	slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
	lineStart := func(p int) int { return bytes.LastIndexByte(old[:p], '\n') + 1 }
	lineEnd := func(p int) int {
		if i := bytes.IndexByte(old[p:], '\n'); i >= 0 {
			return p + i + 1
		}
		return len(old)
	}
	// Group edits into spans of whole lines; edits whose lines touch share one.
	type span struct {
		start, end int
		edits      []edit
	}
	var spans []span
	for _, e := range edits {
		s, en := lineStart(e.start), lineEnd(max(e.end, e.start))
		if n := len(spans); n > 0 && s <= spans[n-1].end {
			spans[n-1].end = max(spans[n-1].end, en)
			spans[n-1].edits = append(spans[n-1].edits, e)
			continue
		}
		spans = append(spans, span{s, en, []edit{e}})
	}
	var ops []diffOp
	ax, ay, pos := 0, 0, 0
	for _, sp := range spans {
		for _, l := range splitLines(string(old[pos:sp.start])) {
			ops = append(ops, diffOp{' ', l, ax, ay})
			ax++
			ay++
		}
		local := make([]edit, len(sp.edits))
		for i, e := range sp.edits {
			local[i] = edit{e.start - sp.start, e.end - sp.start, e.text}
		}
		before := old[sp.start:sp.end]
		after := apply(before, local)
		for _, o := range diffLines(splitLines(string(before)), splitLines(string(after))) {
			o.ax += ax
			o.ay += ay
			ops = append(ops, o)
		}
		ax += len(splitLines(string(before)))
		ay += len(splitLines(string(after)))
		pos = sp.end
	}
	for _, l := range splitLines(string(old[pos:])) {
		ops = append(ops, diffOp{' ', l, ax, ay})
		ax++
		ay++
	}
	return formatUnified(nameA, nameB, ops)
}

// formatUnified prints an edit script as unified diff hunks with three lines of
// context; it returns "" when the script changes nothing.
func formatUnified(nameA, nameB string, ops []diffOp) string {
	if !slices.ContainsFunc(ops, func(o diffOp) bool { return o.kind != ' ' }) {
		return ""
	}
	const context = 3
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	// Group the edit script into hunks.
	i := 0
	for i < len(ops) {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(i-context, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*context {
				end = min(end+context, len(ops))
				break
			}
			end = run
		}
		ax, ay := ops[start].ax, ops[start].ay
		var na, nb int
		for _, o := range ops[start:end] {
			if o.kind != '+' {
				na++
			}
			if o.kind != '-' {
				nb++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(ax, na), hunkRange(ay, nb))
		for _, o := range ops[start:end] {
			line := o.text
			out.WriteByte(o.kind)
			out.WriteString(line)
			if !strings.HasSuffix(line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
	return out.String()
}

func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines splits s after each newline; the last line may lack one.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// diffOp is one line of an edit script: kept (' '), removed ('-') or added ('+');
// ax and ay are the line's index in a and b (for '+', ax is where it goes in a).
type diffOp struct {
	kind   byte
	text   string
	ax, ay int
}

// diffLines returns a shortest edit script turning x into y (Myers, "An O(ND)
// Difference Algorithm and Its Variations", 1986), after trimming the common
// prefix and suffix.
func diffLines(x, y []string) []diffOp {
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	mx, my := x[pre:len(x)-suf], y[pre:len(y)-suf]
	var ops []diffOp
	for i := range pre {
		ops = append(ops, diffOp{' ', x[i], i, i})
	}
	var middle []diffOp
	switch {
	case len(mx) == 0 || len(my) == 0: // only additions or only removals
		for i, l := range mx {
			middle = append(middle, diffOp{'-', l, i, 0})
		}
		for i, l := range my {
			middle = append(middle, diffOp{'+', l, len(mx), i})
		}
	default:
		middle = myers(mx, my)
	}
	for _, o := range middle {
		o.ax += pre
		o.ay += pre
		ops = append(ops, o)
	}
	for i := range suf {
		ops = append(ops, diffOp{' ', x[len(x)-suf+i], len(x) - suf + i, len(y) - suf + i})
	}
	return ops
}

func myers(x, y []string) []diffOp {
	n, m := len(x), len(y)
	maxD := n + m
	if maxD == 0 {
		return nil
	}
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	// trace[d] holds v[k] for k in [-d-1, d+1] as it was when round d began,
	// so memory grows with the square of the edit distance, not of the files.
	var trace [][]int
	for d := 0; d <= maxD; d++ {
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
		done := false
		for k := -d; k <= d; k += 2 {
			var px int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				px = v[off+k+1]
			} else {
				px = v[off+k-1] + 1
			}
			py := px - k
			for px < n && py < m && x[px] == y[py] {
				px++
				py++
			}
			v[off+k] = px
			if px >= n && py >= m {
				done = true
				break
			}
		}
		if done {
			break
		}
	}
	// Walk back through the trace.
	var rev []diffOp
	px, py := n, m
	for d := len(trace) - 1; d >= 0; d-- {
		vd := func(k int) int { return trace[d][k+d+1] }
		k := px - py
		var prevK int
		if k == -d || (k != d && vd(k-1) < vd(k+1)) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := vd(prevK)
		prevY := prevX - prevK
		for px > prevX && py > prevY {
			px--
			py--
			rev = append(rev, diffOp{' ', x[px], px, py})
		}
		if d > 0 {
			if px == prevX {
				py--
				rev = append(rev, diffOp{'+', y[py], px, py})
			} else {
				px--
				rev = append(rev, diffOp{'-', x[px], px, py})
			}
		}
		px, py = prevX, prevY
	}
	ops := make([]diffOp, len(rev))
	for i, o := range rev {
		ops[len(rev)-1-i] = o
	}
	return ops
}
