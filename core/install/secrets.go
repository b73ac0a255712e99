package install

import (
	"math"
	"net/url"
	"strconv"
	"strings"
)

// SecretStore keeps the secret value of a credential scope (docs/DESIGN.md,
// "Authorization and credentials"): the macOS Keychain or the Secret Service on
// Linux, implemented in platform/. Install only calls Set for scopes it creates and
// reads back with Get to check the value arrived; uninstall calls Get for
// --restore-secrets. Get returns an error wrapping fs.ErrNotExist (or any error)
// when the scope has no secret.
type SecretStore interface {
	// Set stores secret under scope, replacing any previous value.
	Set(scope string, secret []byte) error
	// Get returns the secret stored under scope.
	Get(scope string) ([]byte, error)
}

// knownPrefixes start tokens of well-known services. A value that starts with one
// of them (and is long enough to be a token) is a secret whatever its variable's
// name. The list is deliberately short and specific.
var knownPrefixes = []string{
	"sk-", "sk_live_", "sk_test_", "rk_live_", "pk_live_", // OpenAI, Anthropic (sk-ant-), Stripe
	"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", // GitHub
	"glpat-",                                    // GitLab
	"xoxb-", "xoxp-", "xoxa-", "xoxr-", "xapp-", // Slack
	"AKIA", "ASIA", // AWS access key IDs
	"AIza",     // Google API keys
	"ya29.",    // Google OAuth access tokens
	"npm_",     // npm
	"pypi-",    // PyPI
	"hf_",      // Hugging Face
	"ntn_",     // Notion
	"lin_api_", // Linear
	"SG.",      // SendGrid
	"shpat_",   // Shopify
	"dop_v1_",  // DigitalOcean
}

// secretWords are words of a variable name (split at '_', '-' and '.') that make
// its value a secret.
var secretWords = map[string]bool{
	"TOKEN": true, "SECRET": true, "PASSWORD": true, "PASSWD": true, "PASS": true,
	"APIKEY": true, "CREDENTIAL": true, "CREDENTIALS": true, "PAT": true, "PASSPHRASE": true,
	"COOKIE": true, "BEARER": true, "KEY": true, "PRIVATEKEY": true, "ACCESSKEY": true,
	"SECRETKEY": true, "AUTHTOKEN": true,
}

// Secret says whether the environment variable name=value looks like a secret
// (an API key, token or password), and why, in words for a person:
//
//   - by shape: a known token prefix ("sk-", "ghp_", "xoxb-", "AKIA"…), a URL with a
//     password in it, or a long random-looking string (20 characters or more, no
//     spaces, at least 3.5 bits of Shannon entropy per character, letters and
//     digits mixed);
//   - by name: a name with a word (between '_', '-' or '.') such as KEY, APIKEY,
//     TOKEN, SECRET, PASSWORD, PASS or CREDENTIALS (OPENAI_API_KEY, GITHUB_TOKEN,
//     DB_PASSWORD, apiKey…), unless the value is a path, a number, a boolean or a
//     URL without a password or query.
//
// Empty values and variable references ("${input:key}") are never secrets: there
// is nothing to move.
func Secret(name, value string) (bool, string) {
	if value == "" || strings.Contains(value, "${") {
		return false, ""
	}
	for _, p := range knownPrefixes {
		if strings.HasPrefix(value, p) && len(value) >= len(p)+8 {
			return true, "starts with " + p
		}
	}
	if u, err := url.Parse(value); err == nil && u.Scheme != "" && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return true, "URL with a password"
		}
	}
	if notSecretShape(value) {
		return false, ""
	}
	up := strings.ToUpper(name)
	words := strings.FieldsFunc(up, func(r rune) bool { return r == '_' || r == '-' || r == '.' })
	for _, w := range words {
		if secretWords[w] {
			return true, "name contains " + w
		}
	}
	if randomLooking(value) {
		return true, "long random-looking value"
	}
	return false, ""
}

// notSecretShape reports values that name a place or a setting rather than hold a
// secret: paths, numbers, booleans and URLs without a password.
func notSecretShape(v string) bool {
	switch strings.ToLower(v) {
	case "true", "false", "yes", "no", "on", "off", "null", "none":
		return true
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return true
	}
	if strings.HasPrefix(v, "/") || strings.HasPrefix(v, "~/") || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../") {
		return true
	}
	if u, err := url.Parse(v); err == nil && u.Scheme != "" && u.Host != "" && u.RawQuery == "" {
		return true
	}
	return false
}

// randomLooking reports long strings that look generated: 20 characters or more
// from a token alphabet, letters and digits mixed, entropy ≥ 3.5 bits/character.
func randomLooking(v string) bool {
	if len(v) < 20 {
		return false
	}
	var letters, digits bool
	counts := make(map[rune]int)
	for _, r := range v {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			letters = true
		case r >= '0' && r <= '9':
			digits = true
		case strings.ContainsRune("+/=_-.~", r):
		default:
			return false
		}
		counts[r]++
	}
	if !letters || !digits {
		return false
	}
	var h float64
	n := float64(len(v))
	for _, c := range counts {
		p := float64(c) / n
		h -= p * math.Log2(p)
	}
	return h >= 3.5
}

// Mask shows a secret the way Portcullis prints it: its known prefix if it has one,
// an ellipsis, and its last four characters when it is at least 12 characters long
// ("sk-…abcd", "…wxyz"); shorter secrets are only "…".
func Mask(secret string) string {
	prefix := ""
	for _, p := range knownPrefixes {
		if strings.HasPrefix(secret, p) {
			prefix = p
			break
		}
	}
	r := []rune(secret)
	if len(r) < 12 {
		return prefix + "…"
	}
	return prefix + "…" + string(r[len(r)-4:])
}
