#!/usr/bin/env bash
# measure-ui.sh measures the real menu-bar app (`make bench-ui`; figures in
# docs/BENCHMARKS.md, section "Menu-bar app"):
#
#   idle RSS   VmRSS of the app process (daemon and menu-bar icon; the
#              windows are another process, which stands by between them) from
#              /proc/PID/status, with 5 servers running for 5 connected
#              agent runs, after IDLE seconds without traffic: once before
#              any approval window existed, once after the approvals below
#              (the window created, then hidden), with where the resident
#              memory lies (/proc/PID/smaps) and the Go heap at the last GC
#              (GODEBUG=gctrace=1). Target: under 80 MB.
#   approval   APPROVALS tools/calls, round-robin over the 5 agent runs,
#              each needing a person (approved once from the command line):
#              the time from the daemon's "approval requested" log line
#              (millisecond timestamps), and from the agent sending the
#              call, to the approval window being mapped on the X server
#              (`xwininfo` map state IsViewable, polled in a tight loop, a
#              few ms per poll). The first call creates the window; the
#              others show it again after it hid. Target: under 200 ms.
#
# It builds the cgo (Fyne, GLFW) app and the Go echo test server
# (testdata/servers/echo), starts Xvfb and a private D-Bus session bus, runs
# the app with a temporary PORTCULLIS_HOME and 5 servers echo1…echo5
# configured, and connects one raw JSON-RPC agent (protocol 2025-06-18) per
# server through `portcullis connect`. Nothing outside temporary
# directories is touched.
#
# Needs (Debian): xvfb x11-utils dbus, and the cgo build dependencies of
# Fyne (libgl1-mesa-dev xorg-dev). A cold cgo build of the app takes a few
# minutes. Environment: IDLE (seconds, default 5); APPROVALS (default 10);
# BIN, a cgo build of the
# full program (portcullis-app) to measure instead of building one; the
# front (portcullis, which runs it) is built beside it either way.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
me=measure-ui
# shellcheck source=scripts/lib-x.sh
. scripts/lib-x.sh
idle="${IDLE:-5}"
approvals="${APPROVALS:-10}"
servers=5
title="Portcullis — Approval needed"

x_session "${1:-}" Xvfb xwininfo dbus-run-session go

x_workdir mui
build_app "${BIN:-}"
note "building the echo server"
CGO_ENABLED=0 go -C testdata/servers build -o "$tmp/echo" ./echo

x_start ":$((90 + RANDOM % 9))" 1920x1200x24

# window_id: the X window id of the approval window, if it exists.
window_id() { xwininfo -root -tree | grep -F "\"$title\"" | grep -v '1x1+' | awk 'NR == 1 {print $1}'; }
# map_state ID: IsViewable, IsUnMapped or IsUnviewable.
map_state() { xwininfo -id "$1" 2>/dev/null | awk '/Map State:/ {print $3}'; }
window_viewable() {
	local id
	id="$(window_id)"
	[[ -n "$id" && "$(map_state "$id")" == IsViewable ]]
}
window_gone() { ! window_viewable; }

# rss_kb PID: VmRSS in kB.
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# last_gc: the Go heap at the app's last GC ("start->end->live MB, goal"),
# from its gctrace lines.
last_gc() { grep -o '[0-9]*->[0-9]*->[0-9]* MB, [0-9]* MB goal' "$tmp/app.log" | tail -n 1; }
# rss_parts PID: resident kB by mapping (file name, [heap] for C's brk
# heap, or anonymous), largest first.
rss_parts() {
	awk '
		/^[0-9a-f]+-[0-9a-f]+ / {
			name = $6 != "" ? $6 : "anonymous (Go heap, C malloc, GL buffers)"
			sub(/.*\//, "", name)
			next
		}
		/^Rss:/ { kb[name] += $2 }
		END { for (n in kb) if (kb[n] >= 1024) printf "%8d kB  %s\n", kb[n], n }
	' "/proc/$1/smaps" | sort -rn | sed -n 1,12p
}

export PORTCULLIS_HOME="$tmp/home"
mkdir -p "$PORTCULLIS_HOME"
for i in $(seq 1 "$servers"); do
	"$bin" servers add "echo$i" --cwd "$tmp" -- "$tmp/echo" >/dev/null
done

# gctrace: the Go runtime writes one line per GC (heap sizes) to the log.
GODEBUG=gctrace=1 "$bin" >"$tmp/app.log" 2>&1 &
app=$!
pids+=("$app")
wait_for 30 "the daemon in the app" "$bin" status
note "app pid $app; VmRSS right after start: $(rss_kb "$app") kB"

# Agents: raw JSON-RPC over FIFOs to `portcullis connect echoN`.
declare -a to from
send() { printf '%s\n' "$2" >&"${to[$1]}"; }
# recv AGENT ID: read lines until the response with that id.
recv() {
	local line
	while IFS= read -r -t 60 line <&"${from[$1]}"; do
		if [[ "$line" == *"\"id\":$2,"* || "$line" == *"\"id\":$2}"* ]]; then
			printf '%s\n' "$line" >>"$tmp/agent$1.log"
			[[ "$line" != *'"error"'* ]] || die "agent $1, request $2: $line"
			return 0
		fi
	done
	die "no response $2 on agent connection $1"
}
for i in $(seq 1 "$servers"); do
	mkfifo "$tmp/a$i.in" "$tmp/a$i.out"
	"$bin" connect "echo$i" <"$tmp/a$i.in" >"$tmp/a$i.out" 2>>"$tmp/agent.err" &
	pids+=($!)
	exec {w}>"$tmp/a$i.in"
	exec {r}<"$tmp/a$i.out"
	to[i]=$w
	from[i]=$r
	send "$i" '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"measure-ui","version":"1.0.0"}}}'
	recv "$i" 1
	send "$i" '{"jsonrpc":"2.0","method":"notifications/initialized"}'
	send "$i" '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
	recv "$i" 2
done
runs="$("$bin" status --json | grep -c '"state": *"ready"' || true)"
[[ "$runs" == "$servers" ]] || die "$runs agent runs ready, want $servers: $("$bin" status)"
servers_up="$(pgrep -P "$app" -c -x echo || true)"
note "$runs agent runs ready, $servers_up echo server processes under the app; idle ${idle}s"
sleep "$idle"
rss_before="$(rss_kb "$app")"
gc_before="$(last_gc)"
parts_before="$(rss_parts "$app")"

approval_id() { "$bin" approvals --json | grep -o '"id": *"apr_[A-Z0-9]*"' | sed -n 1p | cut -d'"' -f4; }

# Approvals: APPROVALS calls, round-robin over the agent runs, each
# approved once from the command line (a once grant is used up by its call,
# so every call needs a person).
declare -a raised_ms sent_ms shown_ms gc_trend
for k in $(seq 1 "$approvals"); do
	i=$(((k - 1) % servers + 1))
	window_gone || die "the approval window is still shown before call $k"
	sent_ms[k]="$(now_ms)"
	send "$i" "{\"jsonrpc\":\"2.0\",\"id\":$((k + 2)),\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"message\":\"ping $k\"}}}"
	deadline=$(($(now_ms) + 20000))
	until window_viewable; do
		(($(now_ms) < deadline)) || die "the approval window did not show for call $k"
	done
	shown_ms[k]="$(now_ms)"
	id="$(approval_id)"
	[[ -n "$id" ]] || die "the window showed but no approval is pending for call $k"
	person approve --once "$id"
	recv "$i" $((k + 2))
	wait_for 20 "the approval window to hide after call $k" window_gone
	gc_trend+=("$(last_gc | cut -d' ' -f1)")
done

# The daemon's "approval requested" lines, oldest first (slog's
# millisecond RFC 3339 time).
mapfile -t lines < <(grep -F 'msg="approval requested"' "$tmp/app.log" | grep -o '^time=[^ ]*' | cut -d= -f2)
((${#lines[@]} == approvals)) || die "${#lines[@]} \"approval requested\" lines in the app log, want $approvals"
for k in $(seq 1 "$approvals"); do
	raised_ms[k]="$(date -d "${lines[k - 1]}" +%s%3N)"
done

sleep "$idle"
rss_after="$(rss_kb "$app")"
gc_after="$(last_gc)"
parts_after="$(rss_parts "$app")"

printf '\napproval window (ms)     requested→mapped   call sent→mapped\n'
for k in $(seq 1 "$approvals"); do
	kind="again"
	((k > 1)) || kind="first"
	printf '  call %2d (%-5s)        %8d          %8d\n' "$k" "$kind" $((shown_ms[k] - raised_ms[k])) $((shown_ms[k] - sent_ms[k]))
done
printf 'Go heap (MB, start->end->live) at the last GC after each approval: %s\n' "${gc_trend[*]}"
printf '\nidle VmRSS of the app, %d agent runs, %d servers:\n' "$runs" "$servers"
printf '  before any approval window   %6d kB (%s MB)\n' "$rss_before" "$(awk -v k="$rss_before" 'BEGIN {printf "%.1f", k / 1024}')"
printf '  after %2d approvals           %6d kB (%s MB)\n' "$approvals" "$rss_after" "$(awk -v k="$rss_after" 'BEGIN {printf "%.1f", k / 1024}')"
printf '  VmHWM (peak)                 %6d kB\n' "$(awk '/^VmHWM:/ {print $2}' "/proc/$app/status")"
printf '\nbefore any approval window: Go heap at the last GC %s; resident by mapping (1 MB and more):\n%s\n' "$gc_before" "$parts_before"
printf '\nafter %d approvals: Go heap at the last GC %s; resident by mapping:\n%s\n' "$approvals" "$gc_after" "$parts_after"

kill -TERM "$app"
wait_for 30 "the app to quit" bash -c "! kill -0 $app"
