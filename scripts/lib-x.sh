# lib-x.sh: the X session the scripts that run the real app share
# (measure-idle.sh, measure-ui.sh, screenshots.sh), sourced after they set
# `me` (their name in messages) and `tmp` where their logs go, if they have
# one yet.
#
#   x_session TOOL...  outside the session: checks the tools, then runs the
#                      calling script again with --inside on a private D-Bus
#                      session bus, its XDG directories throwaway ones (Go's
#                      build cache stays where it was), and exits with its
#                      status; inside (--inside given) it returns.
#   x_workdir NAME     makes `tmp` (removed at exit) and `pids` (killed at
#                      exit, with AGENT_PID when set).
#   build_app PREBUILT builds the front into $tmp/portcullis (`bin`) and the
#                      cgo app beside it, or copies PREBUILT (a portcullis-app
#                      built already) when it is set.
#   x_start DISPLAY GEOMETRY   starts Xvfb (its pid added to `pids`).
#   wait_for SECONDS WHAT COMMAND...   retries COMMAND every 0.1 s.
#   now_ms             wall-clock milliseconds (no fork).
#   person ARGS...     `$bin ARGS...` as the person runs it (see below).
#   note, die          messages; die shows the tail of each log in $tmp.

note() { printf '%s: %s\n' "$me" "$*" >&2; }
die() {
	note "$*"
	for f in "${tmp:-/nonexistent}"/*.log "${tmp:-/nonexistent}"/agent.err; do
		[[ -s "$f" ]] && { note "--- ${f##*/}"; tail -n 30 "$f" >&2; }
	done
	exit 1
}

# x_session TOOL...: see above. The calling script's arguments are "$@" of
# the script; call it as: x_session "${1:-}" TOOL...
x_session() {
	local first="$1" tool xdg status=0
	shift
	[[ "$first" != --inside ]] || return 0
	for tool in "$@"; do
		command -v "$tool" >/dev/null 2>&1 || die "$tool not found (bash scripts/test-deps.sh installs it)"
	done
	GOCACHE="$(go env GOCACHE)"
	export GOCACHE
	xdg="$(mktemp -d "${TMPDIR:-/tmp}/portcullis-$me-xdg.XXXXXX")"
	mkdir -p "$xdg"/{data,config,cache,runtime}
	chmod 700 "$xdg/runtime"
	XDG_DATA_HOME="$xdg/data" XDG_CONFIG_HOME="$xdg/config" XDG_CACHE_HOME="$xdg/cache" XDG_RUNTIME_DIR="$xdg/runtime" \
		dbus-run-session -- "$0" --inside || status=$?
	rm -rf "$xdg"
	exit "$status"
}

x_workdir() {
	tmp="$(mktemp -d "${TMPDIR:-/tmp}/portcullis-$1.XXXXXX")"
	pids=()
	trap x_cleanup EXIT
}

x_cleanup() {
	# An agent's connection waits on its stdin, which the script holds: a
	# failed run would wait for it forever.
	for p in "${pids[@]}" ${AGENT_PID:-}; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}

build_app() {
	if [[ -n "${1:-}" ]]; then
		[[ -x "$1" ]] || die "no app executable at $1"
		cp "$1" "$tmp/portcullis-app"
	else
		note "building the app (cgo)"
		CGO_ENABLED=1 go build -tags "${APP_TAGS-no_emoji}" -o "$tmp/portcullis-app" ./cmd/portcullis-app
	fi
	# The front, as agents and people run it: it execs portcullis-app beside it.
	bin="$tmp/portcullis"
	CGO_ENABLED=0 go build -o "$bin" .
}

x_start() {
	export DISPLAY="$1"
	Xvfb "$1" -screen 0 "$2" -nolisten tcp >"$tmp/xvfb.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 50); do xwininfo -root >/dev/null 2>&1 && return 0; sleep 0.1; done
	die "Xvfb did not start on $1: $(cat "$tmp/xvfb.log")"
}

wait_for() {
	local secs="$1" what="$2"
	shift 2
	for _ in $(seq 1 $((secs * 10))); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	die "timed out after ${secs}s waiting for $what"
}

now_ms() { local t="${EPOCHREALTIME/[.,]/}"; echo $((t / 1000)); }

# person ARGS...: `$bin ARGS...` as the person runs it: at a terminal
# of its own (script(1)), outside this script's process tree (setsid -f),
# since this script is the agent's parent.
person() {
	local done="$tmp/person.$RANDOM"
	setsid -f sh -c 'script -qec "$1" /dev/null </dev/null >"$2.out" 2>&1; echo $? >"$2.code"' sh "$(printf '%q ' "$bin" "$@")" "$done"
	wait_for 30 "portcullis $*" test -s "$done.code"
	[[ "$(cat "$done.code")" == 0 ]] || die "portcullis $* failed: $(cat "$done.out")"
}
