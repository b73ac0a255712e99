package connect

import "testing"

// TestDaemonReason: the reason a daemon that failed to start gave is found
// in its log among the log records of this and earlier starts.
func TestDaemonReason(t *testing.T) {
	for _, tc := range []struct{ name, out, want string }{
		{"audit key",
			"time=T level=INFO msg=\"daemon listening\"\nportcullis: the audit log is signed but its key cannot be used: locked; move /s/audit aside\n",
			"the audit log is signed but its key cannot be used: locked; move /s/audit aside"},
		{"config, two lines, after an earlier failure",
			"portcullis: old\ntime=T level=WARN msg=x\nportcullis: /c/config.json:2:18: invalid character\nThe configuration file was not changed; fix it\n",
			"/c/config.json:2:18: invalid character\nThe configuration file was not changed; fix it"},
		{"panic", "panic: boom\n\ngoroutine 1 [running]:\nmain.main()\n", "panic: boom"},
		{"nothing", "time=T level=INFO msg=\"daemon listening\"\n", ""},
	} {
		if got := daemonReason(tc.out); got != tc.want {
			t.Errorf("%s: daemonReason = %q, want %q", tc.name, got, tc.want)
		}
	}
}
