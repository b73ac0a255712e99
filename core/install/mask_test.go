package install

import "testing"

func TestMaskTextShortSecretsStayWhole(t *testing.T) {
	text := `+      "env": {"API_KEY": "p", "PATH": "/usr/bin"},` + "\n" + `       "mcpServers": {"x.js": "sk-live-0123456789abcdef"}`
	got := maskText(text, []string{"p", "sk-live-0123456789abcdef"})
	want := `+      "env": {"API_KEY": "…", "PATH": "/usr/bin"},` + "\n" + `       "mcpServers": {"x.js": "sk-…cdef"}`
	if got != want {
		t.Errorf("maskText:\n got %s\nwant %s", got, want)
	}
	// A long secret embedded in other text is masked there too.
	if got := maskText(`"url": "https://h/?t=ghp_abcdefghijklmnop"`, []string{"ghp_abcdefghijklmnop"}); got != `"url": "https://h/?t=ghp_…mnop"` {
		t.Errorf("embedded long secret: %s", got)
	}
}
