//go:build unix

package supervisor_test

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/portcullis/portcullis/core/supervisor"
)

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSecretsRedactedFromOutput: a server that prints its injected secret
// on stderr has it replaced in StderrTail and in Exit, and LogOutput writes
// it to the log redacted; a flood of output reaches the log bounded, with
// the count of lines dropped.
func TestSecretsRedactedFromOutput(t *testing.T) {
	const secret = "PC-7f3a9c-0123456789abcdef"
	var log lockedBuffer
	o := fast
	o.Logger = slog.New(slog.NewTextHandler(&log, nil))
	p := start(t, supervisor.Spec{
		Label: "leaky", Command: "/bin/sh",
		Args:    []string{"-c", `echo "my token is $TOKEN" >&2; printf 'cut %s' "$(printf %s "$TOKEN" | cut -c1-10)" >&2`},
		Env:     []string{"TOKEN=" + secret},
		Secrets: []supervisor.Secret{{Scope: "leaky-token", Value: secret}},
	}, o)
	if _, err := io.Copy(io.Discard, p.Stdout()); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	want := []string{"my token is …(leaky-token)", "cut …(leaky-token)"}
	for what, got := range map[string][]string{"StderrTail": p.StderrTail(0), "Exit().StderrTail": p.Exit().StderrTail} {
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s = %q, want %q", what, got, want)
		}
	}
	for i := range 500 {
		p.LogOutput("server diagnostic", "junk line "+secret+" "+strings.Repeat("x", i))
	}
	if err := p.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	out := log.String()
	if strings.Contains(out, secret) || strings.Contains(out, secret[:10]) {
		t.Errorf("the log holds the secret:\n%s", out)
	}
	if n := strings.Count(out, "msg=\"server diagnostic\""); n < 50 || n > 60 {
		t.Errorf("%d of 500 lines at once reached the log, want the burst of 50 (and what the rate adds while the test runs)", n)
	}
	if !strings.Contains(out, "server output dropped from the log") || !strings.Contains(out, "droppedThisEpoch=") {
		t.Errorf("the log does not say that lines were dropped:\n%s", out)
	}
	if !strings.Contains(out, "…(leaky-token)") {
		t.Errorf("the log lacks the redacted lines:\n%s", out)
	}
}
