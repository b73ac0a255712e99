package identity

import "testing"

func TestShortDigest(t *testing.T) {
	for in, want := range map[string]string{
		"": "none",
		"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": "0123456789ab…",
		"sha256:0123": "0123",
		// Values that stand where a digest does, in a change of identity,
		// are kept whole.
		"node v22.14.0":             "node v22.14.0",
		"/usr/local/bin/node-22.14": "/usr/local/bin/node-22.14",
	} {
		if got := ShortDigest(in); got != want {
			t.Errorf("ShortDigest(%q) = %q, want %q", in, got, want)
		}
	}
}
