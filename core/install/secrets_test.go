package install

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSecret(t *testing.T) {
	tests := []struct {
		name, value string
		want        bool
	}{
		// By shape.
		{"X", "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngABCD1234", true},
		{"CONFIG", "sk-proj-Abc123Def456Ghi789", true},
		{"ANTHROPIC", "sk-ant-api03-abcdefghijklmnop", true},
		{"SLACK", "xoxb-1234567890-0987654321-AbCdEf", true},
		{"AWS_ID", "AKIAIOSFODNN7EXAMPLE", true},
		{"DATABASE_URL", "postgres://app:s3cretpw@localhost:5432/app", true},
		{"SOMETHING", "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZg", true}, // long, random-looking
		{"SHORT_PREFIX", "sk-abc", false},                             // too short to be a token
		// By name.
		{"OPENAI_API_KEY", "abc123", true},
		{"apiKey", "whatever-it-is", true},
		{"GITHUB_TOKEN", "t0k3n", true},
		{"DB_PASSWORD", "hunter2", true},
		{"CLIENT_SECRET", "shh", true},
		{"AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", true},
		// Names that look like secrets, values that are not.
		{"API_KEY_FILE", "/etc/keys/api.key", false},
		{"GOOGLE_APPLICATION_CREDENTIALS", "~/gcp/creds.json", false},
		{"USE_API_KEY", "true", false},
		{"TOKEN_LIMIT", "4096", false},
		{"AUTH_URL", "https://auth.example.com/login", false},
		// Not secrets at all.
		{"LOG_LEVEL", "debug", false},
		{"MAX_TOKENS", "a lot", false},
		{"HOTKEY", "ctrl+k", false},
		{"MONKEY", "banana", false},
		{"PATH", "/usr/local/bin:/usr/bin", false},
		{"UUID_LIKE_HEX", "deadbeefdeadbeefdeadbeef", false}, // low entropy
		{"DOCS_URL", "https://example.com/docs", false},
		// Nothing to move.
		{"GITHUB_TOKEN", "", false},
		{"PERPLEXITY_API_KEY", "${input:perplexity-key}", false},
		{"API_KEY", "${API_KEY:-}", false},
	}
	for _, tt := range tests {
		got, why := Secret(tt.name, tt.value)
		if got != tt.want {
			t.Errorf("Secret(%q, %q) = %v (%s), want %v", tt.name, tt.value, got, why, tt.want)
		}
		if got && why == "" {
			t.Errorf("Secret(%q, %q) gives no reason", tt.name, tt.value)
		}
	}
}

func TestMask(t *testing.T) {
	tests := map[string]string{
		"sk-proj-Abc123Def456Ghi789abcd":          "sk-…abcd",
		"ghp_R4nd0mT0k3nV4lu3F0rT3st1ngABCD1234":  "ghp_…1234",
		"xoxb-1234567890-0987654321-AbCdEfGhWxyz": "xoxb-…Wxyz",
		"a-long-secret-without-prefix":            "…efix",
		"hunter2":                                 "…",
		"":                                        "…",
		"ünïcödé-sêcrèt-välüé":                    "…älüé",
	}
	for in, want := range tests {
		if got := Mask(in); got != want {
			t.Errorf("Mask(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMaskText(t *testing.T) {
	secret := `sk-abc"def\ghijklmnop`
	text := `"KEY": "sk-abc\"def\\ghijklmnop", raw sk-abc"def\ghijklmnop`
	got := maskText(text, []string{secret})
	want := `"KEY": "sk-…mnop", raw sk-…mnop`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("maskText (-want +got):\n%s", diff)
	}
}

func TestSanitizeLabel(t *testing.T) {
	tests := map[string]string{
		"github":                  "github",
		"@acme/weather server":    "acme-weather-server",
		"My Server (dev)":         "My-Server-dev",
		"...dots":                 "dots",
		"ü":                       "server",
		"":                        "server",
		"a.b_c-9":                 "a.b_c-9",
		string(make([]byte, 100)): "server",
	}
	long := "x"
	for range 80 {
		long += "y"
	}
	tests[long] = long[:64]
	for in, want := range tests {
		got := SanitizeLabel(in)
		if got != want {
			t.Errorf("SanitizeLabel(%q) = %q, want %q", in, got, want)
		}
	}
	if got := withSuffix(long[:64], 12); len(got) != 64 || got[61:] != "-12" {
		t.Errorf("withSuffix(64 chars, 12) = %q (%d bytes)", got, len(got))
	}
}
