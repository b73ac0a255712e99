package identity_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/portcullis/portcullis/core/identity"
)

// fakeVersions are what the test binary prints for "--version" when it runs
// under one of these names, standing in for real runtimes.
var fakeVersions = map[string]string{
	"node":    "v22.14.0\n",
	"python3": "Python 3.12.3\n",
	"uv":      "uv 0.5.11 (c4d0caaee 2024-12-19)\n",
	"java":    "openjdk 21.0.5 2024-10-15\nOpenJDK Runtime Environment\n",
}

// probeLogEnv names a file where fake runtimes append one line per probe.
const probeLogEnv = "PORTCULLIS_IDENTITY_PROBE_LOG"

func TestMain(m *testing.M) {
	if v, ok := fakeVersions[filepath.Base(os.Args[0])]; ok {
		if len(os.Args) != 2 || os.Args[1] != "--version" {
			fmt.Fprintln(os.Stderr, "fake runtime: only --version")
			os.Exit(2)
		}
		if log := os.Getenv(probeLogEnv); log != "" {
			f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err == nil {
				fmt.Fprintln(f, filepath.Base(os.Args[0]))
				f.Close()
			}
		}
		fmt.Print(v)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// sum is an independent SHA-256 of a file, as "sha256:<hex>".
func sum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func write(t *testing.T, path, content string, mode fs.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeRuntime puts a copy of the test binary at path, so that running it as
// "path --version" prints fakeVersions[base(path)].
func fakeRuntime(t *testing.T, path string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(self, path); err == nil {
		return path
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func realpath(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

type fixture struct {
	root, bin, proj, shim string
	env                   []string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	root := realpath(t, t.TempDir())
	f := fixture{root: root, bin: filepath.Join(root, "bin"), proj: filepath.Join(root, "proj"), shim: filepath.Join(root, "shim")}
	for _, n := range []string{"node", "python3", "uv", "java"} {
		fakeRuntime(t, filepath.Join(f.bin, n))
	}
	write(t, filepath.Join(root, "lib", "npx-cli.js"), "#!/usr/bin/env node\nrequire('npx')\n", 0o755)
	if err := os.Symlink("../lib/npx-cli.js", filepath.Join(f.bin, "npx")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.shim, "python3"), "#!/bin/sh\nexec "+filepath.Join(f.bin, "python3")+" \"$@\"\n", 0o755)
	write(t, filepath.Join(f.proj, "package-lock.json"), `{"lockfileVersion":3}`, 0o644)
	write(t, filepath.Join(f.proj, "dist", "server.js"), "console.log('hi')\n", 0o644)
	write(t, filepath.Join(f.proj, "setup.js"), "// preload\n", 0o644)
	write(t, filepath.Join(f.proj, "server.py"), "print('hi')\n", 0o644)
	write(t, filepath.Join(f.proj, "pkg", "server.js"), "// nested\n", 0o644)
	write(t, filepath.Join(f.proj, "pkg", "pnpm-lock.yaml"), "lockfileVersion: '9.0'\n", 0o644)
	write(t, filepath.Join(f.proj, "run.sh"), "#!/bin/sh\nexec node dist/server.js\n", 0o755)
	write(t, filepath.Join(f.proj, "envs.js"), "#!/usr/bin/env -S node --no-warnings\n", 0o755)
	write(t, filepath.Join(f.proj, "node_modules", "a", "index.js"), "module.exports = 1\n", 0o644)
	fakeRuntime(t, filepath.Join(f.proj, "tool"))
	f.env = []string{"PATH=" + f.bin + ":/usr/bin:/bin"}
	return f
}

func TestMeasure(t *testing.T) {
	f := newFixture(t)
	node := filepath.Join(f.bin, "node")
	python := filepath.Join(f.bin, "python3")
	lock := filepath.Join(f.proj, "package-lock.json")
	sh := realpath(t, "/bin/sh")
	file := func(p string) identity.FileDigest { return identity.FileDigest{Path: p, SHA256: sum(t, p)} }
	base := func(cmd []string, exe string) identity.Record {
		return identity.Record{
			ServerLabel:        "srv",
			LaunchCommand:      cmd,
			ResolvedExecutable: file(exe),
			WorkingDirectory:   f.proj,
			Lockfile:           lock,
			LockfileDigest:     sum(t, lock),
		}
	}
	with := func(r identity.Record, edit func(*identity.Record)) identity.Record { edit(&r); return r }
	entry := func(r *identity.Record, p string) { r.Entry, r.EntryDigest = p, sum(t, p) }

	tests := []struct {
		name  string
		spec  identity.MeasureSpec
		want  identity.Record
		extra []string
	}{
		{
			name: "node script with watched tree",
			spec: identity.MeasureSpec{Command: "node", Args: []string{"dist/server.js", "--port", "1"}, Extra: []string{"node_modules", "package-lock.json"}},
			want: with(base([]string{"node", "dist/server.js", "--port", "1"}, node), func(r *identity.Record) {
				r.Runtime = "node v22.14.0"
				entry(r, filepath.Join(f.proj, "dist", "server.js"))
				r.ExtraDigests = map[string]string{"node_modules": "tree", "package-lock.json": sum(t, lock)}
			}),
		},
		{
			name: "node flag values skipped",
			spec: identity.MeasureSpec{Command: "node", Args: []string{"--require", "./setup.js", "--inspect=9229", "dist/server.js"}},
			want: with(base([]string{"node", "--require", "./setup.js", "--inspect=9229", "dist/server.js"}, node), func(r *identity.Record) {
				r.Runtime = "node v22.14.0"
				entry(r, filepath.Join(f.proj, "dist", "server.js"))
			}),
		},
		{
			name: "nearest lockfile wins",
			spec: identity.MeasureSpec{Command: "node", Args: []string{"pkg/server.js"}},
			want: with(base([]string{"node", "pkg/server.js"}, node), func(r *identity.Record) {
				r.Runtime = "node v22.14.0"
				entry(r, filepath.Join(f.proj, "pkg", "server.js"))
				r.Lockfile = filepath.Join(f.proj, "pkg", "pnpm-lock.yaml")
				r.LockfileDigest = sum(t, r.Lockfile)
			}),
		},
		{
			name: "python -u script",
			spec: identity.MeasureSpec{Command: "python3", Args: []string{"-u", "server.py"}},
			want: with(base([]string{"python3", "-u", "server.py"}, python), func(r *identity.Record) {
				r.Runtime = "python 3.12.3"
				entry(r, filepath.Join(f.proj, "server.py"))
			}),
		},
		{
			// A known launcher watches what it runs: the module's
			// file in the working directory is the entry.
			name: "python -m runs the module found in the working directory",
			spec: identity.MeasureSpec{Command: "python3", Args: []string{"-m", "server"}},
			want: with(base([]string{"python3", "-m", "server"}, python), func(r *identity.Record) {
				r.Runtime = "python 3.12.3"
				entry(r, filepath.Join(f.proj, "server.py"))
			}),
		},
		{
			name: "python -m of a module not in the working directory has no entry",
			spec: identity.MeasureSpec{Command: "python3", Args: []string{"-m", "http.server"}},
			want: with(base([]string{"python3", "-m", "http.server"}, python), func(r *identity.Record) {
				r.Runtime = "python 3.12.3"
			}),
		},
		{
			name: "uv run: the script is the entry",
			spec: identity.MeasureSpec{Command: "uv", Args: []string{"run", "--with", "mcp", "server.py"}},
			want: with(base([]string{"uv", "run", "--with", "mcp", "server.py"}, filepath.Join(f.bin, "uv")), func(r *identity.Record) {
				r.Runtime = "uv 0.5.11"
				entry(r, filepath.Join(f.proj, "server.py"))
			}),
		},
		{
			name: "java -jar",
			spec: identity.MeasureSpec{Command: "java", Args: []string{"-Xmx1g", "-jar", "server.py"}},
			want: with(base([]string{"java", "-Xmx1g", "-jar", "server.py"}, filepath.Join(f.bin, "java")), func(r *identity.Record) {
				r.Runtime = "java 21.0.5"
				entry(r, filepath.Join(f.proj, "server.py"))
			}),
		},
		{
			name: "shell script is entry and wrapper",
			spec: identity.MeasureSpec{Command: "./run.sh"},
			want: with(base([]string{"./run.sh"}, filepath.Join(f.proj, "run.sh")), func(r *identity.Record) {
				entry(r, filepath.Join(f.proj, "run.sh"))
				r.Interpreter = &identity.FileDigest{Path: sh, SHA256: sum(t, sh)}
				r.Wrappers = []identity.FileDigest{file(filepath.Join(f.proj, "run.sh"))}
			}),
		},
		{
			name: "env -S shebang resolves the interpreter through PATH",
			spec: identity.MeasureSpec{Command: "./envs.js"},
			want: with(base([]string{"./envs.js"}, filepath.Join(f.proj, "envs.js")), func(r *identity.Record) {
				entry(r, filepath.Join(f.proj, "envs.js"))
				r.Interpreter = &identity.FileDigest{Path: node, SHA256: sum(t, node)}
				r.Runtime = "node v22.14.0"
			}),
		},
		{
			name: "sh -c records the shell as wrapper",
			spec: identity.MeasureSpec{Command: "sh", Args: []string{"-c", "node dist/server.js"}},
			want: with(base([]string{"sh", "-c", "node dist/server.js"}, sh), func(r *identity.Record) {
				r.Wrappers = []identity.FileDigest{file(sh)}
			}),
		},
		{
			name: "npx through a symlinked node script",
			spec: identity.MeasureSpec{Command: "npx", Args: []string{"-y", "@scope/server"}},
			want: with(base([]string{"npx", "-y", "@scope/server"}, filepath.Join(f.root, "lib", "npx-cli.js")), func(r *identity.Record) {
				entry(r, filepath.Join(f.root, "lib", "npx-cli.js"))
				r.Interpreter = &identity.FileDigest{Path: node, SHA256: sum(t, node)}
				r.Runtime = "node v22.14.0"
				r.Wrappers = []identity.FileDigest{file(filepath.Join(f.root, "lib", "npx-cli.js"))}
				r.Lockfile, r.LockfileDigest = "", ""
			}),
		},
		{
			name: "native binary is its own entry",
			spec: identity.MeasureSpec{Command: "./tool", Args: []string{"serve"}},
			want: with(base([]string{"./tool", "serve"}, filepath.Join(f.proj, "tool")), func(r *identity.Record) {
				entry(r, filepath.Join(f.proj, "tool"))
			}),
		},
		{
			name: "runtime shim is a wrapper, arguments read as the runtime's",
			spec: identity.MeasureSpec{Command: "python3", Args: []string{"server.py"}, Env: []string{"PATH=" + f.shim + ":" + f.bin + ":/usr/bin:/bin"}},
			want: with(base([]string{"python3", "server.py"}, filepath.Join(f.shim, "python3")), func(r *identity.Record) {
				r.Runtime = "python 3.12.3"
				entry(r, filepath.Join(f.proj, "server.py"))
				r.Interpreter = &identity.FileDigest{Path: sh, SHA256: sum(t, sh)}
				r.Wrappers = []identity.FileDigest{file(filepath.Join(f.shim, "python3"))}
			}),
		},
	}
	m := identity.NewMeasurer(nil)
	tree, err := identity.NewMeasurer(nil).DigestTree(filepath.Join(f.proj, "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.spec
			s.Label, s.Dir = "srv", f.proj
			if s.Env == nil {
				s.Env = f.env
			}
			if tt.want.ExtraDigests["node_modules"] == "tree" {
				tt.want.ExtraDigests["node_modules"] = tree
			}
			got, err := m.Measure(context.Background(), s)
			if err != nil {
				t.Fatalf("Measure: %v", err)
			}
			// The entry's package (measured without watch paths) has
			// tests of its own (scope_test.go).
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(identity.Record{}, "Package")); diff != "" {
				t.Errorf("Measure (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMeasureNpxLockfileFromEntry(t *testing.T) {
	// The lockfile walk starts at the entry's directory, not Dir: npx's own
	// tree has none here, so the project lockfile is not taken for it.
	f := newFixture(t)
	write(t, filepath.Join(f.root, "lib", "yarn.lock"), "# yarn\n", 0o644)
	got, err := identity.NewMeasurer(nil).Measure(context.Background(), identity.MeasureSpec{Command: "npx", Args: []string{"x"}, Dir: f.proj, Env: f.env})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(f.root, "lib", "yarn.lock"); got.Lockfile != want {
		t.Errorf("Lockfile = %q, want %q", got.Lockfile, want)
	}
}

func TestMeasureErrors(t *testing.T) {
	f := newFixture(t)
	write(t, filepath.Join(f.proj, "noexec"), "#!/bin/sh\n", 0o644)
	write(t, filepath.Join(f.proj, "badinterp"), "#!/nonexistent/interp\n", 0o755)
	tests := []struct {
		name     string
		spec     identity.MeasureSpec
		is       error
		contains string
	}{
		{"missing command", identity.MeasureSpec{Command: "portcullis-missing"}, identity.ErrCommandNotFound, "portcullis-missing"},
		{"missing relative command", identity.MeasureSpec{Command: "./nope"}, identity.ErrCommandNotFound, "./nope"},
		{"not executable", identity.MeasureSpec{Command: "./noexec"}, identity.ErrCommandNotFound, "not executable"},
		{"directory", identity.MeasureSpec{Command: "./dist"}, identity.ErrCommandNotFound, "not a regular file"},
		{"missing interpreter", identity.MeasureSpec{Command: "./badinterp"}, fs.ErrNotExist, "/nonexistent/interp"},
		{"missing watch path", identity.MeasureSpec{Command: "node", Args: []string{"dist/server.js"}, Extra: []string{"build"}}, fs.ErrNotExist, "watch path build"},
	}
	m := identity.NewMeasurer(nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.spec
			s.Dir, s.Env = f.proj, f.env
			_, err := m.Measure(context.Background(), s)
			if !errors.Is(err, tt.is) || !strings.Contains(fmt.Sprint(err), tt.contains) {
				t.Errorf("Measure error = %v, want %v containing %q", err, tt.is, tt.contains)
			}
		})
	}
}

func TestRuntimeVersionCachedByDigest(t *testing.T) {
	f := newFixture(t)
	log := filepath.Join(f.root, "probes.log")
	env := append(f.env, probeLogEnv+"="+log)
	m := identity.NewMeasurer(nil)
	for range 3 {
		if _, err := m.Measure(context.Background(), identity.MeasureSpec{Command: "node", Args: []string{"dist/server.js"}, Dir: f.proj, Env: env}); err != nil {
			t.Fatal(err)
		}
	}
	// python3 is the same file as node here: the cache is per runtime kind too.
	r, err := m.Measure(context.Background(), identity.MeasureSpec{Command: "python3", Dir: f.proj, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if r.Runtime != "python 3.12.3" {
		t.Errorf("Runtime = %q", r.Runtime)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("node\npython3\n", string(b)); diff != "" {
		t.Errorf("probes (-want +got):\n%s", diff)
	}
}

func TestLookPath(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, command, dir string
		env                []string
		want               string
		err                error
	}{
		{"bare name through PATH", "node", "", f.env, filepath.Join(f.bin, "node"), nil},
		{"last PATH wins", "python3", "", append(f.env, "PATH="+f.shim), filepath.Join(f.shim, "python3"), nil},
		{"relative to dir", "./tool", f.proj, nil, filepath.Join(f.proj, "tool"), nil},
		{"nested relative", "../bin/node", f.proj, nil, filepath.Join(f.bin, "node"), nil},
		{"relative PATH entries skipped", "tool", f.root, []string{"PATH=proj:"}, "", identity.ErrCommandNotFound},
		{"no PATH", "node", "", nil, "", identity.ErrCommandNotFound},
		{"empty", "", "", f.env, "", identity.ErrCommandNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := identity.LookPath(tt.command, tt.dir, tt.env)
			if got != tt.want || !errors.Is(err, tt.err) {
				t.Errorf("LookPath = %q, %v; want %q, %v", got, err, tt.want, tt.err)
			}
		})
	}
}

func TestMeasureContext(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := identity.NewMeasurer(nil).Measure(ctx, identity.MeasureSpec{Command: "node", Dir: f.proj, Env: f.env})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Measure with ended ctx: %v", err)
	}
}
