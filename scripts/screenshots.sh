#!/usr/bin/env bash
# screenshots.sh takes the screenshots in docs/screenshots/ from the real
# menu-bar app (`make screenshots`):
#
#   approval-proposed.png (@2x)          the first card of a run: the called tool ticked, the others offered
#   approval.png, approval@2x.png        the approval window after a rebuild: the scope widened on the
#                                        previous epoch proposed, the tool the rebuild added unticked
#   approval-stale.png (@2x)             the card of a call refused as authorization_stale
#   approval-code.png (@2x)              the card after a rebuild of a server whose git work tree was
#                                        edited: its Code section lists the files changed
#   approval-diff.png (@2x)              that card's code diff, opened by its button
#   preferences.png, preferences@2x.png  Preferences
#   audit.png, audit@2x.png              the audit viewer
#   verification-key.png (@2x)           the audit log's verification key, shown once on first start
#   tray.png, tray@2x.png                the tray menu, opened by a click on the icon in a real panel:
#                                        pub running with its run, notes idle, broken failed with its
#                                        reason, the recent decisions
#   notification.png (@2x)               the desktop notification of the first approval request (dunst)
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
# panel would). Last, a server built in a git work tree is added, approved,
# edited and rebuilt in place: its card shows the code that changed, and
# Tab and Space open the diff. Windows are captured with ImageMagick's
# `import -window`.
#
# A tray host and a notification server run on the private bus, as on a
# desktop: xfce4-panel (its systray plugin is a StatusNotifierWatcher and
# host; GDK_SCALE follows the scale) and dunst. No window manager runs:
# windows are where the app puts them, and a window reaching outside the
# screen fails the run (xwininfo).
#
# Needs (Debian; scripts/test-deps.sh installs them): xvfb imagemagick
# x11-utils xdotool dbus libglib2.0-bin xfce4-panel dunst, and the cgo build
# dependencies of Fyne (libgl1-mesa-dev xorg-dev).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
out="$root/docs/screenshots"
me=screenshots
# shellcheck source=scripts/lib-x.sh
. scripts/lib-x.sh

# Everything the app and a keyring daemon activated on the bus write
# (keyrings, autostart entries, caches) stays in throwaway directories.
x_session "${1:-}" Xvfb import xwininfo xdotool dbus-run-session gdbus xfce4-panel dunst go

x_workdir shots

# PORTCULLIS_SHOTS_BIN: the full program built already (portcullis-app:
# cgo, APP_TAGS) to use instead of building one; SHOTS_SCALES: the scales to
# shoot (default "1 2").
build_app "${PORTCULLIS_SHOTS_BIN:-}"
note "building the publish server"
mkdir -p "$tmp/srv" "$out"
build_server() { CGO_ENABLED=0 go -C testdata/servers build -ldflags "-X main.revision=$1 ${2:-}" -o "$tmp/srv/publish" ./publish; }

x_start :99 2560x1600x24

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

# The panel: one bar along the top, an expanding separator and the systray
# plugin (the tray icon sits at its right end); its configuration is read
# from XDG_CONFIG_HOME by xfconfd, which the bus starts.
panel_conf="$XDG_CONFIG_HOME/xfce4/xfconf/xfce-perchannel-xml"
mkdir -p "$panel_conf" "$XDG_CONFIG_HOME/dunst"
cat >"$panel_conf/xfce4-panel.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<channel name="xfce4-panel" version="1.0">
  <property name="configver" type="int" value="2"/>
  <property name="panels" type="array">
    <value type="int" value="1"/>
    <property name="dark-mode" type="bool" value="true"/>
    <property name="panel-1" type="empty">
      <property name="position" type="string" value="p=6;x=0;y=0"/>
      <property name="length" type="uint" value="100"/>
      <property name="position-locked" type="bool" value="true"/>
      <property name="size" type="uint" value="28"/>
      <property name="plugin-ids" type="array">
        <value type="int" value="1"/>
        <value type="int" value="2"/>
      </property>
    </property>
  </property>
  <property name="plugins" type="empty">
    <property name="plugin-1" type="string" value="separator">
      <property name="expand" type="bool" value="true"/>
      <property name="style" type="uint" value="0"/>
    </property>
    <property name="plugin-2" type="string" value="systray">
      <property name="square-icons" type="bool" value="true"/>
    </property>
  </property>
</channel>
XML
# dunstrc SCALE: notifications at the bottom right, clear of the tray
# menu, scaled like the app.
dunstrc() {
	printf '[global]\n    origin = bottom-right\n    offset = 20x20\n    width = 420\n    scale = %s\n    show_indicators = no\n' "$1" \
		>"$XDG_CONFIG_HOME/dunst/dunstrc$1"
	echo "$XDG_CONFIG_HOME/dunst/dunstrc$1"
}

# bus_has NAME: a client owns NAME on the session bus.
bus_has() {
	gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
		--method org.freedesktop.DBus.NameHasOwner "$1" | grep -q true
}

# start_desktop SCALE: the panel and dunst, scaled like the app.
start_desktop() {
	GDK_SCALE=$1 xfce4-panel --disable-wm-check >"$tmp/panel$1.log" 2>&1 &
	panel=$!
	pids+=("$panel")
	dunst -config "$(dunstrc "$1")" >"$tmp/dunst$1.log" 2>&1 &
	dunst_pid=$!
	pids+=("$dunst_pid")
	wait_for 30 "the panel's StatusNotifierWatcher" bus_has org.kde.StatusNotifierWatcher
	wait_for 30 "dunst" bus_has org.freedesktop.Notifications
}

no_watcher() { ! bus_has org.kde.StatusNotifierWatcher; }

stop_desktop() {
	kill "$panel" "$dunst_pid" 2>/dev/null || true
	wait "$panel" "$dunst_pid" 2>/dev/null || true
	wait_for 30 "the panel's plugins to leave the bus" no_watcher
}

# tray_registered PID: the tray item of the app PID registered with the
# panel's watcher.
tray_registered() {
	local owner
	owner="$(gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
		--method org.freedesktop.DBus.GetNameOwner "org.kde.StatusNotifierItem-$1-1" | grep -o ':[0-9.]*')" || return 1
	gdbus call --session --dest org.kde.StatusNotifierWatcher --object-path /StatusNotifierWatcher \
		--method org.freedesktop.DBus.Properties.Get org.kde.StatusNotifierWatcher RegisteredStatusNotifierItems |
		grep -qF "'$owner/"
}

# panel_window: the id of the panel's bar.
panel_window() {
	local id w
	for id in $(xwininfo -root -children | awk '/"xfce4-panel": \("xfce4-panel"/ {print $1}'); do
		read -r _ _ w _ < <(geometry "$id")
		((w > 100)) && { echo "$id"; return 0; }
	done
	return 1
}

# geometry ID: "X Y W H" of window ID on the screen.
geometry() {
	xwininfo -id "$1" | awk '/Absolute upper-left X:/ {x = $NF} /Absolute upper-left Y:/ {y = $NF}
		/^ *Width:/ {w = $NF} /^ *Height:/ {h = $NF} END {print x, y, w, h}'
}

# mapped_windows: the ids of the top-level windows shown, larger than 20x20.
mapped_windows() {
	xwininfo -root -children | awk '/^ +0x/ {print $1}' | while read -r id; do
		xwininfo -id "$id" | grep -q 'Map State: IsViewable' || continue
		read -r _ _ w h < <(geometry "$id")
		((w > 20 && h > 20)) && echo "$id"
	done
	return 0
}

# shoot_tray FILE: click the tray icon (the right end of the panel), wait
# for the menu the panel opens, capture the top-right corner of the screen
# with the icon and the menu (nothing left of or below the menu), and close
# the menu.
shoot_tray() {
	local pid px py pw ph before menu mx my mw mh rw x0 h
	pid="$(panel_window)" || die "no panel window"
	read -r px py pw ph < <(geometry "$pid")
	wait_for 30 "the tray icon in the panel" tray_registered "$app"
	sleep 2 # the panel draws the icon and reads the menu
	before="$(mapped_windows)"
	xdotool mousemove $((px + pw - ph / 2)) $((py + ph / 2)) click 1
	menu=""
	for _ in $(seq 1 50); do
		menu="$(comm -13 <(sort <<<"$before") <(mapped_windows | sort) | sed -n 1p)"
		[[ -n "$menu" ]] && break
		sleep 0.2
	done
	[[ -n "$menu" ]] || die "clicking the tray icon opened no menu"
	sleep 1
	read -r mx my mw mh < <(geometry "$menu")
	read -r rw _ < <(xwininfo -root | awk '/^ *Width:/ {w = $NF} /^ *Height:/ {h = $NF} END {print w, h}')
	x0=$mx
	h=$((my + mh))
	import -window root -crop "$((rw - x0))x${h}+${x0}+0" +repage "$1"
	note "wrote ${1#"$root"/}"
	xdotool key Escape
	for _ in $(seq 1 25); do
		xwininfo -id "$menu" 2>/dev/null | grep -q 'Map State: IsViewable' || return 0
		sleep 0.2
	done
	xdotool mousemove $((px + pw - ph / 2)) $((py + ph / 2)) click 1 # closes it
}

# shoot_notification FILE: capture dunst's notification window.
shoot_notification() {
	local id
	for _ in $(seq 1 50); do
		id="$(xdotool search --classname --onlyvisible Dunst 2>/dev/null | sed -n 1p)"
		[[ -n "$id" ]] && break
		sleep 0.2
	done
	[[ -n "$id" ]] || die "no notification shown (dunst)"
	sleep 1
	import -window "$id" "$1"
	note "wrote ${1#"$root"/}"
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

# agent_start N: the agent's handshake and first tool list (ids N, N+1).
agent_start() {
	send '{"jsonrpc":"2.0","id":'"$1"',"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"screenshot-agent","version":"1.0.0"}}}'
	recv "$1"
	send '{"jsonrpc":"2.0","method":"notifications/initialized"}'
	send '{"jsonrpc":"2.0","id":'"$(($1 + 1))"',"method":"tools/list"}'
	recv "$(($1 + 1))"
}

# agent_done: the agent closes its stdin and its connection ends.
agent_done() {
	local agent_pid=${AGENT_PID:-}
	eval "exec ${AGENT[1]}>&-"
	wait "$agent_pid" 2>/dev/null || true
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

# run_failed: a run's server failed to launch.
run_failed() {
	local s
	s="$("$bin" status --json | tr -d ' \n')"
	[[ "$s" == *'"state":"failed"'* ]]
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
	# For the tray: a server no agent uses (idle), and one whose command
	# is missing (failed, with the reason).
	"$bin" servers add notes -- "$tmp/srv/publish" >/dev/null
	"$bin" servers add broken -- "$tmp/srv/missing" >/dev/null 2>&1

	start_desktop "$scale"
	FYNE_SCALE=$scale "$bin" >"$tmp/app$scale.log" 2>&1 &
	app=$!
	pids+=("$app")
	wait_for 30 "the daemon in the app" "$bin" status
	# First start: the app sets up the audit log's sealing keys and shows
	# the verification key once, with its QR code.
	wait_for 20 "the verification key window" window_id_nonempty "Portcullis — audit log verification key"
	shoot "Portcullis — audit log verification key" "$out/verification-key$suffix.png"

	coproc AGENT { exec "$bin" connect pub 2>>"$tmp/agent.err"; }
	agent_start 1
	# First use: the card proposes the called tool only; approved from
	# the command line, widened to status.
	send '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"publish_preview","arguments":{"branch":"main"}}}'
	wait_for 20 "the first approval request" has_approval
	shoot_notification "$out/notification$suffix.png"
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

	# An agent connects to broken: its launch fails, the run stays (its
	# requests are answered with the reason).
	mkfifo "$tmp/broken.in"
	"$bin" connect broken <"$tmp/broken.in" >/dev/null 2>>"$tmp/agent.err" &
	broken=$!
	exec 7>"$tmp/broken.in"
	wait_for 30 "the run of broken to fail" run_failed
	shoot_tray "$out/tray$suffix.png"

	click_menu "$app" "Preferences…"
	shoot "Portcullis Preferences" "$out/preferences$suffix.png"
	click_menu "$app" "Audit log…"
	shoot "Portcullis Audit Log" "$out/audit$suffix.png"

	# The agents disconnect (stdin closed: MCP's stdio shutdown), so that
	# Quit does not ask to end a connected run.
	agent_done
	exec 7>&-
	wait "$broken" 2>/dev/null || true
	rm -f "$tmp/broken.in"
	wait_for 30 "the agent runs to end" no_runs

	# The code section: a server built from a git work tree (the
	# executable's directory lies in it), registered by the person while
	# the app runs; its first call approved, its main.go edited and
	# rebuilt in place, the call after the refresh held: the card lists
	# the changed files since the approved code, and its button opens the
	# diff.
	src="$tmp/code$scale"
	mkdir -p "$src/publish"
	cp testdata/servers/go.mod testdata/servers/go.sum "$src/"
	cp testdata/servers/publish/main.go "$src/publish/"
	printf '/bin/\n' >"$src/.gitignore"
	git -C "$src" init -q
	build_code() { CGO_ENABLED=0 go -C "$src" build -o "$src/bin/publish" ./publish; }
	build_code
	person servers add site --cwd "$src" -- "$src/bin/publish"
	coproc AGENT { exec "$bin" connect site 2>>"$tmp/agent.err"; }
	agent_start 11
	send '{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"publish_preview","arguments":{"branch":"main"}}}'
	wait_for 20 "the first approval request of site" has_approval
	person approve "$(approval_id)"
	recv 13
	# The edit: a message changed and a line added.
	perl -0pi -e 's/(func published\(rev, branch, target string\) string \{\n)\treturn fmt.Sprintf\("revision %s published/$1\tslog.Info("publishing", "branch", branch, "target", target)\n\treturn fmt.Sprintf("revision %s pushed/' "$src/publish/main.go"
	grep -q pushed "$src/publish/main.go" || die "the edit of the site server's main.go did not apply"
	build_code
	wait_for 30 "the new epoch of site" epoch_ready 2
	send '{"jsonrpc":"2.0","id":14,"method":"tools/list"}'
	recv 14
	send '{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"publish_preview","arguments":{"branch":"main"}}}'
	wait_for 20 "the approval request after the edit" has_approval
	shoot "Portcullis — Approval needed" "$out/approval-code$suffix.png"
	# Tab reaches the first control of the card's scrolled middle, the
	# code section's button; Space presses it.
	xdotool windowfocus --sync "$(window_id "Portcullis — Approval needed")" key Tab space
	shoot "Portcullis — Approval needed" "$out/approval-diff$suffix.png"
	# Escape closes the diff, denying nothing.
	xdotool key Escape
	sleep 1
	has_approval || die "Escape over the code diff decided the card"
	person deny "$(approval_id)"
	recv 15
	agent_done
	wait_for 30 "the agent run of site to end" no_runs
	click_menu "$app" "Quit Portcullis"
	wait_for 30 "the app to quit" bash -c "! kill -0 $app"
	stop_desktop
done
note "done: $(ls "$out" | tr '\n' ' ')"
