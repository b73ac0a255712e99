#!/usr/bin/env bash
# measure-idle.sh measures what the real menu-bar app costs while no window
# is shown, and how fast an approval window appears (`make bench-ui`; the
# figures are in docs/BENCHMARKS.md, section "Menu-bar app"):
#
#   idle       with 0 servers, then with 1 server and one agent connected
#              (initialize, tools/list, then nothing): the app's CPU (utime +
#              stime of all its threads, /proc/PID/stat) as a percentage of
#              one core, its wakeups per second (voluntary + involuntary
#              context switches of all its threads, /proc/PID/task/*/status)
#              and VmRSS, over IDLE seconds after SETTLE seconds of quiet.
#              The app is the daemon and the menu-bar icon; its window
#              process, standing by, is measured over the same seconds and
#              listed apart.
#   approval   at FYNE_SCALE 1 and 2: the time from the daemon's "approval
#              requested" log line to the approval window being mapped
#              (xwininfo, polled in a tight loop: under load the poll sees
#              the map late) and to its Show returning (mapped and drawn;
#              the window process's log line, PORTCULLIS_DEBUG), for CALLS
#              calls of the agent, each approved once from the command line:
#              call 1 is the first window of the window process (started
#              and warmed up ahead, standing by), the other odd calls come
#              once it stood by again, the even ones a second after the
#              previous card was decided (awake). With where the time goes:
#              the link, the card's layout, the window made and mapped.
#
# As on a desktop, a tray host runs on a private D-Bus session bus:
# xfce4-panel (its systray plugin is a StatusNotifierWatcher), under Xvfb.
# The app runs with a temporary PORTCULLIS_HOME, started once beforehand so
# that the audit log's verification key (shown once, on first start) is
# not on screen while measuring.
#
# Needs (Debian; scripts/test-deps.sh installs them): xvfb x11-utils dbus
# libglib2.0-bin xfce4-panel, and the cgo build dependencies of Fyne
# (libgl1-mesa-dev xorg-dev). Environment: BIN, a cgo build of the full
# program (portcullis-app) to measure instead of building one; IDLE
# (seconds, default 20); SETTLE (default 5); CALLS (default 4); SCALES
# (default "1 2").
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
me=measure-idle
# shellcheck source=scripts/lib-x.sh
. scripts/lib-x.sh
idle="${IDLE:-20}"
settle="${SETTLE:-5}"
calls="${CALLS:-4}"
title="Portcullis — Approval needed"

x_session "${1:-}" Xvfb xwininfo dbus-run-session gdbus xfce4-panel go

x_workdir idle
build_app "${BIN:-}"
CGO_ENABLED=0 go -C testdata/servers build -o "$tmp/echo" ./echo

x_start ":$((80 + RANDOM % 9))" 2560x1600x24

bus_has() {
	gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
		--method org.freedesktop.DBus.NameHasOwner "$1" | grep -q true
}
no_watcher() { ! bus_has org.kde.StatusNotifierWatcher; }

# The panel: one bar with the systray plugin.
conf="$XDG_CONFIG_HOME/xfce4/xfconf/xfce-perchannel-xml"
mkdir -p "$conf"
cat >"$conf/xfce4-panel.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<channel name="xfce4-panel" version="1.0">
  <property name="panels" type="array">
    <value type="int" value="1"/>
    <property name="panel-1" type="empty">
      <property name="position" type="string" value="p=6;x=0;y=0"/>
      <property name="length" type="uint" value="100"/>
      <property name="position-locked" type="bool" value="true"/>
      <property name="size" type="uint" value="32"/>
      <property name="plugin-ids" type="array">
        <value type="int" value="1"/>
      </property>
    </property>
  </property>
  <property name="plugins" type="empty">
    <property name="plugin-1" type="string" value="systray"/>
  </property>
</channel>
XML
start_panel() {
	GDK_SCALE=$1 xfce4-panel --disable-wm-check >"$tmp/panel$1.log" 2>&1 &
	panel=$!
	pids+=("$panel")
	wait_for 30 "the panel's StatusNotifierWatcher" bus_has org.kde.StatusNotifierWatcher
}
stop_panel() {
	kill "$panel" 2>/dev/null || true
	wait "$panel" 2>/dev/null || true
	wait_for 30 "the panel to leave the bus" no_watcher
}

# cpu_ticks PID, switches PID, rss_kb PID: from /proc.
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {print s + 0}'; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# window_procs PID: the window processes of app PID.
window_procs() { pgrep -P "$1" -f 'portcullis-app window-process' || true; }
# standing_by: the app's window process stands by (its last word in the log).
standing_by() {
	grep -E 'msg="window process (in standby|awake)"' "$tmp/app.log" | tail -n 1 | grep -q 'in standby'
}
# cost PID SECONDS: "CPU% wakeups/s RSS-MB" of PID over SECONDS.
cost() {
	local c0 w0 t0 c1 w1 t1 hz
	hz="$(getconf CLK_TCK)"
	c0="$(cpu_ticks "$1")" w0="$(switches "$1")" t0="$(now_ms)"
	sleep "$2"
	c1="$(cpu_ticks "$1")" w1="$(switches "$1")" t1="$(now_ms)"
	awk -v c=$((c1 - c0)) -v w=$((w1 - w0)) -v ms=$((t1 - t0)) -v hz="$hz" -v rss="$(rss_kb "$1")" \
		'BEGIN {printf "%.2f %% of a core, %.0f wakeups/s, %.0f MB resident", 100 * c / hz / (ms / 1000), w / (ms / 1000), rss / 1024}'
}

# Agents: raw JSON-RPC over FIFOs to `portcullis connect LABEL`.
agent_n=0
connect_agent() {
	agent_n=$((agent_n + 1))
	mkfifo "$tmp/a$agent_n.in" "$tmp/a$agent_n.out"
	"$bin" connect "$1" <"$tmp/a$agent_n.in" >"$tmp/a$agent_n.out" 2>>"$tmp/agent.err" &
	pids+=($!)
	exec {to}>"$tmp/a$agent_n.in"
	exec {from}<"$tmp/a$agent_n.out"
	send '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"measure-idle","version":"1.0.0"}}}'
	recv 1
	send '{"jsonrpc":"2.0","method":"notifications/initialized"}'
	send '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
	recv 2
}
send() { printf '%s\n' "$1" >&"$to"; }
recv() {
	local line
	while IFS= read -r -t 60 line <&"$from"; do
		if [[ "$line" == *"\"id\":$1,"* || "$line" == *"\"id\":$1}"* ]]; then
			[[ "$line" != *'"error"'* ]] || die "request $1: $line"
			return 0
		fi
	done
	die "no response $1 on the agent connection"
}
close_agent() {
	exec {to}>&- {from}<&-
	wait_for 30 "the agent run to end" no_runs
}
no_runs() {
	local s
	s="$("$bin" status --json | tr -d ' \n')"
	[[ "$s" != *'"state":"'* ]] || [[ "$s" == *'"runs":[]'* ]] || [[ "$s" == *'"runs":null'* ]]
}

# start_app SCALE: the app on a fresh PORTCULLIS_HOME with echo1 configured,
# started once before so that the verification key window is behind us.
start_app() {
	export PORTCULLIS_HOME="$tmp/home$RANDOM"
	mkdir -p "$PORTCULLIS_HOME"
	"$bin" servers add echo1 --cwd "$tmp" -- "$tmp/echo" >/dev/null
	FYNE_SCALE=$1 "$bin" >"$tmp/first.log" 2>&1 &
	local first=$!
	wait_for 30 "the daemon in the app" "$bin" status
	sleep 3 # the audit log's sealing keys set up
	kill -TERM "$first"
	wait "$first" 2>/dev/null || true
	FYNE_SCALE=$1 PORTCULLIS_DEBUG="${2:-}" "$bin" >"$tmp/app.log" 2>&1 &
	app=$!
	pids+=("$app")
	wait_for 30 "the daemon in the app" "$bin" status
}
stop_app() {
	kill -TERM "$app" 2>/dev/null || true
	wait "$app" 2>/dev/null || true
}

window_id() { xwininfo -root -tree | grep -F "\"$title\"" | grep -v '1x1+' | awk 'NR == 1 {print $1}'; }
window_viewable() {
	local id
	id="$(window_id)"
	[[ -n "$id" ]] && xwininfo -id "$id" 2>/dev/null | grep -q 'Map State: IsViewable'
}
window_gone() { ! window_viewable; }
approval_id() { "$bin" approvals --json | grep -o '"id": *"apr_[A-Z0-9]*"' | sed -n 1p | cut -d'"' -f4; }

# idle_costs LABEL: the app's and its standby window process's costs over
# IDLE seconds, measured side by side.
idle_costs() {
	local wp
	wp="$(window_procs "$app")"
	[[ "$(wc -w <<<"$wp")" == 1 ]] || die "$(wc -w <<<"$wp") window processes, want the one standing by"
	local p1 p2
	cost "$app" "$idle" >"$tmp/cost.app" &
	p1=$!
	cost "$wp" "$idle" >"$tmp/cost.win" &
	p2=$!
	wait "$p1" "$p2"
	printf '  %-30s app: %s\n  %-30s standby window process: %s\n' "$1" "$(cat "$tmp/cost.app")" "" "$(cat "$tmp/cost.win")"
}

start_panel 1
start_app 1
wait_for 60 "the window process to stand by" standing_by
sleep "$settle"
note "idle, 0 servers: app pid $app"
printf 'idle, no window shown, over %s s (tray host xfce4-panel):\n' "$idle"
idle_costs "0 servers"
connect_agent echo1
sleep "$settle"
note "idle, 1 server with an agent connected"
idle_costs "1 server, 1 agent connected"
close_agent
stop_app
stop_panel

declare -A lat drawn_lat parts warm stand
for scale in ${SCALES:-1 2}; do
	start_panel "$scale"
	start_app "$scale" 1 # PORTCULLIS_DEBUG: the window process's timings
	wait_for 60 "the window process to stand by" standing_by
	connect_agent echo1
	for k in $(seq 1 "$calls"); do
		if ((k % 2 == 1)); then
			# from standby: the window process stood by again
			wait_for 60 "the window process to stand by before call $k" standing_by
		fi
		sleep 1
		send "{\"jsonrpc\":\"2.0\",\"id\":$((k + 2)),\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"message\":\"ping $k\"}}}"
		deadline=$(($(now_ms) + 20000))
		until window_viewable; do
			(($(now_ms) < deadline)) || die "the approval window did not show for call $k"
		done
		shown="$(now_ms)"
		id="$(approval_id)"
		[[ -n "$id" ]] || die "the window showed but no approval is pending"
		person approve --once "$id"
		recv $((k + 2))
		wait_for 20 "the approval window to hide after call $k" window_gone
		raised="$(grep -F 'msg="approval requested"' "$tmp/app.log" | grep -o '^time=[^ ]*' | cut -d= -f2 | sed -n "${k}p")"
		raised_ms="$(date -d "$raised" +%s%3N)"
		lat[$scale,$k]=$((shown - raised_ms))
		# The window process's timings: Show began (its log line's time
		# less render_ms and show_ms), the card laid out, the window made
		# and mapped (by the X server's map state), then drawn (Show
		# returned: Fyne draws after the map).
		line="$(grep -F 'msg="approval window shown"' "$tmp/app.log" | sed -n "${k}p")"
		render="$(grep -o 'render_ms=[0-9]*' <<<"$line" | cut -d= -f2)"
		show="$(grep -o 'show_ms=[0-9]*' <<<"$line" | cut -d= -f2)"
		drawn="$(date -d "$(grep -o '^time=[^ ]*' <<<"$line" | cut -d= -f2)" +%s%3N)"
		began=$((drawn - show - render))
		drawn_lat[$scale,$k]=$((drawn - raised_ms))
		parts[$scale,$k]="request→Show $((began - raised_ms)), layout $render, window made+mapped $((shown - began - render)), mapped→drawn $((drawn - shown))"
	done
	warm[$scale]="$(grep -F 'msg="window process warmed up"' "$tmp/app.log" | grep -o 'ms=[0-9]*' | head -n 1)"
	stand[$scale]="$(cost "$(window_procs "$app")" 1)"
	close_agent
	stop_app
	stop_panel
done

printf '\napproval requested → window mapped (ms); call 1: the first window, from standby;\n'
printf '3, 5, …: from standby again; 2, 4, …: a second after the previous card (awake):\n'
for scale in ${SCALES:-1 2}; do
	printf '  FYNE_SCALE=%s  ' "$scale"
	for k in $(seq 1 "$calls"); do printf ' %6s' "${lat[$scale,$k]}"; done
	printf '   (mapped, as polled)\n  FYNE_SCALE=%s  ' "$scale"
	for k in $(seq 1 "$calls"); do printf ' %6s' "${drawn_lat[$scale,$k]}"; done
	printf '   (mapped and drawn: Show returned, by its log line)\n'
done
printf '\nwhere it goes (ms; PORTCULLIS_DEBUG timings of the window process, X map state):\n'
for scale in ${SCALES:-1 2}; do
	printf '  FYNE_SCALE=%s  warm-up %s\n' "$scale" "${warm[$scale]}"
	for k in $(seq 1 "$calls"); do printf '    call %d  %s\n' "$k" "${parts[$scale,$k]}"; done
	printf '    after the calls (awake, 1 s): %s\n' "${stand[$scale]}"
done
