package identity

import (
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
	reloadEffect = "reloads code inside the same process, which no process table shows"
	fetchEffect  = "downloads or selects the package at launch and runs it from a cache, so the code that answers is not the command's own file"
	fetchHanding = "the program it starts is observed in the process tree once its exec settles, and measured by its executable and script digests; pin a version (pkg@1.2.3) so that a launch does not fetch new code"
)

// KnownLaunchers recognises the watchers and launchers that change what
// answers behind a launch command (nodemon, tsx watch, node --watch,
// watchexec, air, uvicorn --reload, npx, uvx, bunx, pnpm dlx), in the
// command and its arguments (as "sh -c 'nodemon …'" or "npx nodemon …"
// name them too).
func KnownLaunchers(command string, args []string) []Launcher {
	words := []string{filepath.Base(command)}
	for _, a := range args {
		for _, w := range strings.Fields(a) {
			words = append(words, w)
		}
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
			add(Launcher{"nodemon", swapEffect, swapHandling})
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
		add(Launcher{"node --watch", swapEffect, swapHandling})
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
