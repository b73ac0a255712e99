package install

import (
	"fmt"
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
	x, y := splitLines(a), splitLines(b)
	ops := diffLines(x, y)
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
	for _, o := range myers(mx, my) {
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
	off := maxD
	v := make([]int, 2*maxD+2)
	var trace [][]int
	for d := 0; d <= maxD; d++ {
		trace = append(trace, append([]int(nil), v...))
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
			trace = append(trace, v)
			break
		}
	}
	// Walk back through the trace.
	var rev []diffOp
	px, py := n, m
	for d := len(trace) - 2; d >= 0; d-- {
		vd := trace[d]
		k := px - py
		var prevK int
		if k == -d || (k != d && vd[off+k-1] < vd[off+k+1]) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := vd[off+prevK]
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
	for px > 0 && py > 0 {
		px--
		py--
		rev = append(rev, diffOp{' ', x[px], px, py})
	}
	ops := make([]diffOp, len(rev))
	for i, o := range rev {
		ops[len(rev)-1-i] = o
	}
	return ops
}
