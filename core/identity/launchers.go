package identity

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Launcher is a known watcher or launcher found in a launch command: Name
// as the person knows it, Effect what it does to the code that answers,
// Handling what Portcullis does about it.
type Launcher struct {
	Name     string
	Effect   string
	Handling string
}

// Texts shared by the launchers below.
const (
	swapEffect   = "restarts its worker behind the same stdio pipe when files change, so the code that answers changes without a new launch"
	swapHandling = "the supervisor watches the process tree: each new worker is a new epoch (cause observed), grants of the old one are void and the next call asks again; to have Portcullis restart the server itself, run the program directly and add --watch PATH"
	// watchedHandling is swapHandling for a launcher whose script
	// Measure takes as the entry (launchedScript).
	watchedHandling = "the script it runs is measured as the entry, with its package, and watched, so an edit holds calls at once; " + swapHandling
	reloadEffect    = "reloads code inside the same process, which no process table shows"
	fetchEffect     = "downloads or selects the package at launch and runs it from a cache, so the code that answers is not the command's own file"
	fetchHanding    = "the program it starts is observed in the process tree once its exec settles, and measured by its executable and script digests; pin a version (pkg@1.2.3) so that a launch does not fetch new code"
)

// Relays reports whether l restarts its worker behind its own stdio: the
// new worker reads what is written to the launcher's stdin while it swaps
// (nodemon relays it through its own pipe, the others leave it in the
// pipe the workers share), so a request meant for the old worker can reach
// the new one.
func (l Launcher) Relays() bool { return strings.HasPrefix(l.Effect, swapEffect) }

// KnownLaunchers recognises the watchers and launchers that change what
// answers behind a launch command (nodemon, tsx watch, node --watch,
// watchexec, air, uvicorn --reload, npx, uvx, bunx, pnpm dlx), in the
// command and its arguments (as "sh -c 'nodemon …'" or "npx nodemon …"
// name them too).
func KnownLaunchers(command string, args []string) []Launcher {
	words := []string{filepath.Base(command)}
	for _, a := range args {
		words = append(words, strings.Fields(a)...)
	}
	has := func(w string) bool { return slices.Contains(words, w) }
	after := func(prog, flag string) bool {
		for i, w := range words {
			if filepath.Base(w) == prog && slices.Contains(words[i+1:], flag) {
				return true
			}
		}
		return false
	}
	var out []Launcher
	seen := map[string]bool{}
	add := func(l Launcher) {
		if !seen[l.Name] {
			seen[l.Name] = true
			out = append(out, l)
		}
	}
	for _, w := range words {
		switch filepath.Base(w) {
		case "nodemon", "nodemon.js":
			add(Launcher{"nodemon", swapEffect, watchedHandling})
		case "watchexec":
			add(Launcher{"watchexec", swapEffect, swapHandling})
		case "air":
			add(Launcher{"air", swapEffect + " (it rebuilds the Go binary too)", swapHandling})
		case "npx", "npx-cli.js":
			add(Launcher{"npx", fetchEffect, fetchHanding})
		case "uvx":
			add(Launcher{"uvx", fetchEffect, fetchHanding})
		case "bunx":
			add(Launcher{"bunx", fetchEffect, fetchHanding})
		case "pnpx":
			add(Launcher{"pnpm dlx", fetchEffect, fetchHanding})
		}
	}
	if after("tsx", "watch") {
		add(Launcher{"tsx watch", swapEffect + "; it also reads stdin for its restart key, so every JSON-RPC line can restart it",
			"unusable over stdio: run tsx without watch and add --watch PATH, so that Portcullis restarts it"})
	}
	if after("node", "--watch") || after("node", "--watch-path") || after("nodejs", "--watch") {
		add(Launcher{"node --watch", swapEffect, watchedHandling})
	}
	if after("uvicorn", "--reload") {
		add(Launcher{"uvicorn --reload", swapEffect, swapHandling})
	}
	if after("pnpm", "dlx") {
		add(Launcher{"pnpm dlx", fetchEffect, fetchHanding})
	}
	if has("importlib.reload") {
		add(Launcher{"importlib.reload", reloadEffect, "not observable: Portcullis measures the files; use --restart on-change so that a change starts a new process"})
	}
	return out
}

// Known launchers watch what they run (docs/DESIGN.md, "Execution
// identity"): without a watched path, the script a launcher runs is the
// entry of the record, measured with its package and watched by the build
// watcher, so that an edit behind nodemon closes the gate at the first
// file event, before the launcher swaps its worker. The launcher's own file
// stays measured, as a wrapper.

// launcherValueFlags are, per launcher, the options that take the next
// argument as their value.
var launcherValueFlags = map[string]map[string]bool{
	"nodemon": set("-w", "--watch", "-e", "--ext", "-x", "--exec", "-i", "--ignore", "-d", "--delay",
		"--signal", "-s", "--config", "--cwd", "-C", "--spawn", "-V", "--polling-interval", "-P"),
	"tsx": set("--tsconfig", "--include", "--exclude", "--env-file", "--import", "--require", "-r", "--conditions", "-C"),
	"uv": set("--with", "--with-requirements", "--with-editable", "-p", "--python", "--project", "--directory",
		"--env-file", "--group", "--extra", "--package", "--index", "--default-index", "--index-url",
		"--extra-index-url", "-f", "--find-links", "--cache-dir", "--config-file", "--script", "--only-group", "--no-group"),
}

// firstPositional returns the first argument of args that is not an option
// or the value of one (values flags take the next argument unless written
// "--flag=value"), "" when there is none; "--" ends the options.
func firstPositional(args []string, values map[string]bool) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		case strings.HasPrefix(a, "-") && len(a) > 1:
			if name, _, hasVal := strings.Cut(a, "="); !hasVal && values[name] {
				i++
			}
		default:
			return a
		}
	}
	return ""
}

// launcherOf names the known launcher that a program is, by its file name
// or the script it runs ("nodemon.js"): "nodemon", "tsx", "uv", or "".
func launcherOf(path string) string {
	switch base := filepath.Base(path); base {
	case "nodemon", "nodemon.js":
		return "nodemon"
	case "tsx":
		return "tsx"
	case "uv":
		return "uv"
	}
	// node_modules/tsx/dist/cli.mjs, the file node_modules/.bin/tsx links to.
	if filepath.Base(path) == "cli.mjs" && filepath.Base(filepath.Dir(filepath.Dir(path))) == "tsx" {
		return "tsx"
	}
	return ""
}

// launchedWord returns the script word a known launcher's arguments name
// ("nodemon server.js", "tsx watch x.ts", "uv run x.py"), "" when none.
func launchedWord(launcher string, args []string) string {
	values := launcherValueFlags[launcher]
	switch launcher {
	case "nodemon":
		return firstPositional(args, values)
	case "tsx", "uv":
		sub := "run"
		if launcher == "tsx" {
			sub = "watch"
		}
		w := firstPositional(args, values)
		if w != sub {
			if launcher == "tsx" {
				return w // "tsx x.ts" runs x.ts too
			}
			return ""
		}
		i := slices.Index(args, sub)
		w = firstPositional(args[i+1:], values)
		if launcher == "uv" && (w == "python" || w == "python3") {
			// uv run python x.py
			j := slices.Index(args[i+1:], w)
			return entryWord(kindPython, args[i+1+j+1:])
		}
		return w
	}
	return ""
}

// moduleArg returns the module a Python command line runs with -m
// ("python3 -u -m pkg.server" → "pkg.server"), "" when it runs none.
func moduleArg(args []string) string {
	r := rulesByKind[kindPython]
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' || a == "--" {
			return ""
		}
		if strings.HasPrefix(a, "--") {
			if r.value[a] {
				i++
			}
			continue
		}
		for j := 1; j < len(a); j++ {
			switch c := a[j]; {
			case c == 'm':
				if j+1 < len(a) {
					return a[j+1:]
				}
				if i+1 < len(args) {
					return args[i+1]
				}
				return ""
			case c == 'c':
				return ""
			case strings.IndexByte(r.clusterValue, c) >= 0:
				if j == len(a)-1 {
					i++
				}
				j = len(a)
			}
		}
	}
	return ""
}

// moduleFile returns the file that "python -m mod" runs from directory dir
// (the first entry of sys.path): dir/a/b.py, or the package's __main__.py
// for a package, "" when the module is not found there (an installed
// module: its code is in the interpreter's site-packages).
func moduleFile(mod, dir string) string {
	if mod == "" || strings.ContainsAny(mod, "/\\") {
		return ""
	}
	base := filepath.Join(dir, filepath.FromSlash(strings.ReplaceAll(mod, ".", "/")))
	for _, p := range []string{base + ".py", filepath.Join(base, "__main__.py")} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// launchedScript returns the script that a known launcher in the launch
// runs, as an absolute path of an existing regular file, or "": the
// command itself is the launcher (nodemon, tsx, uv), or the runtime runs
// the launcher's script (node …/nodemon.js server.js), or Python runs a
// module (-m) found in the working directory.
func launchedScript(command string, args []string, kind, entry, wd string) string {
	var word string
	switch {
	case launcherOf(command) != "":
		word = launchedWord(launcherOf(command), args)
	case entry != "" && launcherOf(entry) != "" && kind == kindNode:
		// node …/nodemon.js server.js: what follows the script.
		w := entryWord(kindNode, args)
		if i := slices.Index(args, w); i >= 0 {
			word = launchedWord(launcherOf(entry), args[i+1:])
		}
	case kind == kindPython && entry == "":
		return moduleFile(moduleArg(args), wd)
	}
	if word == "" {
		return ""
	}
	p := word
	if !filepath.IsAbs(p) {
		p = filepath.Join(wd, p)
	}
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return p
}

// npxValueFlags are npx's options that take the next argument.
var npxValueFlags = set("-p", "--package", "-c", "--call", "-w", "--workspace", "--cache", "--registry", "--userconfig")

// npxPackage returns the spec (as written, "pkg", "@scope/pkg@1.2.3") and
// name of the registry package an npx command line runs, "" when it names
// none this can follow (--package, --call, a path, a git or URL spec).
func npxPackage(args []string) (spec, name string) {
	for _, a := range args {
		for _, f := range []string{"-p", "--package", "-c", "--call"} {
			if a == f || strings.HasPrefix(a, f+"=") {
				return "", ""
			}
		}
	}
	spec = firstPositional(args, npxValueFlags)
	if spec == "" || strings.ContainsAny(spec, ":\\") || strings.HasPrefix(spec, ".") || strings.HasPrefix(spec, "/") {
		return "", ""
	}
	name = spec
	if rest, scoped := strings.CutPrefix(spec, "@"); scoped {
		if i := strings.IndexByte(rest, '@'); i >= 0 {
			name = spec[:i+1]
		}
		if strings.Count(name, "/") != 1 {
			return "", ""
		}
	} else {
		if i := strings.IndexByte(spec, '@'); i >= 0 {
			name = spec[:i]
		}
		if strings.Contains(name, "/") {
			return "", ""
		}
	}
	return spec, name
}

// npxCacheDir returns npm's npx cache: $npm_config_cache/_npx, else
// ~/.npm/_npx (npm's default cache), from env ("K=V", later wins).
func npxCacheDir(env []string) string {
	cache := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "npm_config_cache="); ok {
			cache = v
		}
	}
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".npm")
	}
	return filepath.Join(cache, "_npx")
}

// npxHash is the directory npm gives the packages of one npx command line
// in its cache (libnpmexec): the first 16 hex digits of the SHA-512 of the
// specs as written, sorted, joined by newlines.
func npxHash(specs ...string) string {
	specs = slices.Clone(specs)
	slices.Sort(specs)
	sum := sha512.Sum512([]byte(strings.Join(specs, "\n")))
	return hex.EncodeToString(sum[:])[:16]
}

// binOf returns the file of pkgDir's bin that npx runs: the only one, or
// the one named like the package (without its scope).
func binOf(pkgDir, name string) string {
	b, err := os.ReadFile(filepath.Join(pkgDir, "package.json"))
	if err != nil {
		return ""
	}
	var manifest struct {
		Bin json.RawMessage `json:"bin"`
	}
	if json.Unmarshal(b, &manifest) != nil || len(manifest.Bin) == 0 {
		return ""
	}
	var one string
	if json.Unmarshal(manifest.Bin, &one) == nil {
		return filepath.Join(pkgDir, filepath.FromSlash(one))
	}
	var bins map[string]string
	if json.Unmarshal(manifest.Bin, &bins) != nil {
		return ""
	}
	short := name[strings.LastIndexByte(name, '/')+1:]
	if p, ok := bins[short]; ok {
		return filepath.Join(pkgDir, filepath.FromSlash(p))
	}
	if len(bins) == 1 {
		for _, p := range bins {
			return filepath.Join(pkgDir, filepath.FromSlash(p))
		}
	}
	return ""
}

// npxScript returns the script "npx PKG" runs and the directory whose tree
// holds its code, as npm resolves them: a bin of that name in a
// node_modules/.bin walking up from wd (the project's own), else the
// package in the npx cache (its directory there, with the dependencies
// installed beside it). "" when neither is on disk yet (a first run
// downloads it: then the running process is what is observed).
func npxScript(args []string, wd string, env []string) (script, tree string) {
	spec, name := npxPackage(args)
	if spec == "" {
		return "", ""
	}
	home, _ := os.UserHomeDir()
	for dir := wd; ; {
		bin := filepath.Join(dir, "node_modules", ".bin", spec)
		if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
			if real, err := filepath.EvalSymlinks(bin); err == nil {
				if dir == home || dir == "/" || systemDir(dir) {
					return real, "" // its own package, not a whole home
				}
				return real, dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	cache := npxCacheDir(env)
	if cache == "" {
		return "", ""
	}
	tree = filepath.Join(cache, npxHash(spec))
	bin := binOf(filepath.Join(tree, "node_modules", filepath.FromSlash(name)), name)
	if bin == "" {
		return "", ""
	}
	if fi, err := os.Stat(bin); err != nil || !fi.Mode().IsRegular() {
		return "", ""
	}
	return bin, tree
}
