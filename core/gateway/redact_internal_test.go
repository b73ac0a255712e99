package gateway

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// secretOut redacts one secret, as *supervisor.Process does for the
// credentials it was given.
type secretOut struct{}

func (secretOut) Redact(s string) string     { return strings.ReplaceAll(s, "tok-123456", "…(api)") }
func (secretOut) LogOutput(msg, text string) {}

// TestSessionLogRedacts: what the session logs of a server (an id it
// chose, an error, a group) has the credential's value replaced, in the
// message too; before an epoch has a process nothing is changed.
func TestSessionLogRedacts(t *testing.T) {
	var b bytes.Buffer
	red := &logRedactor{}
	log := slog.New(redactingHandler{inner: slog.NewTextHandler(&b, nil), redact: red}).With("server", "s")
	log.Info("before tok-123456")
	if !strings.Contains(b.String(), "before tok-123456") {
		t.Fatalf("without a redactor the line changed: %s", b.String())
	}
	b.Reset()
	var r serverOutput = secretOut{}
	red.p.Store(&r)
	log.Warn("server answered an unknown request tok-123456", "id", `"tok-123456"`, "err", errors.New("bad tok-123456"),
		slog.Group("g", "m", "x tok-123456"), "n", 7)
	out := b.String()
	if strings.Contains(out, "tok-123456") {
		t.Errorf("the log holds the secret: %s", out)
	}
	for _, want := range []string{"request …(api)", `id="\"…(api)\""`, `err="bad …(api)"`, `g.m="x …(api)"`, "n=7", "server=s"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s: %s", want, out)
		}
	}
}
