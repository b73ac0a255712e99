package identity_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/identity"
)

func TestKnownLaunchers(t *testing.T) {
	names := func(ls []identity.Launcher) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.Name)
			if l.Effect == "" || l.Handling == "" {
				t.Errorf("%s: empty text", l.Name)
			}
		}
		return out
	}
	for _, tc := range []struct {
		command string
		args    []string
		want    []string
	}{
		{"nodemon", []string{"server.js"}, []string{"nodemon"}},
		{"/usr/local/bin/node", []string{"/app/node_modules/nodemon/bin/nodemon.js", "server.js"}, []string{"nodemon"}},
		{"npx", []string{"-y", "nodemon", "server.js"}, []string{"npx", "nodemon"}},
		{"sh", []string{"-c", "watchexec -r -- python3 worker.py"}, []string{"watchexec"}},
		{"air", nil, []string{"air"}},
		{"npx", []string{"tsx", "watch", "src/index.ts"}, []string{"npx", "tsx watch"}},
		{"node", []string{"--watch", "server.js"}, []string{"node --watch"}},
		{"uvicorn", []string{"app:app", "--reload"}, []string{"uvicorn --reload"}},
		{"uvx", []string{"mcp-server-git"}, []string{"uvx"}},
		{"bunx", []string{"pkg"}, []string{"bunx"}},
		{"pnpm", []string{"dlx", "pkg"}, []string{"pnpm dlx"}},
		{"node", []string{"server.js"}, nil},
		{"python3", []string{"-m", "watchdog_free_server"}, nil},
		{"pnpm", []string{"run", "start"}, nil},
	} {
		if got := names(identity.KnownLaunchers(tc.command, tc.args)); !cmp.Equal(got, tc.want) {
			t.Errorf("KnownLaunchers(%s %v) = %v, want %v", tc.command, tc.args, got, tc.want)
		}
	}
}
