//go:build unix

package supervisor

import (
	"encoding/binary"
	"testing"
)

func TestEnvHas(t *testing.T) {
	epochs := map[string]bool{"01A": true, "01B": true}
	tests := []struct {
		env  string
		want string
	}{
		{"PATH=/bin\x00PORTCULLIS_EPOCH=01B\x00HOME=/h\x00", "01B"},
		{"PORTCULLIS_EPOCH=01A", "01A"},
		{"PORTCULLIS_EPOCH=01C\x00", ""},
		{"PORTCULLIS_EPOCH=01AX\x00", ""},
		{"PORTCULLIS_EPOCH=\x00", ""},
		{"X_PORTCULLIS_EPOCH=01A\x00", ""},
		{"PORTCULLIS_EPOCH_=01A\x00", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got, ok := envHas([]byte(tt.env), epochs)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("envHas(%q) = %q, %v; want %q", tt.env, got, ok, tt.want)
		}
	}
}

func TestParseProcargs2(t *testing.T) {
	buf := func(argc uint32, rest string) []byte {
		b := binary.NativeEndian.AppendUint32(nil, argc)
		return append(b, rest...)
	}
	epochs := map[string]bool{"01A": true}
	// As macOS lays it out: path, padding, arguments, environment, then
	// the kernel's own strings after an empty one.
	b := buf(2, "/bin/sleep\x00\x00\x00\x00sleep\x00PORTCULLIS_EPOCH=01A\x00HOME=/h\x00PORTCULLIS_EPOCH=01A\x00\x00executable_path=/bin/sleep\x00")
	exe, env, ok := parseProcargs2(b)
	if !ok || exe != "/bin/sleep" {
		t.Fatalf("parseProcargs2 = %q, %q, %v", exe, env, ok)
	}
	if e, ok := envHas(env, epochs); !ok || e != "01A" {
		t.Errorf("the environment's mark is not found in %q", env)
	}
	// The mark as an argument is not in the environment.
	_, env, _ = parseProcargs2(buf(2, "/bin/echo\x00\x00echo\x00PORTCULLIS_EPOCH=01A\x00HOME=/h\x00"))
	if _, ok := envHas(env, epochs); ok {
		t.Errorf("an argument counted as the environment: %q", env)
	}
	for _, bad := range [][]byte{nil, {1, 0}, buf(0, ""), buf(0, "\x00/x")} {
		if _, _, ok := parseProcargs2(bad); ok {
			t.Errorf("parseProcargs2(%q) ok", bad)
		}
	}
	// Arguments cut short: no environment.
	if exe, env, ok := parseProcargs2(buf(5, "/x\x00a\x00")); !ok || exe != "/x" || len(env) != 0 {
		t.Errorf("truncated: %q, %q, %v", exe, env, ok)
	}
}
