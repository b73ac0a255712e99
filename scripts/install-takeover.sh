#!/usr/bin/env bash
# install-takeover.sh PREFIX: run by `make install` once the new build is in
# PREFIX/bin. A Portcullis daemon running the program just replaced there is
# stopped at the person's terminal, so that the new version takes over: the
# shims of the agents connected stay, answer what was in flight, and at the
# agent's next call start the new daemon and go on (docs/AGENTS.md). A daemon
# running another installation's program is left alone. When the daemon
# was the menu-bar app's, the new app is started in its place (in the
# graphical session this terminal belongs to).
set -u

# alive PID: the process runs (a zombie has let go of everything).
alive() {
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || { kill -0 "$1" 2>/dev/null; return; }
	st=${st##*) }
	[[ "${st:0:1}" != Z ]]
}
bin="$1/bin"
pid=$("$bin/portcullis" status --json 2>/dev/null | sed -n 's/^  "pid": \([0-9][0-9]*\),\{0,1\}$/\1/p')
[[ -n "$pid" ]] || exit 0
exe=$(readlink "/proc/$pid/exe" 2>/dev/null || ps -o comm= -p "$pid" 2>/dev/null)
exe=${exe% (deleted)}
if [[ "$exe" != "$bin/portcullis-app" ]]; then
	echo "note: the Portcullis daemon running (pid $pid) is ${exe:-unknown}, not this installation: left alone"
	exit 0
fi
# The menu-bar app runs the daemon with no command (`portcullis`); the
# headless daemon is `portcullis daemon`.
app=0
if [[ -r "/proc/$pid/cmdline" ]]; then
	mapfile -d '' -t argv <"/proc/$pid/cmdline"
	((${#argv[@]} <= 1)) && app=1
fi
if "$bin/portcullis" stop; then
	echo "stopped the daemon of the previous version (pid $pid): connected agents go on with the new version at their next call"
	if ((app)); then
		# It was the menu-bar app: start the new one, once the old one has
		# let go of the person's data (its lock), before an agent's next
		# call starts a daemon without the menu bar.
		for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
		if alive "$pid"; then
			echo "note: the previous menu-bar app (pid $pid) has not ended yet: start Portcullis again once it has (run \`portcullis\` in your desktop session)"
		elif [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]]; then
			setsid -f "$bin/portcullis" </dev/null >/dev/null 2>&1
			echo "started the menu-bar app of the new version"
		else
			echo "note: it was the menu-bar app, and this terminal has no graphical session (DISPLAY and WAYLAND_DISPLAY are unset): start Portcullis again from your desktop (run \`portcullis\` there)"
		fi
	fi
else
	echo "note: the daemon of the previous version (pid $pid) still runs; run \`portcullis stop\` at your terminal to let the new one take over (connected agents go on by themselves)"
fi
