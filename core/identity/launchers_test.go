package identity_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestKnownLaunchersRunTheirEntry: without a watched path, the script a
// known launcher runs is the record's entry, so that its package is
// measured and watched; the launcher's own file stays measured as a
// wrapper.
// The launchers that swap their worker behind their own stdio relay it: a
// request written while they swap can reach the new worker. Launchers that
// fetch and run one program do not.
func TestLaunchersThatRelay(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		args []string
		want bool
	}{
		{"nodemon", []string{"server.js"}, true},
		{"node", []string{"--watch", "server.js"}, true},
		{"sh", []string{"-c", "watchexec -r -- node server.js"}, true},
		{"air", nil, true},
		{"npx", []string{"-y", "@modelcontextprotocol/server-everything"}, false},
		{"uvx", []string{"mcp-server-fetch"}, false},
		{"node", []string{"server.js"}, false},
	} {
		got := slices.ContainsFunc(identity.KnownLaunchers(tc.cmd, tc.args), identity.Launcher.Relays)
		if got != tc.want {
			t.Errorf("%s %v relays: %v, want %v", tc.cmd, tc.args, got, tc.want)
		}
	}
}

func TestKnownLaunchersRunTheirEntry(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node")
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodemon := write(t, filepath.Join(dir, "node_modules", "nodemon", "bin", "nodemon.js"), "#!/usr/bin/env node\n", 0o755)
	tsx := write(t, filepath.Join(dir, "node_modules", "tsx", "dist", "cli.mjs"), "#!/usr/bin/env node\n", 0o755)
	for name, target := range map[string]string{"nodemon": "../nodemon/bin/nodemon.js", "tsx": "../tsx/dist/cli.mjs"} {
		if err := os.MkdirAll(filepath.Join(dir, "node_modules", ".bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, "node_modules", ".bin", name)); err != nil {
			t.Fatal(err)
		}
	}
	app := filepath.Join(dir, "app")
	write(t, filepath.Join(app, "package.json"), "{}", 0o644)
	server := write(t, filepath.Join(app, "server.js"), "1\n", 0o644)
	index := write(t, filepath.Join(app, "src", "index.ts"), "1\n", 0o644)
	bin := filepath.Join(dir, "node_modules", ".bin")
	for _, tc := range []struct {
		name    string
		command string
		args    []string
		entry   string
		wrapper string
	}{
		{"nodemon server.js", filepath.Join(bin, "nodemon"), []string{"-q", "--delay", "1", "server.js"}, server, nodemon},
		{"node nodemon.js server.js", "node", []string{nodemon, "--ext", "js", "server.js"}, server, nodemon},
		{"tsx watch", filepath.Join(bin, "tsx"), []string{"watch", "--clear-screen=false", "src/index.ts"}, index, tsx},
		{"node --watch", "node", []string{"--watch", "--watch-path", "src", "server.js"}, server, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := identity.NewMeasurer(nil).Measure(t.Context(), identity.MeasureSpec{Command: tc.command, Args: tc.args, Dir: app})
			if err != nil {
				t.Fatal(err)
			}
			if rec.Entry != tc.entry {
				t.Errorf("entry %q, want %q", rec.Entry, tc.entry)
			}
			if rec.Package == nil || rec.Package.Dir != app {
				t.Errorf("package %+v, want %s", rec.Package, app)
			}
			if tc.wrapper != "" && !slices.ContainsFunc(rec.Wrappers, func(w identity.FileDigest) bool { return w.Path == tc.wrapper }) {
				t.Errorf("wrappers %+v, want the launcher %s", rec.Wrappers, tc.wrapper)
			}
		})
	}
}

// TestNpxRunsItsPackage: "npx -y PKG" runs the package's bin from npm's
// npx cache (the directory npm names after the spec), or from a project's
// node_modules/.bin: that script is the entry, and the directory holding
// it with its dependencies is the package, measured and watched.
func TestNpxRunsItsPackage(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node")
	}
	if _, err := exec.LookPath("npx"); err != nil {
		t.Skip("no npx")
	}
	const spec = "@scope/srv@1.2.0"
	// npm's own computation (libnpmexec), run by node.
	out, err := exec.Command(node, "-e", `console.log(require("crypto").createHash("sha512").update([process.argv[1]].sort((a, b) => a.localeCompare(b, "en")).join("\n")).digest("hex").slice(0, 16))`, spec).Output()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(cache, "_npx", string(out[:16]))
	pkg := filepath.Join(tree, "node_modules", "@scope", "srv")
	write(t, filepath.Join(tree, "package.json"), `{"dependencies":{"@scope/srv":"1.2.0"}}`, 0o644)
	write(t, filepath.Join(pkg, "package.json"), `{"name":"@scope/srv","bin":{"srv":"dist/index.js","other":"x.js"}}`, 0o644)
	index := write(t, filepath.Join(pkg, "dist", "index.js"), "#!/usr/bin/env node\n", 0o755)
	write(t, filepath.Join(tree, "node_modules", "dep", "index.js"), "1\n", 0o644)
	wd := t.TempDir()
	m := identity.NewMeasurer(nil)
	spec1 := identity.MeasureSpec{Command: "npx", Args: []string{"-y", spec, "--root", "/x"}, Dir: wd, Env: []string{"npm_config_cache=" + cache}}
	rec, err := m.Measure(t.Context(), spec1)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Entry != index {
		t.Errorf("entry %q, want the cached package's bin %s", rec.Entry, index)
	}
	if rec.Package == nil || rec.Package.Dir != tree {
		t.Fatalf("package %+v, want the npx directory %s", rec.Package, tree)
	}
	// The cached dependency changes: new code, named.
	write(t, filepath.Join(tree, "node_modules", "dep", "index.js"), "2\n", 0o644)
	now, err := m.Measure(t.Context(), spec1)
	if err != nil {
		t.Fatal(err)
	}
	if d := identity.Diff(rec, now); len(d) != 1 || d[0].Field != "package" || !slices.Contains(d[0].Files, "node_modules/dep/index.js") {
		t.Errorf("changes after the cached dependency changed: %+v", d)
	}
	// Another version is another directory, not on disk yet: no entry.
	other, err := m.Measure(t.Context(), identity.MeasureSpec{Command: "npx", Args: []string{"-y", "@scope/srv@2"}, Dir: wd, Env: spec1.Env})
	if err != nil {
		t.Fatal(err)
	}
	if other.Entry == index {
		t.Errorf("npx @scope/srv@2 measured the cache of %s", spec)
	}

	// A project's own bin wins, as npm resolves it.
	proj, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	local := write(t, filepath.Join(proj, "node_modules", "tool", "cli.js"), "#!/usr/bin/env node\n", 0o755)
	if err := os.MkdirAll(filepath.Join(proj, "node_modules", ".bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../tool/cli.js", filepath.Join(proj, "node_modules", ".bin", "tool")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(proj, "package.json"), "{}", 0o644)
	sub := filepath.Join(proj, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	rec, err = m.Measure(t.Context(), identity.MeasureSpec{Command: "npx", Args: []string{"tool"}, Dir: sub, Env: spec1.Env})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Entry != local || rec.Package == nil || rec.Package.Dir != proj {
		t.Errorf("entry %q package %+v, want %s in %s", rec.Entry, rec.Package, local, proj)
	}
}
