package app

import (
	"regexp"
	"strings"
)

// causeLine returns, of the last lines a server wrote to stderr before it
// failed, the one that most likely names the cause ("Error: Cannot find
// module '/src/server.mjs'" rather than the "Node.js v20.20.2" that ends
// Node's report), or "" when no line looks like an error. A Python
// traceback names its cause last; other runtimes (Node, Go, Rust, Java)
// first, before their stack.
func causeLine(tail []string) string {
	var found []string
	traceback := false
	for _, l := range tail {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "Traceback (most recent call last)") {
			traceback = true
			continue
		}
		if strings.HasPrefix(t, "at ") || strings.HasPrefix(t, "File \"") || t == "" {
			continue // a stack frame
		}
		if errorLine.MatchString(t) {
			found = append(found, t)
		}
	}
	switch {
	case len(found) == 0:
		return ""
	case traceback:
		return found[len(found)-1]
	}
	return found[0]
}

// errorLine matches a line that reports an error: "Error: …",
// "ModuleNotFoundError: …", "panic: …", "fatal: …", "error[E0425]: …", or
// words a person would read as the cause.
var errorLine = regexp.MustCompile(`^([A-Za-z_][\w.$]*)?(Error|Exception|error|ERROR|panic|fatal|FATAL)\b[^:]{0,40}:|(?i)\b(cannot|can't|could not|couldn't|no such file|not found|permission denied|address already in use|unexpected token)\b`)
