#!/usr/bin/env bash
# screenshots.sh takes the screenshots in docs/screenshots/ from the real
# menu-bar app (`make screenshots`):
#
#   approval-proposed.png (@2x)          the first card of a run: the called tool ticked, the others offered
#   approval.png, approval@2x.png        the approval window after a rebuild: the scope widened on the
#                                        previous epoch proposed, the tool the rebuild added unticked
#   approval-stale.png (@2x)             the card of a call refused as authorization_stale
#   preferences.png, preferences@2x.png  Preferences
#   audit.png, audit@2x.png              the audit viewer
#   verification-key.png (@2x)           the audit log's verification key, shown once on first start
#
# It builds the cgo (Fyne, GLFW) app and the publish test server, starts Xvfb
# and a private D-Bus session bus, and for each scale (FYNE_SCALE=1 and 2):
# runs the app with a temporary PORTCULLIS_HOME (its daemon runs inside the
# app), connects an agent through `portcullis connect` (a JSON-RPC client in
# this script, protocol 2025-06-18), approves its first call with the CLI
# widened to status (`approve --tools status`), rebuilds the server as
# revision B with a destructive rollback tool (a new execution epoch with a
# changed catalog), refreshes the tool list and calls again: the call is
# held and the approval window pops up. Rebuilt once more (same catalog, new
# binary), a call the agent prepared before refreshing is refused as
# authorization_stale and its card pops up. Preferences and the audit viewer are opened
# from the app's own tray menu over D-Bus (com.canonical.dbusmenu, as a
# panel would). Windows are captured with ImageMagick's `import -window`.
#
# Needs (Debian): xvfb imagemagick x11-utils dbus libglib2.0-bin, and the cgo
# build dependencies of Fyne (libgl1-mesa-dev xorg-dev). There is no
# StatusNotifierWatcher on the private bus, so the app logs that the tray
# could not register; the rest runs.
set -euo pipefail

note() { printf 'screenshots: %s\n' "$*" >&2; }
die() {
	note "$*"
	for f in "${tmp:-/nonexistent}"/*.log "${tmp:-/nonexistent}"/agent.err; do
		[[ -s "$f" ]] && { note "--- ${f##*/}"; tail -n 30 "$f" >&2; }
	done
	exit 1
}

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
out="$root/docs/screenshots"

if [[ "${1:-}" != --inside ]]; then
	for tool in Xvfb import xwininfo dbus-run-session gdbus go; do
		command -v "$tool" >/dev/null 2>&1 || die "$tool not found (Debian: apt-get install xvfb imagemagick x11-utils dbus libglib2.0-bin)"
	done
	# Everything the app and a keyring daemon activated on the bus write
	# (keyrings, autostart entries, caches) stays in a throwaway directory.
	xdg="$(mktemp -d "${TMPDIR:-/tmp}/portcullis-shots-xdg.XXXXXX")"
	trap 'rm -rf "$xdg"' EXIT
	mkdir -p "$xdg"/{data,config,cache,runtime}
	chmod 700 "$xdg/runtime"
	status=0
	XDG_DATA_HOME="$xdg/data" XDG_CONFIG_HOME="$xdg/config" XDG_CACHE_HOME="$xdg/cache" XDG_RUNTIME_DIR="$xdg/runtime" \
		dbus-run-session -- "$0" --inside || status=$?
	exit "$status"
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/portcullis-shots.XXXXXX")"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# PORTCULLIS_SHOTS_BIN: an app built already (cgo, APP_TAGS) to use
# instead of building one; SHOTS_SCALES: the scales to shoot (default "1 2").
if [[ -n "${PORTCULLIS_SHOTS_BIN:-}" ]]; then
	cp "$PORTCULLIS_SHOTS_BIN" "$tmp/portcullis"
else
	note "building the app (cgo)"
	CGO_ENABLED=1 go build -tags "${APP_TAGS-no_emoji}" -o "$tmp/portcullis" .
fi
note "building the publish server"
mkdir -p "$tmp/srv" "$out"
build_server() { CGO_ENABLED=0 go -C testdata/servers build -ldflags "-X main.revision=$1 ${2:-}" -o "$tmp/srv/publish" ./publish; }
bin="$tmp/portcullis"

export DISPLAY=:99
Xvfb :99 -screen 0 2560x1600x24 -nolisten tcp >"$tmp/xvfb.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do xwininfo -root >/dev/null 2>&1 && break; sleep 0.1; done
xwininfo -root >/dev/null 2>&1 || die "Xvfb did not start: $(cat "$tmp/xvfb.log")"

# wait_for SECONDS DESCRIPTION COMMAND...: retry COMMAND every 0.2 s.
wait_for() {
	local secs="$1" what="$2"
	shift 2
	for _ in $(seq 1 $((secs * 5))); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	die "timed out after ${secs}s waiting for $what"
}

# window_id TITLE: the X window id of the mapped window with that title.
window_id() { xwininfo -root -tree | grep -F "\"$1\"" | grep -v '1x1+' | awk 'NR == 1 {print $1}'; }
window_id_nonempty() { [[ -n "$(window_id "$1")" ]]; }
has_window() { [[ -n "$(window_id "$1")" ]]; }

# on_screen ID: fails, saying where, unless window ID lies wholly inside
# the screen (import would capture only the part on the screen).
on_screen() {
	local x y w h rw rh
	read -r x y w h < <(xwininfo -id "$1" | awk '/Absolute upper-left X:/ {x = $NF} /Absolute upper-left Y:/ {y = $NF}
		/^ *Width:/ {w = $NF} /^ *Height:/ {h = $NF} END {print x, y, w, h}')
	read -r rw rh < <(xwininfo -root | awk '/^ *Width:/ {w = $NF} /^ *Height:/ {h = $NF} END {print w, h}')
	if ((x < 0 || y < 0 || x + w > rw || y + h > rh)); then
		note "window $1 is ${w}x${h} at ($x, $y): it reaches outside the ${rw}x${rh} screen"
		return 1
	fi
}

# shoot TITLE FILE: capture a window after it has drawn; fails when the
# window does not fit on the screen.
shoot() {
	local id
	wait_for 20 "the window \"$1\"" has_window "$1"
	sleep 2
	id="$(window_id "$1")"
	on_screen "$id" || die "\"$1\" does not fit on the screen (${2#"$root"/})"
	import -window "$id" "$2"
	note "wrote ${2#"$root"/}"
}

# Agent: JSON-RPC over the stdio of `portcullis connect pub`.
send() { printf '%s\n' "$1" >&"${AGENT[1]}"; }
# recv ID: read lines until the response with that id (notifications skipped).
recv() {
	local line
	while IFS= read -r -t 60 line <&"${AGENT[0]}"; do
		if [[ "$line" == *"\"id\":$1,"* || "$line" == *"\"id\":$1}"* ]]; then
			printf '%s\n' "$line" >>"$tmp/agent.log"
			return 0
		fi
	done
	die "no response $1 from the agent connection"
}

# person ARGS...: run `portcullis ARGS...` as the person does: at a terminal
# of its own (script(1)), outside this script's process tree (setsid -f),
# since this script is the agent's parent and the daemon refuses decisions
# from an agent's tree; waits for it and fails when it fails.
person() {
	local done="$tmp/person.$RANDOM"
	setsid -f sh -c 'script -qec "$1" /dev/null </dev/null >"$2.out" 2>&1; echo $? >"$2.code"' sh "$(printf '%q ' "$bin" "$@")" "$done"
	wait_for 30 "portcullis $*" test -s "$done.code"
	[[ "$(cat "$done.code")" == 0 ]] || die "portcullis $* failed: $(cat "$done.out")"
}

approval_id() { "$bin" approvals --json | grep -o '"id": *"apr_[A-Z0-9]*"' | sed -n 1p | cut -d'"' -f4; }
has_approval() { [[ -n "$(approval_id)" ]]; }
# epoch_ready N: the run is ready on its Nth epoch.
epoch_ready() {
	local s
	s="$("$bin" status --json | tr -d ' \n')"
	[[ "$s" == *'"state":"ready"'* && "$s" == *"\"epochs\":$1"* ]]
}

# no_runs: no agent run is connected.
no_runs() {
	local s
	s="$("$bin" status --json | tr -d ' \n')"
	[[ "$s" != *'"state":"'* ]] || [[ "$s" == *'"runs":[]'* ]] || [[ "$s" == *'"runs":null'* ]]
}

# click_menu LABEL: click the tray menu item LABEL through com.canonical.dbusmenu.
click_menu() {
	local name="org.kde.StatusNotifierItem-$1-1" label="$2" layout id
	layout="$(gdbus call --session --dest "$name" --object-path /StatusNotifierMenu \
		--method com.canonical.dbusmenu.GetLayout 0 10 '[]')"
	id="$(grep -o "([0-9]*, {[^}]*'label': <'$label'>" <<<"$layout" | sed -n 1p | grep -o '^([0-9]*' | tr -d '(')"
	[[ -n "$id" ]] || die "no menu item \"$label\" in: $layout"
	gdbus call --session --dest "$name" --object-path /StatusNotifierMenu \
		--method com.canonical.dbusmenu.Event "$id" clicked '<0>' 0 >/dev/null
}

for scale in ${SHOTS_SCALES:-1 2}; do
	suffix=""
	[[ $scale == 1 ]] || suffix="@${scale}x"
	note "scale $scale"
	export PORTCULLIS_HOME="$tmp/home$scale"
	mkdir -p "$PORTCULLIS_HOME"
	build_server A
	"$bin" servers add pub --cwd "$tmp/srv" -- "$tmp/srv/publish" >/dev/null

	FYNE_SCALE=$scale "$bin" >"$tmp/app$scale.log" 2>&1 &
	app=$!
	pids+=("$app")
	wait_for 30 "the daemon in the app" "$bin" status
	# First start: the app sets up the audit log's sealing keys and shows
	# the verification key once, with its QR code.
	wait_for 20 "the verification key window" window_id_nonempty "Portcullis — audit log verification key"
	shoot "Portcullis — audit log verification key" "$out/verification-key$suffix.png"

	coproc AGENT { exec "$bin" connect pub 2>>"$tmp/agent.err"; }
	send '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"screenshot-agent","version":"1.0.0"}}}'
	recv 1
	send '{"jsonrpc":"2.0","method":"notifications/initialized"}'
	send '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
	recv 2
	# First use: the card proposes the called tool only; approved from
	# the command line, widened to status.
	send '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"publish_preview","arguments":{"branch":"main"}}}'
	wait_for 20 "the first approval request" has_approval
	shoot "Portcullis — Approval needed" "$out/approval-proposed$suffix.png"
	person approve "$(approval_id)" --tools status
	recv 3

	# Rebuild as revision B with a destructive tool: new epoch, new
	# catalog; refresh, call, held.
	build_server B "-X main.destructiveTool=rollback"
	wait_for 30 "the new epoch" epoch_ready 2
	send '{"jsonrpc":"2.0","id":4,"method":"tools/list"}'
	recv 4
	send '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"publish_preview","arguments":{"branch":"main"}}}'
	wait_for 20 "the approval request after the rebuild" has_approval
	shoot "Portcullis — Approval needed" "$out/approval$suffix.png"
	person approve "$(approval_id)"
	recv 5

	# Rebuild again (same catalog, another binary); a call prepared
	# before refreshing is refused as authorization_stale, and its card
	# pops up.
	build_server B "-X main.destructiveTool=rollback -X main.buildLabel=again"
	wait_for 30 "the third epoch" epoch_ready 3
	send '{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"publish_preview","arguments":{"branch":"main"}}}'
	recv 6
	wait_for 20 "the card of the stale refusal" has_approval
	shoot "Portcullis — Approval needed" "$out/approval-stale$suffix.png"
	person deny "$(approval_id)"

	click_menu "$app" "Preferences…"
	shoot "Portcullis Preferences" "$out/preferences$suffix.png"
	click_menu "$app" "Audit log…"
	shoot "Portcullis Audit Log" "$out/audit$suffix.png"

	# The agent disconnects first (stdin closed: MCP's stdio shutdown), so
	# that Quit does not ask to end a connected run.
	agent_pid=${AGENT_PID:-}
	eval "exec ${AGENT[1]}>&-"
	wait "$agent_pid" 2>/dev/null || true
	wait_for 30 "the agent run to end" no_runs
	click_menu "$app" "Quit Portcullis"
	wait_for 30 "the app to quit" bash -c "! kill -0 $app"
done
note "done: $(ls "$out" | tr '\n' ' ')"
