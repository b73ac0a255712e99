#!/usr/bin/env bash
# test-deps.sh installs what Portcullis's tests need, and only what is missing:
#
#   - Debian/Ubuntu: the C toolchain and X11/OpenGL headers for the cgo (Fyne) build,
#     socat, Xvfb, ImageMagick, x11-utils, xdotool, gdbus, a tray host (xfce4-panel) and a
#     notification daemon (dunst) for UI screenshots, gnome-keyring and dbus for a real
#     Secret Service, bubblewrap for the servers' sandbox (apt-get runs only when dpkg-query reports a package missing);
#   - macOS: nothing through a package manager; it says what must be present;
#   - everywhere: the pinned npm MCP peers in testdata/npm (npm ci, when node_modules is
#     missing or older than package-lock.json).
#
# Safe to run again and again: a second run with everything present changes nothing.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
npm_dir="$repo_root/testdata/npm"

say() { printf 'test-deps: %s\n' "$*"; }
die() {
	printf 'test-deps: error: %s\n' "$*" >&2
	exit 1
}

debian_packages=(
	gcc pkg-config
	libgl1-mesa-dev libxcursor-dev libxrandr-dev libxinerama-dev libxi-dev libxxf86vm-dev
	socat xvfb imagemagick x11-utils xdotool libglib2.0-bin xfce4-panel dunst
	gnome-keyring dbus dbus-x11
	polkitd util-linux
	bubblewrap
)

# missing_debian_packages prints the packages of debian_packages that dpkg does not
# report as installed, one per line.
missing_debian_packages() {
	local p status
	for p in "${debian_packages[@]}"; do
		status="$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)"
		if [[ "$status" != *" installed" ]]; then
			printf '%s\n' "$p"
		fi
	done
}

install_debian_packages() {
	local missing=()
	mapfile -t missing < <(missing_debian_packages)
	if ((${#missing[@]} == 0)); then
		say "Debian packages: all ${#debian_packages[@]} present"
		return
	fi
	say "Debian packages missing: ${missing[*]}"

	local sudo=()
	if ((EUID != 0)); then
		command -v sudo >/dev/null 2>&1 ||
			die "not root and no sudo; install as root: apt-get install -y --no-install-recommends ${missing[*]}"
		sudo=(sudo)
	fi
	# Wait for another apt/dpkg run (an unattended upgrade, a parallel install) rather
	# than failing on its lock.
	local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
	"${apt[@]}" update ||
		die "apt-get update failed (network or sources.list?); needed: ${missing[*]}"
	"${apt[@]}" install -y --no-install-recommends "${missing[@]}" ||
		die "apt-get install failed for: ${missing[*]}"

	mapfile -t missing < <(missing_debian_packages)
	((${#missing[@]} == 0)) || die "still missing after apt-get install: ${missing[*]}"
	say "Debian packages: installed"
}

system_deps() {
	case "$(uname -s)" in
	Darwin)
		say "macOS: no packages installed by this script. Needed:"
		say "  - Xcode Command Line Tools (xcode-select --install) for the cgo app build"
		say "  - Go (see go.mod) and Node.js >= 20 with npm (for example: brew install go node)"
		if ! xcode-select -p >/dev/null 2>&1; then
			say "  warning: Xcode Command Line Tools not found; 'make build' will fail"
		fi
		;;
	Linux)
		if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
			install_debian_packages
		else
			say "not a Debian-based system: install the equivalents of these Debian packages yourself:"
			say "  ${debian_packages[*]}"
		fi
		;;
	*)
		say "$(uname -s): unsupported system; only the npm peers are installed"
		;;
	esac
}

npm_deps() {
	command -v node >/dev/null 2>&1 || die "node not found on PATH; install Node.js >= 20"
	command -v npm >/dev/null 2>&1 || die "npm not found on PATH; install npm (it ships with Node.js)"
	[[ -f "$npm_dir/package-lock.json" ]] || die "missing $npm_dir/package-lock.json"

	# npm ci writes node_modules/.package-lock.json last; it is the stamp of a complete install.
	local stamp="$npm_dir/node_modules/.package-lock.json"
	if [[ -f "$stamp" && ! "$npm_dir/package-lock.json" -nt "$stamp" && ! "$npm_dir/package.json" -nt "$stamp" ]]; then
		say "npm peers: up to date in testdata/npm/node_modules"
		return
	fi
	say "npm peers: running npm ci in testdata/npm (node $(node --version), npm $(npm --version))"
	(cd "$npm_dir" && npm ci --no-audit --no-fund) ||
		die "npm ci failed in $npm_dir (registry reachable? lockfile in sync with package.json?)"
	# npm ci keeps the lockfile's mtime; touch the stamp so the next run sees it as fresh.
	touch "$stamp"
}

# The real Jaeger of the telemetry e2e (testdata/jaeger, its own module): a
# cold build takes many minutes, more than a test should spend; built once
# here, the test's own build is a link from the Go build cache.
jaeger_deps() {
	command -v go >/dev/null 2>&1 || return 0
	say "jaeger: building testdata/jaeger into the Go build cache"
	CGO_ENABLED=0 go -C "$repo_root/testdata/jaeger" build -o /dev/null github.com/jaegertracing/jaeger/cmd/jaeger ||
		say "jaeger: the build failed; the telemetry e2e against Jaeger will say why"
}

system_deps
npm_deps
jaeger_deps
say "done"
